"""Batched environments for seedq actors.

An actor steps ``N`` environments together and sends one message per batch step. Every backend
here is adapted to one contract, :class:`EnvBatch`, with *same-step autoreset*: when an env ends
an episode on a step, that step already returns the first observation of its next episode, and
the true last observation of each *truncated* env comes back separately in
``StepBatch.final_obs`` so the learner can bootstrap from it. A terminated env needs no final
observation (its value is zero).

Backends (``EnvConfig.kind``):

* ``cartpole``: gymnasium's native numpy ``CartPoleVectorEnv``. It only implements next-step
  autoreset, so :class:`CartPoleNativeBatch` performs the reset of finished envs itself, right
  after the step, exactly as the env would have done one step later.
* ``gym``: any gymnasium id with a ``Discrete`` action space, in a ``SyncVectorEnv`` or
  ``AsyncVectorEnv`` with ``AutoresetMode.SAME_STEP`` (``info["final_obs"]`` is an object
  array of per-env observations, ``info["_final_obs"]`` its mask).
* ``atari``: ale_py's C++ ``AtariVectorEnv`` with DeepMind preprocessing, in ``SameStep``
  autoreset mode (``info["final_obs"]`` is a full ``[N, ...]`` uint8 array, valid only in the
  rows of envs that ended; ``Disabled`` is rejected by ale_py 0.12).
* ``football``: Google Research Football, :class:`seedq.actor.football.FootballBatch`: gfootball
  engines (old gym API) stepped in a Python loop, each reset on the step its episode ends; the
  scenario's clock running out is a truncation, a goal or a ball out of play a termination.
  Each controlled player of a game is one env (row), so one game fills
  ``env.controlled_players`` rows (:func:`rows_per_env`).
* ``fake``: :class:`FakeEnvBatch`, pure numpy, whose observations encode (env id, step,
  episode) so pipeline tests can check that every transition arrives in order.

Observations are delivered channels-first (``[C, H, W]``) for images so that models see the
same layout whatever the backend; float64 vectors are cast to float32.
"""

from __future__ import annotations

import difflib
import functools
import logging
import multiprocessing
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import gymnasium

    from seedq.config import EnvConfig

logger = logging.getLogger(__name__)

KINDS = ("cartpole", "gym", "atari", "football", "fake")
# DeepMind's limit: 30 minutes of play at 60 Hz.
ATARI_MAX_EPISODE_FRAMES = 108_000


class EnvError(RuntimeError):
    """An environment cannot be built or stepped; the message says what to change."""


@dataclass
class StepBatch:
    """The result of stepping every env of a batch once.

    Attributes:
        obs: ``[N, *obs_shape]``; for envs that ended this step, the first observation of their
            next episode (same-step autoreset).
        reward: float32 ``[N]``, the reward of the action just taken (for envs that ended, the
            last reward of the episode).
        terminated: bool ``[N]``, the episode reached a terminal state.
        truncated: bool ``[N]``, the episode was cut (time limit). Never True where
            ``terminated`` is: an env that does both is reported as terminated only.
        final_obs: ``[K, *obs_shape]`` with ``K = truncated.sum()``: the true last observation of
            each truncated env, in increasing env index order. ``[0, *obs_shape]`` when none.
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray


@runtime_checkable
class EnvBatch(Protocol):
    """``num_envs`` environments stepped together with same-step autoreset."""

    num_envs: int
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env; returns ``[N, *obs_shape]``."""
        ...

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step every env with integer ``actions`` ``[N]``."""
        ...

    def close(self) -> None:
        """Release threads, subprocesses and emulators. Safe to call twice."""
        ...


class _BatchBase:
    """Shared bookkeeping: spaces, seeding, action checks, context-manager support."""

    def __init__(
        self,
        num_envs: int,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype,
        num_actions: int,
        seed: int | None,
        env_offset: int,
    ) -> None:
        self.num_envs = num_envs
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.num_actions = int(num_actions)
        self.env_offset = env_offset
        self._seed = seed
        self._seeded = False
        # Reused for the (common) steps on which nothing is truncated; a size-0 array cannot be
        # mutated by a consumer, so sharing it is safe.
        self._no_final_obs = np.zeros((0, *self.obs_shape), dtype=self.obs_dtype)

    def _reset_seed(self, seed: int | None) -> int | None:
        """The base seed for a reset: env ``i`` of the batch gets ``base + i``.

        An explicit ``seed`` and the construction seed both become ``seed + env_offset``, so
        batches built from one run seed with distinct offsets get distinct env seeds. Without an
        explicit seed only the first reset is seeded; later ones continue the RNG streams.
        """
        if seed is None:
            if self._seeded or self._seed is None:
                return None
            seed = self._seed
        self._seeded = True
        return int(seed) + self.env_offset

    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        """Validate ``actions`` ``[N]`` and return them as int64.

        Checked on every step because an out-of-range action is not caught by every backend:
        ale_py's C++ vector env deadlocks on one.
        """
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,) or actions.dtype.kind not in "iu":
            raise EnvError(
                f"actions must be an integer array of shape ({self.num_envs},); got "
                f"{actions.dtype} {actions.shape}"
            )
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise EnvError(
                f"actions must lie in [0, {self.num_actions}); got values in "
                f"[{actions.min()}, {actions.max()}]"
            )
        return actions.astype(np.int64, copy=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Subclasses release their env here."""


