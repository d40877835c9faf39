"""One learner per run directory: a second run started into a folder a live run writes to
(the same ``run_dir=`` twice, ``resume=auto`` while the first still runs) is refused instead
of interleaving both runs' metrics and checkpoints.

The lock is ``flock`` on ``<run dir>/.seedq.lock``, held for the life of the process that
claims it: the kernel lets it go when that process ends, however it ends, so a killed run
never leaves a stale lock behind. The file records the holder's pid for the refusal.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from seedq.learner.checkpoint_files import checkpoints_refusal
from seedq.schema import ConfigError

LOCK_NAME = ".seedq.lock"
PROBE_TRIES, PROBE_WAIT_S = 5, 0.05
_held: dict[Path, int] = {}


def claim_run_dir(run_dir: str) -> None:
    """Hold ``run_dir``'s lock until this process ends; :class:`ConfigError` naming the
    holder when another process holds it, or why no checkpoint could be written there."""
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _held:
        return
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    # A few tries: another command's probe (held_by) holds a shared lock for microseconds.
    for attempt in range(PROBE_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt + 1 == PROBE_TRIES:
                holder = _holder(fd)
                os.close(fd)
                raise ConfigError(in_use(run_dir, holder)) from None
            time.sleep(PROBE_WAIT_S)
    if refusal := checkpoints_refusal(folder):
        os.close(fd)  # lets go of the lock
        raise ConfigError(f"{refusal}, or give this run another run_dir")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[key] = fd


def held_by(run_dir: str) -> str | None:
    """The pid (as its lock file gives it) of the live process holding ``run_dir``, or None
    when no process does; takes nothing. Checked before Hydra writes its own files into the
    folder (``.hydra/``, ``cli.log``), so a refused run leaves a live one's folder alone."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)  # lets go of the shared lock, when taken
    return None


def in_use(run_dir: str, holder: str) -> str:
    return (
        f"{run_dir} is in use by another seedq run (pid {holder}); wait for it to end, stop it "
        "(its checkpoint lets resume=auto continue it), or give this run another run_dir"
    )


def _holder(fd: int) -> str:
    return os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"


def release_run_dirs() -> None:
    """Let go of every run directory this process holds (tests; a process's end does it)."""
    for fd in _held.values():
        os.close(fd)
    _held.clear()
