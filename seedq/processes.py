"""Linux's process controls that seedq's launchers use (``prctl``): a signal for a child when
its parent dies, and a process that reaps the orphans of its children."""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> None:
    """Linux's ``prctl(option, value)``; OSError when it fails or this is not Linux."""
    if not sys.platform.startswith("linux"):
        raise OSError(f"prctl({option}) is Linux's; this is {sys.platform}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def signal_at_parent_death(signum: signal.Signals) -> None:
    """Have Linux send this process ``signum`` when the thread that started it exits, even by
    SIGKILL; OSError where it cannot. A parent that died before this ran never sends it: the
    caller checks ``os.getppid()`` after."""
    prctl(PR_SET_PDEATHSIG, int(signum))
