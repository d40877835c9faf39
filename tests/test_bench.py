"""seedq-bench: every subcommand runs briefly as a user runs it and ends with its JSON line.

These prove the benchmarks work, not how fast they are (speed is never asserted here).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from seedq.bench.common import BenchError, split_args
from seedq.bench.pipeline import NullEnvBatch, NullPolicy


def bench(*args: str, timeout: float = 240, tmp: Path | None = None) -> subprocess.CompletedProcess:
    """``tmp``: the bench's TMPDIR, to see what it leaves behind."""
    return subprocess.run(
        [sys.executable, "-m", "seedq.bench.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if tmp is None else {**os.environ, "TMPDIR": str(tmp)},
    )


def left_in(tmp: Path) -> list[str]:
    """What seedq left in a TMPDIR (torch keeps its own caches there too)."""
    return sorted(str(p) for p in tmp.iterdir() if p.name.startswith("seedq"))


PROFILED = r"torch\.profiler: (\d+) batches \((\d+) updates\)"


def last_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["machine"]["cores"] >= 1
    return figures


def test_split_args_parses_bench_options_and_passes_the_rest_to_hydra():
    options, overrides = split_args(
        ["seconds=2.5", "obs_shape=4,84,84", "env=atari", "actor.envs_per_batch=8"],
        {"seconds": 5.0, "obs_shape": [4], "flag": False},
    )
    assert options == {"seconds": 2.5, "obs_shape": [4, 84, 84], "flag": False}
    assert overrides == ["env=atari", "actor.envs_per_batch=8"]
    with pytest.raises(BenchError, match="seconds='soon'"):
        split_args(["seconds=soon"], {"seconds": 5.0})
    with pytest.raises(BenchError, match="key=value"):
        split_args(["fast"], {})


def test_null_env_and_policy_cost_nothing_and_keep_shapes():
    env = NullEnvBatch(5, (4, 84, 84), "uint8", env_offset=10)
    obs = env.reset()
    out = env.step(np.zeros(5, np.int64))
    assert obs.shape == out.obs.shape == (5, 4, 84, 84) and obs.dtype == np.uint8
    assert out.final_obs.shape == (0, 4, 84, 84)
    assert not (out.terminated | out.truncated).any()
    policy = NullPolicy()

    class Batch:
        num_envs = 6

    actions = policy.act(Batch)
    assert actions.shape == (6,) and actions.dtype == np.int32 and not actions.any()


def test_raw_env_reports_steps_per_process_and_total(tmp_path):
    result = bench("raw-env", "seconds=0.5", "warmup_s=0.2", tmp=tmp_path)
    figures = last_json(result)
    assert "random actions, 0.5 s" in result.stdout  # its title said "0 s"
    # Its config's scratch run dir is gone with the process: a bench of figures leaves no files.
    assert left_in(tmp_path) == []
    assert figures["env"] == "CartPole-v1" and len(figures["per_process_steps_per_s"]) == 2
    # Each figure is rounded to 0.1 (the error on a loaded box that steps slowly).
    assert figures["env_steps_per_s"] == pytest.approx(
        sum(figures["per_process_steps_per_s"]), rel=1e-3, abs=3 * 0.05
    )


def test_raw_env_atari_counts_frames_as_four_per_step():
    figures = last_json(
        bench(
            "raw-env",
            "env=atari",
            "actor.num_actors=1",
            "actor.envs_per_batch=2",
            "actor.batches_per_actor=1",
            "seconds=0.5",
            "warmup_s=0.2",
        )
    )
    # Both figures are rounded to 0.1: on a loaded box (a few env steps/s) that is the error.
    assert figures["frames_per_s"] == pytest.approx(
        4 * figures["env_steps_per_s"], rel=1e-3, abs=4 * 0.05 + 0.05
    )


def test_pipeline_moves_steps_through_the_broker_and_reports_latency():
    result = bench(
        "pipeline",
        "seconds=1",
        "warmup_s=0.5",
        "obs_shape=4,8,8",
        "obs_dtype=uint8",
        "actor.envs_per_batch=8",
    )
    figures = last_json(result)
    assert figures["obs_shape"] == [4, 8, 8] and figures["actor_envs"] == 32
    assert figures["env_steps_per_s"] > 0 and figures["messages_per_s"] > 0
    assert 0 < figures["batch_fill"] <= 1
    assert 0 < figures["latency_ms_p50"] <= figures["latency_ms_p99"]
    assert "latency p99 ms" in result.stdout


def test_inference_times_each_model_and_batch_size():
    figures = last_json(bench("inference", "models=mlp,nature", "batch_sizes=1,4", "seconds=0.05"))
    cases = [(r["model"], r["batch"]) for r in figures["results"]]
    assert cases == [("mlp", 1), ("mlp", 4), ("nature", 1), ("nature", 4)]
    assert all(r["samples_per_s"] > 0 for r in figures["results"])


def test_learner_times_the_learners_own_work_per_env_step_with_the_torso_left_out():
    result = bench("learner", "seconds=1", "warmup_s=0.5", "obs_shape=4,12,12", "profile=1")
    figures = last_json(result)  # the JSON line comes last, after the profile too
    assert figures["model"] == "zero" and figures["batches"] > 0 and figures["trained_steps"] > 0
    # Gradient steps, as a run counts them: the Atari preset's 4 epochs x 4 minibatches a batch.
    assert figures["updates"] == 16 * figures["batches"]
    stages = figures["us_act"] + figures["us_record"] + figures["us_train"]
    assert figures["us_per_step"] == pytest.approx(stages, abs=0.05)
    # profile=1: a batch more (or the burst that completes it) under torch.profiler, its ops by
    # self CPU time.
    profiled = re.search(PROFILED, result.stdout)
    batches, updates = map(int, profiled.groups())
    assert batches >= 1 and updates == 16 * batches
    # Which ops make the top 25 depends on the load (index_select, the minibatch gather, fell
    # out of it once on a busy box): the table is checked for its form, not its ranking.
    table = result.stdout[profiled.end() :]
    assert "aten::" in table and "Self CPU time total" in table


@pytest.mark.parametrize(("algorithm", "lr"), [("vtrace", 0.00025), ("sac", 0.0003)])
def test_learner_run_mode_feeds_fake_pong_frames_with_ataris_preset(tmp_path, algorithm, lr):
    from seedq.bench.learner import OPTIONS, run_config

    cfg = run_config(OPTIONS, [f"algorithm={algorithm}"], str(tmp_path))
    assert (cfg.env.kind, cfg.env.obs_shape, cfg.env.num_actions, cfg.algorithm.lr) == (
        "fake",
        [4, 84, 84],
        6,
        lr,  # tuning/vtrace_atari's; SAC has no Atari preset and keeps its default
    )


def test_the_zero_cost_model_skips_the_torso_and_still_learns_with_its_heads():
    from seedq.bench.common import compose
    from seedq.bench.learner import LearnerLoop
    from seedq.messages import EnvSpec

    cfg = compose(["env=atari", "algorithm.train_queue_batches=64"])
    loop = LearnerLoop(cfg, EnvSpec((4, 12, 12), "uint8", 6), "zero", requests=4)
    torso = loop.agent.model.torso
    torso.register_forward_hook(lambda *args: pytest.fail("the torso ran"))
    before = [p.detach().clone() for p in loop.agent.model.parameters()]
    while loop.updates == 0:
        loop.step()
    # Zero features: only the heads' biases get a gradient.
    after = list(loop.agent.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_the_learner_loop_trains_a_config_that_pauses_acting():
    """The loop acts, records and trains on one thread: a sink waiting for a training thread
    (``pause_acting``) would wait for ever, so the loop turns the pause off."""
    import threading

    from seedq.bench.common import compose
    from seedq.bench.learner import LearnerLoop
    from seedq.messages import EnvSpec

    cfg = compose(["env=atari", "algorithm.train_queue_batches=64", "algorithm.pause_acting=true"])
    loop = LearnerLoop(cfg, EnvSpec((4, 12, 12), "uint8", 6), "zero", requests=4)

    def until_an_update() -> None:
        while loop.updates == 0:
            loop.step()

    worker = threading.Thread(target=until_an_update, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive() and loop.updates > 0
    assert loop.agent.pauses_acting is False


@pytest.mark.parametrize("algorithm", ["vtrace", "ppo"])
def test_the_learner_loop_trains_every_on_policy_algorithm(algorithm):
    """PPO's config has no train_queue_batches; the loop's own unbounded queue takes every
    batch a record completes (a queue of one would block the loop's only thread)."""
    import threading

    from seedq.bench.common import compose
    from seedq.bench.learner import LearnerLoop
    from seedq.messages import EnvSpec

    overrides = ["algorithm.unroll_length=8", "algorithm.batch_size=4"]
    cfg = compose(["env=atari", f"algorithm={algorithm}", *overrides])
    loop = LearnerLoop(cfg, EnvSpec((4, 12, 12), "uint8", 6), "zero", requests=4)

    def until_two_batches() -> None:
        while loop.batches < 2:
            loop.step()

    worker = threading.Thread(target=until_two_batches, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive() and loop.updates > 0 and loop.agent.stats.updates > 0


def test_the_learner_loop_names_the_algorithms_it_trains():
    from seedq.bench.common import BenchError, compose
    from seedq.bench.learner import LearnerLoop
    from seedq.messages import EnvSpec

    cfg = compose(["env=atari", "algorithm=r2d2"])
    with pytest.raises(BenchError, match="algorithm=r2d2 is not on-policy.*algorithm=ppo"):
        LearnerLoop(cfg, EnvSpec((4, 12, 12), "uint8", 6), "zero", requests=4)


def test_train_runs_the_real_loop_for_a_few_seconds(tmp_path):
    figures = last_json(
        bench("train", "seconds=3", "warmup_s=2", "actor.transport=inproc", tmp=tmp_path)
    )
    # The run dir its figures name is kept, and nothing else.
    assert left_in(tmp_path) == [figures["run_dir"]]
    assert (Path(figures["run_dir"]) / "metrics.csv").is_file()
    assert figures["algorithm"] == "vtrace" and figures["env_steps_per_s"] > 0
    assert figures["updates_per_s"] > 0
    # The learner process's CPU by thread over the same window: its broker (and inference)
    # thread and its training thread by name.
    if sys.platform == "linux":
        assert {"cpu_broker", "cpu_train", "cpu_process"} <= set(figures)
        assert figures["cpu_process"] >= figures["cpu_broker"] > 0


# A copy that reports 100 units/s on its last line, as `seedq-bench train` reports env steps/s.
TINY_COPY = """python -c 'import json; print(json.dumps({"env_steps_per_s": 100.0}))'"""


def test_contention_runs_copies_alone_then_at_once_and_reports_each_and_the_aggregate():
    figures = last_json(
        bench("contention", "copies=2", "seconds=1", "warmup_s=0", f"command={TINY_COPY}")
    )
    (only_round,) = figures["rounds"]
    assert only_round["each"] == [100.0, 100.0] and only_round["aggregate"] == 200.0
    assert figures["ratio"] == 2.0 and "load_before" in only_round


def test_contention_interrupts_a_command_that_runs_on_and_reads_its_figure_by_pattern():
    result = bench(
        "contention",
        "copies=1",
        "neighbours=1",
        "seconds=0.5",
        "warmup_s=0",
        "grace_s=0",
        "command=echo 'fps 10'; echo 'fps 30'; sleep 60",
        "pattern=fps ([0-9.]+)",
    )
    figures = last_json(result)
    assert figures["rounds"][0]["each"] == [20.0] and figures["neighbours"] == 1
    assert "aggregate vs alone" in result.stdout


def test_broker_stages_time_every_stage_and_central_inference_answers_behind_the_broker():
    stages = last_json(bench("broker", "stages=true", "envs=1,8", "rounds=5"))
    model = last_json(bench("broker", "policy=model", "streams=8", "seconds=0.5", "warmup_s=0.5"))
    (point,) = model["points"]
    assert [s["envs"] for s in stages["stages"]] == [1, 8]
    assert all(s["total"] > 0 and s["receive"] > 0 for s in stages["stages"])
    assert (model["policy"], point["replies_per_s"] > 0, point["refused"]) == ("model", True, 0)


@pytest.mark.parametrize(
    "args, message",
    [
        (["broker", "obs=4:notatype"], "obs='4:notatype'"),
        (["broker", "policy=oracle"], "policy='oracle'"),
        (["warp"], "unknown subcommand 'warp'"),
        (["inference", "models=resnet9000"], "models=['resnet9000']"),
        (["pipeline", "obs_shape=0"], "obs_shape=[0]"),
        (["train", "hardware.amp=fp8"], "hardware.amp='fp8'"),
        (["contention", "copies=0"], "copies and rounds must be >= 1"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args, message, tmp_path):
    result = bench(*args, tmp=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert left_in(tmp_path) == []  # no run dir left behind by a run that never started


def _against(*args: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        pytest.skip("bench_against exports a commit with git archive: no .git here")
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "bench_against.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )


def test_bench_against_runs_a_commit_and_the_checkout_side_by_side():
    result = _against("HEAD", "--pairs", "1", "seconds=1", "warmup_s=0.3", "obs_shape=4,12,12")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["base"] == "HEAD" and summary["metric"] == "us_per_step"
    (pair,) = summary["pairs"]
    assert all(value > 0 for value in pair) and summary["ratio"] > 0


def test_bench_against_names_a_bad_commit_and_an_unknown_metric():
    result = _against("no-such-commit", "--pairs", "1")
    assert result.returncode != 0 and "git archive no-such-commit" in result.stderr
    # The metric is read from each side's JSON line (the run above shows a real one).
    spec = importlib.util.spec_from_file_location(
        "bench_against", Path(__file__).parent.parent / "scripts" / "bench_against.py"
    )
    against = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(against)
    line = {"bench": "learner", "us_per_step": 120.5, "updates": 40, "machine": {"cores": 2}}
    assert against.metric(line, "us_per_step") == 120.5
    with pytest.raises(SystemExit, match=r"no number 'nope'.*\['updates', 'us_per_step'\]"):
        against.metric(line, "nope")
    with pytest.raises(SystemExit, match="no number 'bench'"):
        against.metric(line, "bench")


def test_bench_against_exports_a_base_older_than_the_benchs_helpers(tmp_path):
    # seedq/bench/learner.py imports scratch_dir from common.py since fc928c5: against a base
    # before it (the 0ac3cd8 among them) the export failed with an ImportError. Then
    # common.py's compose took key_refusal from the cli (2026-12-02), which 0ac3cd8 predates:
    # the export imported and every run failed; the export's check now composes a config.
    root = Path(__file__).resolve().parent.parent
    base = "0ac3cd8"
    known = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "-q", base + "^{commit}"],
        capture_output=True,
        check=False,
    )
    if known.returncode != 0:
        pytest.skip(f"{base} is not in this clone's history")
    spec = importlib.util.spec_from_file_location(
        "bench_against", root / "scripts" / "bench_against.py"
    )
    against = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(against)
    tree = against.export(base, "learner", tmp_path)
    assert against.import_error(tree, "learner") == ""
    assert "def scratch_dir" in (tree / "seedq" / "bench" / "common.py").read_text()
    composed = subprocess.run(  # what each of the base's runs does first
        [sys.executable, "-c", "from seedq.bench.common import compose; compose(['env=atari'])"],
        cwd=tree,
        env=against.tree_env(tree),
        capture_output=True,
        text=True,
        check=False,
    )
    assert composed.returncode == 0, composed.stderr[-1500:]


def test_the_update_parts_probe_times_the_learners_own_update():
    # benchmarks/learner_update_parts.py drives VTraceLearner's own methods by hand; if they
    # change, the probe must fail here, not print figures of code that no longer runs.
    script = Path(__file__).parent.parent / "benchmarks" / "learner_update_parts.py"
    result = subprocess.run(
        [sys.executable, str(script), "zero", "1", "ops"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    parts = dict(re.findall(r"^(.+?)\s+([\d.]+) µs/step", result.stdout, re.MULTILINE))
    assert {"gather + forward + loss", "backward", "clip", "adam", "total"} <= set(parts)
    assert "1 batches of 512 env steps" in result.stdout  # the preset: 16 envs x 32 steps
    # ops: the aten ops of one minibatch update, by part.
    assert re.search(r"^one minibatch update\s+\d+ aten ops", result.stdout, re.MULTILINE)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["raw-env", "seconds=0"], "seconds=0.0: must be > 0"),
        (["pipeline", "seconds=-1"], "seconds=-1.0: must be > 0"),
        (["learner", "warmup_s=-1"], "warmup_s=-1.0: must be >= 0"),
        # An OverflowError in a timer, a ZeroDivisionError, a TypeError and a 60 s wait for
        # actors that the learner refused (bad_dtype):
        (["raw-env", "seconds=inf"], "seconds=inf: must be > 0 (the time measured) and at most"),
        (["learner", "requests=0"], "requests=0: the env batches a step takes, >= 1"),
        (["pipeline", "obs_dtype=bogus"], "obs_dtype=bogus: the protocol carries bool"),
        (["pipeline", "obs_dtype=complex64"], "obs_dtype=complex64: the protocol carries"),
        (["raw-env", "seconds=1", "env=gym", "env.id=Nope-v0"], "unknown gymnasium env id"),
        (["train", "env=gym", "env.id=Nope-v0"], "unknown gymnasium env id 'Nope-v0'"),
        # A ZMQError traceback: an address of another machine (TEST-NET-1, RFC 5737).
        (
            ["pipeline", "seconds=1", "broker.host=192.0.2.1", "security.allow_insecure=true"],
            "broker.host='192.0.2.1' is not an address (or interface) of this machine",
        ),
        # A Step that a training run refuses: the actors exited at their Hello and the bench
        # ended in a RuntimeError traceback; one over broker.max_message_bytes was measured
        # (the bench's broker took 256 MB whatever the config said).
        (
            ["pipeline", "seconds=1", "actor.envs_per_batch=100000"],
            "actor.envs_per_batch=100000 is more than one Step carries (at most 65536 envs)",
        ),
        (
            [
                "pipeline",
                "seconds=1",
                "obs_shape=4,84,84",
                "obs_dtype=uint8",
                "broker.max_message_bytes=100000",
            ],
            "more than broker.max_message_bytes=100000",
        ),
        # A run that an override stops before the warm-up is over: RuntimeError tracebacks.
        (
            ["train", "seconds=1", "warmup_s=1", "total_env_steps=1000"],
            "the run stopped (total_env_steps) after",
        ),
        (
            ["learner", "mode=run", "seconds=1", "warmup_s=0.5", "total_env_steps=1000"],
            "mode=run: the run stopped (total_env_steps) before 1 s were measured",
        ),
    ],
)
def test_ordinary_mistakes_exit_2_in_one_line(args, message):
    # They were a ZeroDivisionError, a RuntimeError and an uncaught EnvError (exit 1), and
    # pipeline seconds=0 a table of zeros with exit 0.
    result = bench(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_contention_leaves_no_run_dir_of_its_train_copies(tmp_path):
    # seedq-bench train keeps the run dir its figures name; contention's copies left theirs
    # (one per copy and round) in the TMPDIR.
    result = bench(
        "contention", "copies=2", "seconds=1", "warmup_s=0.3", "total_env_steps=100000000",
        tmp=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert left_in(tmp_path) == []


def test_bench_configs_refuse_misspelt_and_foreign_keys_as_seedq_train_does():
    from seedq.bench.common import compose
    from seedq.config import ConfigError

    with pytest.raises(ConfigError, match=r"did you mean algorithm\.lr\?"):
        compose(["algorithm.lrr=3"])
    with pytest.raises(ConfigError, match="env.scenario is a football key"):
        compose(["env=atari", "env.scenario=11_vs_11_stochastic"])
