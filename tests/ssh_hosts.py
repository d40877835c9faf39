"""Throw-away OpenSSH servers on 127.0.0.1 that stand in for actor hosts in the tests.

Each :class:`SshdHost` is ``/usr/sbin/sshd`` on its own port with its own host key and config
in a temp dir, accepting one generated user key; :func:`client_config` writes the matching
``ssh -F`` file. Nothing here touches the machine's own ssh setup.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def missing_tools() -> str:
    """Why ssh tests cannot run here ("" when they can)."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is not installed (scripts/setup_test_hosts.sh installs openssh-server)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup_test_hosts.sh installs it)"
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free now (a run's broker shards bind port,
    port + 1, ...): a free port's neighbour may be taken."""
    while True:
        first = free_port()
        if first + count > 65536:
            continue
        sockets = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()


def user_key(directory: Path) -> Path:
    key = directory / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


class SshdHost:
    """One sshd on 127.0.0.1:``port``, in the foreground, logging to ``dir/sshd.log``."""

    def __init__(self, directory: Path, key: Path, address: str = "127.0.0.1", netns: str = ""):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.address = address
        self.port = free_port() if not netns else 22
        host_key = self.dir / "host_ed25519"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True
        )
        (self.dir / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
        config = self.dir / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {address}",
                    f"HostKey {host_key}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.log = open(self.dir / "sshd.log", "ab")
        self.process = subprocess.Popen(
            [*prefix, SSHD, "-D", "-e", "-f", str(config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready(netns)

    def _wait_ready(self, netns: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.dir / 'sshd.log').read_text()}")
            probe = ["ip", "netns", "exec", netns] if netns else []
            code = subprocess.run(
                [*probe, "python3", "-c", _PROBE, self.address, str(self.port)],
                capture_output=True,
            ).returncode
            if code == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("sshd did not start listening within 30 s")

    def kill(self) -> None:
        """The host dies: sshd and every session it serves, at once.

        The sessions are found before the listener dies: they are told by their parent (a
        session's sshd renames itself, ``sshd: user@notty``), and orphans lose it."""
        sessions = session_pids(self.dir)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for pid in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.log.close()


_PROBE = (
    "import socket,sys\n"
    "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()"
)


def session_pids(sshd_dir: Path) -> list[int]:
    """sshd processes serving sessions of the sshd configured in ``sshd_dir`` (they keep the
    listener's command line), and all their descendants."""
    marker = str(sshd_dir / "sshd_config")
    roots = [pid for pid, line in _cmdlines() if marker in line or _is_child_of_sshd(pid, marker)]
    return roots


def _is_child_of_sshd(pid: int, marker: str) -> bool:
    ppid = _ppid(pid)
    seen = 0
    while ppid > 1 and seen < 20:
        line = _cmdline(ppid)
        if marker in line:
            return True
        ppid = _ppid(ppid)
        seen += 1
    return False


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _cmdlines() -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        line = _cmdline(int(entry.name))
        if line:
            found.append((int(entry.name), line))
    return found


def processes_with_env(marker: str) -> list[str]:
    """Command lines of live processes whose environment holds ``marker`` (set through
    ``launcher.env``, so it marks exactly what the launcher started on the "remote" side)."""
    return [_cmdline(pid) for pid in pids_with_env(marker)]


def pids_with_env(marker: str) -> list[int]:
    """Pids of the live processes :func:`processes_with_env` describes."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state != "Z":
            found.append(int(entry.name))
    return found


def client_config(directory: Path, key: Path, hosts: dict[str, SshdHost]) -> Path:
    """An ``ssh -F`` file: an alias per host, this user, the test key, no host-key prompts."""
    lines = []
    for alias, host in hosts.items():
        lines += [f"Host {alias}", f"  HostName {host.address}", f"  Port {host.port}"]
    lines += [
        "Host *",
        f"  User {getpass.getuser()}",
        f"  IdentityFile {key}",
        "  IdentitiesOnly yes",
        "  StrictHostKeyChecking no",
        "  UserKnownHostsFile /dev/null",
        "  LogLevel ERROR",
        "",
    ]
    path = directory / "ssh_config"
    path.write_text("\n".join(lines))
    return path
