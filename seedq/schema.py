"""Building blocks of the typed config: documented fields, ``ConfigError`` and range checks.

Each config section is a dataclass that lives with the code it configures (``seedq.envs.config``,
``seedq.agents.vtrace.config``, ...); ``seedq.config`` only composes them. Every field is made
with :func:`setting`, so it has exactly one default and a help text that ``seedq-train --keys``
and the README's key table show.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the key and what is allowed."""


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Callable | None = None,
    network: bool = False,
):
    """A dataclass field with its one default and a help text (``metadata["help"]``);
    ``network``: the key shapes the network, so a checkpoint fits only its own value."""
    if not help:
        raise ValueError("every setting needs a help text")
    metadata = {"help": help, "network": network}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def network_keys(config: type) -> tuple[str, ...]:
    """The fields of a config dataclass declared with ``setting(..., network=True)``."""
    return tuple(f.name for f in dataclasses.fields(config) if f.metadata.get("network"))


# A number in a float's notation: 1e7, 2.5e6, 1000.0 (sign allowed); the command lines read a
# whole one as the int it is for an int key.
FLOAT_NOTATION = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(?=[eE]))([eE][+-]?\d+)?")


@dataclass(frozen=True)
class KeyDoc:
    key: str
    default: Any
    help: str
    whole: bool = False  # the key holds an int (int or int | None), whatever its default
    switch: bool = False  # the key holds a bool (bool or bool | None)


def describe(schema: Any, prefix: str = "") -> Iterator[KeyDoc]:
    """Every leaf key of a config dataclass (type or instance), with its default and help."""
    instance = schema() if isinstance(schema, type) else schema
    try:
        hints = typing.get_type_hints(type(instance))
    except (NameError, TypeError):  # an annotation that does not resolve: judged by default
        hints = {}
    for f in dataclasses.fields(instance):
        value = getattr(instance, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from describe(value, key + ".")
        else:
            hint = hints.get(f.name)
            whole = hint is int or (
                typing.get_origin(hint) in (typing.Union, types.UnionType)
                and int in typing.get_args(hint)
                and not {float, str} & set(typing.get_args(hint))
            )
            switch = hint is bool or (
                typing.get_origin(hint) in (typing.Union, types.UnionType)
                and set(typing.get_args(hint)) == {bool, type(None)}
            )
            if hint is None:
                whole = isinstance(value, int) and not isinstance(value, bool)
                switch = isinstance(value, bool)
            yield KeyDoc(key, value, f.metadata.get("help", ""), whole, switch)


def choice(key: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of {list(allowed)}")


def positive(key: str, value: float, *, zero_ok: bool = False) -> None:
    # inf passes a bare range check and nan fails none: a learning rate of inf makes NaN
    # weights, an Adam epsilon of inf weights that never move. No key means anything by them.
    bound = ">= 0" if zero_ok else "> 0"
    if not math.isfinite(value):
        raise ConfigError(f"{key}={value!r} is out of range; it must be a finite number {bound}")
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{key}={value!r} is out of range; it must be {bound}")


def finite(key: str, value: float) -> None:
    """Refuse inf and nan for a key that takes any real number."""
    if not math.isfinite(value):
        raise ConfigError(f"{key}={value!r} is out of range; it must be a finite number")


def in_unit_interval(key: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}={value!r} is out of range; it must be in [0, 1]")


def section_type(section: Any) -> type:
    """The dataclass a config section is (an instance, or a DictConfig typed by one): which
    option of a Hydra group composed it, where each option types its section."""
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.get_type(section) if isinstance(section, DictConfig) else type(section)


def check_positive(section: Any, prefix: str, names: Sequence[str], *, zero_ok: bool = False):
    """:func:`positive` for several fields of one section, named ``prefix.field``."""
    for name in names:
        positive(f"{prefix}.{name}", getattr(section, name), zero_ok=zero_ok)


def override(key: str, value: str) -> str:
    """``key=value`` as Hydra's override grammar reads back ``value`` whole: quoted, so that a
    path holding a comma, a space, brackets or a quote is not taken for a list, a sweep or a
    syntax error (a backslash before a quote or at the end is doubled, a quote escaped)."""
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    return f"{key}='" + re.sub(r"(\\+)$", r"\1\1", escaped) + "'"
