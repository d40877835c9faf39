"""gymnasium spaces in seedq's layout: how an env's observations become the arrays the network
reads, and how the policy's actions become the env's.

Observations (:func:`obs_transform`): a Box by :func:`box_layout` (vectors as they are, frames
channels-first, a stack of frames folded into channels, any other shape flattened), a Discrete
state as a bool one-hot, MultiBinary, MultiDiscrete, Tuple and Dict spaces flattened as
``gymnasium.spaces.flatten`` lays them out. Actions (:func:`env_actions`): a 1-D Box's float
vectors clipped to its own bounds in its dtype (:func:`box_actions`), a discrete space's index
taken apart into its joint action (:func:`joint_actions`). Training's env batches, ``seedq-eval``
and ``seedq.load_policy``'s policies all map them here.

gymnasium is imported when a space is read, not with this module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from seedq.envs.base import EnvError

if TYPE_CHECKING:
    import gymnasium


def obs_transform(
    env_id: str, space: gymnasium.Space
) -> tuple[Callable[[np.ndarray], np.ndarray], tuple[int, ...], np.dtype]:
    """How to turn a batch of raw observations ``[B, *raw]`` into seedq's layout.

    Returns ``(fn, obs_shape, obs_dtype)``. A Box goes as :func:`box_layout` says: vectors as
    they are, frames channels-first ``[C, H, W]``, a stack of frames folded into channels, any
    other shape flattened; float observations of any width become float32 (the models run in
    float32, and float64's wire is twice the size). Discrete observations become bool one-hots.

    Bool, not float: a one-hot is an indicator, and the models read bool observations as 0/1
    without running normalisation (``seedq.agents.common.normalize.RunningNorm``), which would
    scale a rarely visited state's unit up to ``1/sqrt(p)`` and an unseen one to the clip
    (Taxi-v4 and FrozenLake-v1 did not learn with it). One byte per state on the wire, too.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        return (lambda x: one_hots(x, n, start, np.bool_)), (n,), np.dtype(np.bool_)
    if isinstance(space, spaces.Tuple | spaces.Dict | spaces.MultiBinary | spaces.MultiDiscrete):
        transform = flat_transform(env_id, space)
    elif isinstance(space, spaces.Box):
        transform = _box_transform(tuple(space.shape), np.dtype(space.dtype))
    else:
        raise EnvError(f"{env_id} has {space}; seedq takes {OBS_SPACES} observation spaces")
    if 0 in transform[1]:
        # The learner refused every actor's hello (bad_shape), and the run went on without one.
        raise EnvError(
            f"{env_id} has {space}: observations of no values, which no network reads; give "
            "the env an observation of at least one value (a constant for a bandit)"
        )
    return transform


def one_hots(x: Any, n: int, start: int, dtype: Any) -> np.ndarray:
    """``[B, n]`` one-hots of a batch of ``Discrete(n, start)`` values ``x``.

    Set by index, O(B * n): indexing ``np.eye(n)`` would first build n * n entries (37 GiB
    for a ``Discrete(200000)``)."""
    x = np.asarray(x, dtype=np.int64).reshape(-1)
    out = np.zeros((len(x), n), dtype=dtype)
    out[np.arange(len(x)), x - start] = 1
    return out


# How obs_transform lays out a Box, by box_layout's name, as the env's start-up line says it.
BOX_LAYOUTS = {
    "vector": "a vector",
    "flat": "flattened into a vector",
    "HW": "a grey frame (H, W), given one channel",
    "CHW": "channels-first frames (C, H, W)",
    "HWC": "channels-last frames (H, W, C), made channels-first",
    "KCHW": "a stack of channels-first frames (K, C, H, W), folded into K*C channels",
    "KHWC": "a stack of channels-last frames (K, H, W, C), folded into K*C channels",
}


def _frames_last(shape: tuple[int, ...]) -> bool:
    # (H, W, C) when the last side is smaller than both others: gymnasium's image convention
    # (48x48x3, 40x40x6, 210x160x3). Anything else is taken as (C, H, W), as it always was:
    # (3, 40, 40), (4, 84, 84), and the ambiguous (10, 10, 10).
    return shape[2] < min(shape[:2])


def box_layout(shape: tuple[int, ...], dtype: np.dtype) -> str:
    """The :data:`BOX_LAYOUTS` name of a Box of ``shape`` and ``dtype``.

    1-D: a vector. 2-D uint8: a grey frame. 3-D: frames, channels-last when the last side is
    smaller than both others, whatever the dtype, else channels-first. 4-D: a stack of such
    frames (gymnasium's FrameStackObservation). Any other Box (a scalar, a 2-D float matrix,
    5-D) is flattened, in C order as ``gymnasium.spaces.flatten`` lays it out.
    """
    if len(shape) == 1:
        return "vector"
    if len(shape) == 2 and dtype == np.uint8:
        return "HW"
    if len(shape) == 3:
        return "HWC" if _frames_last(shape) else "CHW"
    if len(shape) == 4:
        return "KHWC" if _frames_last(shape[1:]) else "KCHW"
    return "flat"


def obs_layout(space: Any) -> str:
    """How :func:`obs_transform` lays ``space`` out, in words (the env's start-up line)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return "a one-hot"
    if isinstance(space, spaces.Box):
        return BOX_LAYOUTS[box_layout(tuple(space.shape), np.dtype(space.dtype))]
    return "flattened into a vector"


def _box_transform(
    shape: tuple[int, ...], dtype: np.dtype
) -> tuple[Callable[[np.ndarray], np.ndarray], tuple[int, ...], np.dtype]:
    """:func:`obs_transform` of a Box of ``shape`` and ``dtype``, as :func:`box_layout` says."""
    out = np.dtype(np.float32) if dtype.kind == "f" else dtype
    layout = box_layout(shape, dtype)
    if layout == "vector" or layout == "CHW":
        return (lambda x: np.asarray(x, dtype=out)), shape, out
    if layout == "HW":
        return (lambda x: np.asarray(x, dtype=out)[:, None]), (1, *shape), out
    if layout == "HWC":
        h, w, c = shape
        # A transposed copy, contiguous for the wire.
        return (
            lambda x: np.ascontiguousarray(np.asarray(x).transpose(0, 3, 1, 2), dtype=out),
            (c, h, w),
            out,
        )
    if layout == "KCHW":
        k, c, h, w = shape
        return (lambda x: np.asarray(x, dtype=out).reshape(-1, k * c, h, w)), (k * c, h, w), out
    if layout == "KHWC":
        k, h, w, c = shape
        # Frame-major channels (the oldest frame's C first), as env=atari stacks its frames.
        return (
            lambda x: np.ascontiguousarray(
                np.asarray(x).transpose(0, 1, 4, 2, 3), dtype=out
            ).reshape(-1, k * c, h, w),
            (k * c, h, w),
            out,
        )
    width = int(np.prod(shape))
    return (lambda x: np.asarray(x, dtype=out).reshape(-1, width)), (width,), out


# Observation spaces seedq reads, as its errors name them.
OBS_SPACES = "Box, Discrete, MultiBinary, MultiDiscrete, and Tuple or Dict of those"


def _flat_parts(env_id: str, space: Any) -> tuple[Callable[[Any], np.ndarray], int, bool]:
    """``(fn, width, indicator)``: ``fn`` turns a batch of ``space``'s observations, as a vector
    env batches them (arrays ``[B, ...]``, tuples and dicts of them), into ``[B, width]``; each
    Discrete part becomes a one-hot and each MultiDiscrete part one one-hot per entry, as
    ``gymnasium.spaces.flatten`` lays them out. ``indicator``: every entry is 0/1 (no Box)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        return (lambda x: one_hots(x, n, start, np.float32)), n, True
    if isinstance(space, spaces.MultiBinary):
        width = int(np.prod(space.shape))
        return (lambda x: np.asarray(x, dtype=np.float32).reshape(len(x), -1)), width, True
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, dtype=np.int64).reshape(-1)
        start = np.asarray(space.start, dtype=np.int64).reshape(-1)
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        width = int(nvec.sum())

        def multi_hot(x: Any) -> np.ndarray:
            x = np.asarray(x, dtype=np.int64).reshape(-1, len(nvec))
            out = np.zeros((len(x), width), dtype=np.float32)
            out[np.arange(len(x))[:, None], x - start + offsets] = 1.0
            return out

        return multi_hot, width, True
    if isinstance(space, spaces.Box):
        width = int(np.prod(space.shape))
        return (lambda x: np.asarray(x, dtype=np.float32).reshape(len(x), -1)), width, False
    if isinstance(space, spaces.Tuple | spaces.Dict):
        keys = list(space.spaces) if isinstance(space, spaces.Dict) else range(len(space.spaces))
        parts = [_flat_parts(env_id, space.spaces[k]) for k in keys]

        def joined(x: Any) -> np.ndarray:
            return np.concatenate(
                [fn(x[k]) for k, (fn, _, _) in zip(keys, parts, strict=True)], axis=1
            )

        return joined, sum(w for _, w, _ in parts), all(ind for _, _, ind in parts)
    raise EnvError(f"{env_id} has {space} in its observation space; seedq takes {OBS_SPACES}")


