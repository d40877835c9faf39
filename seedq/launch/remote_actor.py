"""What the ssh and slurm launchers share: an actor started through a command that runs
``sh -s`` elsewhere (``ssh HOST sh -s``, ``srun --nodelist=NODE ... sh -s``).

The command's stdin carries a short script (:func:`remote_script`: cd, environment, CURVE keys
via :func:`~seedq.launch.remote_keys.actor_script`, then the actor under
:mod:`seedq.launch.remote_guard`) and then stays open: the local process stands for the actor
(its exit is the actor's exit), and when it ends for any reason the guard sees end-of-file and
stops the actor. Its output is the actor's log, streamed into ``RUN_DIR/actors/<host>-<n>.log``.

Before anything starts, :func:`check_hosts` runs :mod:`seedq.launch.host_check` through the same
command on every host at once; :class:`HostFailures` drops a host whose actors keep failing.
:class:`RemoteLauncher` is what both launchers are to ``ActorPool``: the endpoint actors dial
and the spawner that counts restarts as failures of a host.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shlex
import subprocess
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from seedq.envs import EnvConfig
from seedq.launch.actors import SpawnRefused
from seedq.launch.config import LauncherConfig
from seedq.launch.remote_keys import KEYS_EXIT, actor_script, keys_check_script
from seedq.messages import PROTOCOL_VERSION
from seedq.schema import ConfigError
from seedq.security import curve_enabled

if TYPE_CHECKING:
    from seedq.broker.config import BrokerConfig

log = logging.getLogger(__name__)

FAILURE_WINDOW_S = 600.0


class HostCheckError(ConfigError):
    """A host cannot run actors; reported like a config error, before anything starts."""


class HostDropped(SpawnRefused):
    """A host failed too often; its actors are not restarted and the run goes on without it."""


def remote_script(
    actor_argv: list[str],
    *,
    workdir: str = "",
    env: dict[str, str] | None = None,
    keys_dir: str = "",
    remote_keys_dir: str = "",
    install_keys: bool = True,
) -> str:
    """The ``sh -s`` script that runs ``actor_argv`` on a host: cd, environment, keys, exec;
    ``install_keys=False`` (the host check): the keys' folder checked, no key written."""
    lines = ["set -e"]
    if workdir:
        lines.append(f"cd {shlex.quote(workdir)}")
    for key, value in (env or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"launcher.env key {key!r} is not an environment variable name")
        lines.append(f"export {key}={shlex.quote(str(value))}")
    head = "\n".join(lines) + "\n"
    if keys_dir and install_keys:
        return head + actor_script(keys_dir, remote_keys_dir, actor_argv)
    if keys_dir:
        head += keys_check_script(keys_dir, remote_keys_dir)
    return head + "exec " + shlex.join(actor_argv) + "\n"


def remote_actor_argv(cmd: list[str], remote_keys_dir: str) -> list[str]:
    """The local actor command line, made for a host: logs to stderr (streamed back), keys from
    ``remote_keys_dir`` (empty: the same path, on a shared filesystem), under the guard that
    stops it when the launching command goes away."""
    argv: list[str] = []
    items = iter(cmd)
    for item in items:
        if item == "--log-file":
            next(items)
        elif item == "--keys-dir" and remote_keys_dir:
            next(items)
            argv += ["--keys-dir", remote_keys_dir]
        else:
            argv.append(item)
    python = argv[0]
    return [python, "-m", "seedq.launch.remote_guard", "--", *argv]


def actor_host_script(cmd: list[str], workdir: str, env: dict[str, str], remote_keys: str) -> str:
    """:func:`remote_script` for the local actor command ``cmd``; with CURVE on (``cmd`` names
    a key directory) and a ``remote_keys`` directory, the host gets a copy of the actor's keys."""
    keys_dir = cmd[cmd.index("--keys-dir") + 1] if "--keys-dir" in cmd and remote_keys else ""
    return remote_script(
        remote_actor_argv(cmd, remote_keys),
        workdir=workdir,
        env=env,
        keys_dir=keys_dir,
        remote_keys_dir=remote_keys,
    )