def _split_done(terminated: np.ndarray, truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flags as bool arrays, with ``truncated`` cleared where ``terminated`` is set.

    A terminal state has value zero whatever the clock says, so terminated wins.
    """
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool) & ~terminated
    return terminated, truncated


# --------------------------------------------------------------------------------------------
# fake


class FakeEnvBatch(_BatchBase):
    """Deterministic numpy envs whose observations say who and when they are.

    The flattened observation of env ``i`` is ``[env_offset + i, t, e, a, 0, ...]`` where ``t`` is
    the step within the episode (0 right after a reset) and ``e`` the number of episodes env
    ``i`` has finished. The reward of a step is the new ``t`` (so ordering errors show up as
    wrong rewards). Global env ``g = env_offset + i`` ends its episodes after
    ``episode_length + (g % 3)`` steps, so every observation describes itself; the lengths
    differ so that episode ends fall on different batch steps, as in real envs. They end as
    truncated if ``truncate_episodes``, else as terminated; ``final_obs`` of a truncated env has
    ``t == episode_length + (g % 3)``.

    Integer dtypes wrap the encoded values (e.g. env ids beyond 255 in uint8); float32 is exact
    up to 2**24.
    """

    def __init__(
        self,
        num_envs: int,
        obs_shape: tuple[int, ...] = (4,),
        obs_dtype: np.dtype | str = "float32",
        num_actions: int = 2,
        episode_length: int = 10,
        truncate_episodes: bool = False,
        env_offset: int = 0,
    ) -> None:
        obs_shape = tuple(int(d) for d in obs_shape)
        try:
            dtype = np.dtype(obs_dtype)
        except TypeError as exc:
            raise EnvError(f"fake env: env.obs_dtype={obs_dtype!r} is not a numpy dtype") from exc
        flat = int(np.prod(obs_shape)) if obs_shape else 1
        if flat < 3:
            raise EnvError(
                f"fake env: env.obs_shape={list(obs_shape)} has {flat} element(s); it needs at "
                "least 3 to encode (env id, step, episode)"
            )
        if episode_length < 1 or num_actions < 1:
            raise EnvError(
                f"fake env: episode_length={episode_length} and num_actions={num_actions} must "
                "both be >= 1"
            )
        super().__init__(num_envs, obs_shape, dtype, num_actions, None, env_offset)
        self._flat = flat
        self._truncate = bool(truncate_episodes)
        self.env_ids = np.arange(env_offset, env_offset + num_envs, dtype=np.int64)
        self.episode_lengths = (
            episode_length + (env_offset + np.arange(num_envs, dtype=np.int64)) % 3
        )
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._episode = np.zeros(num_envs, dtype=np.int64)
        self._no_done = np.zeros(num_envs, dtype=bool)

    def _encode(
        self, ids: np.ndarray, t: np.ndarray, episode: np.ndarray, last_action: np.ndarray | int
    ) -> np.ndarray:
        """``[len(ids), *obs_shape]`` observations for the given rows (all 1-D, same length).

        With 4+ elements, element 3 is the action that led to this observation (-1 after a
        reset), so a test can check that the learner pairs each action with the right step.
        """
        out = np.zeros((len(ids), self._flat), dtype=self.obs_dtype)
        # Array-to-array assignment casts unsafely, which is the documented wrap-around.
        out[:, 0] = ids
        out[:, 1] = t
        out[:, 2] = episode
        if self._flat >= 4:
            out[:, 3] = last_action
        return out.reshape(len(ids), *self.obs_shape)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start episode 0 at step 0 in every env (``seed`` is ignored: nothing is random)."""
        self._t[:] = 0
        self._episode[:] = 0
        return self._encode(self.env_ids, self._t, self._episode, -1)

    def step(self, actions: np.ndarray) -> StepBatch:
        self._check_actions(actions)
        self._t += 1
        reward = self._t.astype(np.float32)
        done = self._t >= self.episode_lengths
        if self._truncate:
            terminated, truncated = self._no_done.copy(), done
        else:
            terminated, truncated = done, self._no_done.copy()
        if done.any():
            final_obs = (
                self._encode(self.env_ids[done], self._t[done], self._episode[done], actions[done])
                if self._truncate
                else self._no_final_obs
            )
            self._t[done] = 0
            self._episode += done
        else:
            final_obs = self._no_final_obs
        obs = self._encode(self.env_ids, self._t, self._episode, np.where(done, -1, actions))
        return StepBatch(obs, reward, terminated, truncated, final_obs)

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# gymnasium (cartpole native, sync, async)


def _import_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise EnvError('gymnasium is not installed; run: pip install "gymnasium>=1.1,<2"') from exc
    return gymnasium


def _gym_spec(env_id: str) -> Any:
    """The registered spec of ``env_id``, or an EnvError naming it."""
    gym = _import_gymnasium()
    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        # Atari ids only exist once ale_py has registered them.
        try:
            import ale_py

            gym.register_envs(ale_py)
        except ImportError:
            pass
    try:
        return gym.spec(env_id)
    except gym.error.Error as exc:
        raise EnvError(
            f"unknown gymnasium env id {env_id!r} ({exc}); list the registered ids with "
            "`python -c 'import gymnasium; gymnasium.pprint_registry()'`"
        ) from exc


def _make_single_env(env_id: str, max_episode_steps: int | None) -> Any:
    """Build one gymnasium env; module level so AsyncVectorEnv can pickle it for subprocesses."""
    gym = _import_gymnasium()
    _gym_spec(env_id)  # registers Atari ids in a fresh (forkserver/spawn) subprocess
    return gym.make(env_id, max_episode_steps=max_episode_steps)


def _obs_transform(
    env_id: str, space: gymnasium.Space
) -> tuple[Callable[[np.ndarray], np.ndarray], tuple[int, ...], np.dtype]:
    """How to turn a batch of raw observations ``[B, *raw]`` into seedq's layout.

    Returns ``(fn, obs_shape, obs_dtype)``. Images (uint8 ``[H, W, C]`` with ``C <= 4``, or
    ``[H, W]``) become channels-first ``[C, H, W]``; float64 vectors become float32 (models run
    in float32 and the wire is half the size); Discrete observations become float32 one-hots.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        eye = np.eye(int(space.n), dtype=np.float32)
        start = int(space.start)
        return (lambda x: eye[np.asarray(x, dtype=np.int64) - start]), (int(space.n),), eye.dtype
    if not isinstance(space, spaces.Box):
        raise EnvError(f"seedq supports Box and Discrete observation spaces; {env_id} has {space}")
    shape, dtype = tuple(space.shape), np.dtype(space.dtype)
    if dtype == np.uint8 and len(shape) == 3 and shape[-1] <= 4 < shape[0]:
        # HWC image (gymnasium's convention): a transposed copy, contiguous for the wire.
        return (
            lambda x: np.ascontiguousarray(np.asarray(x).transpose(0, 3, 1, 2)),
            (shape[2], shape[0], shape[1]),
            dtype,
        )
    if dtype == np.uint8 and len(shape) == 2:
        return (lambda x: np.asarray(x)[:, None]), (1, *shape), dtype
    if dtype == np.float64:
        return (lambda x: np.asarray(x, dtype=np.float32)), shape, np.dtype(np.float32)
    # Already in a usable layout (vectors, or images that are channels-first already).
    return np.asarray, shape, dtype


def _async_context() -> str | None:
    # The actor process runs ZeroMQ and possibly other actor threads; forking it can copy held
    # locks into the env workers. forkserver forks from a clean, single-threaded server.
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else None


class GymVectorBatch(_BatchBase):
    """A gymnasium ``SyncVectorEnv`` or ``AsyncVectorEnv`` in SAME_STEP autoreset mode."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None,
        env_offset: int = 0,
        vectorization: str = "sync",
        max_episode_steps: int | None = None,
    ) -> None:
        gym = _import_gymnasium()
        from gymnasium import spaces
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

        _gym_spec(env_id)  # fail fast, in this process, on an unknown id
        env_fns = [
            functools.partial(_make_single_env, env_id, max_episode_steps) for _ in range(num_envs)
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
                    f"env.vectorization={vectorization!r} is not allowed; use sync or async"
                )
        except (gym.error.Error, ImportError) as exc:
            # e.g. DependencyNotInstalled for box2d / mujoco envs; its message names the extra.
            raise EnvError(f"cannot build gymnasium env {env_id!r}: {exc}") from exc
        except (BrokenPipeError, EOFError, ConnectionResetError) as exc:
            # A worker died while starting. With forkserver the usual cause is a main script
            # that starts envs at import time: workers re-import it and fail.
            raise EnvError(
                f"an async env worker for {env_id!r} died while starting ({exc!r}); see its "
                "traceback above. env.vectorization=async starts workers with forkserver, so "
                "a script that builds envs must do so under `if __name__ == '__main__':`"
            ) from exc
        self._env = env
        action_space = env.single_action_space
        if not isinstance(action_space, spaces.Discrete):
            env.close()
            raise EnvError(f"seedq supports discrete action spaces; {env_id} has {action_space}")
        try:
            transform, obs_shape, obs_dtype = _obs_transform(env_id, env.single_observation_space)
        except EnvError:
            env.close()
            raise
        super().__init__(num_envs, obs_shape, obs_dtype, int(action_space.n), seed, env_offset)
        self._transform = transform
        self._action_start = int(action_space.start)
        logger.info(
            "gym env %s: %d envs, %s, obs %s %s, %d actions",
            env_id,
            num_envs,
            vectorization,
            obs_shape,
            obs_dtype,
            self.num_actions,
        )

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self._env.reset(seed=self._reset_seed(seed))
        return self._transform(obs)

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        if self._action_start:
            actions = actions + self._action_start
        obs, reward, terminated, truncated, info = self._env.step(actions)
        terminated, truncated = _split_done(terminated, truncated)
        if truncated.any():
            # info["final_obs"] is an object array [N] holding each ended env's last obs (None
            # elsewhere); only the K truncated rows are stacked, in env index order.
            final_obs = self._transform(np.stack(list(info["final_obs"][truncated])))
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


