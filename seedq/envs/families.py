"""Which env family an ``env.id`` belongs to, for the refusal of an id given to another
family (``env=atari env.id=MinAtar/Breakout-v1``): each family's unknown-id error names the
family that has it, and the command that runs it."""

from __future__ import annotations

import threading

from seedq.envs.base import EnvError

_asking = threading.local()  # the families' own checks raise these errors: no hint inside


def _is_minatar(env_id: str) -> bool:
    from seedq.envs.minatar import minatar_game

    minatar_game(env_id)
    return True


def _is_procgen(env_id: str) -> bool:
    from seedq.envs.procgen import procgen_game

    procgen_game(env_id)
    return True


def _is_atari(env_id: str) -> bool:
    from seedq.envs.atari import _atari_game

    _atari_game(env_id)
    return True


def _gym_kind(env_id: str) -> str | None:
    from seedq.envs.gym_ids import gym_spec

    entry = gym_spec(env_id).entry_point
    if isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco"):
        return "mujoco"
    if isinstance(entry, str) and entry.startswith(("ale_py", "minatar")):
        return None  # env=gym plays them raw; their own family is named above
    return "gym"


def family_of(env_id: str, *, not_kind: str) -> str | None:
    """The env family (``env=<kind>``) other than ``not_kind`` that plays ``env_id``; None if
    none does."""
    checks = [
        ("minatar", _is_minatar),
        ("procgen", _is_procgen),
        ("atari", _is_atari),
    ]
    for kind, check in checks:
        if kind == not_kind:
            continue
        try:
            if check(env_id):
                return kind
        except EnvError:
            continue
    if not_kind in ("gym", "mujoco", "cartpole"):
        return None  # gymnasium's registry is theirs: an id not in it is nobody's
    try:
        return _gym_kind(env_id)
    except EnvError:
        return None


def other_family_hint(env_id: str, kind: str) -> str:
    """`` It is a MinAtar game: env=minatar env.id=...`` where another family plays
    ``env_id``, for the unknown-id error of ``env=<kind>``; "" else."""
    if getattr(_asking, "now", False):
        return ""
    _asking.now = True
    try:
        other = family_of(env_id, not_kind=kind)
    finally:
        _asking.now = False
    if other is None:
        return ""
    return f" {env_id!r} is an id of env={other}: env={other} env.id={env_id} runs it."