def flat_transform(
    env_id: str, space: Any
) -> tuple[Callable[[Any], np.ndarray], tuple[int, ...], np.dtype]:
    """:func:`obs_transform` of a MultiBinary, MultiDiscrete, Tuple or Dict space: one vector
    per observation in ``gymnasium.spaces.flatten``'s layout, bool when every part is 0/1
    (Discrete, MultiBinary, MultiDiscrete: indicators, which the models read without
    normalisation), else float32 (Box parts beside them, normalised with the rest)."""
    fn, width, indicator = _flat_parts(env_id, space)
    dtype = np.dtype(np.bool_ if indicator else np.float32)
    return (lambda x: fn(x).astype(dtype, copy=False)), (width,), dtype


def batch_singles(space: Any, observations: list[Any]) -> Any:
    """Single observations of ``space`` batched as a vector env batches them (what the
    :func:`obs_transform` functions take): arrays ``[K, ...]``, tuples and dicts of them."""
    from gymnasium.vector.utils import concatenate, create_empty_array

    return concatenate(space, observations, create_empty_array(space, len(observations)))


# Action spaces seedq reads, as its errors name them, and the most joint actions a
# MultiDiscrete or MultiBinary space may have: each is one of the policy's logits.
ACTION_SPACES = "Discrete, MultiDiscrete, MultiBinary (as their joint actions) and 1-D Box"
MAX_JOINT_ACTIONS = 4096


