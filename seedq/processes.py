"""Linux's process controls that seedq's launchers use (``prctl``): a signal for a child when
its parent dies (an actor's or a broker shard's when the learner dies), and a process that
reaps the orphans of its children."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# The learner's death reaches its actors as SIGRTMAX, apart from SIGTERM and SIGINT (a deliberate
# stop: the launcher's, a user's, a scheduler's), SIGHUP (which nohup ignores) and SIGUSR1/2 (a
# scheduler's notices: NOTICES). Linux sends it when the learner *thread* that started the actor
# exits, which comes before the reparenting that getppid() shows (the other threads of a killed
# learner are still exiting), so the actor waits up to PARENT_EXIT_WAIT_S for that.
PARENT_DEATH_SIGNAL = signal.SIGRTMAX
PARENT_EXIT_WAIT_S = 5.0
# A scheduler's notices to every process of a job: Slurm's --signal=USR1@T without B:, the USR2
# Hydra's submitit launcher asks for before a time limit. The learner stops its actors and
# broker shards itself, with a checkpoint; their default action killed them first (a shard's
# death failed the run), and SIGUSR2, once the parent-death signal, read as the learner's death.
NOTICES = (signal.SIGUSR1, signal.SIGUSR2)


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


def exit_with_parent(parent_pid: int) -> bool:
    """Have Linux send this process (an actor, a broker shard) ``PARENT_DEATH_SIGNAL`` when
    ``parent_pid`` (its parent, the learner) dies.

    False when the parent is already gone: it may have died before ``prctl`` ran, which then
    never fires, so the parent pid is checked after it.
    """
    if sys.platform.startswith("linux"):
        if signal.getsignal(PARENT_DEATH_SIGNAL) == signal.SIG_IGN:  # inherited: it must kill
            signal.signal(PARENT_DEATH_SIGNAL, signal.SIG_DFL)
        try:
            signal_at_parent_death(PARENT_DEATH_SIGNAL)
        except OSError as exc:
            log.warning("cannot have the learner's death signalled to this process: %s", exc)
    return os.getppid() == parent_pid


def leave_notices_to_the_learner() -> None:
    """In a process the learner started (an actor, a broker shard; its main thread): ignore
    :data:`NOTICES`, which the learner acts on for the whole run."""
    for sig in NOTICES:
        signal.signal(sig, signal.SIG_IGN)
