"""End-to-end data path: fake envs -> actors -> ZMQ -> broker -> inference -> unrolls -> training.

The fake env's observation is [global env id, step in episode, episode index, last action], so
every row the learner trains on says where it came from. The test model's value of an
observation is its step number, so a truncation bootstrap shows which observation it used, and
its logits differ per action and per observation, so behaviour logits stored one row off from
their observation show.
"""

import collections

import numpy as np
import pytest
import torch
from fault_helpers import capture_batches

from seedq.actor.config import ActorConfig
from seedq.agents.vtrace.agent import VTraceAgent
from seedq.agents.vtrace.config import VTraceConfig
from seedq.agents.vtrace.network import AgentOutput
from seedq.arch.seed import SeedRun
from seedq.broker.config import BrokerConfig
from seedq.config import SeedqConfig
from seedq.envs import FakeConfig

EPISODE_LENGTH = 4
UNROLL = 5


def policy_logits(obs: np.ndarray) -> np.ndarray:
    """Logits ``[..., 3]`` distinct per action and per (env, step, episode, last action)."""
    code = obs[..., 0] * 7 + obs[..., 1] + obs[..., 2] * 0.5 + obs[..., 3] * 0.25
    return 0.01 * code[..., None] * (np.arange(3) - 1) + 0.1 * np.arange(3)


class StepValueNet(torch.nn.Module):
    """Logits = policy_logits(obs); V(obs) = the step number encoded in the observation."""

    def __init__(self, num_actions: int) -> None:
        super().__init__()
        self.num_actions = num_actions
        self.unused = torch.nn.Parameter(torch.zeros(1))  # the optimizer needs a parameter

    def initial_state(self, batch_size: int, device=None) -> tuple:
        return ()

    def forward(self, obs, done, core_state):
        T, B = obs.shape[:2]
        logits = torch.from_numpy(policy_logits(obs.double().numpy())).float()
        return AgentOutput(logits, obs[..., 1].float()), ()


def run_pipeline(
    tmp_path, *, truncate: bool, total_env_steps: int = 3000, broker: BrokerConfig | None = None
):
    cfg = SeedqConfig(
        run_dir=str(tmp_path),
        env=FakeConfig(
            obs_shape=[4],
            episode_length=EPISODE_LENGTH,
            truncate_episodes=truncate,
            num_actions=3,
        ),
        actor=ActorConfig(num_actors=2, envs_per_batch=3, batches_per_actor=2, transport="inproc"),
        # 5 envs per inference batch and 4 columns per training batch: neither divides the
        # 3 envs of an actor, so batches mix and split actors.
        broker=broker or BrokerConfig(max_batch=5, deadline_ms=1.0),
        algorithm=VTraceConfig(unroll_length=UNROLL, batch_size=4),
        total_env_steps=total_env_steps,
        log_interval_s=0.2,
        max_minutes=2,
    )
    with pytest.MonkeyPatch.context() as patch:
        # The agent builds the network the run acts with: give it the test's.
        patch.setattr(VTraceAgent, "build_model", classmethod(lambda cls, *a, **k: StepValueNet(3)))
        run = SeedRun(cfg, str(tmp_path))
    batches = capture_batches(run)
    summary = run.run()
    return summary, batches


def columns_by_env(batches):
    """{env id: [dict of [T+1] arrays per unroll column, in training order]}."""
    out = collections.defaultdict(list)
    for batch in batches:
        for b, env_id in enumerate(batch.env_id.tolist()):
            out[env_id].append(
                {
                    "obs": batch.obs[:, b].astype(int),
                    "reward": batch.reward[:, b],
                    "done": batch.done[:, b],
                    "truncated": batch.truncated[:, b],
                    "truncation_value": batch.truncation_value[:, b],
                    "action": batch.action[:, b],
                    "behaviour": batch.behaviour[:, b],
                }
            )
    return out


