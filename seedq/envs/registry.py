"""The env kinds seedq can build: ``env.kind`` name -> (backend, config of its family).

Adding a kind is one module in ``seedq/envs/`` (an :class:`~seedq.envs.base.EnvBatch`, a
factory and, if the kind has keys of its own, a config dataclass subclassing
:class:`~seedq.envs.config.EnvConfig`) plus one line in :data:`BACKENDS`; config validation, the
``env`` Hydra group (a ``conf/env/<kind>.yaml`` naming ``env_<kind>_schema``), ``seedq-train``,
``seedq-eval`` and ``seedq-bench`` pick it up from here. The backend modules import their
optional packages (gymnasium, ale_py, gfootball, minatar, procgen, mujoco) only when an env is
built, so importing this module stays cheap for actor processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from seedq.envs import atari, catch, fake, families, football, gym, minatar, mujoco, procgen
from seedq.envs.base import EnvBatch, EnvError, env_spec_of, install_family_hint
from seedq.envs.config import EnvConfig
from seedq.messages import EnvSpec


@dataclass(frozen=True)
class EnvBackend:
    """How to build one env kind, and the config of its family.

    Attributes:
        summary: one line for ``env.kind``'s help text.
        make: ``make(cfg, num_envs, seed, env_offset)`` builds the batch (see
            :func:`make_env_batch`).
        config: the family's config dataclass (the ``env`` section of a run of this kind):
            :class:`EnvConfig` or a subclass holding the family's own keys, their help and
            their checks (``check``, ``rows_per_env``).
        gymnasium_id: ``env.id`` is a gymnasium id that ``gymnasium.make`` builds as training
            steps it (no preprocessing of seedq's own): ``seedq-eval`` plays it so, and a loaded
            policy maps its actions into that env's action space. Otherwise seedq's own env
            batch is the env.
    """

    summary: str
    make: Callable[[EnvConfig, int, int, int], EnvBatch]
    config: type[EnvConfig] = EnvConfig
    gymnasium_id: bool = False


BACKENDS: dict[str, EnvBackend] = {
    "cartpole": EnvBackend(
        "gymnasium's native CartPole vector env", gym.make_cartpole, gymnasium_id=True
    ),
    "gym": EnvBackend(
        "any gymnasium id, vectorised in Python", gym.make_gym, gym.GymConfig, gymnasium_id=True
    ),
    "atari": EnvBackend("ale_py's C++ AtariVectorEnv", atari.AtariBatch, atari.AtariConfig),
    "football": EnvBackend(
        "Google Research Football, one row per controlled player",
        football.FootballBatch,
        football.FootballConfig,
    ),
    "minatar": EnvBackend(
        "MinAtar's 10x10 Atari-like games, fast on a CPU",
        minatar.make_minatar,
        minatar.MinAtarConfig,
    ),
    "procgen": EnvBackend(
        "OpenAI Procgen games through procgen's C++ vector env",
        procgen.make_procgen,
        procgen.ProcgenConfig,
    ),
    "mujoco": EnvBackend(
        "gymnasium's MuJoCo tasks, continuous (Box) actions",
        mujoco.make_mujoco,
        mujoco.MujocoConfig,
        gymnasium_id=True,
    ),
    "catch": EnvBackend(
        "bsuite's Catch as faint objects on a textured frame", catch.make_catch, catch.CatchConfig
    ),
    "fake": EnvBackend(
        "observations encode (env id, step) for tests", fake.make_fake, fake.FakeConfig
    ),
}
KINDS = tuple(BACKENDS)
install_family_hint(families.other_family_hint)


def backend(kind: str) -> EnvBackend:
    """The backend of ``env.kind=kind``, or an EnvError listing the kinds."""
    try:
        return BACKENDS[kind]
    except KeyError:
        raise EnvError(f"env.kind={kind!r} is not allowed; choose one of {list(KINDS)}") from None


def rows_per_env(cfg: EnvConfig) -> int:
    """Rows of an :class:`EnvBatch` that one environment of ``cfg`` fills (its family's
    ``rows_per_env``: football's controlled players, 1 for the others). A batch of this kind
    holds a multiple of it."""
    return cfg.rows_per_env()


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
