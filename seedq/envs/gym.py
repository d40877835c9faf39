"""gymnasium backends: ``env.kind=cartpole`` (native vector env) and ``env.kind=gym`` (any id).

* ``cartpole``: gymnasium's native numpy ``CartPoleVectorEnv``. It only implements next-step
  autoreset, so :class:`CartPoleNativeBatch` performs the reset of finished envs itself, right
  after the step, exactly as the env would have done one step later. Ids without an adaptable
  native vector env fall back to a ``SyncVectorEnv``.
* ``gym``: any gymnasium id with a ``Discrete`` or 1-D ``Box`` action space, in a
  ``SyncVectorEnv`` or ``AsyncVectorEnv`` with ``AutoresetMode.SAME_STEP``
  (``info["final_obs"]`` is an object array of per-env observations, ``info["_final_obs"]``
  its mask). Box actions are clipped to the space's own bounds, in its dtype, an integer Box's
  rounded (:func:`env_actions`, as ``seedq-eval`` and ``seedq.load_policy`` map them).

gymnasium is imported when an env is built, not with this module.
"""

from __future__ import annotations

import functools
import importlib
import logging
import multiprocessing
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from seedq.envs.base import BatchBase, EnvBatch, EnvError, StepBatch, split_done
from seedq.envs.config import EnvConfig, kind_setting
from seedq.envs.families import other_family_hint
from seedq.envs.mujoco_import import import_mujoco
from seedq.schema import ConfigError, choice, setting

if TYPE_CHECKING:
    import gymnasium

logger = logging.getLogger(__name__)

# ale_py's AtariEnv skips this many frames a step unless its id or env.kwargs say otherwise.
ALE_FRAMESKIP = 4
# env.vectorization: "sync" steps the envs in the actor process, "async" in subprocesses.
VECTORIZATIONS = ("sync", "async")


@dataclass
class GymConfig(EnvConfig):
    """``env=gym``: any gymnasium id, and how its envs are vectorised (``env=cartpole`` is the
    base :class:`EnvConfig`: its native vector env has nothing to choose)."""

    kind: str = kind_setting("gym")
    host_keys: ClassVar[tuple[str, ...]] = ("vectorization",)
    vectorization: str = setting(
        "sync",
        f"How envs are vectorised, one of {list(VECTORIZATIONS)}: sync steps them in the actor "
        "process, async in one subprocess each.",
    )
    kwargs: dict[str, Any] = setting(
        help="Keyword arguments of gymnasium.make for each env, each added with a +: "
        "+env.kwargs.continuous=false (CarRacing-v3's discrete actions), "
        "+env.kwargs.obs_type=ram (an Atari game's RAM) or '+env.kwargs={is_slippery: false}'; "
        "{}: the id's own.",
        factory=dict,
    )

    def check(self) -> None:
        super().check()
        choice("env.vectorization", self.vectorization, VECTORIZATIONS)
        check_make_kwargs(self.kwargs)

    def frames_per_step(self) -> float:
        """An Atari id's emulator frames per step, as its registration or
        ``env.kwargs.frameskip`` sets them (``ALE/Pong-v5``: 4; ``Pong-v4``'s random 2 to 4: 3
        on average; a NoFrameskip id: 1); 1 for any other env."""
        spec = gym_spec(self.id)
        entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
        if not entry.startswith("ale_py"):
            return 1
        skip = self.kwargs.get("frameskip", spec.kwargs.get("frameskip", ALE_FRAMESKIP))
        if isinstance(skip, int):
            return skip
        low, high = skip  # drawn uniformly from [low, high) each step
        return (low + high - 1) / 2


# gymnasium.make's own keywords that seedq sets: a run names them by their env keys instead.
OWN_MAKE_KEYS = {"max_episode_steps": "env.max_episode_steps"}


def check_make_kwargs(kwargs: Any) -> None:
    """A ConfigError unless ``kwargs`` is a mapping of keyword names that seedq leaves to the
    env (``env.kwargs``)."""
    if not isinstance(kwargs, Mapping):
        raise ConfigError(
            f"env.kwargs={kwargs!r} is not a mapping; add each argument as +env.kwargs.NAME=VALUE"
        )
    for name in kwargs:
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"env.kwargs has {name!r}, which is no keyword name")
        if name in OWN_MAKE_KEYS:
            key = OWN_MAKE_KEYS[name]
            instead = f"; set {key} instead" if key else ""
            raise ConfigError(f"env.kwargs.{name} is seedq's to set, not the env's{instead}")


