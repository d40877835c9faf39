"""``seedq-train ... supervise=true``: the learner runs as a child process and is started again
when it dies, for machines without a scheduler that would requeue it.

A learner that dies (a non-zero exit status other than 2, a signal: ``kill -9``, the OOM
killer, a crash) is started again with ``resume=auto`` in the same run directory, after a
backoff that doubles per death within ``supervisor.window_minutes`` (``backoff_s``, then twice
that, ... up to ``max_backoff_s``); more than ``supervisor.max_restarts`` deaths within the
window end the supervisor with exit status 3. The restarted learner starts its actors through
its launcher as at the first start (local processes, ssh hosts, srun steps). The dead learner's
actors are gone by then: local ones follow it (parent-death signal), remote ones lose their
connection (their guard sees ssh's or srun's stdin close), and the supervisor ends whatever is
left in the learner's process group, so no actor outlives the run.

SIGINT, SIGTERM and SIGUSR1 sent to the supervisor go to the learner, which checkpoints and
stops; the supervisor then exits with the learner's status (75: stopped to be resumed) and
restarts nothing. The learner's own exit statuses 0 (finished), 2 (refused: it would be
refused again) and 75 (a stop signal sent to the learner itself) end the supervisor with the
same status.

Linux only (like the actors' parent-death signal): the supervisor makes itself the subreaper
of the learner's orphans, so it can wait for every one of them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from seedq.exit_status import (
    EXIT_FINISHED,
    EXIT_REFUSED,
    EXIT_RUN_FAILED,
    EXIT_STOPPED,
    STOP_SIGNALS,
    stop_signals_to,
)
from seedq.processes import PR_SET_CHILD_SUBREAPER, prctl, signal_at_parent_death
from seedq.schema import check_positive, override, setting

log = logging.getLogger(__name__)

# Command-line keys the supervisor sets for each learner it starts.
OWN_KEYS = ("supervise", "resume", "run_dir", "hydra.run.dir")
# Seconds the rest of a dead learner's process group gets between SIGTERM and SIGKILL.
GROUP_GRACE_S = 10.0


@dataclass
class SupervisorConfig:
    max_restarts: int = setting(
        10,
        "supervise=true: learner deaths allowed within supervisor.window_minutes; one more "
        "ends the supervisor (exit status 3)",
    )
    window_minutes: float = setting(
        60.0, "supervise=true: the window over which learner deaths are counted"
    )
    backoff_s: float = setting(
        5.0, "supervise=true: seconds before a dead learner is restarted (doubles per death)"
    )
    max_backoff_s: float = setting(300.0, "supervise=true: the longest wait before a restart")


def validate_supervisor(cfg: SupervisorConfig) -> None:
    check_positive(cfg, "supervisor", ["window_minutes", "max_backoff_s"])
    check_positive(cfg, "supervisor", ["max_restarts", "backoff_s"], zero_ok=True)


def learner_command(task: list[str], hydra: list[str], run_dir: str) -> list[str]:
    """The command line of a supervised learner: this one's overrides without the keys the
    supervisor sets, then the fixed run directory (Hydra's files there too) and resume=auto."""

    def key(override: str) -> str:
        return override.split("=", 1)[0].lstrip("+~")

    kept = [o for o in [*task, *hydra] if key(o) not in OWN_KEYS]
    return [
        sys.executable,
        "-m",
        "seedq.train_entry",  # takes the stop signals before its imports
        *kept,
        override("run_dir", run_dir),
        override("hydra.run.dir", run_dir),
        "resume=auto",
    ]


def _become_subreaper() -> None:
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError) as exc:
        log.warning("cannot reap the learner's orphans here (%s); relying on init", exc)


def _stop_with_parent() -> None:
    """In the learner, before exec: SIGTERM when the supervisor dies (even by SIGKILL), so the
    learner checkpoints and stops rather than running on unsupervised."""
    # Not Linux (no prctl): the learner then outlives a killed supervisor. Nothing is logged:
    # this runs between fork and exec, where logging could deadlock on a lock the fork copied.
    with contextlib.suppress(OSError, AttributeError):
        signal_at_parent_death(signal.SIGTERM)


