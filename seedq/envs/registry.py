"""The env kinds seedq can build: ``env.kind`` name -> backend.

Adding a kind is one module in ``seedq/envs/`` (an :class:`~seedq.envs.base.EnvBatch` and a
factory) plus one line in :data:`BACKENDS`; config validation, ``seedq-train``, ``seedq-eval``
and ``seedq-bench`` pick it up from here. The backend modules import their optional packages
(gymnasium, ale_py, gfootball, minatar, procgen, mujoco) only when an env is built, so importing
this module stays cheap for actor processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from seedq.envs import atari, catch, fake, football, gym, minatar, mujoco, procgen
from seedq.envs.base import EnvBatch, EnvError, env_spec_of
from seedq.messages import EnvSpec

if TYPE_CHECKING:
    from seedq.envs.config import EnvConfig


def _one_row(cfg: EnvConfig) -> int:
    return 1


@dataclass(frozen=True)
class EnvBackend:
    """How to build one env kind.

    Attributes:
        summary: one line for ``env.kind``'s help text.
        make: ``make(cfg, num_envs, seed, env_offset)`` builds the batch (see
            :func:`make_env_batch`).
        rows_per_env: rows of a batch that one environment fills (1 unless one env acts for
            several agents).
        rows_key: the ``env`` key that sets ``rows_per_env``, named when ``actor.envs_per_batch``
            is not a multiple of it.
        check: raises an :class:`EnvError` naming the key for values this backend cannot
            take; run by config validation before any process starts. ``None``: no checks.
    """

    summary: str
    make: Callable[[EnvConfig, int, int, int], EnvBatch]
    rows_per_env: Callable[[EnvConfig], int] = _one_row
    rows_key: str = ""
    check: Callable[[EnvConfig], None] | None = None


BACKENDS: dict[str, EnvBackend] = {
    "cartpole": EnvBackend("gymnasium's native CartPole vector env", gym.make_cartpole),
    "gym": EnvBackend("any gymnasium id, vectorised in Python", gym.make_gym),
    "atari": EnvBackend("ale_py's C++ AtariVectorEnv", atari.AtariBatch),
    "football": EnvBackend(
        "Google Research Football, one row per controlled player",
        football.FootballBatch,
        football.football_rows_per_env,
        "controlled_players",
        football.check_football_config,
    ),
    "minatar": EnvBackend(
        "MinAtar's 10x10 Atari-like games, fast on a CPU",
        minatar.make_minatar,
        check=minatar.check_minatar_config,
    ),
    "procgen": EnvBackend(
        "OpenAI Procgen games through procgen's C++ vector env",
        procgen.make_procgen,
        check=procgen.check_procgen_config,
    ),
    "mujoco": EnvBackend("gymnasium's MuJoCo tasks, continuous (Box) actions", mujoco.make_mujoco),
    "catch": EnvBackend("bsuite's Catch as faint objects on a textured frame", catch.make_catch),
    "fake": EnvBackend("observations encode (env id, step) for tests", fake.make_fake),
}
KINDS = tuple(BACKENDS)


def backend(kind: str) -> EnvBackend:
    """The backend of ``env.kind=kind``, or an EnvError listing the kinds."""
    try:
        return BACKENDS[kind]
    except KeyError:
        raise EnvError(f"env.kind={kind!r} is not allowed; choose one of {list(KINDS)}") from None


def rows_per_env(cfg: EnvConfig) -> int:
    """Rows of an :class:`EnvBatch` that one environment of ``cfg`` fills.

    ``env.controlled_players`` for football (one row per controlled player of a game), 1 for
    the other kinds. A batch of this kind holds a multiple of it.
    """
    return backend(cfg.kind).rows_per_env(cfg)


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
    return backend(cfg.kind).make(cfg, num_envs, seed, env_offset)


def env_spec(cfg: EnvConfig, seed: int = 0) -> EnvSpec:
    """Observation shape, dtype and action count of ``cfg``'s envs.

    Builds one environment (its :func:`rows_per_env` rows) and closes it, so it fails fast on a
    bad id, a missing package or ROM, exactly as the actors would.
    """
    env = make_env_batch(cfg, rows_per_env(cfg), seed=seed)
    try:
        return env_spec_of(env)
    finally:
        env.close()
