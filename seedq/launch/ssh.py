"""The ssh launcher: actors on other hosts, started through the OpenSSH client.

Everything goes through the user's own ``ssh`` (config, agent, keys, ports, ProxyJump). Each
actor is one ``ssh HOST sh -s`` whose stdin carries the script of
:mod:`seedq.launch.remote_actor` and then stays open; when the local ``ssh`` ends for any
reason the remote guard sees end-of-file and stops the actor. Its output is streamed into
``RUN_DIR/actors/<host>-<n>.log``.

Before anything starts, :meth:`SshLauncher.check_hosts` runs :mod:`seedq.launch.host_check`
on every host in parallel and raises :class:`HostCheckError` naming each failing host with
its stderr.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seedq.envs import EnvConfig
from seedq.launch.config import LauncherConfig
from seedq.launch.remote_actor import (
    HostCheckError,
    HostFailures,
    RemoteLauncher,
    shipped_keys_dir,
)
from seedq.parallel.ranks import actor_share
from seedq.schema import ConfigError
from seedq.security import is_loopback

if TYPE_CHECKING:
    from seedq.broker.config import BrokerConfig

# No prompts (a password or host-key question would hang a run) and no terminal; options the
# user gives in launcher.ssh_args come first, and ssh keeps the first value of an option.
SSH_DEFAULTS = ["-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]
# A broker.host that listens on every interface: actors dial this machine's address instead.
WILDCARDS = ("*", "0.0.0.0", "::", "")


@dataclass(frozen=True)
class SshHost:
    """One ``launcher.hosts`` entry and what ``ssh -G`` says it resolves to."""

    entry: str
    hostname: str
    port: int
    user: str

    @property
    def label(self) -> str:
        """A file-name-safe form of the entry, for ``actors/<label>-<n>.log``."""
        text = self.entry.removeprefix("ssh://")
        return re.sub(r"[^A-Za-z0-9@._-]", "_", text)


def ssh_command(ssh_args: list[str], entry: str, *remote: str) -> list[str]:
    return ["ssh", *ssh_args, *SSH_DEFAULTS, entry, *remote]


def resolve_host(entry: str, ssh_args: list[str]) -> SshHost:
    """Ask ``ssh -G`` (config, aliases, ``ssh://user@host:port``) where ``entry`` goes."""
    result = subprocess.run(
        ["ssh", *ssh_args, "-G", entry], capture_output=True, text=True, timeout=30
    )
    if result.returncode != 0:
        raise HostCheckError(
            f"launcher.hosts entry {entry!r}: ssh -G failed: {result.stderr.strip()}"
        )
    options: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition(" ")
        options.setdefault(key, value)
    return SshHost(entry, options["hostname"], int(options.get("port", 22)), options["user"])


def route_address(host: str, port: int) -> str:
    """This machine's source address on the route to ``host`` (no packet is sent)."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(address)
        return probe.getsockname()[0]


def advertise_host(broker_host: str, advertise: str, hosts: list[SshHost]) -> str:
    """The address remote actors dial: ``advertise`` if set, else ``broker_host`` unless it is
    a wildcard (then the route to the first host that is not this machine); fails early where
    actors could not reach it."""
    if advertise:
        return advertise
    if broker_host in WILDCARDS:
        # The route to this machine itself is 127.0.0.1, which the other hosts' actors would
        # dial as their own loopback and wait there for a learner that never answers.
        first = next((h for h in hosts if not is_loopback(h.hostname)), hosts[0])
        try:
            return route_address(first.hostname, first.port)
        except OSError as exc:
            # A host reached through ProxyJump or a ProxyCommand may have a name only the
            # jump host resolves: ssh reaches it, this machine has no route to look up.
            raise ConfigError(
                f"broker.host={broker_host!r} binds every interface, so actors dial this "
                f"machine's address on the route to host {first.entry} ({first.hostname}), "
                f"but there is none from here ({exc}); set broker.advertise_host to the name or "
                "address the hosts reach this machine by"
            ) from None
    if is_loopback(broker_host):
        remote = [h.entry for h in hosts if not is_loopback(h.hostname)]
        if remote:
            raise ConfigError(
                f"broker.host={broker_host!r} is loopback but actor hosts {remote} are not: "
                "bind an address they reach (broker.host=0.0.0.0 or this machine's address), "
                "with security.keys_dir from seedq-keys"
            )
    return broker_host


@dataclass
class SshLauncher(RemoteLauncher):
    """Hosts, their checks, and the spawner that ``ActorPool`` calls for each actor."""

    cfg: LauncherConfig
    run_dir: str
    num_actors_per_host: int
    hosts: list[SshHost] = field(default_factory=list)
    # (host index, n) of each actor this learner runs: all hosts' actors, or with several
    # learner ranks this rank's share of them.
    slots: list[tuple[int, int]] = field(default_factory=list)
    _failures: HostFailures = field(init=False)
    _spawned: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._failures = HostFailures(self.cfg.max_host_failures)
        if not self.hosts:
            self.hosts = [resolve_host(e, self.cfg.ssh_args) for e in self.cfg.hosts]
        if not self.slots:
            per_host = range(self.num_actors_per_host)
            every = [(h, n) for h in range(len(self.hosts)) for n in per_host]
            self.slots = actor_share(every, "launcher.hosts x launcher.actors_per_host")

    @classmethod
    def for_run(cls, cfg: Any, run_dir: str) -> SshLauncher:
        """Resolve and check every host of ``cfg.launcher``; raises before anything starts."""
        if cfg.actor.transport != "tcp":
            raise ConfigError("launcher=ssh needs actor.transport=tcp")
        per_host = cfg.launcher.actors_per_host or cfg.actor.num_actors
        launcher = cls(cfg.launcher, run_dir, per_host)
        python = cfg.launcher.python or sys.executable
        launcher.check_hosts(cfg.env, python, shipped_keys_dir(cfg))
        # After the checks, which name a host that cannot be reached as such; before the
        # learner is built, so an address actors cannot dial is refused before anything starts.
        launcher.dialled_host(cfg.broker)
        return launcher

    def dialled_host(self, broker: BrokerConfig) -> str:
        return advertise_host(broker.host, broker.advertise_host, self.hosts)

    def place(self, index: int) -> tuple[str, str]:
        host, n = self.slots[index]
        return self.hosts[host].entry, f"{self.hosts[host].label}-{n}.log"

    def command(self, host: str, name: str) -> list[str]:
        return ssh_command(self.cfg.ssh_args, host, "sh", "-s")

    def check_hosts(self, env: EnvConfig, python: str, keys_dir: str = "") -> None:
        """Run the host check everywhere at once; raise naming every host that failed."""
        used = sorted({host for host, _ in self.slots})
        self.check([self.hosts[h].entry for h in used], env, python, keys_dir)

    def record_failure(self, host: SshHost, now: float | None = None) -> bool:
        """Count one failure of ``host``; True once it is dropped (see :class:`HostFailures`)."""
        return self._failures.record(host.entry, now)
