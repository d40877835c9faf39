"""arch=anakin: the config group and its refusals, the device rollout, and short training runs
(learning signal, resume, seedq-eval on the checkpoint)."""

import math

import pytest
import torch
from cli_helpers import run_cli

from seedq.arch import ArchUnavailable, run_class
from seedq.arch.anakin import AnakinRun
from seedq.arch.episodes import EpisodeTracker
from seedq.arch.seed import SeedRun
from seedq.bench.common import compose
from seedq.config import ConfigError
from seedq.evaluate import evaluate, main

# Small and quick: 128 envs, 16-step unrolls, two updates of 64 columns per unroll.
TINY = [
    "arch=anakin",
    "arch.anakin.num_envs=128",
    "arch.anakin.unroll_length=16",
    "arch.anakin.minibatches=2",
    "log_interval_s=1",
    "checkpoint.every_minutes=0",
    "max_minutes=3",
]


def anakin_run(run_dir, *overrides, resume=None):
    cfg = compose([*TINY, *overrides], run_dir=str(run_dir))
    return AnakinRun(cfg, str(run_dir), resume=resume)


def test_the_default_arch_is_seed_and_each_arch_names_its_run_class():
    assert compose([]).arch.name == "seed"
    assert run_class("seed") is SeedRun
    assert run_class("anakin") is AnakinRun


def test_sebulba_is_routed_to_its_module_or_refused_clearly():
    try:
        run = run_class("sebulba")
    except ArchUnavailable as exc:
        assert "seedq.arch.sebulba" in str(exc)
    else:
        assert run.__name__ == "SebulbaRun"


def test_anakin_picks_the_tensor_env_of_the_env_groups_id():
    cfg = compose(["arch=anakin", "env=gym", "env.id=Acrobot-v1"])
    assert (cfg.arch.name, cfg.env.kind, cfg.env.id) == ("anakin", "gym", "Acrobot-v1")


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["env=atari"], "CartPole-v1, MountainCar-v0"),
        (["env=gym", "env.id=LunarLander-v3"], "env.id=LunarLander-v3 has none"),
        (["algorithm=r2d2"], "algorithm=r2d2 cannot: it learns from a prioritised replay"),
        (["arch.anakin.num_envs=100", "arch.anakin.minibatches=3"], "not a multiple"),
        (["algorithm.model.use_lstm=true"], "use_lstm"),
        (
            ["env=gym", "env.id=MountainCar-v0", "+env.kwargs.goal_velocity=0.5"],
            r"takes no gymnasium make\(\) arguments: env.kwargs=\{'goal_velocity': 0.5\}",
        ),
    ],
)
def test_combinations_anakin_cannot_run_are_refused_naming_what_can(overrides, says):
    with pytest.raises(ConfigError, match=says):
        compose(["arch=anakin", *overrides])


def test_seedq_train_refuses_an_env_without_tensor_implementation_at_start_up():
    result = run_cli("arch=anakin", "env=gym", "env.id=Pendulum-v1", timeout=60)
    assert (result.returncode, "Envs arch=anakin runs: Acrobot-v1" in result.stdout) == (2, True)


def test_episode_tracker_keeps_the_most_recent_returns_oldest_first():
    tracker = EpisodeTracker(3, torch.device("cpu"), keep=4)
    done = torch.tensor([[0, 1, 0], [1, 1, 1], [0, 1, 1], [1, 0, 0]], dtype=torch.bool)
    for t in range(4):
        tracker.record(torch.full((3,), float(t + 1)), done[t])
    # Finished (return, length), in step then env order: (1, 1); (3, 2), (2, 1), (3, 2);
    # (3, 1), (3, 1); (7, 2). The newest four, oldest first:
    assert tracker.drain() == (7, [3.0, 3.0, 3.0, 7.0], [2, 1, 1, 2])
    tracker.record(torch.ones(3), torch.tensor([1, 0, 0], dtype=torch.bool))
    assert tracker.drain() == (1, [1.0], [1])


