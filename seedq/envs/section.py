"""The ``env`` section of a run's config: one family's keys, checked, refused or mapped.

``env.kind`` names the family and :data:`~seedq.envs.registry.BACKENDS` its config class. Here
the section is checked before any process starts (:func:`validate_env`), a key of another
family is refused with one line naming the family that has it (:func:`foreign_key`), a plain
mapping (an actor's ``--env-config``, ``seedq-eval``'s) becomes the family's dataclass
(:func:`env_config`), and the flat section that checkpoints held before the families had their
own configs is mapped onto the family's (:func:`saved_env_section`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from seedq.envs.base import EnvError
from seedq.envs.config import EnvConfig
from seedq.envs.registry import BACKENDS, KINDS
from seedq.schema import ConfigError, choice

# The flat section's keys and their defaults, as checkpoints saved them before each family had
# its own config. A saved key of another family that still holds this value was never chosen,
# so it is dropped; frozen here, so that a family's later defaults do not change the mapping.
FLAT_DEFAULTS: dict[str, Any] = {
    "frame_skip": 4,
    "frame_stack": 4,
    "screen_size": 84,
    "grayscale": True,
    "noop_max": 30,
    "episodic_life": False,
    "repeat_action_probability": 0.25,
    "full_action_space": False,
    "vectorization": "sync",
    "difficulty_ramping": True,
    "distribution_mode": "hard",
    "num_levels": 0,
    "start_level": 0,
    "scenario": "academy_empty_goal_close",
    "representation": "simple115v2",
    "rewards": "scoring",
    "controlled_players": 1,
    "obs_shape": [4],
    "obs_dtype": "float32",
    "num_actions": 2,
    "continuous_actions": False,
    "episode_length": 10,
    "truncate_episodes": False,
    "nan_every": 0,
    "num_threads": 0,
}
# Flat keys whose saved value the machine chose, not the run (sized at start when 0,
# seedq.launch.sizing): dropped from another family's section whatever they hold.
SIZED_AT_START = frozenset({"num_threads"})


def config_class(kind: str) -> type[EnvConfig]:
    """The config dataclass of ``env.kind=kind``'s family."""
    choice("env.kind", kind, KINDS)
    return BACKENDS[kind].config


def family_keys(kind: str) -> list[str]:
    """The keys of ``env.kind=kind``'s section, in their order."""
    return [f.name for f in dataclasses.fields(config_class(kind))]


def kind_of(config: type[EnvConfig]) -> str:
    """The kind whose family config is ``config`` (the base class is cartpole's)."""
    return next(kind for kind, b in BACKENDS.items() if b.config is config)


def families_with(key: str) -> list[str]:
    """The kinds whose section has ``key``."""
    return [kind for kind in KINDS if key in family_keys(kind)]


def foreign_key(key: str, kind: str) -> str | None:
    """The one-line refusal of ``env.<key>`` in a run of ``env=<kind>``, or None.

    None when the key is the family's, or no family's (a typo is Hydra's to report, with the
    keys it knows), or ``kind`` is not a registered kind.
    """
    if kind not in KINDS or key in family_keys(kind):
        return None
    owners = families_with(key)
    if not owners:
        return None
    return (
        f"env.{key} is a{'n' if owners[0][0] in 'aeiou' else ''} {' and '.join(owners)} key; "
        f"this run is env={kind} (its keys: seedq-train --keys env={kind})"
    )


def env_config(section: Mapping[str, Any]) -> EnvConfig:
    """The family dataclass of a plain ``env`` section (``kind`` picks the family), each value
    of the type its key holds (:func:`typed_value`).

    Raises:
        ConfigError: an unknown kind, a key the family does not have (naming its family), or a
            value of another type.
    """
    kind = section.get("kind", "cartpole")
    config = config_class(kind)
    for key in section:
        if key not in family_keys(kind):
            raise ConfigError(foreign_key(key, kind) or f"env.{key} is not an env key")
    return config(**{key: typed_value(config, key, value) for key, value in section.items()})


