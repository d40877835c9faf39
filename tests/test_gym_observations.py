"""env=gym's observation layouts (``seedq.envs.gym_spaces.obs_transform``), each against a NumPy
reference: one-hots set by index, float observations of any width as float32, Box shapes that
are neither vectors nor frames flattened, frame stacks folded into channels, and channels-last
frames found by their shape whatever their dtype; and the torsos that read them."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from cli_helpers import run_cli
from gymnasium import spaces
from space_envs import Observes

from seedq.agents.common.torsos import MinAtarTorso, MLPTorso, NatureTorso
from seedq.agents.torsos import auto_torso
from seedq.agents.vtrace.network import ActorCriticNet
from seedq.envs.base import EnvError
from seedq.envs.gym import GymVectorBatch
from seedq.envs.gym_spaces import batch_singles, obs_transform
from seedq.schema import ConfigError

TESTS = str(Path(__file__).parent)


def transformed(space: spaces.Space, batch: int = 3) -> tuple[list, np.ndarray, tuple, np.dtype]:
    """``batch`` samples of ``space`` and obs_transform's ``(observations, obs_shape,
    obs_dtype)`` of them."""
    space.seed(0)
    singles = [space.sample() for _ in range(batch)]
    fn, shape, dtype = obs_transform("x", space)
    return singles, fn(batch_singles(space, singles)), shape, dtype


# ------------------------------------------------------------------------------- one-hots


@pytest.mark.parametrize(
    "space",
    [
        spaces.Discrete(200_000, start=-7),
        spaces.Tuple([spaces.Discrete(200_000), spaces.Discrete(2)]),
    ],
    ids=["discrete", "in-a-tuple"],
)
def test_a_large_discrete_observation_is_one_hot_without_an_n_by_n_table(space) -> None:
    # np.eye(200000)[x] first built 200000 x 200000 entries: 37 GiB, a MemoryError.
    tracemalloc.start()
    try:
        singles, obs, shape, _ = transformed(space)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    reference = np.stack([spaces.flatten(space, x) for x in singles])
    np.testing.assert_array_equal(obs, reference.astype(obs.dtype))
    assert obs.shape == (3, *shape) and peak < 20 * obs.size * 4


# --------------------------------------------------------------------- float observations


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.float32])
@pytest.mark.parametrize(
    ("shape", "layout"),
    [((4,), lambda x: x), ((40, 40, 3), lambda x: x.transpose(0, 3, 1, 2))],
    ids=["vector", "frames"],
)
def test_float_observations_of_any_width_become_float32(dtype, shape, layout) -> None:
    # float16 went to the model as it was: "mat1 and mat2 must have the same dtype".
    singles, obs, _, obs_dtype = transformed(spaces.Box(-1.0, 1.0, shape, dtype))
    assert obs.dtype == obs_dtype == np.float32
    np.testing.assert_array_equal(obs, layout(np.stack(singles)).astype(np.float32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int64])
def test_the_mlp_torso_reads_any_numeric_dtype_as_float32(dtype) -> None:
    torso = MLPTorso(4, (8,))
    x = torch.arange(8.0).reshape(2, 4) / 8
    out = torso(x.to(dtype))
    torch.testing.assert_close(out, torso(x.to(dtype).float()))
    assert out.dtype == torch.float32


def test_the_conv_torsos_read_float16_frames_as_float32() -> None:
    frames = torch.rand(2, 3, 40, 40)
    for torso in (MinAtarTorso((3, 40, 40)), NatureTorso((3, 40, 40))):
        torch.testing.assert_close(torso(frames.half()), torso(frames.half().float()))


def test_a_net_without_obs_norm_acts_on_float16_vectors() -> None:
    # R2D2 and V-trace with algorithm.model.obs_norm=false crashed on a float16 Box.
    net = ActorCriticNet((4,), 2, obs_norm=False)
    obs = torch.rand(1, 2, 4, dtype=torch.float16)
    out, _ = net(obs, torch.zeros(1, 2, dtype=torch.bool), ())
    torch.testing.assert_close(
        out.logits, net(obs.float(), torch.zeros(1, 2, dtype=torch.bool), ())[0].logits
    )


# ------------------------------------------------------------------- flattened Box shapes


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((3, 5), np.float32), ((), np.float32), ((3, 5), np.int64), ((2, 2, 2, 2, 2), np.float64)],
    ids=["matrix", "scalar", "int-matrix", "5-d"],
)
def test_a_box_that_is_neither_vector_nor_frames_is_flattened(shape, dtype) -> None:
    singles, obs, obs_shape, obs_dtype = transformed(spaces.Box(-5, 5, shape, dtype))
    reference = np.stack([spaces.flatten(spaces.Box(-5, 5, shape, dtype), x) for x in singles])
    assert obs_shape == (int(np.prod(shape)),) and auto_torso(obs_shape) == "mlp"
    # Floats as float32, like every float observation; other dtypes as a 1-D Box keeps them.
    assert obs_dtype == (np.float32 if np.dtype(dtype).kind == "f" else dtype)
    np.testing.assert_array_equal(obs, reference.astype(obs_dtype))


# --------------------------------------------------------------------------------- frames


@pytest.mark.parametrize(
    ("shape", "dtype", "obs_shape"),
    [
        # Channels-last by shape, whatever the dtype: the last side is smaller than both others.
        ((40, 40, 3), np.float32, (3, 40, 40)),
        ((40, 40, 6), np.uint8, (6, 40, 40)),  # two RGB frames stacked on the channel axis
        ((10, 10, 4), np.bool_, (4, 10, 10)),  # MinAtar's state, as its gymnasium env gives it
        # The layouts that were read right before stay as they were.
        ((48, 48, 3), np.uint8, (3, 48, 48)),
        ((40, 40, 1), np.uint8, (1, 40, 40)),
        ((210, 160, 3), np.uint8, (3, 210, 160)),  # an Atari screen through env=gym
        ((3, 40, 40), np.uint8, (3, 40, 40)),
        ((4, 84, 84), np.float32, (4, 84, 84)),
        ((10, 10, 10), np.uint8, (10, 10, 10)),  # no side smaller: channels-first, as before
    ],
    ids=[
        "float-hwc",
        "six-channels",
        "minatar-state",
        "rgb",
        "grey-hw1",
        "atari-screen",
        "chw",
        "float-chw",
        "cube",
    ],
)
def test_frames_are_channels_last_when_their_last_side_is_the_smallest(
    shape, dtype, obs_shape
) -> None:
    singles, obs, got_shape, _ = transformed(spaces.Box(0, 1, shape, dtype))
    x = np.stack(singles)
    reference = x.transpose(0, 3, 1, 2) if obs_shape != shape else x
    assert got_shape == obs_shape
    np.testing.assert_array_equal(obs, reference)
    assert obs.flags.c_contiguous  # the wire sends it as it is


def test_a_grey_frame_gets_one_channel() -> None:
    singles, obs, obs_shape, _ = transformed(spaces.Box(0, 255, (40, 40), np.uint8))
    assert obs_shape == (1, 40, 40)
    np.testing.assert_array_equal(obs[:, 0], np.stack(singles))


@pytest.mark.parametrize(
    ("shape", "frame"),
    [
        # gymnasium's FrameStackObservation over RGB screens: (K, H, W, C).
        ((2, 40, 40, 3), lambda x, k: x[:, k].transpose(0, 3, 1, 2)),
        ((4, 3, 40, 40), lambda x, k: x[:, k]),
    ],
    ids=["channels-last", "channels-first"],
)
def test_a_stack_of_frames_is_folded_into_channels_frame_by_frame(shape, frame) -> None:
    singles, obs, obs_shape, _ = transformed(spaces.Box(0, 255, shape, np.uint8))
    x = np.stack(singles)
    reference = np.concatenate([frame(x, k) for k in range(shape[0])], axis=1)
    assert obs_shape == reference.shape[1:] and auto_torso(obs_shape) == "nature"
    np.testing.assert_array_equal(obs, reference)


def _make_observes(env_id: str, max_episode_steps: int | None, **kwargs) -> gym.Env:  # noqa: ANN003
    return Observes(**kwargs)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(-1, 1, (3, 5), np.float16),
        spaces.Box(-1, 1, (), np.float32),
        spaces.Box(0, 255, (2, 40, 40, 3), np.uint8),
        spaces.Box(0, 1, (40, 40, 3), np.float32),
    ],
    ids=["float16-matrix", "scalar", "frame-stack", "float-frames"],
)
def test_the_env_batch_delivers_what_the_auto_torso_reads(space: spaces.Space) -> None:
    env = GymVectorBatch(
        "CartPole-v1", 2, seed=0, make_one=_make_observes, make_kwargs={"observation_space": space}
    )
    try:
        net = ActorCriticNet(env.obs_shape, env.num_actions)
        obs = torch.as_tensor(env.step(np.zeros(2, np.int64)).obs)[None]
        out, _ = net(obs, torch.zeros(1, 2, dtype=torch.bool), ())
        assert torch.isfinite(out.logits).all()
    finally:
        env.close()


# ------------------------------------------------------------------------ refused shapes


@pytest.mark.parametrize("shape", [(3, 5), (2, 40, 40, 3)])
def test_a_shape_no_torso_reads_is_a_config_error(shape) -> None:
    # A ConfigError is seedq-train's one-line refusal (exit 2), not a traceback.
    with pytest.raises(ConfigError, match=r"torsos take 1-D feature vectors \(D,\) or 3-D"):
        auto_torso(shape)


def test_frames_too_small_for_the_conv_torso_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"\(2, 2, 2\) is too small for the 'minatar' torso"):
        MinAtarTorso((2, 2, 2))


def test_seedq_train_refuses_frames_too_small_for_its_torso_in_one_line(monkeypatch) -> None:
    # The learner imports space_envs (tests/space_envs.py) to register the env.
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", TESTS if not path else f"{TESTS}{os.pathsep}{path}")
    result = run_cli("env=gym", "env.id=space_envs:TinyFrames-v0", "total_env_steps=100")
    assert (result.returncode, "Traceback" in result.stdout) == (2, False), result.stdout
    assert "(2, 2, 2) is too small for the 'minatar' torso" in result.stdout


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(0.0, 1.0, (0,), np.float32),
        spaces.Box(0, 255, (4, 0), np.uint8),
        spaces.Dict({}),
        spaces.Tuple([]),
    ],
    ids=["box-0", "frame-4x0", "empty-dict", "empty-tuple"],
)
def test_observations_of_no_values_are_refused_naming_the_space(space) -> None:
    with pytest.raises(EnvError, match=r"observations of no values"):
        obs_transform("x", space)


def test_seedq_train_refuses_observations_of_no_values_in_one_line(monkeypatch) -> None:
    # Its actors' hellos were refused (bad_shape) and the run went on with none stepping.
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", TESTS if not path else f"{TESTS}{os.pathsep}{path}")
    result = run_cli("env=gym", "env.id=space_envs:NoValues-v0", "max_minutes=0.3")
    assert (result.returncode, "Traceback" in result.stdout) == (2, False), result.stdout
    assert "observations of no values" in result.stdout
