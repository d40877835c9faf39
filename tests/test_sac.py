"""SAC: its target and losses against NumPy, the squashed Gaussian, Polyak averaging, its config,
continuous actions through the real wire, checkpoints, resume and seedq-eval's policy."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import distributions as D

import seedq
from seedq.actor.config import ActorConfig
from seedq.agents.common.distributions import Gaussian
from seedq.agents.common.replay import SampledSequences
from seedq.agents.common.update import Placement
from seedq.agents.sac.config import SACConfig, SACModelConfig
from seedq.agents.sac.learner import SACLearner, polyak_update
from seedq.agents.sac.loss import actor_loss, critic_loss, soft_q_target, temperature_loss
from seedq.agents.sac.network import build_network
from seedq.arch.seed import SeedRun
from seedq.broker.config import BrokerConfig
from seedq.cli import to_config
from seedq.config import ConfigError, SeedqConfig, register_configs
from seedq.envs import FakeConfig
from seedq.learner.checkpoint import find_checkpoint, load_checkpoint
from seedq.learner.config import CheckpointConfig
from seedq.messages import EnvSpec
from seedq.trained_policy import load_policy

RNG = np.random.default_rng(0)
CONF_DIR = str(Path(seedq.__file__).parent / "conf")
SPEC = EnvSpec((3,), "float32", 2, "continuous", (-2.0, 0.0), (2.0, 1.0))
SPEC_LOW, SPEC_HIGH = torch.tensor(SPEC.action_low), torch.tensor(SPEC.action_high)

register_configs()


def compose_config(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=["run_dir=/tmp/seedq-test", *overrides])


def test_soft_q_target_bootstraps_truncations_and_stops_at_terminations():
    gamma, alpha, B = 0.9, 0.3, 4
    # Transitions stored as two rows; row 1 holds what arrived with the next observation.
    reward = RNG.normal(size=(B, 2)).astype(np.float32)
    done = np.zeros((B, 2), bool)
    truncated = np.zeros((B, 2), bool)
    truncation_value = np.zeros((B, 2), np.float32)
    done[1, 1] = True  # transition 1 terminated
    done[2, 1] = truncated[2, 1] = True  # transition 2 hit the time limit, V(final obs) = 4.5
    truncation_value[2, 1] = 4.5
    data = {
        "obs": RNG.normal(size=(B, 2, 3)).astype(np.float32),
        "action": RNG.uniform(-2, 2, size=(B, 2, 2)).astype(np.float32),
        "reward": reward,
        "done": done,
        "truncated": truncated,
        "truncation_value": truncation_value,
    }
    model = build_network(SPEC, SACConfig())
    learner = SACLearner(model, SACConfig(gamma=gamma), Placement.cpu())
    batch = learner._batch(data)
    q1, q2, log_prob = (RNG.normal(size=B) for _ in range(3))
    y = soft_q_target(
        batch["reward"].double(),
        batch["discount"].double(),
        *(torch.tensor(x) for x in (q1, q2, log_prob)),
        alpha,
    )
    soft_next = np.minimum(q1, q2) - alpha * log_prob
    expected = reward[:, 1] + gamma * soft_next
    expected[1] = reward[1, 1]  # terminal: no bootstrap
    expected[2] = reward[2, 1] + gamma * 4.5  # truncated: the final obs's value, not s'
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)


def transitions(B: int) -> dict[str, np.ndarray]:
    """``B`` random transitions of SPEC as the replay stores them (two rows each)."""
    return {
        "obs": RNG.normal(size=(B, 2, 3)).astype(np.float32),
        "action": RNG.uniform(-1, 1, size=(B, 2, 2)).astype(np.float32),
        "reward": RNG.normal(size=(B, 2)).astype(np.float32),
        "done": np.zeros((B, 2), bool),
        "truncated": np.zeros((B, 2), bool),
        "truncation_value": np.zeros((B, 2), np.float32),
    }


def test_critic_actor_and_temperature_losses_match_numpy():
    B, alpha, target_entropy = 32, 0.2, -2.0
    q1, q2, y, log_prob = (RNG.normal(size=B) for _ in range(4))
    t = {k: torch.tensor(v) for k, v in dict(q1=q1, q2=q2, y=y, log_prob=log_prob).items()}
    log_alpha = torch.tensor(math.log(alpha), dtype=torch.float64)
    assert float(critic_loss(t["q1"], t["q2"], t["y"])) == pytest.approx(
        0.5 * ((q1 - y) ** 2).mean() + 0.5 * ((q2 - y) ** 2).mean(), rel=1e-12
    )
    assert float(actor_loss(t["log_prob"], t["q1"], t["q2"], log_alpha.exp())) == pytest.approx(
        (alpha * log_prob - np.minimum(q1, q2)).mean(), rel=1e-12
    )
    assert float(temperature_loss(log_alpha, t["log_prob"], target_entropy)) == pytest.approx(
        -(alpha * (log_prob + target_entropy)).mean(), rel=1e-12
    )


def test_losses_send_gradients_only_where_sac_wants_them():
    log_alpha = torch.tensor(0.0, requires_grad=True)
    log_prob = torch.full((4,), -3.0, requires_grad=True)  # entropy 3 above the target -1
    actor_loss(log_prob, torch.zeros(4), torch.ones(4), log_alpha.exp()).backward()
    assert log_alpha.grad is None and torch.allclose(log_prob.grad, torch.full((4,), 0.25))
    temperature_loss(log_alpha, log_prob, target_entropy=-1.0).backward()
    # Entropy above its target: the loss falls as alpha falls, so alpha's gradient is positive.
    assert log_alpha.grad > 0 and torch.allclose(log_prob.grad, torch.full((4,), 0.25))


def test_squashed_rsample_log_prob_matches_torch_distributions_and_has_gradients():
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    params = (torch.tensor(RNG.normal(size=(6, 4)), dtype=torch.float32) * 0.5).requires_grad_()
    mean, log_std = params[:, :2], params[:, 2:]
    ref = D.Independent(
        D.TransformedDistribution(
            D.Normal(mean, log_std.exp()),
            [D.TanhTransform(), D.AffineTransform((high + low) / 2, (high - low) / 2)],
        ),
        1,
    )
    torch.manual_seed(0)
    actions, log_prob = Gaussian(2, squash=True, low=low, high=high).rsample(params)
    assert ((actions > low) & (actions < high)).all()
    torch.testing.assert_close(log_prob, ref.log_prob(actions), rtol=1e-4, atol=1e-4)
    log_prob.sum().backward()
    assert params.grad is not None and params.grad.abs().sum() > 0


def test_polyak_update_moves_targets_by_tau():
    online, target = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    polyak_update(target, online, 0.1)
    for name, value in target.state_dict().items():
        expected = 0.9 * before[name] + 0.1 * online.state_dict()[name]
        torch.testing.assert_close(value, expected)


def test_network_acts_in_bounds_and_its_value_is_the_soft_value():
    model = build_network(SPEC, SACConfig())
    obs = torch.tensor(RNG.normal(size=(1, 5, 3)), dtype=torch.float32)
    torch.manual_seed(3)
    out, state = model(obs, torch.zeros(1, 5, dtype=torch.bool), ())
    torch.manual_seed(3)
    x = model.normalize(obs[0])
    action, log_prob = model.sample(model.policy(x))
    expected = model.q(x, action).min(0).values - log_prob  # alpha starts at 1
    torch.testing.assert_close(out.value[0], expected)
    greedy = out.distribution.mode(out.policy[0])
    assert state == () and ((greedy >= SPEC_LOW) & (greedy <= SPEC_HIGH)).all()


@pytest.mark.parametrize("env", ["gym", "mujoco"])
@pytest.mark.parametrize("hardware", ["cpu", "gpu"])
def test_sac_composes_and_validates_with_its_env_groups(env, hardware):
    cfg = to_config(compose_config("algorithm=sac", f"env={env}", f"hardware={hardware}"))
    assert isinstance(cfg.algorithm, SACConfig) and cfg.algorithm.name == "sac"


def test_mujoco_preset_applies_the_paper_settings_and_the_command_line_wins():
    tuned = to_config(compose_config("algorithm=sac", "env=mujoco")).algorithm
    overridden = to_config(compose_config("algorithm=sac", "env=mujoco", "algorithm.lr=1e-3"))
    assert (tuned.lr, tuned.batch_size, tuned.gamma, tuned.tau) == (3e-4, 256, 0.99, 0.005)
    assert (tuned.replay_capacity, tuned.learning_starts, tuned.model.hidden_sizes) == (
        1_000_000,
        10_000,
        [256, 256],
    )
    assert overridden.algorithm.lr == 1e-3


@pytest.mark.parametrize("env", ["cartpole", "atari", "football"])
def test_discrete_env_groups_are_refused_at_start_up(env):
    with pytest.raises(ConfigError, match=f"env.kind={env} has discrete"):
        to_config(compose_config("algorithm=sac", f"env={env}"))


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("algorithm.tau=1.5", "algorithm.tau"),
        ("algorithm.updates_per_step=0", "algorithm.updates_per_step"),
        ("algorithm.learning_starts=10", "algorithm.learning_starts"),
        ("algorithm.model.use_lstm=true", "algorithm.model.use_lstm"),
        ("algorithm.model.torso=nature", "algorithm.model.torso"),
        ("arch=anakin", "arch=anakin"),
    ],
)
def test_bad_sac_values_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        to_config(compose_config("algorithm=sac", "env=mujoco", override))


def test_a_block_of_k_batches_is_k_updates_each_on_its_own_batch():
    cfg = SACConfig(batch_size=4, model=SACModelConfig(hidden_sizes=[8]))
    block, single = (SACLearner(build_network(SPEC, cfg), cfg, Placement.cpu()) for _ in "ab")
    single.model.load_state_dict(block.model.state_dict())
    single.target_critics.load_state_dict(block.target_critics.state_dict())
    data = transitions(12)

    torch.manual_seed(0)
    block.train_block(SampledSequences(np.arange(12), np.zeros(12), np.ones(12), data), 3)
    torch.manual_seed(0)
    for part in (slice(0, 4), slice(4, 8), slice(8, 12)):
        rows = {k: v[part] for k, v in data.items()}
        single.train_step(SampledSequences(np.arange(4), np.zeros(4), np.ones(4), rows))

    assert block.stats.updates == single.stats.updates == 3
    pairs = zip(block.model.state_dict().values(), single.model.state_dict().values(), strict=True)
    for a, b in pairs:
        torch.testing.assert_close(a, b)


def test_a_take_with_no_block_allowed_hands_the_training_loop_none_within_a_moment():
    # SAC's take waited on the replay until the rate limiter allowed a block or the run
    # stopped: with several learner ranks, a rank whose actors were restarting held every
    # rank's training round, up to hardware.learner_timeout_s, which then ended the run.
    import threading
    from types import SimpleNamespace

    from seedq.agents.sac.agent import SACAgent
    from seedq.agents.sac.transitions import make_replay

    alg = SACConfig(batch_size=4, block_updates=2, model=SACModelConfig(hidden_sizes=[8]))
    agent = SACAgent.__new__(SACAgent)
    agent.alg, agent.ctx = alg, SimpleNamespace(stop=threading.Event())
    agent.replay = make_replay(alg, SPEC, 0)  # empty: no block is allowed
    takes = []
    agent.training_loop = lambda take, train: takes.append(take)
    agent.train(lambda: 0)
    result = []
    taker = threading.Thread(target=lambda: result.append(takes[0]()), daemon=True)
    taker.start()
    taker.join(timeout=30)
    agent.ctx.stop.set()  # the old take returns only now
    assert result == [None], "the take waited on the replay"


def test_a_block_larger_than_the_replay_slack_is_refused():
    with pytest.raises(ConfigError, match="algorithm.block_updates=40"):
        to_config(compose_config("algorithm=sac", "env=gym", "algorithm.block_updates=40"))


def test_a_discrete_or_unbounded_action_space_is_refused_as_a_config_error():
    with pytest.raises(ConfigError, match="algorithm=sac needs continuous"):
        build_network(EnvSpec((3,), "float32", 4), SACConfig())
    unbounded = EnvSpec((3,), "float32", 1, "continuous", (-math.inf,), (math.inf,))
    with pytest.raises(ConfigError, match="infinite bounds"):
        build_network(unbounded, SACConfig())


def sac_config(tmp_path, **overrides) -> SeedqConfig:
    alg = dict(
        unroll_length=4,
        batch_size=16,
        learning_starts=48,
        replay_capacity=2000,
        updates_per_step=0.5,
        model=SACModelConfig(hidden_sizes=[32, 32], obs_norm=True),
    )
    return SeedqConfig(
        run_dir=str(tmp_path),
        env=FakeConfig(obs_shape=[4], num_actions=2, continuous_actions=True, episode_length=5),
        actor=ActorConfig(num_actors=1, envs_per_batch=3, batches_per_actor=2, transport="inproc"),
        broker=BrokerConfig(max_batch=6, deadline_ms=1.0),
        algorithm=SACConfig(**{**alg, **overrides}),
        checkpoint=CheckpointConfig(replay=True),
        total_env_steps=600,
        log_interval_s=0.2,
        max_minutes=1,
    )


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("sac")
    run = SeedRun(sac_config(tmp_path), str(tmp_path))
    summary = run.run()
    return run, summary


def test_transitions_through_the_real_wire_pair_each_action_with_its_next_obs(sac_run):
    run, summary = sac_run
    replay = run.agent.replay
    stored = {name: array[: len(replay)] for name, array in replay.storage.items()}
    assert summary.env_steps >= 600 and len(replay) >= 600 - 6 * 4
    assert stored["action"].dtype == np.float32 and stored["action"].shape[1:] == (2, 2)
    # Obs element 3 is the first value of the action that led to it, clipped to [-1, 1] by
    # the env: each stored transition holds its action and the observation it led to.
    stepped = ~stored["done"][:, 1]
    np.testing.assert_allclose(
        stored["obs"][stepped, 1, 3], np.clip(stored["action"][stepped, 0, 0], -1, 1), rtol=1e-6
    )
    assert (np.abs(stored["action"]) <= 1).all()  # squashed into the env's bounds


def test_truncated_episodes_store_the_soft_value_of_their_final_observation(tmp_path):
    cfg = sac_config(tmp_path)
    cfg = dataclasses.replace(
        cfg, env=dataclasses.replace(cfg.env, truncate_episodes=True), total_env_steps=200
    )
    run = SeedRun(cfg, str(tmp_path))
    run.run()
    replay = run.agent.replay
    truncated = replay.storage["truncated"][: len(replay), 1]
    value = replay.storage["truncation_value"][: len(replay), 1]
    # Row 1 of a transition into a new episode carries the value inference computed for the
    # true last observation: the learner bootstraps from it, not from the next episode's obs.
    assert truncated.any() and (value[truncated] != 0).all() and (value[~truncated] == 0).all()


def test_sac_updated_at_its_replay_ratio(sac_run):
    run, summary = sac_run
    limiter = run.agent.replay.limiter
    alg = run.cfg.algorithm
    due = limiter.samples_per_insert * (limiter.inserts - limiter.min_size)
    assert summary.updates > 0 and limiter.samples_per_insert == alg.updates_per_step * 16
    assert due - (alg.replay_slack_batches * alg.batch_size + 6 * 4 * 8) <= limiter.samples <= due
    norm = run.agent.model.obs_norm
    assert norm is not None and float(norm.count) == pytest.approx(limiter.inserts, rel=0.1)


def test_checkpoint_resumes_weights_targets_optimizers_and_replay(sac_run, tmp_path):
    run, _ = sac_run
    path = find_checkpoint(run.run_dir)
    state = load_checkpoint(path)
    cfg = dataclasses.replace(sac_config(tmp_path), resume=str(path))
    resumed = SeedRun(cfg, str(tmp_path), resume=state)
    resumed._close_roles()  # built to compare, never run: its socket and context go now
    agent, old = resumed.agent, run.agent
    for a, b in [
        (agent.model, old.model),
        (agent.learner.target_critics, old.learner.target_critics),
    ]:
        for key, value in b.state_dict().items():
            torch.testing.assert_close(a.state_dict()[key], value)
    assert float(agent.model.log_alpha.detach()) != 0.0  # the temperature was learned and restored
    for name, opt in agent.learner.optimizers.items():
        assert opt.state_dict()["state"], name
    assert (len(agent.replay), agent.replay.limiter.inserts) == (
        len(old.replay),
        old.replay.limiter.inserts,
    )
    assert agent.stats.updates == state["updates"] > 0


def test_load_policy_acts_with_the_mean_or_a_sample_within_bounds(sac_run):
    run, _ = sac_run
    greedy = load_policy(run.run_dir, mode="greedy")
    sampled = load_policy(run.run_dir, seed=1)
    obs = np.array([0.1, -0.2, 0.3, 0.0], np.float32)
    a, b = greedy(obs), greedy(obs)
    with torch.no_grad():
        out, _ = greedy.model(torch.tensor(obs)[None, None], torch.ones(1, 1, dtype=torch.bool), ())
    mean = out.distribution.mode(out.policy[0, 0])
    np.testing.assert_allclose(a, mean.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(a, b)  # the same policy on the same input: exact
    draws = np.stack([sampled(obs) for _ in range(20)])
    assert draws.shape == (20, 2) and (np.abs(draws) <= 1).all() and draws.std(0).min() > 0


def pendulum_run(tmp_path, *overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                f"run_dir={tmp_path}",
                "algorithm=sac",
                "env=gym",
                "env.id=Pendulum-v1",
                "log_interval_s=1",
                *overrides,
            ],
        )
    return SeedRun(to_config(cfg), str(tmp_path)).run()


def test_smoke_sac_trains_on_pendulum_with_tcp_actors(tmp_path):
    """Smoke test: real Pendulum-v1 in an actor process, 4 envs (sac_gym), episodes truncated
    at 200 steps, updates at a quarter of the paper's rate (no learning asserted)."""
    summary = pendulum_run(
        tmp_path,
        "total_env_steps=1200",
        "algorithm.learning_starts=256",
        "algorithm.batch_size=64",
        "algorithm.updates_per_step=0.25",
    )
    assert (summary.episodes >= 4, summary.updates >= 100) == (True, True), summary


@pytest.mark.slow
def test_sac_learns_pendulum(tmp_path):
    # A random policy scores about -1200; the 100-episode mean includes the first ~40 episodes
    # (before the policy learns), so it passes -400 at ~23k env steps (12 min on a loaded box).
    summary = pendulum_run(tmp_path, "max_minutes=20", "stop_at_return=-400")
    assert summary.return_at_target is not None and summary.return_at_target >= -400, summary


def test_a_replay_that_does_not_fit_in_memory_is_refused_before_it_is_allocated(monkeypatch):
    # algorithm=sac algorithm.replay_capacity=1e12 ended in numpy's 21.8 TiB allocation error.
    from seedq.agents.sac import transitions
    from seedq.schema import ConfigError

    monkeypatch.setattr(transitions, "available_memory_bytes", lambda: 8 * 2**30)
    with pytest.raises(ConfigError, match=r"algorithm.replay_capacity=1000000000000 transitions"):
        transitions.make_replay(SACConfig(replay_capacity=10**12), SPEC, seed=0)
    fits = transitions.make_replay(SACConfig(replay_capacity=1000), SPEC, seed=0)
    assert fits is not None
