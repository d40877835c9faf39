"""Env backends and their registry: used by actors, the launcher, seedq-eval and seedq-bench.

Every backend meets one contract, :class:`EnvBatch` (``base.py``); :data:`BACKENDS` maps each
``env.kind`` to its module's factory and its family's config (``registry.py``); the keys every
family shares are :class:`EnvConfig` (``config.py``), each family's own keys a subclass beside
its backend (``AtariConfig`` in ``atari.py``, ...); ``section.py`` checks, refuses and maps the
``env`` section. Optional packages (gymnasium, ale_py, gfootball) are imported only when an env
of their kind is built, and nothing here imports torch.
"""

from seedq.envs.atari import AtariConfig
from seedq.envs.base import BatchBase, EnvBatch, EnvError, StepBatch
from seedq.envs.catch import CatchConfig
from seedq.envs.config import EnvConfig
from seedq.envs.fake import FakeConfig
from seedq.envs.football import FootballConfig
from seedq.envs.gym import GymConfig
from seedq.envs.minatar import MinAtarConfig
from seedq.envs.mujoco import MujocoConfig
from seedq.envs.procgen import ProcgenConfig
from seedq.envs.registry import (
    BACKENDS,
    KINDS,
    EnvBackend,
    backend,
    env_spec,
    make_env_batch,
    rows_per_env,
)
from seedq.envs.section import (
    config_class,
    env_config,
    family_keys,
    foreign_key,
    saved_env_section,
    validate_env,
)

__all__ = [
    "BACKENDS",
    "KINDS",
    "AtariConfig",
    "BatchBase",
    "CatchConfig",
    "EnvBackend",
    "EnvBatch",
    "EnvConfig",
    "EnvError",
    "FakeConfig",
    "FootballConfig",
    "GymConfig",
    "MinAtarConfig",
    "MujocoConfig",
    "ProcgenConfig",
    "StepBatch",
    "backend",
    "config_class",
    "env_config",
    "env_spec",
    "family_keys",
    "foreign_key",
    "make_env_batch",
    "rows_per_env",
    "saved_env_section",
    "validate_env",
]
