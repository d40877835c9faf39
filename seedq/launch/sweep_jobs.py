"""The jobs of a sweep (``seedq-train -m``): how each runs (in seedq-train's process under
Hydra's basic launcher, or in a process forked for it from a worker of joblib's or submitit's),
how stop signals reach them and stop the sweep, and the sweep's exit status (its worst job's).

A job's work is a function of the composed config (:func:`seedq.cli.train_job`'s run), passed
in, so this module knows nothing of what a run is.
"""

from __future__ import annotations

import _thread
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from hydra.errors import CompactHydraException
from omegaconf import DictConfig

from seedq.exit_status import EXIT_RUN_FAILED, EXIT_STOPPED, STOP_SIGNALS, StoppedWhileStarting
from seedq.processes import signal_at_parent_death

log = logging.getLogger("seedq")


@dataclasses.dataclass
class Command:
    """What this ``seedq-train`` did with its run dir: Hydra's folder (set once composed), and
    whether a run started in it (a refused command, or one that finds its run finished, starts
    none)."""

    output_dir: str | None = None
    started: bool = False
    composed: bool = False  # Hydra composed the config and called seedq
    job_codes: list[int] = dataclasses.field(default_factory=list)  # a sweep's failed jobs
    next_job: int | None = None  # a sweep's first job whose run has not started
    main_pid: int | None = None  # the process of seedq-train itself (train_main)
    sweep_dir: str | None = None  # the folder of a sweep whose jobs run in this process
    sweep_stopped: bool = False  # a stop signal ended the sweep: no later job starts
    not_jobs: set[int] = dataclasses.field(default_factory=set)  # child processes, no workers
    sweep_hint: str = ""  # how a stopped sweep goes on (continue_sweep)
    notice_told: bool = False  # relay_notice said why the job stops


COMMAND = Command()


class JobFailed(CompactHydraException):
    """The exit status of a sweep's job that ran in a launcher's own process (Hydra's joblib
    or submitit launchers). Raised there, Hydra counts the job failed and its other jobs run;
    it comes back to seedq-train's process pickled with the job's result, and rebuilding it
    there (:func:`job_failed_here`) adds the status to the sweep's."""

    def __init__(self, num: int, code: int, log_file: str) -> None:
        super().__init__(
            f"job {num} of the sweep ended with exit status {code} (its log: {log_file})"
        )
        self.num, self.code, self.log_file = num, code, log_file

    def __reduce__(self) -> tuple[Any, tuple[int, int, str]]:
        return job_failed_here, (self.num, self.code, self.log_file)


def job_failed_here(num: int, code: int, log_file: str) -> JobFailed:
    """A :class:`JobFailed` unpickled in this process: its status is one of this sweep's."""
    COMMAND.job_codes.append(code)
    return JobFailed(num, code, log_file)


# joblib's errors when one of its worker processes died (it then ends the others).
WORKER_LOST = ("TerminatedWorkerError", "BrokenProcessPool")


def submitit_notice() -> signal.Signals | None:
    """The signal a submitit job gets before its time limit (``--signal=USR2@`` the launcher's
    ``signal_delay_s``) or when preempted, sent by Slurm to every process of the job; None
    outside a submitit job. submitit's handler of it, inherited by the job's process, raised an
    UncompletedJobError into the training loop (no stop checkpoint) and ended its own process
    while the job still ran, and the sweep ended in a traceback; the job stops as for SIGUSR1
    instead, and the sweep's ``resume=auto`` continues it."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")  # submitit's own default
    notice = getattr(signal, f"SIG{name}", None)
    return None if notice is None or notice in STOP_SIGNALS else notice


def relay_notice(signum: int, frame: object) -> None:
    """A sweep job's submitit notice (:func:`submitit_notice`): stop as for SIGUSR1. It comes
    twice, from Slurm and passed on by submitit's process, and is told once."""
    if not COMMAND.notice_told:
        COMMAND.notice_told = True
        log.warning(
            "%s: Slurm's notice of this job's time limit (hydra.launcher.signal_delay_s before "
            "it) or of its preemption; the job stops as for SIGUSR1",
            signal.Signals(signum).name,
        )
    signal.raise_signal(signal.SIGUSR1)