def import_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise EnvError('gymnasium is not installed; run: pip install "gymnasium>=1.1,<2"') from exc
    return gymnasium


def ram_id_hint(env_id: str) -> str:
    """How to step a game's RAM, for an Atari ``-ram`` id (``ALE/Breakout-ram-v5``,
    ``Breakout-ramNoFrameskip-v4``), which ale_py no longer registers; else ""."""
    ram = re.fullmatch(r"(?:ALE/)?(\w+?)-ram(?:NoFrameskip)?(?:-v\d+)?", env_id)
    if ram is None:
        return ""
    game = ram.group(1)
    return (
        f"for the {game} RAM (128 bytes) use env=gym env.id=ALE/{game}-v5 +env.kwargs.obs_type=ram"
    )


def _import_env_module(env_id: str) -> str:
    """gymnasium's ``module:EnvName-v0`` form: import ``module`` (which registers the env, as
    ``gymnasium.make`` does for such an id) and return the id it registers."""
    module, _, name = env_id.partition(":")
    if not module or not name:
        raise EnvError(
            f"env.id={env_id!r}: an id with a ':' is gymnasium's module:EnvName-v0 form, the "
            "module that registers the env, then its id"
        )
    where = (
        "install it, or add its folder to PYTHONPATH, wherever the learner and actors run "
        "(seedq-eval too)"
    )
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module or module.startswith(f"{exc.name}."):
            raise EnvError(
                f"env.id={env_id!r} names the module {module!r} to import first, which is not "
                f"importable here ({exc}): {where}"
            ) from exc
        raise EnvError(f"importing {module!r} for env.id={env_id!r} failed: {exc!r}") from exc
    except Exception as exc:  # the user's module: whatever its import raises
        raise EnvError(f"importing {module!r} for env.id={env_id!r} failed: {exc!r}") from exc
    return name


def gym_spec(env_id: str) -> Any:
    """The registered spec of ``env_id`` (``module:EnvName-v0`` imports ``module`` first), or
    an EnvError naming it."""
    gym = import_gymnasium()
    if ":" in env_id:
        name = _import_env_module(env_id)
        try:
            return gym.spec(name)
        except gym.error.Error as exc:
            module = env_id.partition(":")[0]
            raise EnvError(
                f"env.id={env_id!r}: the module {module!r} imported, but no env {name!r} is "
                f"registered ({exc}); it must call gymnasium.register({name!r}, ...) when "
                "imported"
            ) from exc
    try:
        try:
            return gym.spec(env_id)
        except gym.error.Error:
            # Registered only once asked for: ale_py's Atari ids (Pong-v4 as well as
            # ALE/Pong-v5 and PongNoFrameskip-v4, which alone were registered before) and
            # those of packages' gymnasium.envs entry points.
            if not (_register_ale_envs() | _register_plugin_envs(env_id)):
                raise
            return gym.spec(env_id)  # or the error of the registry they filled
    except gym.error.DeprecatedEnv as exc:
        # Taxi-v3 once gymnasium has Taxi-v4: the id is known, its version is not served.
        raise EnvError(f"gymnasium env id {env_id!r} is deprecated: {exc}") from exc
    except gym.error.Error as exc:
        if ram := ram_id_hint(env_id):
            raise EnvError(f"unknown gymnasium env id {env_id!r}: {ram}") from exc
        raise EnvError(
            f"unknown gymnasium env id {env_id!r} ({exc});{other_family_hint(env_id, 'gym')} "
            "list the registered ids with "
            "`python -c 'import gymnasium; gymnasium.pprint_registry()'`"
        ) from exc


def _register_ale_envs() -> bool:
    """Register ale_py's Atari ids, once a process; whether this call did."""
    gym = import_gymnasium()
    if "ALE/Pong-v5" in gym.registry:
        return False
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True


# gymnasium's entry point group of packages that register envs (MinAtar's "MinAtar" namespace).
PLUGIN_GROUP = "gymnasium.envs"
_LOADED_PLUGINS: set[str] = set()


