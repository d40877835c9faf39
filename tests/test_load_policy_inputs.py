"""Misuse of ``seedq.load_policy`` and of its policy refused in one line naming what to give:
an epsilon or seed out of range, an observation that is no array of numbers, a batch, a
frame scaled to floats; and R2D2's ``mode="greedy"`` is the argmax, as every policy's is."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_evaluate_actions import untrained_run

import seedq
from seedq.learner.checkpoint import CheckpointError


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> str:
    return untrained_run(tmp_path_factory.mktemp("vtrace"), "env=cartpole")


@pytest.fixture(scope="module")
def r2d2(tmp_path_factory) -> str:
    return untrained_run(tmp_path_factory.mktemp("r2d2"), "algorithm=r2d2", "env=cartpole")


def test_an_r2d2_policy_in_greedy_mode_takes_the_argmax(r2d2) -> None:
    # It acted with the run's eval epsilon, a random action now and then.
    assert seedq.load_policy(r2d2, mode="greedy").epsilon == 0.0


def test_an_r2d2_policy_in_greedy_mode_refuses_an_epsilon(r2d2) -> None:
    with pytest.raises(ValueError, match=r"epsilon=0\.5 with mode='greedy'.*mode='sample'"):
        seedq.load_policy(r2d2, mode="greedy", epsilon=0.5)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        # Each acted without a word (at random, greedily, or read as 0.1).
        ({"epsilon": 2.0}, r"epsilon=2\.0 is out of range; it must be a number in \[0, 1\]"),
        ({"epsilon": float("nan")}, r"epsilon=nan is out of range"),
        ({"epsilon": "0.1"}, r"epsilon='0\.1' is not a number"),
        ({"seed": -1}, r"seed=-1 is out of range; it must be a whole number in \[0, "),
        # torch's "Overflow when unpacking long long" and "manual_seed expected a long".
        ({"seed": 2**70}, r"seed=\d+ is out of range"),
        ({"seed": 1.5}, r"seed=1\.5 is not a whole number"),
    ],
)
def test_an_epsilon_or_seed_out_of_range_is_refused_naming_it(r2d2, arguments, message) -> None:
    with pytest.raises(ValueError, match=message):
        seedq.load_policy(r2d2, **arguments)


@pytest.mark.parametrize(
    ("obs", "message"),
    [
        # numpy's "inhomogeneous shape" error.
        (gym.make("CartPole-v1").reset(seed=0), r"an \(obs, info\) pair.*obs, info = env.reset"),
        # torch's "can't convert np.ndarray of type numpy.str_" and clamp's NotImplementedError.
        (np.array(["a", "b", "c", "d"]), r"of ndarray <U1; .* numbers of shape \(4,\) float32"),
        ({"position": 0.0}, r"of dict object; .*obs_transform"),
        (np.ones(4, complex), r"of ndarray complex128"),
        # The action was the argmax of NaN logits, 0.
        (np.array([0.0, np.nan, 0.0, np.inf]), r"NaN or inf \(flat indices \[1, 3\]\)"),
        # Named only as a wrong shape, with obs_transform's layout as the way out.
        (np.zeros((2, 4), np.float32), r"\(2, 4\); .* one observation at a time"),
    ],
    ids=["reset-pair", "strings", "dict", "complex", "nan", "batch"],
)
def test_an_observation_that_is_no_array_of_numbers_is_refused_naming_it(
    cartpole, obs, message
) -> None:
    with pytest.raises(ValueError, match=message):
        seedq.load_policy(cartpole)(obs)


def test_a_frame_scaled_to_fractions_is_refused_and_whole_numbers_are_taken(tmp_path) -> None:
    policy = seedq.load_policy(untrained_run(tmp_path, "env=catch"), mode="greedy")
    frame = np.random.default_rng(0).integers(0, 256, policy.obs_shape, dtype=np.uint8)
    assert policy.act(frame.astype(np.int64)) == policy.act(frame.astype(np.float32))
    # Frames in [0, 1] met normalisation statistics of 0..255 and chose from garbage.
    with pytest.raises(ValueError, match=r"float32 observation of fractions; .* on uint8 ones"):
        policy.act(frame.astype(np.float32) / 255)


def test_a_one_hot_of_other_values_than_0_and_1_is_refused(tmp_path) -> None:
    run = untrained_run(tmp_path, "env=gym", "env.id=FrozenLake-v1")
    policy = seedq.load_policy(run, mode="greedy")
    one_hot = np.eye(16)[3]
    assert policy(one_hot) == policy(one_hot.astype(bool))
    with pytest.raises(ValueError, match="values other than 0 and 1; .* bool ones"):
        policy(2 * one_hot)


@pytest.mark.parametrize(
    ("action_space", "message"),
    [
        # Each was named as the trained env's space: "CartPole-v1 has the action space ...".
        ("Discrete(2)", r"action_space='Discrete\(2\)' is not a gymnasium space: give env\.acti"),
        (gym.make("CartPole-v1"), r"is not a gymnasium space: give env\.action_space, not the env"),
        (gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), r"action_space=Dict.*: a policy acts in"),
    ],
    ids=["string", "env", "dict"],
)
def test_an_action_space_that_no_policy_acts_in_is_refused_as_it_is_given(
    cartpole, action_space, message
) -> None:
    with pytest.raises(ValueError, match=message):
        seedq.load_policy(cartpole, action_space=action_space)


@pytest.mark.parametrize("path", [None, 3], ids=["none", "int"])
def test_a_path_that_is_no_path_is_refused_naming_it(path) -> None:
    # pathlib's "expected str, bytes or os.PathLike object, not NoneType".
    with pytest.raises(TypeError, match=rf"path={path}: give a run directory or a checkpoint"):
        seedq.load_policy(path)


@pytest.mark.parametrize("within", ["", "checkpoints"], ids=["run", "folder"])
def test_a_path_under_the_home_folder_is_read_as_the_shell_would(
    cartpole, within, tmp_path, monkeypatch
) -> None:
    # "~/..." was taken as a folder named "~" in the working directory: no checkpoint there.
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "run").symlink_to(cartpole)
    policy = seedq.load_policy(f"~/run/{within}")
    assert policy.path.resolve().parent == (Path(cartpole) / "checkpoints").resolve()
    assert seedq.load_policy(f"~/run/checkpoints/{policy.path.name}").path == policy.path


def test_a_checkpoint_of_an_algorithm_this_seedq_lacks_is_refused_naming_it(
    cartpole, tmp_path
) -> None:
    policy = seedq.load_policy(cartpole)
    state = torch.load(policy.path, weights_only=False)
    state["config"]["algorithm"]["name"] = "dqn"
    torch.save(state, tmp_path / "ckpt.pt")
    # The registry's KeyError "algorithm 'dqn' is unknown".
    with pytest.raises(CheckpointError, match=r"written by algorithm='dqn', which this seedq"):
        seedq.load_policy(tmp_path / "ckpt.pt")


def test_a_policy_of_seedqs_own_env_names_its_env_batch_for_observations(tmp_path) -> None:
    policy = seedq.load_policy(untrained_run(tmp_path, "env=catch"))
    # It named obs_transform, which lays out a gymnasium env's observations, not Catch's.
    with pytest.raises(ValueError, match=r"as seedq's env=catch batch delivers them: .*make_env"):
        policy(np.zeros((84, 84, 3), np.uint8))
