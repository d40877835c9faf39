"""``env.kind=mujoco``: gymnasium's MuJoCo locomotion tasks (``HalfCheetah-v5``, ``Hopper-v5``,
``Walker2d-v5``, ``Ant-v5``, ``Humanoid-v5``, ...) with continuous (Box) actions.

The envs run in a gymnasium ``SyncVectorEnv`` or ``AsyncVectorEnv`` (``env.vectorization``) in
``SAME_STEP`` autoreset mode, as ``env.kind=gym`` does, with the ids' own time limits (1000
steps) unless ``env.max_episode_steps`` says otherwise. Observations are float64 vectors, cast
to float32 (``obs_transform``).

Actions. :class:`MujocoBatch` describes its action space for the continuous-action plumbing:
``action_kind = "continuous"``, ``num_actions`` the length ``D`` of an action vector,
``action_low`` / ``action_high`` float32 ``[D]`` bounds and ``action_shape = (D,)``. ``step``
takes float ``[N, D]`` actions and clips them to the bounds (an unsquashed Gaussian policy
samples outside them; the learner keeps the unclipped sample it computed log-probabilities
of).

Rendering. ``seedq-eval video=true`` renders MuJoCo offscreen through OpenGL. Without a display
there is no GLFW window, so this module sets ``MUJOCO_GL=egl`` (GPU or Mesa's EGL) before
MuJoCo is first imported unless ``MUJOCO_GL`` is set already; ``MUJOCO_GL=osmesa`` (software,
needs libosmesa6) is the fallback where EGL is missing. Training never renders.

gymnasium's MuJoCo envs need the ``mujoco`` package (``pip install 'seedq[mujoco]'``); it and
gymnasium are imported when an env is built, not with this module.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from seedq.envs.base import BatchBase, EnvError, StepBatch, split_done
from seedq.envs.gym import (
    VECTORIZATIONS,
    _async_context,
    _make_single_env,
    gym_spec,
    import_gymnasium,
    obs_transform,
)

if TYPE_CHECKING:
    from seedq.envs.config import EnvConfig

logger = logging.getLogger(__name__)

CONTINUOUS = "continuous"  # the action_kind of Box action spaces (seedq.messages' name)
INSTALL_HINT = "env.kind=mujoco needs MuJoCo; run: pip install 'seedq[mujoco]'"


def use_headless_gl() -> None:
    """Pick EGL for MuJoCo's offscreen rendering when no display is set (before ``import
    mujoco``, which reads ``MUJOCO_GL`` once)."""
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"


_warned: set[str] = set()


def _log_mujoco_warning(message: str) -> None:
    # MuJoCo's default handler prints and appends to MUJOCO_LOG.TXT in the working directory,
    # once per env built (MuJoCo 4 warns that gymnasium's models use settotalmass).
    if message not in _warned:
        _warned.add(message)
        logger.warning("MuJoCo: %s", message)


def import_mujoco() -> Any:
    """The ``mujoco`` module (its warnings routed to logging, once each), or an EnvError with
    the install line."""
    use_headless_gl()
    try:
        import mujoco
    except ImportError as exc:
        raise EnvError(INSTALL_HINT) from exc
    mujoco.set_mju_user_warning(_log_mujoco_warning)
    return mujoco


def _make_mujoco_env(env_id: str, max_episode_steps: int | None) -> Any:
    """One MuJoCo env; module level so AsyncVectorEnv workers (fresh processes) also route
    MuJoCo's warnings to logging."""
    import_mujoco()
    return _make_single_env(env_id, max_episode_steps)


def check_mujoco_id(env_id: str) -> None:
    """An EnvError unless ``env_id`` is a gymnasium MuJoCo env (its entry point lives in
    ``gymnasium.envs.mujoco``)."""
    spec = gym_spec(env_id)
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    if not entry.startswith("gymnasium.envs.mujoco"):
        raise EnvError(
            f"{env_id!r} is not a gymnasium MuJoCo env; use env.kind=gym for it, or a MuJoCo "
            "id such as HalfCheetah-v5, Hopper-v5, Walker2d-v5, Ant-v5 or Humanoid-v5"
        )


