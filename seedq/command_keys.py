"""``seedq-train``'s command-line keys, checked before Hydra composes anything: a key of
another env family, algorithm or arch, a misspelt key (with the keys it may mean), a choice a
config group does not have, a number for a switch; whole numbers written as floats; and
``seedq-train --keys``, which lists them. Each check returns the refusal in one line, or None.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import sys
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from seedq.config import schema_for
from seedq.envs.section import foreign_key
from seedq.exit_status import EXIT_REFUSED
from seedq.schema import FLOAT_NOTATION

AUTO = "auto"  # resume=auto: the newest checkpoint of the run dir


def print_keys(argv: list[str]) -> None:
    """``seedq-train --keys [algorithm] [env=<kind>] [prefix]``: every config key of that
    algorithm and env family, its default and help."""
    from seedq.agents.registry import agent_names
    from seedq.envs.registry import BACKENDS
    from seedq.schema import describe

    algorithm = next((a for a in argv if a in agent_names()), "vtrace")
    kinds = [a.removeprefix("env=") for a in argv if a.startswith("env=")]
    kind = kinds[-1] if kinds else default_env()
    if kind not in BACKENDS:
        print(f"seedq-train --keys: env={kind} is not a kind; choose one of {list(BACKENDS)}")
        sys.exit(EXIT_REFUSED)
    prefixes = [a for a in argv if a not in agent_names() and not a.startswith("env=")]
    print(f"seedq-train keys (defaults of the dataclasses, algorithm={algorithm}, env={kind}; the")
    print(
        "env, hardware and tuning YAML groups may set others: seedq-train --cfg job shows a run's)"
    )
    print("env=<kind>, each with keys of its own: " + ", ".join(BACKENDS))
    shown = 0
    for doc in describe(schema_for(algorithm, kind)):
        if prefixes and not any(doc.key.startswith(p) for p in prefixes):
            continue
        print(f"  {doc.key} = {doc.default!r}\n      {doc.help}")
        shown += 1
    if not shown:
        print(
            f"seedq-train --keys: no key of algorithm={algorithm}, env={kind} starts with "
            f"{' or '.join(prefixes)} (algorithms: {', '.join(agent_names())})",
            file=sys.stderr,
        )
        sys.exit(EXIT_REFUSED)


def default_choice(group: str) -> str:
    """The ``group``'s choice in ``conf/config.yaml``'s defaults list (``env``, ``algorithm``)."""
    from pathlib import Path

    defaults = OmegaConf.load(Path(__file__).parent / "conf" / "config.yaml").defaults
    return next(str(d[group]) for d in defaults if isinstance(d, DictConfig) and group in d)


def default_env() -> str:
    """The ``env`` group's choice in ``conf/config.yaml``'s defaults list."""
    return default_choice("env")


def parsed_overrides(argv: list[str]) -> list[Any]:
    """The ``key=value`` overrides of a command line, parsed as Hydra parses them (options and
    overrides Hydra cannot parse are left out: Hydra reports those)."""
    parser = OverridesParser.create()
    parsed = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        with contextlib.suppress(HydraException):
            parsed.append(parser.parse_override(arg))
    return parsed


def group_overrides(argv: list[str], group: str) -> tuple[list[str], list[str]]:
    """The choices of ``group=`` on the command line (every one of a sweep) and the keys its
    ``group.<key>=`` overrides name. With no choice the default's, unless ``resume=<run>``
    continues a run, whose saved choice is not known here (none: nothing to check)."""
    choices, keys, resumed = [], [], False
    for override in parsed_overrides(argv):
        key = override.key_or_group
        if key == "resume":
            resumed = str(override.value()) not in (AUTO, "null", "None", "")
        elif key == group and override.package is None:
            sweep = override.is_sweep_override()
            choices += list(override.sweep_string_iterator()) if sweep else [override.value()]
        elif key.startswith(f"{group}."):
            keys.append(key.split(".")[1])
    if not choices and not resumed:
        choices = [default_choice(group)]
    return [str(c) for c in choices], keys


def foreign_env_key(argv: list[str]) -> str | None:
    """The refusal of the first ``env.<key>=`` on the command line that belongs to another env
    family than the one ``env=<kind>`` (or the default) chooses; None if there is none.

    Checked before Hydra composes (which would refuse the key too, but with a trace of its own
    and exit 1); every kind of a sweep (``-m env=atari,minatar``) must have the key.
    """
    kinds, keys = group_overrides(argv, "env")
    return next((r for kind in kinds for key in keys if (r := foreign_key(key, kind))), None)


def foreign_algorithm_key(argv: list[str]) -> str | None:
    """The refusal of the first ``algorithm.<key>=`` that belongs to another algorithm than the
    one ``algorithm=<name>`` (or the default) chooses; None if there is none (a key no
    algorithm has is a typo, Hydra's to report with the keys it knows)."""

    from seedq.agents.registry import agent_names, config_class

    names, keys = group_overrides(argv, "algorithm")
    fields = {n: {f.name for f in dataclasses.fields(config_class(n))} for n in agent_names()}
    for name in names:
        for key in keys:
            owners = [n for n in agent_names() if key in fields[n]]
            if name in fields and key not in fields[name] and owners:
                return (
                    f"algorithm.{key} is a key of algorithm={' and '.join(owners)}; this run is "
                    f"algorithm={name} (its keys: seedq-train --keys {name})"
                )
    return None


# Keys an architecture never reads, and what stands for them there (None: nothing does).
# arch.<option>.* belongs to that option alone; see arch_ignores.
ARCH_IGNORES: dict[str, dict[str, str | None]] = {
    "sebulba": {
        "actor.num_actors": "arch.sebulba.threads",
        "actor.batches_per_actor": "arch.sebulba.threads",
        "actor.envs_per_batch": "arch.sebulba.envs_per_thread",
        "broker.max_batch": "arch.sebulba.threads x arch.sebulba.envs_per_thread",
        "broker": None,  # no sockets: the env threads hand their batches to inference
        **dict.fromkeys(
            f"actor.{key}"
            for key in (
                "transport",
                "max_restarts",
                "restart_window_s",
                "restart_backoff_s",
                "reply_timeout_s",
                "learner_lost_s",
            )
        ),
    },
    "anakin": {"actor": "arch.anakin.num_envs", "broker": None},
}


def arch_ignores(arch: str, key: str) -> tuple[str, str | None] | None:
    """``(what it belongs to, what ``arch`` reads instead)`` when ``arch`` would ignore the
    config key ``key``; None when it reads it."""
    section, _, rest = key.partition(".")
    if section == "arch" and (option := rest.partition(".")[0]) in ("sebulba", "anakin"):
        return (f"arch={option}", None) if option != arch else None
    for prefix, instead in ARCH_IGNORES.get(arch, {}).items():
        if key == prefix or key.startswith(f"{prefix}."):
            owner = "arch=seed" if section == "broker" else "arch=seed (actor processes)"
            return owner, instead
    return None


def foreign_arch_key(argv: list[str]) -> str | None:
    """The refusal of the first key on the command line that the chosen architecture (every
    one of a sweep) never reads: another option's ``arch.<option>.*``, actor process and broker
    keys under ``arch=anakin``, the actor layout under ``arch=sebulba`` (its threads stand for
    it); None if there is none. A resumed run's arch is not known here: not checked."""
    arches, _ = group_overrides(argv, "arch")
    keys = [
        o.key_or_group
        for o in parsed_overrides(argv)
        if "." in o.key_or_group and o.package is None
    ]
    for arch in arches:
        for key in keys:
            if ignored := arch_ignores(arch, key):
                owner, instead = ignored
                there = f"; its counterpart here is {instead}" if instead else ""
                return (
                    f"{key} is read by {owner} only; this run is arch={arch}, which would "
                    f"ignore it{there} (drop the key, or choose the arch that reads it)"
                )
    return None


def misspelt_key(argv: list[str]) -> str | None:
    """The refusal of the first plain ``key=value`` that names no config key of the run (its
    algorithm and env family; any of them when ``resume=<run>`` hides which), with the keys
    nearest it by spelling or, failing that, the keys whose help names its words
    (``algorithm.discount``: ``algorithm.gamma``, the discount factor); None when every key is
    known. ``+key=``, ``++key=``, ``~key`` and Hydra's own keys are not checked.
    """
    import difflib

    from hydra.core.override_parser.types import OverrideType

    from seedq.agents.registry import agent_names
    from seedq.envs.registry import BACKENDS
    from seedq.schema import describe

    named = [
        o.key_or_group
        for o in parsed_overrides(argv)
        if o.type == OverrideType.CHANGE
        and not o.key_or_group.startswith("hydra")
        and "/" not in o.key_or_group
    ]
    groups = {p.name for p in (Path(__file__).parent / "conf").iterdir() if p.is_dir()}
    named = [k for k in named if k not in groups]
    if not named:
        return None
    chosen_algorithms = group_overrides(argv, "algorithm")[0]
    chosen_kinds = group_overrides(argv, "env")[0]
    algorithms = chosen_algorithms or agent_names()
    kinds = chosen_kinds or list(BACKENDS)
    pairs = [(a, k) for a in algorithms if a in agent_names() for k in kinds if k in BACKENDS]
    helps = {d.key: d.help for a, k in pairs for d in describe(schema_for(a, k))}
    keys = sorted(helps)
    for key in named:
        if key in keys or any(k.startswith(f"{key}.") or key.startswith(f"{k}.") for k in keys):
            continue
        section, _, name = key.rpartition(".")
        prefix = f"{section}." if section else ""
        names = [k.removeprefix(prefix) for k in keys if k.startswith(prefix)]
        names = [n for n in names if "." not in n]
        close = [prefix + n for n in difflib.get_close_matches(name, names, n=3, cutoff=0.6)]
        if not names:  # a misspelt section: algoritm.lr
            close = difflib.get_close_matches(key, keys, n=3, cutoff=0.8)
        close = close or described_as(name, {prefix + n: helps[prefix + n] for n in names})
        where = {
            "algorithm": f" of algorithm={' or '.join(chosen_algorithms)}"
            if chosen_algorithms
            else " of any algorithm",
            "env": f" of env={' or '.join(chosen_kinds)}" if chosen_kinds else " of any env family",
        }.get(key.split(".")[0] if "." in key else "", "")
        lists = (
            f"seedq-train --keys {algorithms[0]} env={kinds[0]}"
            if len(pairs) == 1
            else "seedq-train --keys ALGORITHM env=KIND"
        )
        guess = f"; did you mean {' or '.join(close)}?" if close else ""
        return f"{key} is not a key{where}{guess} (every key: {lists})"
    return None


def entry_without_plus(argv: list[str]) -> str | None:
    """The refusal of a new entry of a mapping key written without ``+``
    (``env.kwargs.map_name=8x8``): Hydra's answer was "Key 'map_name' is not in struct" and
    its config's types, which do not say to write ``+env.kwargs.map_name=8x8``."""
    from hydra.core.override_parser.types import OverrideType

    changes = [
        o
        for o in parsed_overrides(argv)
        if o.type == OverrideType.CHANGE
        and o.key_or_group.count(".") >= 2  # section.mapping.entry at the least
        and "/" not in o.key_or_group
    ]
    for override in changes:
        key = override.key_or_group
        for mapping, default in mapping_keys().items():
            entry = key.removeprefix(f"{mapping}.").split(".")[0]
            if key.startswith(f"{mapping}.") and entry not in default:
                return (
                    f"{key}: {mapping} is a mapping with no entry {entry!r}; Hydra adds one "
                    f"with +: +{override.input_line}"
                )
    return None


@functools.cache
def mapping_keys() -> dict[str, dict]:
    """The keys that hold a mapping (``env.kwargs``, ``launcher.env``) in any algorithm's
    config on any env family, with their defaults."""
    from seedq.agents.registry import agent_names
    from seedq.envs.registry import BACKENDS
    from seedq.schema import describe

    return {
        d.key: d.default
        for a in agent_names()
        for k in BACKENDS
        for d in describe(schema_for(a, k))
        if isinstance(d.default, dict)
    }


def described_as(name: str, helps: dict[str, str]) -> list[str]:
    """Up to three keys whose help has every word of ``name`` (split at ``_``, words of three
    letters or more): what a user who knows the idea but not seedq's name for it meant
    (``discount``: the key whose help says "discount factor"). Those whose help has the words
    side by side come first, the nearer its start and the shorter the help the sooner."""
    words = [w for w in name.lower().split("_") if len(w) >= 3]
    if not words:
        return []
    found = [
        k
        for k, h in helps.items()
        if all(re.search(rf"\b{re.escape(w)}\b", h.lower()) for w in words)
    ]
    phrase = " ".join(words)

    def rank(key: str) -> tuple[bool, int, int, str]:
        text = helps[key].lower().replace("-", " ")
        at = text.find(phrase)
        return (at < 0, at if at >= 0 else len(text), len(text), key)

    return sorted(found, key=rank)[:3]


@functools.cache
def typed_keys(kind: str) -> frozenset[str]:
    """The keys that hold an int (``kind="whole"``) or a bool (``"switch"``) in any
    algorithm's config on any env family."""
    from seedq.agents.registry import agent_names
    from seedq.envs.registry import BACKENDS
    from seedq.schema import describe

    return frozenset(
        d.key
        for a in agent_names()
        for k in BACKENDS
        for d in describe(schema_for(a, k))
        if getattr(d, kind)
    )


# A number: OmegaConf reads any int as a bool (2 and -1 as true), where a count or a size was
# likely meant for another key.
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def number_for_switch(argv: list[str]) -> str | None:
    """The refusal of a bool key given a number other than 0 or 1 (each value of a sweep);
    None if there is none. OmegaConf takes ``env.full_action_space=2`` as true."""
    for arg in argv:
        key, eq, value = arg.partition("=")
        name = key.lstrip("+")
        if not eq or name not in typed_keys("switch"):
            continue
        for part in value.split(","):
            if NUMBER.fullmatch(part.strip()) and part.strip() not in ("0", "1"):
                return f"{name}={part.strip()}: it takes true or false"
    return None


def whole_numbers(argv: list[str]) -> list[str]:
    """The command line with each int key given a whole number in a float's notation
    (``total_env_steps=1e7``, ``algorithm.replay_capacity=2.5e5``, ``1000.0``, each value of a
    sweep ``-m total_env_steps=1e6,2e6``) written as the int it is, as budgets are written in
    papers and other tools; OmegaConf refuses any float for an int. A value that is not a whole
    number, and every other argument, is left as it was for Hydra to judge."""
    from decimal import Decimal

    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        name = key.lstrip("+")
        parts = value.split(",")
        if eq and name in typed_keys("whole") and all(FLOAT_NOTATION.fullmatch(p) for p in parts):
            numbers = [Decimal(p) for p in parts]
            if all(n == n.to_integral_value() for n in numbers):
                arg = f"{key}={','.join(str(int(n)) for n in numbers)}"
        out.append(arg)
    return out


# The config groups a run chooses one option of, each checked before anything else reads it.
CHOICE_GROUPS = ("algorithm", "env", "arch", "hardware", "launcher")


def group_options(group: str) -> list[str]:
    """The options of a config group: the algorithms seedq registers, or the group's files in
    ``conf/<group>/``."""
    if group == "algorithm":
        from seedq.agents.registry import agent_names

        return sorted(agent_names())
    return sorted(p.stem for p in (Path(__file__).parent / "conf" / group).glob("*.yaml"))


def unknown_choice(argv: list[str]) -> str | None:
    """The refusal of the first ``group=<option>`` (every option of a sweep) that names no
    option of the group, with the options nearest it by spelling and all of them; None if
    there is none. Other checks read the choices (``algorithm=foo`` would otherwise be
    reported as a key named ``algorithm``). ``group=null``, of these groups and of ``logger``,
    is refused too: Hydra's answer is a traceback, or a key reported missing. Not checked when
    the command line adds config directories (``--config-dir``, ``hydra.searchpath``), whose
    options are Hydra's to find."""
    import difflib

    from hydra.core.override_parser.types import OverrideType

    if any(
        a in ("-cd", "--config-dir") or a.startswith(("--config-dir=", "hydra.searchpath"))
        for a in argv
    ):
        return None
    for override in parsed_overrides(argv):
        group = override.key_or_group
        if group not in (*CHOICE_GROUPS, "logger") or override.package is not None:
            continue
        options = group_options(group)
        value = override.value()
        nulls = value is None or (isinstance(value, list) and None in value)
        if nulls and override.type != OverrideType.DEL:  # ~group is Hydra's to judge
            if group == "logger":
                return (
                    f"logger=null names no tracker; write 'logger=[]' for metrics.csv alone, "
                    f"or choose one or more of {', '.join(options)}"
                )
            return (
                f"{group}=null chooses no {group}; the run needs one: choose one of "
                f"{', '.join(options)} (or leave {group}= out for the default)"
            )
        if group == "logger":
            continue
        sweep = override.is_sweep_override()
        choices = list(override.sweep_string_iterator()) if sweep else [value]
        for choice in choices:
            if not isinstance(choice, str) or choice in options:
                continue
            close = difflib.get_close_matches(choice, options, n=2, cutoff=0.6)
            guess = f"; did you mean {' or '.join(f'{group}={c}' for c in close)}?" if close else ""
            every = ", ".join(options)
            return f"{group}={choice} is not an option of {group}{guess} (choose one of {every})"
    return None


def key_refusal(argv: list[str]) -> str | None:
    """The refusal of the first choice or key on the command line that the run does not have:
    an option no group has, another env family's or algorithm's key, or a misspelt one; None if
    there is none. seedq-train and seedq-bench check it before Hydra composes."""
    return (
        unknown_choice(argv)
        or foreign_env_key(argv)
        or foreign_algorithm_key(argv)
        or misspelt_key(argv)
        or entry_without_plus(argv)
        or foreign_arch_key(argv)
        or number_for_switch(argv)
    )


# Hydra launchers seedq's extras install, by the name of their option in hydra/launcher.
LAUNCHER_PLUGINS = {
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
}


def missing_launcher(argv: list[str]) -> str | None:
    """The refusal of a ``hydra/launcher=`` whose plugin an extra of seedq installs but this
    environment lacks; None if there is none. Hydra's own answer lists the launchers it has,
    not how to get the one named."""
    import importlib.util

    for arg in argv:
        key, _, option = arg.partition("=")
        if key.lstrip("+") != "hydra/launcher" or option not in LAUNCHER_PLUGINS:
            continue
        module, extra = LAUNCHER_PLUGINS[option]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # no hydra_plugins package at all
            found = False
        if not found:
            return (
                f"hydra/launcher={option} needs Hydra's submitit launcher, which is not "
                f"installed: pip install 'seedq[{extra}]'"
            )
    return None
