"""The ``launcher`` section: how the roles are started."""

from __future__ import annotations

from dataclasses import dataclass

from seedq.schema import choice, setting

LAUNCHERS = ("local",)


@dataclass
class LauncherConfig:
    name: str = setting("local", f"how actors are started: {', '.join(LAUNCHERS)}")
    python: str = setting("", "interpreter for actor processes (empty: the learner's own)")


def validate_launcher(launcher: LauncherConfig) -> None:
    choice("launcher.name", launcher.name, LAUNCHERS)
