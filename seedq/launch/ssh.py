"""The ssh launcher: actors on other hosts, started through the OpenSSH client.

Everything goes through the user's own ``ssh`` (config, agent, keys, ports, ProxyJump). Each
actor is one ``ssh HOST sh -s`` whose stdin carries a short script (:func:`remote_script`:
cd, environment, CURVE keys via :func:`~seedq.launch.remote_keys.actor_script`, then the
actor under :mod:`seedq.launch.remote_guard`) and then stays open: the local ``ssh`` process
stands for the actor (its exit is the actor's exit), and when it ends for any reason the
remote guard sees end-of-file and stops the actor. Its output is the actor's log, streamed
into ``RUN_DIR/actors/<host>-<n>.log``.

Before anything starts, :meth:`SshLauncher.check_hosts` runs :mod:`seedq.launch.host_check`
on every host in parallel and raises :class:`HostCheckError` naming each failing host with
its stderr.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from seedq.envs import EnvConfig
from seedq.launch.actors import SpawnRefused
from seedq.launch.config import LauncherConfig
from seedq.launch.remote_keys import actor_script
from seedq.messages import PROTOCOL_VERSION
from seedq.schema import ConfigError
from seedq.security import is_loopback

if TYPE_CHECKING:
    from seedq.broker.config import BrokerConfig
    from seedq.config import SeedqConfig

log = logging.getLogger(__name__)

# No prompts (a password or host-key question would hang a run) and no terminal; options the
# user gives in launcher.ssh_args come first, and ssh keeps the first value of an option.
SSH_DEFAULTS = ["-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]
FAILURE_WINDOW_S = 600.0


class HostCheckError(ConfigError):
    """A host cannot run actors; reported like a config error, before anything starts."""


class HostDropped(SpawnRefused):
    """A host failed too often; its actors are not restarted and the run goes on without it."""


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
    a wildcard (then the route to the first host); fails early where actors could not reach it."""
    if advertise:
        return advertise
    if broker_host in ("*", "0.0.0.0", "::", ""):
        return route_address(hosts[0].hostname, hosts[0].port)
    if is_loopback(broker_host):
        remote = [h.entry for h in hosts if not is_loopback(h.hostname)]
        if remote:
            raise ConfigError(
                f"broker.host={broker_host!r} is loopback but actor hosts {remote} are not: "
                "bind an address they reach (broker.host=0.0.0.0 or this machine's address), "
                "with security.keys_dir from seedq-keys"
            )
    return broker_host


def remote_script(
    actor_argv: list[str],
    *,
    workdir: str = "",
    env: dict[str, str] | None = None,
    keys_dir: str = "",
    remote_keys_dir: str = "",
) -> str:
    """The ``sh -s`` script that runs ``actor_argv`` on a host: cd, environment, keys, exec."""
    lines = ["set -e"]
    if workdir:
        lines.append(f"cd {shlex.quote(workdir)}")
    for key, value in (env or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"launcher.env key {key!r} is not an environment variable name")
        lines.append(f"export {key}={shlex.quote(str(value))}")
    head = "\n".join(lines) + "\n"
    if keys_dir:
        return head + actor_script(keys_dir, remote_keys_dir, actor_argv)
    return head + "exec " + shlex.join(actor_argv) + "\n"


def _remote_actor_argv(cmd: list[str], remote_keys_dir: str) -> list[str]:
    """The local actor command line, made for a host: logs to stderr (streamed back by ssh),
    keys from ``remote_keys_dir``, under the guard that stops it when ssh goes away."""
    argv: list[str] = []
    items = iter(cmd)
    for item in items:
        if item == "--log-file":
            next(items)
        elif item == "--keys-dir":
            next(items)
            argv += ["--keys-dir", remote_keys_dir]
        else:
            argv.append(item)
    python = argv[0]
    return [python, "-m", "seedq.launch.remote_guard", "--", *argv]


