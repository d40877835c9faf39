"""gymnasium backends: ``env.kind=cartpole`` (native vector env) and ``env.kind=gym`` (any id).

* ``cartpole``: gymnasium's native numpy ``CartPoleVectorEnv``. It only implements next-step
  autoreset, so :class:`CartPoleNativeBatch` performs the reset of finished envs itself, right
  after the step, exactly as the env would have done one step later. Ids without an adaptable
  native vector env fall back to a ``SyncVectorEnv``.
* ``gym``: any gymnasium id with a ``Discrete`` or 1-D ``Box`` action space, in a
  ``SyncVectorEnv`` or ``AsyncVectorEnv`` with ``AutoresetMode.SAME_STEP``
  (``info["final_obs"]`` is an object array of per-env observations, ``info["_final_obs"]``
  its mask). Box actions are clipped to the space's own bounds, in its dtype, an integer Box's
  rounded (``gym_spaces.env_actions``, as ``seedq-eval`` and ``seedq.load_policy`` map them).

How an id is found and one env made is ``gym_ids.py``'s; how a space's observations and actions
are laid out, ``gym_spaces.py``'s. gymnasium is imported when an env is built, not with this
module.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from seedq.envs.base import BatchBase, EnvBatch, EnvError, StepBatch, split_done
from seedq.envs.config import EnvConfig, kind_setting
from seedq.envs.gym_ids import gym_spec, import_gymnasium, install_hint, make_single_env
from seedq.envs.gym_spaces import (
    ACTION_SPACES,
    batch_singles,
    continuous_actions,
    env_actions,
    joint_actions,
    obs_layout,
    obs_transform,
)
from seedq.schema import ConfigError, choice, setting

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
        make_one: Callable[..., Any] = make_single_env,
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
