"""Env backends and their registry: used by actors, the launcher, seedq-eval and seedq-bench.

Every backend meets one contract, :class:`EnvBatch` (``base.py``); :data:`BACKENDS` maps each
``env.kind`` to its module's factory (``registry.py``); :class:`EnvConfig` is the ``env``
config section (``config.py``). Optional packages (gymnasium, ale_py, gfootball) are imported
only when an env of their kind is built, and nothing here imports torch.
"""

from seedq.envs.base import BatchBase, EnvBatch, EnvError, StepBatch
from seedq.envs.config import EnvConfig, validate_env
from seedq.envs.registry import (
    BACKENDS,
    KINDS,
    EnvBackend,
    backend,
    env_spec,
    make_env_batch,
    rows_per_env,
)

__all__ = [
    "BACKENDS",
    "KINDS",
    "BatchBase",
    "EnvBackend",
    "EnvBatch",
    "EnvConfig",
    "EnvError",
    "StepBatch",
    "backend",
    "env_spec",
    "make_env_batch",
    "rows_per_env",
    "validate_env",
]
