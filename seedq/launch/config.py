"""The ``launcher`` section: how the roles are started."""

from __future__ import annotations

from dataclasses import dataclass

from seedq.schema import ConfigError, choice, positive, setting

LAUNCHERS = ("local", "ssh")


@dataclass
class LauncherConfig:
    name: str = setting("local", f"how actors are started: {', '.join(LAUNCHERS)}")
    python: str = setting(
        "", "interpreter for actor processes, here or on each host (empty: the learner's own path)"
    )
    hosts: list[str] = setting(
        help="ssh: actor hosts, anything `ssh` accepts as a destination (cpu1, alice@cpu3, "
        "ssh://alice@cpu3:2222)",
        factory=list,
    )
    actors_per_host: int = setting(0, "ssh: actor processes per host (0: actor.num_actors)")
    ssh_args: list[str] = setting(
        help="ssh: extra options for every ssh call, before the host (e.g. [-F,/path/config])",
        factory=list,
    )
    workdir: str = setting("", "ssh: remote directory the actors run in (empty: the login dir)")
    env: dict[str, str] = setting(
        help="ssh: environment variables set for remote actors (e.g. {PYTHONPATH: /src/seedq})",
        factory=dict,
    )
    remote_keys_dir: str = setting(
        "~/.seedq/keys", "ssh: where the actor's CURVE keys are written on each host"
    )
    check_timeout_s: float = setting(
        60.0, "ssh: seconds each host gets to pass its start-up check (all hosts in parallel)"
    )
    max_host_failures: int = setting(
        5, "ssh: a host whose actors failed this many times in 10 minutes is dropped"
    )


def validate_launcher(launcher: LauncherConfig) -> None:
    choice("launcher.name", launcher.name, LAUNCHERS)
    if launcher.actors_per_host < 0:
        raise ConfigError(
            f"launcher.actors_per_host={launcher.actors_per_host!r} is out of range; it must be "
            ">= 0 (0: actor.num_actors on each host)"
        )
    positive("launcher.check_timeout_s", launcher.check_timeout_s)
    positive("launcher.max_host_failures", launcher.max_host_failures)
    if launcher.name == "ssh" and not launcher.hosts:
        raise ConfigError(
            "launcher=ssh needs hosts: launcher.hosts=[cpu1,cpu2] (anything `ssh` accepts)"
        )
    for host in launcher.hosts:
        if not host or host.startswith("-") or any(c.isspace() for c in host):
            raise ConfigError(
                f"launcher.hosts entry {host!r} is not an ssh destination (user@host, host, "
                "ssh://user@host:port); ssh options go in launcher.ssh_args"
            )