class MujocoBatch(BatchBase):
    """A gymnasium vector env of a Box-action id, in SAME_STEP autoreset mode.

    Works for any gymnasium id with a 1-D Box action space (the tests use ``Pendulum-v1``,
    which needs no MuJoCo); :func:`make_mujoco` is the factory that insists on MuJoCo ids.
    ``make_one(env_id, max_episode_steps)`` builds one env (module level, for async workers).
    """

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
        gym = import_gymnasium()
        from gymnasium import spaces
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

        gym_spec(env_id)
        if vectorization not in VECTORIZATIONS:
            raise EnvError(
                f"env.vectorization={vectorization!r} is not allowed; choose one of "
                f"{list(VECTORIZATIONS)}"
            )
        env_fns = [functools.partial(make_one, env_id, max_episode_steps) for _ in range(num_envs)]
        try:
            if vectorization == "sync":
                env: Any = SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
            else:
                env = AsyncVectorEnv(
                    env_fns, context=_async_context(), autoreset_mode=AutoresetMode.SAME_STEP
                )
        except (gym.error.Error, ImportError) as exc:
            raise EnvError(f"cannot build gymnasium env {env_id!r}: {exc}") from exc
        self._env = env
        action_space = env.single_action_space
        if not (isinstance(action_space, spaces.Box) and len(action_space.shape) == 1):
            env.close()
            raise EnvError(
                f"env.kind=mujoco needs a 1-D Box action space; {env_id} has {action_space}"
            )
        try:
            transform, obs_shape, obs_dtype = obs_transform(env_id, env.single_observation_space)
        except EnvError:
            env.close()
            raise
        width = int(action_space.shape[0])
        super().__init__(num_envs, obs_shape, obs_dtype, width, seed, env_offset)
        self.action_kind = CONTINUOUS
        self.action_shape = (width,)
        self.action_low = np.asarray(action_space.low, dtype=np.float32)
        self.action_high = np.asarray(action_space.high, dtype=np.float32)
        self._action_dtype = np.dtype(action_space.dtype)
        self._transform = transform
        logger.info(
            "mujoco env %s: %d envs, %s, obs %s %s, actions [%d] in [%s, %s]",
            env_id,
            num_envs,
            vectorization,
            obs_shape,
            obs_dtype,
            width,
            self.action_low.min(),
            self.action_high.max(),
        )

    def _check_box_actions(self, actions: np.ndarray) -> np.ndarray:
        """Finite float ``[N, D]`` actions, clipped to the bounds, in the space's dtype."""
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs, *self.action_shape) or actions.dtype.kind != "f":
            raise EnvError(
                f"actions must be a float array of shape ({self.num_envs}, "
                f"{self.action_shape[0]}); got {actions.dtype} {actions.shape}"
            )
        if not np.isfinite(actions).all():
            raise EnvError("actions hold NaN or inf")
        clipped = np.clip(actions, self.action_low, self.action_high)
        return clipped.astype(self._action_dtype, copy=False)

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self._env.reset(seed=self._reset_seed(seed))
        return self._transform(obs)

    def step(self, actions: np.ndarray) -> StepBatch:
        obs, reward, terminated, truncated, info = self._env.step(self._check_box_actions(actions))
        terminated, truncated = split_done(terminated, truncated)
        if truncated.any():
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


def make_mujoco(cfg: EnvConfig, num_envs: int, seed: int, env_offset: int) -> MujocoBatch:
    """``env.kind=mujoco``: the MuJoCo id ``cfg.id``, vectorised as ``cfg.vectorization`` says."""
    import_mujoco()
    check_mujoco_id(cfg.id)
    return MujocoBatch(cfg.id, num_envs, seed, env_offset, cfg.vectorization, cfg.max_episode_steps)