def in_a_process_of_its_own(
    run: Callable[[DictConfig], float | None], cfg: DictConfig, hydra_cfg: Any
) -> float | None:
    """A sweep's job in a process of Hydra's launcher (a joblib worker, a submitit job). What
    this process notes never reaches seedq-train's, which ended 0 however its jobs failed:
    a failed or stopped job is Hydra's failed job instead (:class:`JobFailed`). The job runs in
    a process of its own, forked here: a job killed (the OOM killer, kill -9) is one failed
    job, where a joblib worker killed made joblib kill the sweep's other jobs mid-run. A stop
    signal ends the job with a checkpoint and keeps this process's later jobs from starting."""
    num = hydra_cfg.job.num
    log_file = str(Path(hydra_cfg.runtime.output_dir) / f"{hydra_cfg.job.name}.log")
    if COMMAND.sweep_stopped:
        log.warning("job %s of the sweep is not started: the sweep was stopped", num)
        raise JobFailed(num, EXIT_STOPPED, log_file)
    main_thread = threading.current_thread() is threading.main_thread()
    notice = submitit_notice()
    returned, sent = os.pipe()
    job = os.fork()
    if job == 0:
        os.close(returned)
        forked_job(run, cfg, num, sent)
    os.close(sent)
    if main_thread:
        # The job's process has the terminal's signals itself; seedq-train's come through here.
        def pass_on(signum: int, frame: object) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(job, signum)

        # submitit's notice too: its handler here would end this process, the job running on.
        for sig in (*STOP_SIGNALS, *([notice] if notice else [])):
            signal.signal(sig, pass_on)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    _, status = os.waitpid(job, 0)
    if main_thread:
        note_stop_signals(notice)
    os.set_blocking(returned, False)
    try:
        value = os.read(returned, 64).decode()
    except BlockingIOError:  # nothing written: the job returned no value, or was killed
        value = ""
    finally:
        os.close(returned)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return float(value) if value else None
    if code < 0:
        log.error(
            "job %s of the sweep: its process was killed by %s (SIGKILL: the kernel's "
            "out-of-memory killer, or a kill -9); its other jobs run, and resume=auto with the "
            "sweep's folder continues it from its newest checkpoint",
            num,
            signal.Signals(-code).name,
        )
        raise JobFailed(num, EXIT_RUN_FAILED, log_file)
    if code == EXIT_STOPPED:
        COMMAND.sweep_stopped = True
        log.warning(
            "job %s of the sweep was stopped: its later jobs are not started; %s",
            num,
            COMMAND.sweep_hint,
        )
    else:
        log.error("job %s of the sweep ended with exit status %s (see above)", num, code)
    raise JobFailed(num, code, log_file)


def forked_job(
    run: Callable[[DictConfig], float | None], cfg: DictConfig, num: int, sent: int
) -> NoReturn:
    """The process of one sweep job (:func:`in_a_process_of_its_own`): the run, its final return
    written to ``sent``, and its exit status as a single run's."""
    import multiprocessing

    code, value = EXIT_RUN_FAILED, None
    COMMAND.started = False  # this job's run has not started
    notice = submitit_notice()
    if notice and threading.current_thread() is threading.main_thread():
        signal.signal(notice, relay_notice)
    stop_with_parent()
    # joblib's worker set multiprocessing's start method to its own "loky", which a process
    # the run spawns (a broker shard) cannot set: it died at start and the run failed.
    multiprocessing.set_start_method(None, force=True)
    try:
        if threading.current_thread() is threading.main_thread():
            # Its start is a single run's: a signal ends it (KeyboardInterrupt). seedq-train
            # blocked them for its workers (wait_for_the_jobs): one pending arrives here.
            for sig in STOP_SIGNALS:
                signal.signal(sig, stop_the_start)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        value = run(cfg)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    except KeyboardInterrupt as exc:
        name = exc.name if isinstance(exc, StoppedWhileStarting) else "SIGINT"
        log.warning("job %s of the sweep stopped by %s while starting", num, name)
        code = EXIT_STOPPED
    except BaseException:
        log.exception("job %s of the sweep failed", num)
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            os.write(sent, b"" if value is None else repr(float(value)).encode())
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        # Not sys.exit: the worker's own exit handlers (joblib's queues) are not this
        # process's to run.
        os._exit(code)