def stitch(columns):
    """Check the one-row overlap between consecutive unrolls and join them into one stream."""
    for prev, nxt in zip(columns, columns[1:], strict=False):
        for key in prev:
            np.testing.assert_array_equal(prev[key][-1], nxt[key][0], err_msg=key)
    return {
        key: np.concatenate([columns[0][key]] + [c[key][1:] for c in columns[1:]])
        for key in columns[0]
    }


def expected_stream(env_id: int, rows: int, actions: np.ndarray):
    """The exact observations env ``env_id`` produced, given the actions the learner chose."""
    length = EPISODE_LENGTH + env_id % 3
    t, episode, last = 0, 0, -1
    obs, reward, done = [], [], []
    for i in range(rows):
        obs.append([env_id, t, episode, last])
        reward.append(0.0 if i == 0 else float(t if t else length))
        done.append(i == 0 or t == 0)
        t += 1
        last = int(actions[i])
        if t == length:
            t, episode, last = 0, episode + 1, -1
    return np.array(obs), np.array(reward), np.array(done)


@pytest.fixture(scope="module", params=[False, True], ids=["terminated", "truncated"])
def pipeline(request, tmp_path_factory):
    truncate = request.param
    summary, batches = run_pipeline(tmp_path_factory.mktemp("run"), truncate=truncate)
    return truncate, summary, batches


def test_every_env_reaches_training(pipeline):
    _, _, batches = pipeline
    assert sorted(columns_by_env(batches)) == list(range(12))


def test_unrolls_have_the_configured_length(pipeline):
    _, _, batches = pipeline
    assert {b.obs.shape[:2] for b in batches} == {(UNROLL + 1, 4)}


def test_training_sees_exactly_the_sequence_each_env_produced(pipeline):
    _, _, batches = pipeline
    for env_id, columns in columns_by_env(batches).items():
        stream = stitch(columns)
        obs, reward, done = expected_stream(env_id, len(stream["obs"]), stream["action"])
        np.testing.assert_array_equal(stream["obs"], obs, err_msg=f"env {env_id}")
        np.testing.assert_array_equal(stream["reward"], reward, err_msg=f"env {env_id}")
        np.testing.assert_array_equal(stream["done"], done, err_msg=f"env {env_id}")


def test_behaviour_logits_are_those_of_the_row_s_own_observation(pipeline):
    _, _, batches = pipeline
    for env_id, columns in columns_by_env(batches).items():
        stream = stitch(columns)
        np.testing.assert_allclose(
            stream["behaviour"], policy_logits(stream["obs"]), rtol=1e-6, err_msg=f"env {env_id}"
        )


def test_each_action_is_the_one_the_next_observation_reports(pipeline):
    _, _, batches = pipeline
    for env_id, columns in columns_by_env(batches).items():
        stream = stitch(columns)
        continuing = ~stream["done"][1:]  # a reset observation reports -1, not the action
        np.testing.assert_array_equal(
            stream["action"][:-1][continuing], stream["obs"][1:, 3][continuing], f"env {env_id}"
        )


def test_episode_ends_are_flagged_as_the_env_reported_them(pipeline):
    truncate, _, batches = pipeline
    for columns in columns_by_env(batches).values():
        stream = stitch(columns)
        ends = stream["done"][1:]
        np.testing.assert_array_equal(stream["truncated"][1:], ends if truncate else 0 * ends)


def test_truncation_bootstraps_from_the_final_observation_not_the_reset_one(pipeline):
    truncate, _, batches = pipeline
    for env_id, columns in columns_by_env(batches).items():
        stream = stitch(columns)
        length = EPISODE_LENGTH + env_id % 3
        # V(final obs) = its step number = the episode length; V(reset obs) would be 0.
        expected = np.where(stream["truncated"], float(length), 0.0)
        np.testing.assert_array_equal(stream["truncation_value"], expected)


def test_run_reports_steps_and_episodes(pipeline):
    _, summary, _ = pipeline
    assert summary.env_steps >= 3000 and summary.episodes > 0
