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

import threading
from collections.abc import Callable
from dataclasses import dataclass

from seedq.envs import atari, catch, fake, football, gym, gym_ids, minatar, mujoco, procgen
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
        plays: ``plays(env_id)`` is true when this family plays ``env_id`` (it may raise
            EnvError for no); asked only for the refusal of an id given to another family
            (:func:`other_family_hint`). None: its ids are no one else's to name.
    """

    summary: str
    make: Callable[[EnvConfig, int, int, int], EnvBatch]
    config: type[EnvConfig] = EnvConfig
    gymnasium_id: bool = False
    plays: Callable[[str], object] | None = None


BACKENDS: dict[str, EnvBackend] = {
    "cartpole": EnvBackend(
        "gymnasium's native CartPole vector env", gym.make_cartpole, gymnasium_id=True
    ),
    "gym": EnvBackend(
        "any gymnasium id, vectorised in Python",
        gym.make_gym,
        gym.GymConfig,
        gymnasium_id=True,
        plays=lambda env_id: gymnasium_family(env_id) == "gym",
    ),
    "atari": EnvBackend(
        "ale_py's C++ AtariVectorEnv", atari.AtariBatch, atari.AtariConfig, plays=atari.atari_game
    ),
    "football": EnvBackend(
        "Google Research Football, one row per controlled player",
        football.FootballBatch,
        football.FootballConfig,
    ),
    "minatar": EnvBackend(
        "MinAtar's 10x10 Atari-like games, fast on a CPU",
        minatar.make_minatar,
        minatar.MinAtarConfig,
        plays=minatar.minatar_game,
    ),
    "procgen": EnvBackend(
        "OpenAI Procgen games through procgen's C++ vector env",
        procgen.make_procgen,
        procgen.ProcgenConfig,
        plays=procgen.procgen_game,
    ),
    "mujoco": EnvBackend(
        "gymnasium's MuJoCo tasks, continuous (Box) actions",
        mujoco.make_mujoco,
        mujoco.MujocoConfig,
        gymnasium_id=True,
        plays=lambda env_id: gymnasium_family(env_id) == "mujoco",
    ),
    "catch": EnvBackend(
        "bsuite's Catch as faint objects on a textured frame", catch.make_catch, catch.CatchConfig
    ),
    "fake": EnvBackend(
        "observations encode (env id, step) for tests", fake.make_fake, fake.FakeConfig
    ),
}
KINDS = tuple(BACKENDS)


def gymnasium_family(env_id: str) -> str | None:
    """``mujoco`` or ``gym`` for a gymnasium id of theirs; None for one another family plays
    (ale_py's, MinAtar's: env=gym plays them raw, their own family is theirs to name)."""
    entry = str(gym_ids.gym_spec(env_id).entry_point)
    if entry.startswith("gymnasium.envs.mujoco"):
        return "mujoco"
    return None if entry.startswith(("ale_py", "minatar")) else "gym"


_asking = threading.local()  # the families' own checks raise their unknown-id errors
# The families that name ids, the narrowest id space first: an id two of them play
# ('space_invaders': a MinAtar game and an ALE ROM) is named by the one it is likelier meant for.
ASKED_FIRST = ("minatar", "procgen", "atari", "gym", "mujoco")
assert set(ASKED_FIRST) == {k for k, b in BACKENDS.items() if b.plays is not None}


def other_family_hint(env_id: str, kind: str) -> str:
    """`` '...' is an id of env=minatar: env=minatar env.id=... runs it.`` where a family other
    than ``kind`` plays ``env_id`` (its backend's ``plays``), for ``env=<kind>``'s unknown-id
    error; "" else. A gymnasium family's unknown id is no other gymnasium family's."""
    if getattr(_asking, "now", False):
        return ""
    _asking.now = True
    try:
        gymnasium = BACKENDS[kind].gymnasium_id if kind in BACKENDS else False
        for other in ASKED_FIRST:
            backend_ = BACKENDS[other]
            if other == kind or backend_.plays is None or (gymnasium and backend_.gymnasium_id):
                continue
            try:
                if backend_.plays(env_id):
                    runs = f"env={other} env.id={env_id} runs it"
                    return f" {env_id!r} is an id of env={other}: {runs}."
            except EnvError:
                continue
        return ""
    finally:
        _asking.now = False


install_family_hint(other_family_hint)


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