class CartPoleNativeBatch(_BatchBase):
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
        terminated, truncated = _split_done(terminated, truncated)
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


def _make_cartpole(cfg: EnvConfig, num_envs: int, seed: int, env_offset: int) -> EnvBatch:
    """The native vector env when the id has one we can adapt, else a SyncVectorEnv."""
    gym = _import_gymnasium()
    spec = _gym_spec(cfg.id)
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


# --------------------------------------------------------------------------------------------
# atari


def _atari_game(env_id: str) -> str:
    """The snake_case ROM name (``"pong"``) of ``env_id`` (``"ALE/Pong-v5"`` or ``"pong"``)."""
    try:
        import ale_py
        from ale_py import roms
    except ImportError as exc:
        raise EnvError(
            'env.kind=atari needs ale_py (ROMs included); run: pip install "ale-py>=0.10"'
        ) from exc
    gym = _import_gymnasium()
    gym.register_envs(ale_py)
    rom_ids = roms.get_all_rom_ids()
    if env_id in rom_ids:
        return env_id
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        spec = None
    game = spec.kwargs.get("game") if spec is not None else None
    if spec is not None and game is None:
        raise EnvError(
            f"{env_id!r} is not an Atari id; use env.kind=gym (or cartpole) for it, or an "
            "Atari id like 'ALE/Pong-v5' with env.kind=atari"
        )
    if game is None:
        ale_ids = [i for i in gym.registry if i.startswith("ALE/")]
        close = difflib.get_close_matches(env_id, ale_ids, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise EnvError(
            f"unknown Atari env id {env_id!r}.{hint} Atari ids look like 'ALE/Pong-v5'; list "
            "the games with `python -c 'import ale_py.roms as r; print(r.get_all_rom_ids())'` "
            "or the ids with `python -c 'import gymnasium, ale_py; "
            "gymnasium.register_envs(ale_py); gymnasium.pprint_registry()'`"
        )
    return str(game)


def _atari_rom_path(game: str) -> Any:
    from ale_py import roms

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # get_rom_path warns before returning None
            path = roms.get_rom_path(game)
    except OSError as exc:  # missing or corrupt .bin, or a bad ALE_ROMS_DIR
        raise EnvError(
            f"the ROM for {game!r} cannot be loaded ({exc}); reinstall the ROMs with: "
            'pip install --force-reinstall "ale-py>=0.10"'
        ) from exc
    if path is None:
        raise EnvError(
            f"ale_py has no ROM named {game!r}; list them with "
            "`python -c 'import ale_py.roms as r; print(r.get_all_rom_ids())'`"
        )
    return path


def _default_num_threads(num_envs: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))  # respects taskset / container CPU sets
    except AttributeError:  # pragma: no cover - not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(num_envs, cpus))