def stop_with_parent() -> None:
    """Have Linux send this process SIGTERM when its parent (the joblib worker) dies: the job
    then stops with a checkpoint, as the rest of its sweep does when joblib ends its workers,
    rather than training on with no one to report to."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        signal_at_parent_death(signal.SIGTERM)
    except OSError as exc:
        log.warning("job of the sweep: cannot be stopped when its launcher's process dies: %s", exc)
        return
    if os.getppid() != parent:  # it died before prctl ran, which then never fires
        os.kill(os.getpid(), signal.SIGTERM)


def stop_the_start(signum: int, frame: object) -> None:
    """A sweep job's start in a launcher's process: the first stop signal ends it, as a single
    run's start. One after its run (which takes the signals itself) or after another (seedq-train
    passes on the signal a terminal gave every process of the group) stops the sweep's later
    jobs, not this one's end with an exception."""
    first = not COMMAND.sweep_stopped
    COMMAND.sweep_stopped = True
    if first and not COMMAND.started:
        raise StoppedWhileStarting(signal.Signals(signum).name)


def note_stop_signals(notice: signal.Signals | None = None) -> None:
    """A launcher's process between a sweep's jobs: a stop signal (or submitit's ``notice``)
    keeps its later jobs from starting, and the process (a joblib worker) lives on; killed,
    joblib killed the others."""

    def noted(signum: int, frame: object) -> None:
        if not COMMAND.sweep_stopped:
            log.warning("%s: this sweep's later jobs are not started", signal.Signals(signum).name)
        COMMAND.sweep_stopped = True

    for sig in (*STOP_SIGNALS, *([notice] if notice else [])):
        signal.signal(sig, noted)


def continue_sweep(hydra_cfg: Any, resumes: bool, fixed: bool) -> str:
    """How a stopped sweep goes on: its jobs' folders again, with ``resume=auto`` (a finished
    job is not trained again, the stopped one continues from its checkpoint)."""
    if resumes:
        return "the same command continues the sweep"
    if fixed:
        return "the same command with resume=auto continues the sweep"
    return (
        f"the same command with resume=auto hydra.sweep.dir={hydra_cfg.sweep.dir} continues "
        "the sweep"
    )


def sweep_failed() -> None:
    """End a sweep some of whose jobs failed or were stopped with their worst exit status, in
    one line."""
    stopped = COMMAND.job_codes.count(EXIT_STOPPED)
    failed = len(COMMAND.job_codes) - stopped
    ended = [
        f"{count} job{'s' if count > 1 else ''} of the sweep {verb}"
        for count, verb in ((failed, "failed"), (stopped, "stopped or not started"))
        if count
    ]
    print(
        f"seedq-train: {' and '.join(ended)} (see above); the sweep ends with the worst "
        f"status, {max(COMMAND.job_codes)}",
        file=sys.stderr,
    )
    sys.exit(max(COMMAND.job_codes))


def child_processes() -> list[int]:
    """The processes this one started (Linux: /proc)."""
    me, found = str(os.getpid()), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            found.append(int(entry.name))
    return found


