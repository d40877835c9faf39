"""The exit statuses of ``seedq-train`` (also its supervisor's), for scripts and schedulers,
and the signals that stop a run."""

from __future__ import annotations

import contextlib
import signal
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