class Supervisor:
    """Starts ``command`` (a learner) and starts it again after each death, per ``cfg``."""

    def __init__(self, command: list[str], cfg: SupervisorConfig, run_dir: str) -> None:
        self.command, self.cfg, self.run_dir = command, cfg, run_dir
        self.signalled = threading.Event()
        self.learner: subprocess.Popen | None = None
        self.deaths: deque[float] = deque()  # monotonic times of deaths within the window
        self.restarts = 0
        self.exits: list[int] = []  # every learner's exit status (negative: killed by signal)

    def delay(self, deaths: int) -> float:
        """Seconds before the restart after the ``deaths``-th death within the window."""
        return min(self.cfg.max_backoff_s, self.cfg.backoff_s * 2 ** max(0, deaths - 1))

    def run(self) -> int:
        """Supervise until the learner finishes, is refused or stopped, or dies too often; the
        exit status for the supervisor's own process."""
        _become_subreaper()
        with stop_signals_to(self._forward):
            return self._loop()

    def _forward(self, signum: int, frame: object) -> None:
        self.signalled.set()
        learner = self.learner
        if learner is not None and learner.poll() is None:
            log.warning("%s: passed on to the learner", signal.Signals(signum).name)
            learner.send_signal(signum)

    def _loop(self) -> int:
        window_s = self.cfg.window_minutes * 60
        while True:
            code = self._run_learner()
            if self.signalled.is_set():
                if -code in STOP_SIGNALS:
                    # Passed on before the learner could take it (the interpreter's own
                    # start): stopped as asked, with its newest checkpoint standing.
                    return EXIT_STOPPED
                return code if code >= 0 else 128 - code
            if code in (EXIT_FINISHED, EXIT_REFUSED, EXIT_STOPPED):
                return code  # finished, refused (it would be again), or stopped on purpose
            now = time.monotonic()
            self.deaths.append(now)
            while self.deaths and now - self.deaths[0] > window_s:
                self.deaths.popleft()
            if len(self.deaths) > self.cfg.max_restarts:
                log.error(
                    "the learner died %d times within %g minutes (last: %s), more than "
                    "supervisor.max_restarts=%d; giving up. Its log is %s/cli.log; "
                    "`seedq-train ... resume=auto` continues the run from its newest checkpoint",
                    len(self.deaths),
                    self.cfg.window_minutes,
                    describe_exit(code),
                    self.cfg.max_restarts,
                    self.run_dir,
                )
                return EXIT_RUN_FAILED
            delay = self.delay(len(self.deaths))
            log.warning(
                "the learner %s; restarting it with resume=auto in %.1f s (death %d of at "
                "most %d within %g minutes)",
                describe_exit(code),
                delay,
                len(self.deaths),
                self.cfg.max_restarts,
                self.cfg.window_minutes,
            )
            if self.signalled.wait(delay):
                return EXIT_STOPPED
            self.restarts += 1

    def _run_learner(self) -> int:
        # Its own session: the supervisor can end the whole group the learner leaves behind,
        # and a Ctrl-C on the terminal reaches the learner once, through _forward.
        self.learner = subprocess.Popen(
            self.command, start_new_session=True, preexec_fn=_stop_with_parent
        )
        log.info("supervising the learner, pid %d", self.learner.pid)
        if self.signalled.is_set():  # a signal came while it was being started
            self.learner.send_signal(signal.SIGTERM)
        code = self.learner.wait()
        self.exits.append(code)
        self._end_group(self.learner.pid)
        self._write_record()
        return code

    def _end_group(self, pgid: int) -> None:
        """SIGTERM, then SIGKILL after a grace period, to what is left of the learner's process
        group (its actors, ssh clients, srun steps), reaping the orphans among them."""
        if not _signal_group(pgid, signal.SIGTERM):
            return
        deadline = time.monotonic() + GROUP_GRACE_S
        while time.monotonic() < deadline:
            _reap_orphans(pgid)
            if not _signal_group(pgid, 0):
                return
            time.sleep(0.1)
        log.warning("processes of the dead learner's group outlived SIGTERM; killing them")
        _signal_group(pgid, signal.SIGKILL)
        time.sleep(0.1)
        _reap_orphans(pgid)

    def _write_record(self) -> None:
        record = {"learner_exits": self.exits, "restarts": self.restarts}
        try:
            Path(self.run_dir, "supervisor.json").write_text(json.dumps(record, indent=2))
        except OSError as exc:
            log.error("could not write supervisor.json: %s", exc)


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group (0: only probe); False when none of it is left."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _reap_orphans(pgid: int) -> None:
    """Collect the exit of the group's processes that became our children (as subreaper)."""
    me = os.getpid()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and int(fields[2]) == pgid:
            try:
                os.waitpid(int(entry.name), os.WNOHANG)
            except ChildProcessError:
                pass


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"
