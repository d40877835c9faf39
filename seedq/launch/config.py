"""The ``launcher`` section: how the roles are started."""

from __future__ import annotations

from dataclasses import dataclass

from seedq.schema import ConfigError, choice, positive, setting

LAUNCHERS = ("local", "ssh", "slurm")
# The slurm launcher places each actor itself: one task on one named node of its job.
SRUN_PLACEMENT = ("-n", "--ntasks", "-N", "--nodes", "-w", "--nodelist", "--jobid", "-i", "--input")


@dataclass
class LauncherConfig:
    name: str = setting("local", f"how actors are started: {', '.join(LAUNCHERS)}")
    python: str = setting(
        "",
        "interpreter for actor processes, here, on each host or node (empty: the learner's own "
        "path)",
    )
    hosts: list[str] = setting(
        help="ssh: actor hosts, anything `ssh` accepts as a destination (cpu1, alice@cpu3, "
        "ssh://alice@cpu3:2222); slurm: the allocation's nodes that run actors (empty: all)",
        factory=list,
    )
    actors_per_host: int = setting(
        0,
        "ssh, slurm: actor processes per host or node (0: ssh: actor.num_actors; slurm: the "
        "allocation's tasks on each node when it asked for tasks (-n, --ntasks-per-node), else "
        "actor.num_actors)",
    )
    ssh_args: list[str] = setting(
        help="ssh: extra options for every ssh call, before the host (e.g. [-F,/path/config])",
        factory=list,
    )
    srun_args: list[str] = setting(
        help="slurm: extra options for every srun call, after seedq's own (e.g. "
        "'launcher.srun_args=[\"--mem-per-cpu=2G\"]': an option holding = is quoted, which "
        "Hydra's override grammar needs)",
        factory=list,
    )
    workdir: str = setting(
        "",
        "ssh, slurm: directory the actors run in (empty: ssh: the login dir; slurm: the "
        "learner's working directory)",
    )
    env: dict[str, str] = setting(
        help="ssh, slurm: environment variables set for remote actors (e.g. {PYTHONPATH: "
        "/src/seedq}); srun passes the learner's environment on as well",
        factory=dict,
    )
    remote_keys_dir: str = setting(
        "~/.seedq/keys",
        "ssh, slurm: where the actor's CURVE keys are written on each host or node, sent over "
        "the ssh or srun channel; a different key file already there is never replaced (the "
        "host check refuses the run) (empty: hosts share security.keys_dir's filesystem and "
        "actors read it there)",
    )
    check_timeout_s: float = setting(
        60.0,
        "ssh, slurm: seconds each host or node gets to pass its start-up check (all in parallel)",
    )
    max_host_failures: int = setting(
        5, "ssh, slurm: a host or node whose actors failed this many times in 10 minutes is dropped"
    )
    learner_hosts: list[str] = setting(
        help="hardware.learners > 1: ssh destinations that run the learner ranks, an equal share "
        "each (torchrun on every host over ssh; the first host is rank 0's and the rendezvous); "
        "empty: all ranks on this machine",
        factory=list,
    )
    learner_port: int = setting(
        29500, "learner_hosts: the TCP port the ranks meet on, on the first learner host"
    )


# Keys only some launchers read, by the launchers that read them: set on another, the user asked
# for actors that will not be started (launcher.hosts=[a,b] without launcher=ssh runs them here).
# ssh_args, workdir, env and python also serve launcher.learner_hosts, on any launcher.
LAUNCHER_ONLY = {
    "hosts": ("ssh", "slurm"),
    "actors_per_host": ("ssh", "slurm"),
    "srun_args": ("slurm",),
}


def validate_launcher(launcher: LauncherConfig) -> None:
    choice("launcher.name", launcher.name, LAUNCHERS)
    for key, readers in LAUNCHER_ONLY.items():
        value = getattr(launcher, key)
        if launcher.name not in readers and value != getattr(LauncherConfig(), key):
            shown = value if isinstance(value, int) else f"[{','.join(value)}]"
            by = " and ".join(f"launcher={r}" for r in readers)
            raise ConfigError(
                f"launcher.{key}={shown} is read by {by} only; this run is "
                f"launcher={launcher.name}, which would ignore it: add launcher={readers[0]}, "
                "or drop the key"
            )
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
    twice = sorted({h for h in launcher.hosts if launcher.hosts.count(h) > 1})
    if twice:
        # Its actors took the same slot names: both wrote one log file, named by the host.
        raise ConfigError(
            f"launcher.hosts names {', '.join(twice)} more than once; name each host once "
            "(launcher.actors_per_host=N runs N actor processes on each)"
        )
    for host in launcher.learner_hosts:
        if not host or host.startswith("-") or any(c.isspace() for c in host):
            raise ConfigError(
                f"launcher.learner_hosts entry {host!r} is not an ssh destination (user@host, "
                "host, ssh://user@host:port)"
            )
    if not 0 < launcher.learner_port < 65536:
        raise ConfigError(f"launcher.learner_port={launcher.learner_port} is not a TCP port")
    for option in launcher.srun_args:
        name = option.split("=", 1)[0]
        if name in SRUN_PLACEMENT or (name[:2] in SRUN_PLACEMENT and not name.startswith("--")):
            raise ConfigError(
                f"launcher.srun_args entry {option!r}: the slurm launcher sets where actors run "
                "(one task on one node, its stdin for the start-up script); choose the nodes "
                "with launcher.hosts and their actors with launcher.actors_per_host"
            )