def test_the_rollout_never_reads_a_device_value_on_the_host(tmp_path, monkeypatch):
    run = anakin_run(tmp_path)

    def host_read(*args, **kwargs):
        raise AssertionError("host sync in the per-step rollout")

    for name in ("item", "tolist", "numpy", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, host_read)
    # The per-step loop alone (the truncation gather runs once per unroll, after it).
    monkeypatch.setattr(run.rollout, "_bootstrap_truncated", lambda: None)
    unroll = run.rollout.collect()
    monkeypatch.undo()
    assert tuple(unroll.action.shape) == (17, 128)


def test_unroll_rows_follow_the_learner_convention_and_truncations_bootstrap(tmp_path):
    run = anakin_run(tmp_path, "env.max_episode_steps=5")
    first, second = run.rollout.collect(), None
    obs0 = first.obs[-1].clone()
    second = run.rollout.collect()
    truncated = second.truncated[1:]
    rows, cols = truncated.nonzero(as_tuple=True)
    with torch.no_grad():
        out, _ = run.agent.model(second.obs.new_zeros(1, 1, 4), torch.zeros(1, 1).bool(), ())
        expected, _ = run.agent.model(
            run.rollout.final_obs[1:][rows, cols][None], torch.zeros(1, len(rows)).bool(), ()
        )
    assert torch.equal(second.obs[0], obs0)  # one row of overlap
    assert bool(truncated.any()) and not bool((truncated & ~second.done[1:]).any())
    # float32 values from a batch of another size, whose matmul may sum in another order.
    assert torch.allclose(
        second.truncation_value[1:][rows, cols], expected.baseline[0], rtol=1e-5, atol=1e-6
    )
    assert float(second.truncation_value[1:][~truncated].abs().sum()) == 0.0


def test_a_budget_under_one_block_still_trains_and_is_not_warned_of(tmp_path, caplog):
    # Anakin acts a block of every env and trains on it, past total_env_steps if need be:
    # the warning of a budget that ends before the first update is not for it.
    with caplog.at_level("WARNING"):
        summary = anakin_run(tmp_path, "total_env_steps=100").run()
    assert summary.updates > 0
    assert not [r for r in caplog.records if "update" in r.getMessage()]


@pytest.mark.parametrize(("total", "says"), [(5000, 6144), (4096, None)])
def test_a_budget_inside_a_block_names_where_the_run_ends(tmp_path, caplog, total, says):
    # Blocks of 128 envs x 16 steps = 2048 env steps: 5000 ends inside the third.
    with caplog.at_level("INFO", logger="seedq.arch.anakin"):
        summary = anakin_run(tmp_path, f"total_env_steps={total}").run()
    told = [r.getMessage() for r in caplog.records if "whole blocks" in r.getMessage()]
    assert summary.env_steps == (says or total)
    assert told == (
        [
            f"arch=anakin acts in whole blocks of 2048 env steps (128 envs x unroll 16): "
            f"the run ends at {says} env steps, past total_env_steps={total}"
        ]
        if says
        else []
    )


