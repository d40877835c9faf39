"""The exit statuses of ``seedq-train`` (also its supervisor's), for scripts and schedulers,
and the signals that stop a run."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

EXIT_FINISHED = 0  # the run reached a stop rule (target, step or time budget)
EXIT_REFUSED = 2  # refused before anything started: a config error, a checkpoint that does not fit
EXIT_RUN_FAILED = 3  # a fault the run could not survive; its last good state is checkpointed
# Stopped by SIGINT, SIGTERM or SIGUSR1 after saving a checkpoint: the run is not finished, and
# `seedq-train ... resume=auto` (the same command) continues it. sysexits.h's EX_TEMPFAIL.
EXIT_STOPPED = 75
# A learner rank's own exit when another rank stopped answering (a collective failed or timed
# out): the run's failure is the other rank's, which the launcher names.
EXIT_RANK_LOST = 4
# An actor process's exit when another process joined the learner with its actor ids (the
# learner lets the newcomer have them): not a crash, and not restarted, since a restart would
# take the ids back and the two would take turns ending each other.
EXIT_ACTOR_TAKEN_OVER = 5
EXIT_INTERRUPTED = 130  # a shell's for SIGINT: Ctrl-C before any run started

# Ctrl-C; SIGTERM from a scheduler, a supervisor or `kill`; SIGUSR1 from Slurm's
# --signal=B:USR1@90 before a time limit. Each stops the run with a checkpoint first (a
# supervisor passes them on to its learner).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


@contextlib.contextmanager
def stop_signals_to(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Within the block ``handler`` receives :data:`STOP_SIGNALS`; the handlers they had
    before come back after it. Main thread only (Python's signal rule)."""
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, earlier in previous.items():
            signal.signal(sig, earlier)


class StoppedWhileStarting(KeyboardInterrupt):
    """SIGTERM or SIGUSR1 before a run took the stop signals over (imports, config, checks,
    the run's start-up): the command ends as Ctrl-C does there, in one line, but with exit
    status 75, so a scheduler that requeues a stopped job (``scripts/slurm/requeue.sbatch``)
    or a supervisor starts it again, as it would a run stopped later. Nothing was trained."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _stopped_while_starting(signum: int, frame: Any) -> None:
    raise StoppedWhileStarting(signal.Signals(signum).name)


def stop_while_starting() -> None:
    """Until a run takes them over, SIGTERM and SIGUSR1 raise :class:`StoppedWhileStarting`
    (their default action killed the command with 143 or 138, without a word)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if sig != signal.SIGINT:
                signal.signal(sig, _stopped_while_starting)


def exit_while_starting(command: str, exc: KeyboardInterrupt) -> None:
    """End ``command``, stopped while it started: one line, 75 after a stop signal (the same
    command starts it again), 130 after Ctrl-C."""
    if isinstance(exc, StoppedWhileStarting):
        print(
            f"{command}: stopped by {exc.name} while starting; no run started (exit status "
            f"{EXIT_STOPPED}: the same command starts it again)",
            file=sys.stderr,
        )
        sys.exit(EXIT_STOPPED)
    print(f"{command}: interrupted while starting; no run started", file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)
