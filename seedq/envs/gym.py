"""gymnasium backends: ``env.kind=cartpole`` (native vector env) and ``env.kind=gym`` (any id).

* ``cartpole``: gymnasium's native numpy ``CartPoleVectorEnv``. It only implements next-step
  autoreset, so :class:`CartPoleNativeBatch` performs the reset of finished envs itself, right
  after the step, exactly as the env would have done one step later. Ids without an adaptable
  native vector env fall back to a ``SyncVectorEnv``.
* ``gym``: any gymnasium id with a ``Discrete`` or 1-D ``Box`` action space, in a
  ``SyncVectorEnv`` or ``AsyncVectorEnv`` with ``AutoresetMode.SAME_STEP``
  (``info["final_obs"]`` is an object array of per-env observations, ``info["_final_obs"]``
  its mask). Box actions are clipped to the space's bounds (``BatchBase._check_continuous``).

gymnasium is imported when an env is built, not with this module.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from seedq.envs.base import BatchBase, EnvBatch, EnvError, StepBatch, split_done
from seedq.envs.config import EnvConfig, kind_setting
from seedq.envs.mujoco_import import import_mujoco
from seedq.schema import choice, setting

if TYPE_CHECKING:
    import gymnasium

logger = logging.getLogger(__name__)

# env.vectorization: "sync" steps the envs in the actor process, "async" in subprocesses.
VECTORIZATIONS = ("sync", "async")


@dataclass
class GymConfig(EnvConfig):
    """``env=gym``: any gymnasium id, and how its envs are vectorised (``env=cartpole`` is the
    base :class:`EnvConfig`: its native vector env has nothing to choose)."""

    kind: str = kind_setting("gym")
    vectorization: str = setting(
        "sync",
        f"How envs are vectorised, one of {list(VECTORIZATIONS)}: sync steps them in the actor "
        "process, async in one subprocess each.",
    )

    def check(self) -> None:
        super().check()
        choice("env.vectorization", self.vectorization, VECTORIZATIONS)


def import_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise EnvError('gymnasium is not installed; run: pip install "gymnasium>=1.1,<2"') from exc
    return gymnasium


def gym_spec(env_id: str) -> Any:
    """The registered spec of ``env_id``, or an EnvError naming it."""
    gym = import_gymnasium()
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
    gym = import_gymnasium()
    spec = gym_spec(env_id)  # registers Atari ids in a fresh (forkserver/spawn) subprocess
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    if entry.startswith("gymnasium.envs.mujoco"):
        # A MuJoCo id through env=gym: MuJoCo's default warning handler would append to
        # MUJOCO_LOG.TXT in the working directory; import_mujoco routes it to the log.
        import_mujoco()
    return gym.make(env_id, max_episode_steps=max_episode_steps)


def obs_transform(
    env_id: str, space: gymnasium.Space
) -> tuple[Callable[[np.ndarray], np.ndarray], tuple[int, ...], np.dtype]:
    """How to turn a batch of raw observations ``[B, *raw]`` into seedq's layout.

    Returns ``(fn, obs_shape, obs_dtype)``. Images (uint8 ``[H, W, C]`` with ``C <= 4``, or
    ``[H, W]``) become channels-first ``[C, H, W]``; float64 vectors become float32 (models run
    in float32 and the wire is half the size); Discrete observations become bool one-hots.

    Bool, not float: a one-hot is an indicator, and the models read bool observations as 0/1
    without running normalisation (``seedq.agents.common.normalize.RunningNorm``), which would
    scale a rarely visited state's unit up to ``1/sqrt(p)`` and an unseen one to the clip
    (Taxi-v4 and FrozenLake-v1 did not learn with it). One byte per state on the wire, too.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        eye = np.eye(int(space.n), dtype=np.bool_)
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
        make_one: Callable[[str, int | None], Any] = _make_single_env,
    ) -> None:
        """``make_one(env_id, max_episode_steps)`` builds one env (module level, so async
        workers, which are fresh processes, can import it)."""
        gym = import_gymnasium()
        from gymnasium import spaces
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

        gym_spec(env_id)  # fail fast, in this process, on an unknown id
        env_fns = [functools.partial(make_one, env_id, max_episode_steps) for _ in range(num_envs)]
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
        continuous = isinstance(action_space, spaces.Box) and len(action_space.shape) == 1
        if not (continuous or isinstance(action_space, spaces.Discrete)):
            env.close()
            raise EnvError(
                f"seedq supports Discrete and 1-D Box action spaces; {env_id} has {action_space}"
            )
        try:
            transform, obs_shape, obs_dtype = obs_transform(env_id, env.single_observation_space)
        except EnvError:
            env.close()
            raise
        width = int(action_space.shape[0]) if continuous else int(action_space.n)
        super().__init__(num_envs, obs_shape, obs_dtype, width, seed, env_offset)
        self._transform = transform
        self._action_start = 0
        if continuous:
            self._set_continuous(action_space.low, action_space.high)
            self._action_dtype = np.dtype(action_space.dtype)
        else:
            self._action_start = int(action_space.start)
        logger.info(
            "gym env %s: %d envs, %s, obs %s %s, %d %s actions",
            env_id,
            num_envs,
            vectorization,
            obs_shape,
            obs_dtype,
            self.num_actions,
            self.action_kind,
        )

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self._env.reset(seed=self._reset_seed(seed))
        return self._transform(obs)

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        if self._action_start:
            actions = actions + self._action_start
        elif self.action_kind == "continuous":
            actions = actions.astype(self._action_dtype, copy=False)
        obs, reward, terminated, truncated, info = self._env.step(actions)
        terminated, truncated = split_done(terminated, truncated)
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
    return GymVectorBatch(
        cfg.id, num_envs, seed, env_offset, cfg.vectorization, cfg.max_episode_steps
    )
