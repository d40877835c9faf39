"""``seedq.load_policy``'s policy gives the env's own actions (a Discrete's start, the entries
of a MultiDiscrete or MultiBinary, a Box's bounds), mapped as training and seedq-eval map the
network's actions (``seedq.envs.gym_spaces.env_actions``); ``policy.act`` keeps the network's."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from test_env_config import compose_config

import seedq
from seedq.agents.registry import agent_class
from seedq.cli import to_config
from seedq.envs import env_spec
from seedq.envs.base import EnvError
from seedq.envs.gym_spaces import env_actions
from seedq.learner.checkpoint import plain_config, save_checkpoint
from seedq.messages import EnvSpec
from seedq.trained_policy import trained_action_space

ENV = "SeedqActionSpaces-v0"
# The action spaces of ENV, by its `actions` keyword (a name: configs hold plain values).
ACTION_SPACES = {
    "discrete-start": spaces.Discrete(3, start=-5),
    "multi-discrete": spaces.MultiDiscrete([3, 2], start=[1, -1]),
    "multi-binary": spaces.MultiBinary(3),
    "box": spaces.Box(np.array([10.0, -2.0]), np.array([20.0, -1.0]), dtype=np.float64),
}


def reference(space: spaces.Space, action: Any) -> Any:
    """The env action the network's ``action`` stands for, worked out by hand."""
    if isinstance(space, spaces.Discrete):
        return space.start + action
    if isinstance(space, spaces.MultiDiscrete):
        return np.array(np.unravel_index(action, space.nvec)) + space.start
    if isinstance(space, spaces.MultiBinary):
        return np.array([(action >> bit) & 1 for bit in reversed(range(space.n))])
    return np.clip(action, space.low, space.high)


class StrictActions(gym.Env):
    """Four zeros for observations; raises on an action outside its ``actions`` space."""

    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)

    def __init__(self, actions: str) -> None:
        self.action_space = ACTION_SPACES[actions]

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN202
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN202
        if not self.action_space.contains(action):
            raise ValueError(f"{action!r} is not an action of {self.action_space}")
        return np.zeros(4, np.float32), 0.0, False, False, {}


gym.register(ENV, entry_point=StrictActions)
START, BOX = "+env.kwargs.actions=discrete-start", "+env.kwargs.actions=box"


def untrained_run(run_dir, *overrides: str) -> str:
    """``run_dir`` holding a checkpoint of an untrained network of the run ``overrides``."""
    config = to_config(compose_config(*overrides))
    spec = env_spec(config.env)
    model = agent_class(config.algorithm.name).build_model(
        spec, config.algorithm, channels_last=False
    )
    state = {"config": plain_config(config), "spec": spec.to_dict(), "model": model.state_dict()}
    save_checkpoint(str(run_dir), {**state, "env_steps": 0, "updates": 0}, keep=1)
    return str(run_dir)


@pytest.mark.parametrize(
    ("algorithm", "actions"),
    [
        ("vtrace", "discrete-start"),
        ("vtrace", "multi-discrete"),
        ("r2d2", "multi-binary"),
        ("ppo", "box"),  # an untrained mean near 0, outside [10, 20] x [-2, -1]
    ],
)
def test_a_loaded_policy_steps_its_own_gymnasium_env(tmp_path, algorithm, actions) -> None:
    # As docs/getting-started.md shows it: env.step(policy(obs)) on a gymnasium env.
    kwargs = f"+env.kwargs.actions={actions}"
    run = untrained_run(tmp_path, f"algorithm={algorithm}", "env=gym", f"env.id={ENV}", kwargs)
    policy = seedq.load_policy(run, mode="greedy")
    env = gym.make(ENV, actions=actions)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        action = policy(obs)
        np.testing.assert_array_equal(action, reference(env.action_space, policy.act(obs)))
        obs, *_ = env.step(action)


def test_a_discrete_action_is_an_int_and_a_box_action_the_boxs_dtype(tmp_path) -> None:
    obs = np.zeros(4, np.float32)
    run = untrained_run(tmp_path / "ppo", "algorithm=ppo", "env=gym", f"env.id={ENV}", BOX)
    assert seedq.load_policy(run)(obs).dtype == np.float64
    run = untrained_run(tmp_path / "vtrace", "env=gym", f"env.id={ENV}", START)
    assert type(seedq.load_policy(run)(obs)) is int


def test_an_action_space_given_to_load_policy_is_the_one_it_maps_into(tmp_path) -> None:
    run = untrained_run(tmp_path, "env=gym", f"env.id={ENV}", START)
    policy = seedq.load_policy(run, mode="greedy", action_space=spaces.Discrete(3, start=10))
    obs = np.zeros(4, np.float32)
    assert policy(obs) == policy.act(obs) + 10


def test_an_action_space_of_other_actions_than_the_policys_is_refused(tmp_path) -> None:
    run = untrained_run(tmp_path, "algorithm=ppo", "env=gym", f"env.id={ENV}", BOX)
    # Refused as it is given, not at the first step.
    with pytest.raises(ValueError, match="takes 2 discrete actions; .* trained on 2 continuous"):
        seedq.load_policy(run, action_space=spaces.Discrete(2))


@pytest.mark.parametrize(
    ("kind", "spec", "space"),
    [
        # seedq's own env batches take the network's index as it is.
        ("minatar", EnvSpec((4, 10, 10), "uint8", 6), spaces.Discrete(6)),
        ("fake", EnvSpec((4,), "float32", 2, "continuous", (-1.0, 0.0), (1.0, 2.0)), None),
    ],
    ids=["minatar", "fake-continuous"],
)
def test_envs_seedq_steps_itself_take_the_actions_their_spec_records(kind, spec, space) -> None:
    got = trained_action_space({"env": {"kind": kind, "id": "breakout"}}, spec)
    if space is None:
        space = spaces.Box(np.float32([-1, 0]), np.float32([1, 2]), dtype=np.float32)
    assert got == space


def test_a_trained_env_that_cannot_be_built_here_names_the_way_around() -> None:
    config = {"env": {"kind": "gym", "id": "no_such_module:Maze-v0"}}
    with pytest.raises(EnvError, match=r"action_space=env\.action_space, or act with policy\.act"):
        trained_action_space(config, EnvSpec((4,), "float32", 2))


def test_box_actions_are_clipped_to_the_bounds_in_the_boxs_dtype() -> None:
    space = ACTION_SPACES["box"]
    actions = np.array([[5.0, -1.5], [25.0, 0.0], [15.0, -3.0]], np.float32)
    got = env_actions("x", space)(actions)
    assert got.dtype == np.float64 and all(space.contains(a) for a in got)
    np.testing.assert_array_equal(got, np.clip(actions.astype(np.float64), space.low, space.high))