class AtariBatch(_BatchBase):
    """ale_py's C++ ``AtariVectorEnv`` with DeepMind preprocessing and SameStep autoreset.

    Preprocessing (all in C++): ``frame_skip`` with max-pooling of the last two frames,
    ``screen_size`` square grey (or RGB) frames, ``frame_stack`` stacked frames, up to
    ``noop_max`` no-ops and FIRE on reset, sticky actions with ``repeat_action_probability``,
    no reward clipping (the learner clips). ``max_episode_steps`` counts agent steps; ale_py
    counts frames, so it gets ``max_episode_steps * frame_skip`` (default 108000 frames).

    ``episodic_life`` maps to ale_py's ``life_loss_info``: a life loss reports terminated while
    the game goes on, and only game over resets (DeepMind's semantics). ale_py's own
    ``episodic_life`` would restart the game on every life loss, so it is not used.

    Observations are uint8 ``[frame_stack, S, S]`` (grey) or ``[3 * frame_stack, S, S]`` (RGB,
    channels of each frame together).
    """

    def __init__(
        self, cfg: EnvConfig, num_envs: int, seed: int | None, env_offset: int = 0
    ) -> None:
        game = _atari_game(cfg.id)
        _atari_rom_path(game)
        from ale_py.vector_env import AtariVectorEnv
        from gymnasium.vector import AutoresetMode

        if cfg.max_episode_steps is not None:
            max_frames = int(cfg.max_episode_steps) * int(cfg.frame_skip)
        else:
            max_frames = ATARI_MAX_EPISODE_FRAMES
        num_threads = _default_num_threads(num_envs)
        try:
            env = AtariVectorEnv(
                game,
                num_envs,
                # batch_size == num_envs: step() waits for every env (no async batches).
                batch_size=num_envs,
                num_threads=num_threads,
                max_num_frames_per_episode=max_frames,
                repeat_action_probability=float(cfg.repeat_action_probability),
                full_action_space=bool(cfg.full_action_space),
                autoreset_mode=AutoresetMode.SAME_STEP,
                img_height=int(cfg.screen_size),
                img_width=int(cfg.screen_size),
                grayscale=bool(cfg.grayscale),
                stack_num=int(cfg.frame_stack),
                frameskip=int(cfg.frame_skip),
                maxpool=True,
                noop_max=int(cfg.noop_max),
                episodic_life=False,
                life_loss_info=bool(cfg.episodic_life),
                reward_clipping=False,
                use_fire_reset=True,
            )
        except (ValueError, RuntimeError, AssertionError) as exc:
            raise EnvError(f"cannot build AtariVectorEnv for {cfg.id!r} ({game}): {exc}") from exc
        self._env = env
        self._grayscale = bool(cfg.grayscale)
        stack, size = int(cfg.frame_stack), int(cfg.screen_size)
        channels = stack if self._grayscale else 3 * stack
        super().__init__(
            num_envs,
            (channels, size, size),
            np.dtype(np.uint8),
            int(env.single_action_space.n),
            seed,
            env_offset,
        )
        logger.info(
            "atari env %s (%s): %d envs, %d threads, obs %s, %d actions, max %d frames",
            cfg.id,
            game,
            num_envs,
            num_threads,
            self.obs_shape,
            self.num_actions,
            max_frames,
        )

    def _layout(self, obs: np.ndarray) -> np.ndarray:
        """Grey ``[B, stack, H, W]`` as is; RGB ``[B, stack, H, W, 3]`` -> ``[B, 3*stack, H, W]``.

        The three channels of each frame stay adjacent, so a model's first conv sees frames in
        order.
        """
        if self._grayscale:
            return obs
        b, stack, h, w, c = obs.shape
        return np.ascontiguousarray(obs.transpose(0, 1, 4, 2, 3)).reshape(b, stack * c, h, w)

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self._env.reset(seed=self._reset_seed(seed))
        return self._layout(obs)

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        obs, reward, terminated, truncated, info = self._env.step(actions)
        terminated, truncated = _split_done(terminated, truncated)
        if truncated.any():
            # info["final_obs"] is [N, ...]; rows of envs that did not end hold stale frames.
            final_obs = self._layout(info["final_obs"][truncated])
        else:
            final_obs = self._no_final_obs
        return StepBatch(
            self._layout(obs), reward.astype(np.float32), terminated, truncated, final_obs
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            # The C++ worker threads stop when the interface is freed.
            self._env = None


# --------------------------------------------------------------------------------------------


def rows_per_env(cfg: EnvConfig) -> int:
    """Rows of an :class:`EnvBatch` that one environment of ``cfg`` fills.

    ``env.controlled_players`` for football (one row per controlled player of a game), 1 for
    the other kinds. A batch of this kind holds a multiple of it.
    """
    return int(cfg.controlled_players) if cfg.kind == "football" else 1


def make_env_batch(cfg: EnvConfig, num_envs: int, seed: int, env_offset: int = 0) -> EnvBatch:
    """Build ``num_envs`` environments described by ``cfg`` as one :class:`EnvBatch`.

    Args:
        cfg: the ``env`` section of the config; ``cfg.kind`` picks the backend.
        num_envs: envs (rows) stepped together, a multiple of :func:`rows_per_env`.
        seed: base seed; on the first reset env ``i`` is seeded with ``seed + env_offset + i``
            (football: each game with the global id of its first row).
        env_offset: global index of this batch's first env (fake env ids, seed spreading).

    Raises:
        EnvError: unknown kind, id or scenario, unsupported spaces, missing packages or ROMs.
    """
    if num_envs < 1:
        raise EnvError(f"num_envs={num_envs} must be >= 1")
    kind = cfg.kind
    if kind == "fake":
        return FakeEnvBatch(
            num_envs,
            tuple(cfg.obs_shape),
            cfg.obs_dtype,
            cfg.num_actions,
            cfg.episode_length,
            cfg.truncate_episodes,
            env_offset,
        )
    if kind == "cartpole":
        return _make_cartpole(cfg, num_envs, seed, env_offset)
    if kind == "gym":
        return GymVectorBatch(
            cfg.id, num_envs, seed, env_offset, cfg.vectorization, cfg.max_episode_steps
        )
    if kind == "atari":
        return AtariBatch(cfg, num_envs, seed, env_offset)
    if kind == "football":
        # Imported here: football.py builds on this module's contract.
        from seedq.actor.football import FootballBatch

        return FootballBatch(cfg, num_envs, seed, env_offset)
    raise EnvError(f"env.kind={kind!r} is not allowed; choose one of {list(KINDS)}")