def _whole(value: Any) -> int | None:
    """``value`` as an int if it is a whole number (``1000.0`` too: YAML reads ``1e3``-style
    budgets as floats, as seedq-train takes them), else None; a bool is no number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return None


def typed_value(config: type[EnvConfig], key: str, value: Any) -> Any:
    """``value`` as ``env.<key>`` of ``config`` holds it: a bool only true or false, an int a
    whole number (a whole float becomes the int), a float any number, a string a string, a
    list its items' type, a mapping a mapping; None where the key may be null.

    A plain mapping (``seedq-eval``'s ``env.<key>=value``, an actor's ``--env-config``) gave
    the family's dataclass whatever it held: ``grayscale='flase'`` ran as true, ``frame_skip=
    'abc'`` ended in a TypeError of the range checks.

    Raises:
        ConfigError: naming the key, the value and the type the key takes.
    """
    kind = typing.get_type_hints(config)[key]
    args = typing.get_args(kind)
    nullable = typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args
    if nullable:
        if value is None:
            return None
        (kind,) = (arg for arg in args if arg is not type(None))
    origin = typing.get_origin(kind) or kind
    if origin is bool and isinstance(value, bool):
        return value
    if origin is int and (number := _whole(value)) is not None:
        return number
    if origin is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if origin is str and isinstance(value, str):
        return value
    if origin is list and isinstance(value, list | tuple):
        (item,) = typing.get_args(kind)
        items = [_whole(v) if item is int else v for v in value]
        if all(v is not None for v in items):
            return items
    if origin is dict and isinstance(value, Mapping):
        return dict(value)
    allowed = {
        bool: "true or false",
        int: "a whole number",
        float: "a number",
        str: "a string",
        list: "a list of whole numbers, e.g. [4]",
        dict: "a mapping",
    }[origin]
    null = " (or null)" if nullable else ""
    raise ConfigError(f"env.{key}={value!r} is not allowed; it takes {allowed}{null}")


def saved_env_section(section: Mapping[str, Any]) -> dict[str, Any]:
    """A saved ``env`` section mapped onto its family's keys.

    Checkpoints of a seedq before the env families saved every family's keys. A key of
    another family that holds the flat default (:data:`FLAT_DEFAULTS`), or that was sized at
    start (:data:`SIZED_AT_START`), is dropped; one set to anything else was ignored by that
    run, and is refused rather than silently lost.

    Raises:
        ConfigError: one line naming the key, its value and the family it belongs to.
    """
    kind = section.get("kind", "cartpole")
    if kind not in KINDS:
        raise ConfigError(f"its env.kind={kind!r} is not a kind of this seedq ({list(KINDS)})")
    own = family_keys(kind)
    mapped = {}
    for key, value in section.items():
        if key in own:
            mapped[key] = value
        elif key not in FLAT_DEFAULTS:
            raise ConfigError(f"its env section holds {key}={value!r}, which is no env key")
        elif value != FLAT_DEFAULTS[key] and key not in SIZED_AT_START:
            raise ConfigError(
                f"its env section sets {key}={value!r}, a {' and '.join(families_with(key))} "
                f"key, on an env.kind={kind} run (which ignored it); env={kind} has no such key"
            )
    return mapped


def validate_env(env: EnvConfig | Mapping[str, Any], actor: Any) -> None:
    """Check the ``env`` section (its family's dataclass, or a mapping of one) and the actor
    batch size.

    Raises:
        ConfigError: naming the bad key and what is allowed; the family's own checks included.
    """
    if not isinstance(env, EnvConfig):
        env = env_config(env)
    kind = env.kind
    config = config_class(kind)
    if type(env) is not config:
        raise ConfigError(
            f"env.kind={kind} comes with env={kind}, which brings that family's keys; this run "
            f"is env={kind_of(type(env))}"
        )
    try:
        env.check()
    except EnvError as exc:
        raise ConfigError(str(exc)) from None
    if not str(env.id).strip():
        # gymnasium's "Malformed environment ID" or an unknown id '' of the family, else.
        raise ConfigError(
            f"env.id is empty: give env={kind} the id of an env (seedq-train --keys env={kind} "
            "env.id says which it takes)"
        )
    rows = env.rows_per_env()
    if actor.envs_per_batch % rows:
        raise ConfigError(
            f"actor.envs_per_batch={actor.envs_per_batch} is not a multiple of "
            f"env.{env.rows_key}={rows}: each env.kind={kind} environment fills {rows} "
            f"rows of an actor batch; make actor.envs_per_batch a multiple of "
            f"env.{env.rows_key}"
        )