@dataclass
class SshLauncher:
    """Hosts, their checks, and the spawner that ``ActorPool`` calls for each actor."""

    cfg: LauncherConfig
    run_dir: str
    num_actors_per_host: int
    hosts: list[SshHost] = field(default_factory=list)
    _failures: dict[str, deque] = field(default_factory=dict)
    _spawned: set[int] = field(default_factory=set)
    _dropped: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.hosts:
            self.hosts = [resolve_host(e, self.cfg.ssh_args) for e in self.cfg.hosts]

    @classmethod
    def for_run(cls, cfg: SeedqConfig, run_dir: str) -> SshLauncher:
        """Resolve and check every host of ``cfg.launcher``; raises before anything starts."""
        if cfg.actor.transport != "tcp":
            raise ConfigError("launcher=ssh needs actor.transport=tcp")
        per_host = cfg.launcher.actors_per_host or cfg.actor.num_actors
        launcher = cls(cfg.launcher, run_dir, per_host)
        launcher.check_hosts(cfg.env, cfg.launcher.python or sys.executable)
        return launcher

    def actor_endpoint(self, broker: BrokerConfig, bound: str) -> str:
        """The endpoint remote actors dial, for a broker bound at ``bound`` (tcp://host:port)."""
        port = bound.rsplit(":", 1)[1]
        host = advertise_host(broker.host, broker.advertise_host, self.hosts)
        return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"

    @property
    def num_actors(self) -> int:
        return len(self.hosts) * self.num_actors_per_host

    def host_of(self, index: int) -> tuple[SshHost, int]:
        return self.hosts[index // self.num_actors_per_host], index % self.num_actors_per_host

    def check_hosts(self, env: EnvConfig, python: str) -> None:
        """Run the host check everywhere at once; raise naming every host that failed."""
        with ThreadPoolExecutor(max_workers=min(32, len(self.hosts))) as pool:
            results = list(pool.map(lambda h: self._check(h, env, python), self.hosts))
        failed = [r for r in results if r]
        if failed:
            raise HostCheckError(
                f"{len(failed)} of {len(self.hosts)} actor hosts failed their check; nothing "
                "was started:\n" + "\n".join(failed)
            )
        log.info("actor hosts ready: %s", ", ".join(h.entry for h in self.hosts))

    def _check(self, host: SshHost, env: EnvConfig, python: str) -> str:
        argv = [
            python,
            "-m",
            "seedq.launch.host_check",
            "--protocol",
            str(PROTOCOL_VERSION),
            "--env-config",
            json.dumps(asdict(env)),
        ]
        script = remote_script(argv, workdir=self.cfg.workdir, env=self.cfg.env)
        try:
            result = subprocess.run(
                ssh_command(self.cfg.ssh_args, host.entry, "sh", "-s"),
                input=script,
                capture_output=True,
                text=True,
                timeout=self.cfg.check_timeout_s,
            )
        except subprocess.TimeoutExpired:
            limit = self.cfg.check_timeout_s
            return f"  {host.entry}: no answer within launcher.check_timeout_s={limit}"
        if result.returncode == 0:
            return ""
        what = {
            255: "unreachable (ssh failed)",
            126: f"python {python!r} cannot run there (set launcher.python)",
            127: f"python {python!r} not found there (set launcher.python)",
        }.get(result.returncode, f"check failed (exit {result.returncode})")
        stderr = "\n".join("    " + line for line in result.stderr.strip().splitlines()[-15:])
        return f"  {host.entry}: {what}\n{stderr}"

    def record_failure(self, host: SshHost, now: float | None = None) -> bool:
        """Count one failure of ``host``; True once it failed ``max_host_failures`` times within
        ten minutes, and from then on (it is dropped)."""
        now = time.monotonic() if now is None else now
        times = self._failures.setdefault(host.entry, deque())
        times.append(now)
        while times and now - times[0] > FAILURE_WINDOW_S:
            times.popleft()
        if len(times) >= self.cfg.max_host_failures and host.entry not in self._dropped:
            self._dropped.add(host.entry)
            log.warning(
                "actor host %s failed %d times in %.0f minutes; dropping it, the run goes on "
                "with the other hosts",
                host.entry,
                len(times),
                FAILURE_WINDOW_S / 60,
            )
        return host.entry in self._dropped

    def spawn(self, index: int, cmd: list[str], log_file: str) -> subprocess.Popen:
        """``ActorPool``'s spawner: actor ``index`` on its host; a second call for the same
        index is a restart and counts as a failure of that host."""
        host, n = self.host_of(index)
        if index in self._spawned and self.record_failure(host):
            raise HostDropped(f"actor host {host.entry} was dropped after repeated failures")
        self._spawned.add(index)
        # With CURVE on, the local command names the key directory; the host gets a copy.
        keys_dir = cmd[cmd.index("--keys-dir") + 1] if "--keys-dir" in cmd else ""
        script = remote_script(
            _remote_actor_argv(cmd, self.cfg.remote_keys_dir),
            workdir=self.cfg.workdir,
            env=self.cfg.env,
            keys_dir=keys_dir,
            remote_keys_dir=self.cfg.remote_keys_dir,
        )
        remote_log = os.path.join(self.run_dir, "actors", f"{host.label}-{n}.log")
        os.makedirs(os.path.dirname(remote_log), exist_ok=True)
        with open(remote_log, "ab") as out:
            proc = subprocess.Popen(
                ssh_command(self.cfg.ssh_args, host.entry, "sh", "-s"),
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                # The learner stops actors in order; a Ctrl-C meant for it must not hit ssh.
                start_new_session=True,
            )
        # stdin stays open: its end-of-file is what stops the remote actor.
        assert proc.stdin is not None
        proc.stdin.write(script.encode())
        proc.stdin.flush()
        _link(log_file, remote_log)
        return proc


def _link(link: str, target: str) -> None:
    """``actor_<i>.log`` beside the learner's log points at the streamed remote log."""
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.relpath(target, os.path.dirname(link)), link)