def wait_for_the_jobs() -> None:
    """seedq-train's stop signals while its sweep's jobs run in a launcher's processes
    (joblib's workers). Raised into joblib, a signal made it kill those processes, the jobs in
    the middle of their stop checkpoints, and the command said no run had started; a worker
    that had no job yet died of it the same way. So each signal is passed on to the workers,
    whose running jobs stop with a checkpoint while this process waits; and the signals are
    blocked in this thread before any worker exists: the workers inherit the mask, a job
    unblocks it as it starts, and a signal pending in an idle worker stops its next job
    there."""
    from multiprocessing import resource_tracker

    # Started later (by joblib), multiprocessing's resource tracker unblocks SIGINT and
    # SIGTERM in the thread that starts it (CPython up to 3.13): the workers would not inherit
    # the mask.
    resource_tracker.ensure_running()
    COMMAND.not_jobs = set(child_processes())  # the tracker
    for sig in STOP_SIGNALS:
        signal.signal(sig, pass_on_to_the_jobs)
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def relay() -> None:
        # A signal no thread takes (all block it) reaches the handler through here.
        while True:
            _thread.interrupt_main(signal.sigwait(STOP_SIGNALS))

    threading.Thread(target=relay, name="sweep-signals", daemon=True).start()


def pass_on_to_the_jobs(signum: int, frame: object) -> None:
    """seedq-train's handler of a stop signal while its sweep's jobs run in other processes
    (:func:`wait_for_the_jobs`)."""
    name = signal.Signals(signum).name
    workers = set(child_processes()) - COMMAND.not_jobs
    if not workers:
        # No job has started yet: the command stops as any start does.
        raise KeyboardInterrupt if signum == signal.SIGINT else StoppedWhileStarting(name)
    if not COMMAND.sweep_stopped:
        COMMAND.sweep_stopped = True
        print(
            f"seedq-train: {name}: the sweep stops; its running jobs save a checkpoint and end, "
            "its jobs not started yet are not run",
            file=sys.stderr,
        )
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def stopped_between_jobs(exc: KeyboardInterrupt) -> None:
    """End a sweep a stop signal reached while no job's run held the signals (a job starting,
    or Hydra between two jobs): one line and exit status 75, not a traceback."""
    name = exc.name if isinstance(exc, StoppedWhileStarting) else "SIGINT"
    print(
        f"seedq-train: stopped by {name} before job {COMMAND.next_job} of the sweep started; "
        f"it and the jobs after it are not run (exit status {EXIT_STOPPED}: "
        f"{COMMAND.sweep_hint})",
        file=sys.stderr,
    )
    sys.exit(max([*COMMAND.job_codes, EXIT_STOPPED]))


def sweep_job(
    run: Callable[[DictConfig], float | None],
    cfg: DictConfig,
    hydra_cfg: Any,
    *,
    resumes: bool,
    fixed: bool,
) -> float | None:
    """One job of a sweep: ``run(cfg)`` here, in seedq-train's process (Hydra's basic
    launcher), or in a process of its own forked from a launcher's (joblib, submitit).
    ``resumes``: the command line has ``resume=auto``; ``fixed``: it names the sweep's folder."""
    COMMAND.sweep_hint = continue_sweep(hydra_cfg, resumes, fixed)
    if os.getpid() != COMMAND.main_pid:
        return in_a_process_of_its_own(run, cfg, hydra_cfg)
    COMMAND.next_job = hydra_cfg.job.num
    COMMAND.sweep_dir = str(hydra_cfg.sweep.dir)
    try:
        return run(cfg)
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        COMMAND.job_codes.append(int(exc.code))
        if exc.code == EXIT_STOPPED:
            # A stop signal (Ctrl-C, a scheduler's SIGTERM) stops the sweep, not only the job
            # it landed in: the next job started, and stopping a sweep took one per job.
            log.warning(
                "job %s of the sweep was stopped: the sweep stops with it, its later jobs are "
                "not started; %s",
                hydra_cfg.job.num,
                COMMAND.sweep_hint,
            )
            raise
        # A SystemExit would end the sweep here, its later jobs never run. The job returns
        # instead (an exception would be Hydra's failed job, printed with a traceback), and
        # the sweep ends with its worst job's status once all have run (train_main).
        log.error(
            "job %s of the sweep ended with exit status %s (see above); its other jobs run",
            hydra_cfg.job.num,
            exc.code,
        )
        return None