def _register_plugin_envs(env_id: str) -> bool:
    """Call the ``gymnasium.envs`` entry points named for ``env_id``'s namespace
    (``"__root__"`` for an id without one), as gymnasium 0.x did when imported and 1.x no
    longer does: MinAtar declares ``MinAtar``, whose ids (``MinAtar/Breakout-v1``) were
    unknown. Whether one was called (each is called once a process)."""
    from importlib.metadata import entry_points

    namespace = env_id.split("/", 1)[0] if "/" in env_id else "__root__"
    plugins = [
        ep
        for ep in entry_points(group=PLUGIN_GROUP)
        if ep.name == namespace and ep.value not in _LOADED_PLUGINS  # again: warns for each id
    ]
    for plugin in plugins:
        _LOADED_PLUGINS.add(plugin.value)
        try:
            plugin.load()()
        except Exception as exc:  # a package's own code: whatever it raises
            raise EnvError(
                f"env.id={env_id!r}: the {PLUGIN_GROUP} entry point {plugin.value!r} that "
                f"registers the {namespace!r} envs failed: {exc!r}"
            ) from exc
    return bool(plugins)


def _make_single_env(env_id: str, max_episode_steps: int | None, **kwargs: Any) -> Any:
    """Build one gymnasium env (``kwargs``: gymnasium.make's, ``env.kwargs``); module level so
    AsyncVectorEnv can pickle it for subprocesses."""
    gym = import_gymnasium()
    spec = gym_spec(env_id)  # registers Atari ids in a fresh (forkserver/spawn) subprocess
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    if entry.startswith("gymnasium.envs.mujoco"):
        # A MuJoCo id through env=gym: MuJoCo's default warning handler would append to
        # MUJOCO_LOG.TXT in the working directory; import_mujoco routes it to the log.
        import_mujoco()
    return gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs)


def install_hint(exc: BaseException) -> str:
    """``"; pip install 'seedq[box2d]'"`` for gymnasium's error that a Box2D env's package is
    missing, else "". gymnasium's own line asks for swig and gymnasium[box2d]; seedq's extra
    holds the box2d wheel (no swig, no compiler) and pygame, which CarRacing draws with."""
    text = str(exc)
    if "Box2D" in text or "gymnasium[box2d]" in text:
        return "; seedq's extra installs what the Box2D envs need: pip install 'seedq[box2d]'"
    return ""


def single_action_space(env_id: str, make_kwargs: Mapping[str, Any] | None = None) -> Any:
    """The action space of ``env_id`` made with gymnasium.make's ``make_kwargs``
    (``env.kwargs``): one env built, read and closed."""
    gym = import_gymnasium()
    make_kwargs = dict(make_kwargs or {})
    try:
        env = _make_single_env(env_id, None, **make_kwargs)
    except EnvError:
        raise
    except Exception as exc:  # the env's constructor: whatever it raises
        with_kwargs = f" with env.kwargs={make_kwargs}" if make_kwargs else ""
        kind = "" if isinstance(exc, gym.error.Error) else f"{type(exc).__name__}: "
        raise EnvError(
            f"cannot build gymnasium env {env_id!r}{with_kwargs}: {kind}{exc}{install_hint(exc)}"
        ) from exc
    try:
        return env.action_space
    finally:
        env.close()


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


def _async_context() -> str | None:
    # The actor process runs ZeroMQ and possibly other actor threads; forking it can copy held
    # locks into the env workers. forkserver forks from a clean, single-threaded server.
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else None