def start_fed(command: list[str], script: str, log_path: str) -> subprocess.Popen:
    """Run ``command`` with ``script`` on its stdin, kept open, and its output appended to
    ``log_path``; closing its stdin is what stops the remote process (its guard's end-of-file)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            # The learner stops its remote processes in order; a Ctrl-C meant for it must not
            # hit them.
            start_new_session=True,
        )
    assert proc.stdin is not None
    try:
        proc.stdin.write(script.encode())
        proc.stdin.flush()
    except BrokenPipeError:
        # The command ended before it read the script (ssh to a host that just died refuses
        # at once): it is a failed start, which its exit status and log say, for the caller's
        # restart accounting; raised here, it ended the whole run.
        with contextlib.suppress(OSError):
            proc.stdin.close()  # what is left in its buffer goes nowhere
    return proc


def start_streamed(command: list[str], script: str, log_path: str, link: str) -> subprocess.Popen:
    """:func:`start_fed`, and ``link`` (the actor's ``actor_<i>.log``) pointing at
    ``log_path``."""
    proc = start_fed(command, script, log_path)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.relpath(log_path, os.path.dirname(link)), link)
    return proc


def shipped_keys_dir(cfg: Any) -> str:
    """The CURVE keys folder whose actor keys a run's remote actors use ("" with CURVE off)."""
    return cfg.security.keys_dir if curve_enabled(cfg.security, cfg.broker.host) else ""


def host_check_argv(python: str, env: EnvConfig) -> list[str]:
    return [
        python,
        "-m",
        "seedq.launch.host_check",
        "--protocol",
        str(PROTOCOL_VERSION),
        "--env-config",
        json.dumps(asdict(env)),
    ]


def check_host(host: str, command: list[str], script: str, timeout_s: float, python: str) -> str:
    """Run the host check ``script`` through ``command``; "" when it passed, else a report
    naming ``host`` with the end of its stderr."""
    try:
        result = subprocess.run(
            command, input=script, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return f"  {host}: no answer within launcher.check_timeout_s={timeout_s}"
    if result.returncode == 0:
        return ""
    if result.returncode == KEYS_EXIT and result.stderr.strip():
        return f"  {host}: {result.stderr.strip().splitlines()[-1]}"
    what = {
        255: "unreachable (ssh failed)",
        126: f"python {python!r} cannot run there (set launcher.python)",
        127: f"python {python!r} not found there (set launcher.python)",
    }.get(result.returncode, f"check failed (exit {result.returncode})")
    stderr = "\n".join("    " + line for line in result.stderr.strip().splitlines()[-15:])
    return f"  {host}: {what}\n{stderr}"


def check_hosts(
    hosts: list[str],
    command: Callable[[str], list[str]],
    cfg: LauncherConfig,
    env: EnvConfig,
    python: str,
    keys_dir: str = "",
) -> None:
    """Run the host check on every host at once, each through ``command(host)`` (its ``sh -s``)
    with ``cfg``'s working directory and environment; raise naming every host that failed.

    With ``keys_dir`` (CURVE on) and ``cfg.remote_keys_dir``, each host must also be able to take
    the actor's keys there (see :mod:`seedq.launch.remote_keys`)."""
    script = remote_script(
        host_check_argv(python, env),
        workdir=cfg.workdir,
        env=cfg.env,
        keys_dir=keys_dir if cfg.remote_keys_dir else "",
        remote_keys_dir=cfg.remote_keys_dir,
        install_keys=False,
    )

    def check(host: str) -> str:
        return check_host(host, command(host), script, cfg.check_timeout_s, python)

    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        failed = [r for r in pool.map(check, hosts) if r]
    if failed:
        raise HostCheckError(
            f"{len(failed)} of {len(hosts)} actor hosts failed their check; nothing was "
            "started:\n" + "\n".join(failed)
        )
    log.info("actor hosts ready: %s", ", ".join(hosts))


@dataclass
class HostFailures:
    """Actor failures per host over the last ten minutes; a host with too many is dropped."""

    max_failures: int
    _times: dict[str, deque] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)

    def record(self, host: str, now: float | None = None) -> bool:
        """Count one failure of ``host``; True once it failed ``max_failures`` times within
        ten minutes, and from then on (it is dropped)."""
        now = time.monotonic() if now is None else now
        times = self._times.setdefault(host, deque())
        times.append(now)
        while times and now - times[0] > FAILURE_WINDOW_S:
            times.popleft()
        if len(times) >= self.max_failures and host not in self.dropped:
            self.dropped.add(host)
            log.warning(
                "actor host %s failed %d times in %.0f minutes; dropping it, the run goes on "
                "with the other hosts",
                host,
                len(times),
                FAILURE_WINDOW_S / 60,
            )
        return host in self.dropped


class RemoteLauncher(ABC):
    """``ActorPool``'s side of a launcher whose actors run elsewhere (ssh, slurm).

    A subclass, a dataclass, has ``cfg``, ``run_dir``, ``slots`` (one per actor this learner
    runs), ``_failures`` and ``_spawned``, and says where actor ``index`` runs
    (:meth:`place`), the command that starts an ``sh -s`` there (:meth:`command`) and the host
    actors dial (:meth:`dialled_host`).
    """

    cfg: LauncherConfig
    run_dir: str
    slots: list
    _failures: HostFailures
    _spawned: set[int]

    @abstractmethod
    def place(self, index: int) -> tuple[str, str]:
        """The host of actor ``index`` (as ``HostFailures`` counts it) and the name of its log
        file under ``RUN_DIR/actors``."""

    @abstractmethod
    def command(self, host: str, name: str) -> list[str]:
        """The command that runs ``sh -s`` on ``host``, for the job called ``name``."""

    @abstractmethod
    def dialled_host(self, broker: BrokerConfig) -> str:
        """The address actors dial the broker at."""

    @property
    def num_actors(self) -> int:
        return len(self.slots)

    def check(self, hosts: list[str], env: EnvConfig, python: str, keys_dir: str = "") -> None:
        """The host check on every one of ``hosts`` at once (``keys_dir``: the CURVE keys the
        actors will be sent); raises naming each that failed."""
        command = functools.partial(self.command, name="seedq-check")
        check_hosts(hosts, command, self.cfg, env, python, keys_dir)

    def actor_endpoint(self, broker: BrokerConfig, bound: str) -> str:
        """The endpoint actors dial, for a broker bound at ``bound`` (tcp://host:port)."""
        port = bound.rsplit(":", 1)[1]
        host = self.dialled_host(broker)
        return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"

    def spawn(self, index: int, cmd: list[str], log_file: str) -> subprocess.Popen:
        """``ActorPool``'s spawner: actor ``index`` on its host; a second call for the same
        index is a restart and counts as a failure of that host."""
        host, log_name = self.place(index)
        if index in self._spawned and self._failures.record(host):
            raise HostDropped(f"actor host {host} was dropped after repeated failures")
        self._spawned.add(index)
        cfg = self.cfg
        return start_streamed(
            self.command(host, f"seedq-actor-{index}"),
            actor_host_script(cmd, cfg.workdir, cfg.env, cfg.remote_keys_dir),
            os.path.join(self.run_dir, "actors", log_name),
            log_file,
        )
