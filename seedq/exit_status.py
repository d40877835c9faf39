"""The exit statuses of ``seedq-train`` (also its supervisor's), for scripts and schedulers."""

from __future__ import annotations

EXIT_FINISHED = 0  # the run reached a stop rule (target, step or time budget)
EXIT_REFUSED = 2  # refused before anything started: a config error, a checkpoint that does not fit
EXIT_RUN_FAILED = 3  # a fault the run could not survive; its last good state is checkpointed
# Stopped by SIGINT, SIGTERM or SIGUSR1 after saving a checkpoint: the run is not finished, and
# `seedq-train ... resume=auto` (the same command) continues it. sysexits.h's EX_TEMPFAIL.
EXIT_STOPPED = 75
