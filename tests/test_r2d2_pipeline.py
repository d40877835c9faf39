"""R2D2 through the whole pipeline with fake envs (observation = [env id, t, episode, action]).

The replay must hold, for every env, overlapping sequences that are exactly what the env
produced, each with the LSTM state central inference had before its first step.
"""

import collections
import threading

import numpy as np
import pytest

from seedq.actor.config import ActorConfig
from seedq.agents.common.replay import SequenceReplay
from seedq.agents.r2d2.config import QModelConfig, R2D2Config
from seedq.agents.r2d2.sequences import check_replay_fits, replay_fields
from seedq.arch.seed import SeedRun
from seedq.broker.config import BrokerConfig
from seedq.config import ConfigError, SeedqConfig
from seedq.envs import FakeConfig
from seedq.messages import EnvSpec

BURN_IN, LENGTH = 2, 4
ROWS = BURN_IN + LENGTH + 1


def r2d2_config(tmp_path, **overrides):
    alg = dict(
        sequence_length=LENGTH,
        burn_in=BURN_IN,
        batch_size=4,
        replay_capacity=5000,
        replay_min_size=8,
        replay_ratio=1.0,
        target_update_period=5,
        eval_batches=1,
        model=QModelConfig(hidden_sizes=[8], lstm_size=6, head_size=8),
    )
    alg.update(overrides)
    return SeedqConfig(
        run_dir=str(tmp_path),
        env=FakeConfig(obs_shape=[4], episode_length=5, num_actions=3),
        actor=ActorConfig(num_actors=2, envs_per_batch=3, batches_per_actor=2, transport="inproc"),
        broker=BrokerConfig(max_batch=5, deadline_ms=1.0),
        algorithm=R2D2Config(**alg),
        total_env_steps=2500,
        log_interval_s=0.2,
        max_minutes=2,
    )


@pytest.fixture(scope="module")
def r2d2_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("r2d2")
    run = SeedRun(r2d2_config(tmp_path), str(tmp_path))
    seen = {}  # (env, episode, t) -> the state inference used, and the epsilon it acted with
    lock = threading.Lock()
    infer = run.engine.infer

    def recording_infer(obs, done, rows, truncated_index, final_obs, epsilon=None):
        result = infer(obs, done, rows, truncated_index, final_obs, epsilon)
        with lock:
            for i, o in enumerate(obs.astype(int)):
                state = np.stack([s[i] for s in result.input_state])
                seen[(o[0], o[2], o[1])] = (state, float(epsilon[i]))
        return result

    run.engine.infer = recording_infer
    summary = run.run()
    replay = run.agent.replay
    stored = {name: array[: len(replay)] for name, array in replay.storage.items()}
    return run, summary, seen, stored


def test_every_stored_sequence_is_what_its_env_produced(r2d2_run):
    _, _, _, stored = r2d2_run
    obs = stored["obs"].astype(int)
    for seq in obs:
        env = seq[0, 0]
        length = 5 + env % 3
        # Within a sequence time advances by one, wrapping to a new episode at its length.
        expected_t = (seq[0, 1] + np.arange(ROWS)) % length
        assert (seq[:, 0] == env).all() and (seq[:, 1] == expected_t).all(), seq
    np.testing.assert_array_equal(stored["env_id"], obs[:, 0, 0])
    np.testing.assert_array_equal(stored["done"], obs[:, :, 1] == 0)
    # The reward of a step is its new t, or the episode length on the step that ends it.
    lengths = 5 + obs[:, :1, 0] % 3
    expected_reward = np.where(obs[:, :, 1] == 0, lengths, obs[:, :, 1])
    np.testing.assert_array_equal(stored["reward"][:, 1:], expected_reward[:, 1:])


def test_stored_state_is_the_state_inference_had_at_the_first_step(r2d2_run):
    _, _, seen, stored = r2d2_run
    for seq, state in zip(stored["obs"].astype(int), stored["core_state"], strict=True):
        env, t, episode = seq[0, 0], seq[0, 1], seq[0, 2]
        np.testing.assert_array_equal(state, seen[(env, episode, t)][0])


def test_consecutive_sequences_overlap_by_burn_in_plus_one(r2d2_run):
    _, _, _, stored = r2d2_run
    by_env = collections.defaultdict(list)
    for seq in stored["obs"].astype(int):
        by_env[seq[0, 0]].append(seq)
    for seqs in by_env.values():
        seqs.sort(key=lambda s: (s[0, 2], s[0, 1]))
        for prev, nxt in zip(seqs, seqs[1:], strict=False):
            np.testing.assert_array_equal(prev[LENGTH:], nxt[: BURN_IN + 1])
    assert sum(len(s) for s in by_env.values()) == len(stored["obs"])


def test_exploring_envs_follow_the_ladder_and_eval_envs_the_eval_epsilon(r2d2_run):
    run, _, seen, _ = r2d2_run
    alg = run.cfg.algorithm
    epsilons = {}
    for (env, _, _), (_, eps) in seen.items():
        epsilons[env] = eps
    ladder = alg.epsilon_base ** (1 + alg.epsilon_alpha * np.arange(9) / 8)
    # Epsilons travel to inference as float32: one rounding of the float64 values.
    np.testing.assert_allclose([epsilons[e] for e in range(9)], ladder, rtol=1e-6)
    np.testing.assert_allclose([epsilons[e] for e in range(9, 12)], alg.eval_epsilon, rtol=1e-6)


def test_training_ran_and_kept_the_replay_ratio(r2d2_run):
    run, summary, _, _ = r2d2_run
    limiter = run.agent.replay.limiter
    slack = run.cfg.algorithm.replay_slack_batches * run.cfg.algorithm.batch_size
    assert summary.updates > 0
    assert limiter.samples <= limiter.samples_per_insert * (limiter.inserts - limiter.min_size)
    assert limiter.samples >= limiter.samples_per_insert * (limiter.inserts - limiter.min_size) - (
        slack + 4 * run.cfg.actor.envs_per_batch
    )


def test_metrics_have_the_r2d2_columns(r2d2_run):
    run, _, _, _ = r2d2_run
    with open(f"{run.run_dir}/metrics.csv") as f:
        header = f.readline().strip().split(",")
    for column in (
        "loss/td",
        "train/q_mean",
        "replay/priority_mean",
        "replay/size",
        "replay/ratio",
        "eval/return_mean",
        "eval/epsilon",
    ):
        assert column in header


def test_a_replay_that_does_not_fit_in_memory_is_refused_with_the_figures():
    cfg = R2D2Config(replay_capacity=100_000, sequence_length=80, burn_in=40)
    fields = replay_fields(cfg, EnvSpec((4, 84, 84), "uint8", 6), (512, 512))
    with pytest.raises(ConfigError) as error:
        check_replay_fits(cfg, fields, available=24 * 2**30)
    budget = 0.8 * 24 * 2**30
    fits = int(budget // (SequenceReplay.bytes_needed(100_000, fields) / 100_000))
    message = str(error.value)
    assert "algorithm.replay_capacity=100000 sequences need 318.60 GiB" in message
    assert f"use algorithm.replay_capacity={fits} or less" in message
    assert SequenceReplay.bytes_needed(fits, fields) <= budget