def joint_actions(env_id: str, space: Any) -> tuple[int, Callable[[np.ndarray], np.ndarray]]:
    """``(n, fn)`` for a discrete action space: the policy picks one of ``n`` actions, and
    ``fn`` turns a batch of those indices ``[B]`` into the env's batched actions.

    Discrete(n, start): ``start + i``. MultiDiscrete and MultiBinary: one action per
    combination of their entries (``i`` in C order over ``nvec``, MultiBinary's entries as
    bits), so every algorithm's categorical policy covers them; spaces of more than
    :data:`MAX_JOINT_ACTIONS` combinations are refused.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return int(space.n), (lambda i: i + start if start else i)
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, dtype=np.int64)
        start = np.asarray(space.start, dtype=np.int64)
        shape, dtype = nvec.shape, np.dtype(space.dtype)
    elif isinstance(space, spaces.MultiBinary):
        shape = tuple(np.atleast_1d(space.n))
        nvec, start, dtype = np.full(shape, 2), np.zeros(shape, np.int64), np.dtype(space.dtype)
    else:
        raise EnvError(f"{env_id} has the action space {space}; seedq takes {ACTION_SPACES}")
    n = int(np.prod(nvec, dtype=np.float64))
    if n > MAX_JOINT_ACTIONS:
        raise EnvError(
            f"{env_id}'s action space {space} has {n:,} joint actions; seedq's policies pick one "
            f"of at most {MAX_JOINT_ACTIONS:,} (each is a logit)"
        )
    flat = nvec.reshape(-1)

    def entries(i: np.ndarray) -> np.ndarray:
        parts = np.unravel_index(np.asarray(i, dtype=np.int64), flat)
        joint = np.stack(parts, axis=-1).reshape(*np.shape(i), *shape) + start
        return joint.astype(dtype, copy=False)

    return n, entries


def continuous_actions(space: Any) -> bool:
    """Whether seedq's policies act in ``space`` with float vectors (a 1-D Box), not indices."""
    from gymnasium import spaces

    return isinstance(space, spaces.Box) and len(space.shape) == 1


def env_actions(env_id: str, space: Any) -> Callable[[np.ndarray], np.ndarray]:
    """How a batch of the policy's actions becomes a batch of ``space``'s, as training steps
    them (and ``seedq-eval`` and ``seedq.load_policy``'s policies act): a 1-D Box's float
    vectors ``[B, D]`` through :func:`box_actions`, a discrete space's indices ``[B]`` through
    :func:`joint_actions`."""
    if not continuous_actions(space):
        return joint_actions(env_id, space)[1]
    return functools.partial(
        box_actions, low=space.low, high=space.high, dtype=np.dtype(space.dtype)
    )


def box_actions(
    actions: np.ndarray, *, low: np.ndarray, high: np.ndarray, dtype: np.dtype
) -> np.ndarray:
    """Float ``actions [B, D]`` as a Box of ``low``, ``high`` and ``dtype`` holds them: clipped
    to the Box's own bounds (a float64 Box's 0.3 is below float32's 0.3, which an env that
    asserts ``action_space.contains`` refused), rounded to the nearest whole number for an
    integer Box (a cast alone truncates: 9.99 became 9, and a squashed policy never reached
    the upper bound)."""
    clipped = np.clip(actions, low, high)
    if dtype.kind in "iu":
        clipped = np.rint(clipped)
    return clipped.astype(dtype, copy=False)