class GymVectorBatch(BatchBase):
    """A gymnasium ``SyncVectorEnv`` or ``AsyncVectorEnv`` in SAME_STEP autoreset mode."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None,
        env_offset: int = 0,
        vectorization: str = "sync",
        max_episode_steps: int | None = None,
        make_one: Callable[..., Any] = _make_single_env,
        make_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """``make_one(env_id, max_episode_steps, **make_kwargs)`` builds one env (module level,
        so async workers, which are fresh processes, can import it); ``make_kwargs``:
        gymnasium.make's keyword arguments (``env.kwargs``)."""
        gym = import_gymnasium()
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

        gym_spec(env_id)  # fail fast, in this process, on an unknown id
        make_kwargs = dict(make_kwargs or {})
        env_fns = [
            functools.partial(make_one, env_id, max_episode_steps, **make_kwargs)
            for _ in range(num_envs)
        ]
        try:
            if vectorization == "sync":
                env: Any = SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
            elif vectorization == "async":
                env = AsyncVectorEnv(
                    env_fns, context=_async_context(), autoreset_mode=AutoresetMode.SAME_STEP
                )
            else:
                raise EnvError(
                    f"env.vectorization={vectorization!r} is not allowed; choose one of "
                    f"{list(VECTORIZATIONS)}"
                )
        except (gym.error.Error, ImportError) as exc:
            # e.g. DependencyNotInstalled for box2d / mujoco envs; its message names the extra.
            raise EnvError(
                f"cannot build gymnasium env {env_id!r}: {exc}{install_hint(exc)}"
            ) from exc
        except (BrokenPipeError, EOFError, ConnectionResetError) as exc:
            # A worker died while starting. With forkserver the usual cause is a main script
            # that starts envs at import time: workers re-import it and fail.
            raise EnvError(
                f"an async env worker for {env_id!r} died while starting ({exc!r}); see its "
                "traceback above. env.vectorization=async starts workers with forkserver, so "
                "a script that builds envs must do so under `if __name__ == '__main__':`"
            ) from exc
        except Exception as exc:
            if not make_kwargs or isinstance(exc, EnvError):
                raise
            # An argument the env does not take, or a value it refuses (constructors raise
            # TypeError, ValueError, KeyError, AssertionError, ...).
            raise EnvError(
                f"cannot build gymnasium env {env_id!r} with env.kwargs={make_kwargs}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._env = env
        action_space = env.single_action_space
        obs_space = env.single_observation_space
        continuous = continuous_actions(action_space)
        try:
            if continuous:
                width = int(action_space.shape[0])
                if not width:  # the policy head was built with no outputs: a traceback
                    raise EnvError(
                        f"{env_id} has the action space {action_space}: no values to act "
                        f"with; seedq takes {ACTION_SPACES}, of at least one action"
                    )
                # _check_continuous clips to float32 bounds: env_actions to the Box's own.
                to_env = env_actions(env_id, action_space)
            else:  # refuses the spaces seedq cannot act in
                width, to_env = joint_actions(env_id, action_space)
            transform, obs_shape, obs_dtype = obs_transform(env_id, obs_space)
        except EnvError:
            env.close()
            raise
        super().__init__(num_envs, obs_shape, obs_dtype, width, seed, env_offset)
        self._transform = transform
        self._env_actions = to_env
        self._single_space = obs_space
        if continuous:
            self._set_continuous(action_space.low, action_space.high)
        logger.info(
            "gym env %s: %d envs, %s, obs %s -> %s %s (%s), %d %s actions",
            env_id,
            num_envs,
            vectorization,
            obs_space,
            obs_shape,
            obs_dtype,
            obs_layout(obs_space),
            self.num_actions,
            self.action_kind,
        )

    @classmethod
    def from_config(cls, cfg: GymConfig, num_envs: int, seed: int, env_offset: int) -> Any:
        """``num_envs`` envs of ``cfg.id``, vectorised, limited and made as ``cfg`` says."""
        return cls(
            cfg.id,
            num_envs,
            seed,
            env_offset,
            cfg.vectorization,
            cfg.max_episode_steps,
            make_kwargs=cfg.kwargs,
        )

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self._env.reset(seed=self._reset_seed(seed))
        return self._transform(obs)

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._env_actions(self._check_actions(actions))
        obs, reward, terminated, truncated, info = self._env.step(actions)
        terminated, truncated = split_done(terminated, truncated)
        if truncated.any():
            # info["final_obs"] is an object array [N] holding each ended env's last obs (None
            # elsewhere); only the K truncated rows are stacked, in env index order.
            final_obs = self._transform(
                batch_singles(self._single_space, list(info["final_obs"][truncated]))
            )
        else:
            final_obs = self._no_final_obs
        return StepBatch(
            self._transform(obs),
            np.asarray(reward, dtype=np.float32),
            terminated,
            truncated,
            final_obs,
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class CartPoleNativeBatch(BatchBase):
    """gymnasium's numpy ``CartPoleVectorEnv`` adapted to same-step autoreset.

    ``CartPoleVectorEnv`` (gymnasium 1.x) only does next-step autoreset: an env that ended is
    reset on the *following* step, whose action it ignores. Here the finished envs are reset
    immediately after the step with the env's own RNG and reset bounds (the same three state
    updates its step would make), so the next step treats them as running envs.
    """

    _STATE_ATTRS = ("state", "steps", "prev_done", "np_random", "low", "high")

    def __init__(self, vec_env: Any, env_id: str, seed: int | None, env_offset: int = 0) -> None:
        self._env = vec_env
        self._u = vec_env.unwrapped
        space = vec_env.single_observation_space
        super().__init__(
            vec_env.num_envs,
            tuple(space.shape),
            np.dtype(space.dtype),
            int(vec_env.single_action_space.n),
            seed,
            env_offset,
        )
        logger.info(
            "cartpole env %s: %d envs, native vector env, max_episode_steps=%d",
            env_id,
            self.num_envs,
            self._u.max_episode_steps,
        )

    @classmethod
    def supports(cls, vec_env: Any) -> bool:
        """Whether ``vec_env`` is a CartPoleVectorEnv with the internals this class resets."""
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        u = vec_env.unwrapped
        return isinstance(u, CartPoleVectorEnv) and all(hasattr(u, a) for a in cls._STATE_ATTRS)

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self._env.reset(seed=self._reset_seed(seed))
        return obs

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        obs, reward, terminated, truncated, _ = self._env.step(actions)
        terminated, truncated = split_done(terminated, truncated)
        done = terminated | truncated
        final_obs = self._no_final_obs
        if done.any():
            final_obs = obs[truncated]  # boolean indexing copies
            u = self._u
            # state is [4, N] float64; draw the new states as the env's own next-step reset would.
            u.state[:, done] = u.np_random.uniform(low=u.low, high=u.high, size=(4, done.sum()))
            u.steps[done] = 0
            u.prev_done[done] = False  # stops the env from resetting them again next step
            obs[done] = u.state[:, done].T
        reward = np.asarray(reward, dtype=np.float32)
        return StepBatch(obs, reward, terminated, truncated, final_obs)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def make_cartpole(cfg: EnvConfig, num_envs: int, seed: int, env_offset: int) -> EnvBatch:
    """The native vector env when the id has one we can adapt, else a SyncVectorEnv."""
    gym = import_gymnasium()
    spec = gym_spec(cfg.id)
    if spec.vector_entry_point is not None:
        kwargs: dict[str, Any] = {}
        if cfg.max_episode_steps is not None:
            kwargs["max_episode_steps"] = cfg.max_episode_steps
        try:
            vec_env = gym.make_vec(
                cfg.id, num_envs, vectorization_mode="vector_entry_point", **kwargs
            )
        except (gym.error.Error, ImportError, TypeError) as exc:
            raise EnvError(f"cannot build the vector env of {cfg.id!r}: {exc}") from exc
        if CartPoleNativeBatch.supports(vec_env):
            return CartPoleNativeBatch(vec_env, cfg.id, seed, env_offset)
        vec_env.close()
        logger.warning(
            "env.kind=cartpole: %s's vector env is not gymnasium's CartPoleVectorEnv; "
            "falling back to a SyncVectorEnv",
            cfg.id,
        )
    else:
        logger.info("env.kind=cartpole: %s has no vector entry point; using SyncVectorEnv", cfg.id)
    return GymVectorBatch(cfg.id, num_envs, seed, env_offset, "sync", cfg.max_episode_steps)


def make_gym(cfg: GymConfig, num_envs: int, seed: int, env_offset: int) -> GymVectorBatch:
    """``env.kind=gym``: ``cfg.id`` vectorised as ``cfg.vectorization`` says."""
    entry = gym_spec(cfg.id).entry_point
    if isinstance(entry, str) and entry.startswith("ale_py"):
        logger.warning(
            "%s is an Atari game: env=gym gives the network its raw screens (no frame skip for "
            "a NoFrameskip id, no resizing, no frame stack, rewards as the game gives them); "
            "env=atari env.id=%s adds DeepMind's preprocessing, as seedq's Atari results use",
            cfg.id,
            cfg.id,
        )
    if isinstance(entry, str) and entry.startswith("minatar"):
        game = gym_spec(cfg.id).kwargs.get("game", "breakout")
        logger.warning(
            "%s is MinAtar's own gymnasium env: env=gym reads its bool (10, 10, C) frames by "
            "the Box layout rule (Seaquest's (10, 10, 10) as channels-first, which it is not); "
            "env=minatar env.id=%s delivers them channels-first with MinAtar's settings",
            cfg.id,
            game,
        )
    return GymVectorBatch.from_config(cfg, num_envs, seed, env_offset)
