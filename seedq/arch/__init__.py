"""The architectures of a run, one Hydra group ``arch``: which class runs it.

Each entry names its run class by import path, so choosing one imports only what it needs;
every run class takes ``(cfg, run_dir, *, resume=None)`` and its ``run()`` returns a
:class:`~seedq.arch.monitor.RunSummary`. The settings live in :mod:`seedq.arch.config`.
"""

from __future__ import annotations

import importlib
from typing import Any

from seedq.arch.config import ARCH_NAMES, ArchConfig

__all__ = ["ARCH_NAMES", "ARCH_RUNS", "ArchConfig", "ArchUnavailable", "run_class"]

ARCH_RUNS: dict[str, str] = {
    "seed": "seedq.arch.seed:SeedRun",
    "sebulba": "seedq.arch.sebulba:SebulbaRun",
    "anakin": "seedq.arch.anakin:AnakinRun",
}


class ArchUnavailable(ImportError):
    """The chosen architecture's module is not part of this seedq installation."""


def run_class(name: str) -> Any:
    """The run class of ``arch.name``: ``run_class(name)(cfg, run_dir, resume=state).run()``."""
    try:
        path = ARCH_RUNS[name]
    except KeyError:
        raise KeyError(f"arch={name!r} is unknown; choose one of {list(ARCH_RUNS)}") from None
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ArchUnavailable(
            f"arch={name} needs {module}, which this seedq installation does not have yet; "
            f"use arch={' or arch='.join(n for n in ARCH_RUNS if n != name)}"
        ) from None