def test_stop_at_return_is_met_between_rows(tmp_path):
    # The episodes reached the stats only with each row: the rule checked between rows saw
    # none, and a run stopped (and timed its target) at the next row, here never.
    summary = anakin_run(
        tmp_path, "log_interval_s=1000", "stop_at_return=15", "total_env_steps=2000000"
    ).run()
    assert (summary.stop_reason, summary.env_steps < 2_000_000) == ("target_return", True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("anakin")
    summary = anakin_run(run_dir, "seed=1", "total_env_steps=600000").run()
    return run_dir, summary


def test_a_short_run_learns_cartpole_well_above_random_play(trained):
    _, summary = trained
    # Random play averages about 22; 600k steps are about 590 updates (seed 1 reached ~150).
    assert (summary.stop_reason, summary.return_mean > 80) == ("total_env_steps", True)


def test_metrics_rows_have_the_seed_paths_columns(trained):
    run_dir, _ = trained
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    expected = {"wall_time", "env_steps", "steps_per_s", "return_mean", "episode/count"}
    assert expected | {"train/updates", "loss/pg"} <= set(header)


def test_resume_continues_the_step_count_and_the_weights(trained, tmp_path):
    from seedq.learner.checkpoint import find_checkpoint, load_checkpoint

    run_dir, summary = trained
    state = load_checkpoint(find_checkpoint(str(run_dir)))
    resumed = anakin_run(tmp_path, "seed=1", "total_env_steps=640000", resume=state)
    weights = {k: v.clone() for k, v in resumed.agent.model.state_dict().items()}
    assert all(torch.equal(weights[k], state["model"][k]) for k in weights)  # loaded, not computed
    after = resumed.run()
    assert (after.env_steps >= 640000, after.updates > summary.updates) == (True, True)


def test_seedq_eval_plays_the_gymnasium_env_with_the_anakin_checkpoint(trained, capsys):
    run_dir, _ = trained
    returns, _ = evaluate(str(run_dir), episodes=3, seed=0)
    assert main([f"checkpoint={run_dir}", "episodes=2"]) == 0
    assert len(returns) == 3 and all(math.isfinite(r) and r > 0 for r in returns)


def test_a_config_built_in_code_with_minibatches_0_is_sized_as_seed_and_sebulba_size_it(tmp_path):
    cfg = compose([*TINY], run_dir=str(tmp_path))
    cfg.algorithm.minibatches, cfg.algorithm.minibatch_size = 0, 256
    run = AnakinRun(cfg, str(tmp_path))
    # Each update call gets one of 2 shares of 128 envs x 16 steps: 64 x 16 = 1,024 transitions,
    # 4 minibatches of 256. The caller's config is left as it was.
    assert (run.cfg.algorithm.minibatches, cfg.algorithm.minibatches) == (4, 0)
    assert run.agent.alg.minibatches == 4


def test_more_envs_than_memory_holds_are_refused_before_any_is_built(tmp_path, monkeypatch):
    # 1e9 CartPole envs were an OOM kill: exit 137 and an empty log.
    import seedq.arch.anakin as anakin

    monkeypatch.setattr(anakin, "available_bytes", lambda device: 2**30)
    built = []
    monkeypatch.setattr(anakin, "make_tensor_env", lambda *a, **k: built.append(a))
    with pytest.raises(ConfigError) as caught:
        anakin_run(tmp_path, "arch.anakin.num_envs=1000000")
    says = str(caught.value)
    assert says.startswith("arch.anakin.num_envs=1000000 needs at least ") and not built, says
    fits = int(says.split("use arch.anakin.num_envs=")[1].split()[0])
    assert 0 < fits < 1_000_000 and fits % 2 == 0  # a multiple of TINY's 2 minibatches
    # The suggestion passes the same check, and a run of fewer envs is built as before.
    cfg = compose([*TINY, f"arch.anakin.num_envs={fits}"])
    model = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Linear(64, 2))
    cartpole = anakin.tensor_env_class("CartPole-v1")
    anakin.check_envs_fit(cfg.arch.anakin, cartpole, model, 16, 2**30, torch.device("cpu"))
    monkeypatch.undo()
    assert anakin_run(tmp_path / "fits").env.num_envs == 128


def test_the_memory_floor_counts_the_unroll_the_state_and_an_updates_share():
    from seedq.arch.anakin import ROW_FIELD_BYTES, bytes_per_env
    from seedq.envs.tensor import tensor_env_class

    cartpole = tensor_env_class("CartPole-v1")
    model = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Linear(32, 2))
    rows, row = 17, 2 * 4 * 4 + ROW_FIELD_BYTES + 4 * 2
    assert bytes_per_env(cartpole, model, 16, 1, 8) == 4 * 8 + rows * row + rows * 4 * 34
    assert bytes_per_env(cartpole, model, 16, 2, 8, copies=3) == (
        4 * 8 + rows * row + rows * 4 * 3 * 34 // 2
    )


def test_seedq_train_refuses_anakin_envs_past_memory_in_one_line(tmp_path):
    result = run_cli(
        "arch=anakin", "env=cartpole", "arch.anakin.num_envs=1000000000000", f"run_dir={tmp_path}"
    )
    assert result.returncode == 2 and "Traceback" not in result.stdout, result.stdout[-2000:]
    assert "arch.anakin.num_envs=1000000000000 needs at least" in result.stdout
