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
there is no GLFW window, so ``seedq.envs.mujoco_import`` sets ``MUJOCO_GL=egl`` (GPU or Mesa's
EGL) before MuJoCo is first imported unless ``MUJOCO_GL`` is set already; ``MUJOCO_GL=osmesa``
(software, needs libosmesa6) is the fallback where EGL is missing. Training never renders.

gymnasium's MuJoCo envs need the ``mujoco`` package (``pip install 'seedq[mujoco]'``); it and
gymnasium are imported when an env is built, not with this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seedq.envs.base import EnvError
from seedq.envs.config import kind_setting
from seedq.envs.gym import GymConfig, GymVectorBatch
from seedq.envs.gym_ids import gym_spec, make_single_env
from seedq.envs.mujoco_import import import_mujoco
from seedq.schema import setting

CONTINUOUS = "continuous"  # the action_kind of Box action spaces (seedq.messages' name)


@dataclass
class MujocoConfig(GymConfig):
    """``env=mujoco``: a gymnasium MuJoCo id, vectorised as ``env=gym`` vectorises its ids."""

    kind: str = kind_setting("mujoco")
    id: str = setting(
        "HalfCheetah-v5", "A gymnasium MuJoCo id like HalfCheetah-v5 or Hopper-v5; names the run."
    )
    max_episode_steps: int | None = setting(
        None,
        "Truncate episodes after this many agent steps (> 0); null keeps the id's own limit "
        "(1000 steps).",
    )


def _make_mujoco_env(env_id: str, max_episode_steps: int | None, **kwargs: Any) -> Any:
    """One env; module level so AsyncVectorEnv workers (fresh processes) also route MuJoCo's
    warnings to logging. A Box env without MuJoCo (``Pendulum-v1``) needs no ``mujoco``."""
    if is_mujoco_id(env_id):
        import_mujoco()
    return make_single_env(env_id, max_episode_steps, **kwargs)


def is_mujoco_id(env_id: str) -> bool:
    """Whether ``env_id`` is a gymnasium MuJoCo env (its entry point is in
    ``gymnasium.envs.mujoco``)."""
    spec = gym_spec(env_id)
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    return entry.startswith("gymnasium.envs.mujoco")


def check_mujoco_id(env_id: str) -> None:
    """An EnvError unless ``env_id`` is a gymnasium MuJoCo env."""
    if not is_mujoco_id(env_id):
        raise EnvError(
            f"{env_id!r} is not a gymnasium MuJoCo env; use env=gym for it, or a MuJoCo "
            "id such as HalfCheetah-v5, Hopper-v5, Walker2d-v5, Ant-v5 or Humanoid-v5"
        )


class MujocoBatch(GymVectorBatch):
    """A gymnasium vector env of a 1-D Box-action id (:class:`GymVectorBatch`, which steps,
    clips and truncates it), refusing discrete action spaces.

    Works for any gymnasium id with a 1-D Box action space (the tests use ``Pendulum-v1``,
    which needs no MuJoCo); :func:`make_mujoco` is the factory that insists on MuJoCo ids.
    """

    def __init__(self, env_id: str, *args: Any, **kwargs: Any) -> None:
        """:class:`GymVectorBatch`'s arguments; each env is built by ``_make_mujoco_env`` unless
        ``make_one`` says otherwise."""
        kwargs.setdefault("make_one", _make_mujoco_env)
        super().__init__(env_id, *args, **kwargs)
        if self.action_kind != CONTINUOUS:
            self.close()
            raise EnvError(
                f"env.kind=mujoco needs a 1-D Box action space; {env_id} has "
                f"{self.num_actions} discrete actions"
            )
        self.action_shape = (self.num_actions,)


def make_mujoco(cfg: MujocoConfig, num_envs: int, seed: int, env_offset: int) -> MujocoBatch:
    """``env.kind=mujoco``: the MuJoCo id ``cfg.id``, vectorised as ``cfg.vectorization`` says."""
    import_mujoco()
    check_mujoco_id(cfg.id)
    return MujocoBatch.from_config(cfg, num_envs, seed, env_offset)
