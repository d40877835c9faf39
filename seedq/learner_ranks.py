"""Starting and running learner ranks with torch's own machinery.

* :func:`start_learners`: ``seedq-train hardware.learners=N`` on one machine. This process
  (the Hydra app, which composed and checked the config) starts N ranks through torch's elastic
  launcher (what ``torchrun --standalone`` runs), waits for them, and turns a rank's failure
  into one message that names the rank, its host and how it ended (a rank that refused the
  run, into a refusal with its reason).
* :func:`rank_main`: what each rank runs, whoever started it (the elastic launcher above,
  ``torchrun``, an ``srun`` step, torchrun over ssh): join the process group, take rank 0's
  config, build the run (rank 0 alone reads the checkpoint it resumes), take rank 0's agent
  state, run, compare the weights at an agreed end.

Exit codes of a rank: 0 done, 2 refused before starting (config), 3 the run failed (actors,
NaN training), 4 another rank was lost. A rank that dies is noticed by the launcher within a
second (it stops the other ranks) and by the other ranks' next collective (gloo: at once, its
sockets close; NCCL: ``hardware.learner_timeout_s``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from seedq.exit_status import EXIT_RANK_LOST, EXIT_REFUSED, EXIT_RUN_FAILED, EXIT_STOPPED
from seedq.parallel.ranks import (
    RankInfo,
    check_learners,
    launched_rank,
    rank_config,
    rank_device,
)

log = logging.getLogger(__name__)

# How often the launcher looks at its ranks (a dead one is noticed this fast).
MONITOR_INTERVAL_S = 0.5
RANK_LOG_FORMAT = (
    "%(asctime)s %(levelname)s [learner rank {rank} %(process)d] %(name)s: %(message)s"
)


class LearnersFailed(RuntimeError):
    """A learner rank failed; the message names it, its host and how it ended."""


class LearnersRefused(RuntimeError):
    """A learner rank refused the run before it started (a config only a rank can judge, such
    as its share of the actor slots); the message names the rank and gives its reason."""


class LearnersStopped(RuntimeError):
    """A stop signal (named) reached the ranks' launcher, which passed it on to the ranks: they
    stopped as one run does, rank 0 saving a checkpoint first."""


# --------------------------------------------------------------------------- one machine


def start_learners(config: Any) -> Any:
    """Run ``config`` as ``config.hardware.learners`` ranks on this machine; rank 0's
    :class:`~seedq.arch.monitor.RunSummary`. Raises :class:`LearnersFailed` if a rank failed."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    learners = config.hardware.learners
    elastic_dir = os.path.join(rank_log_dir(config), "elastic")
    launch = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=learners,
        # The launcher's own folders (one per rank and attempt, for error files) go with the
        # run, not into a new torchelastic_* folder in the temp dir on every run.
        logs_specs=DefaultLogsSpecs(log_dir=elastic_dir),
        run_id=f"seedq-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=MONITOR_INTERVAL_S,
        start_method="spawn",
    )
    log.info("starting %d learner ranks on %s (logs: %s)", learners, host(), rank_log_dir(config))
    # The launcher's own records of a failure would repeat ours, in several lines each.
    for name in ("torch.distributed.elastic", "torch.multiprocessing"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    from torch.distributed.elastic.multiprocessing.api import SignalException

    # The launcher turns SIGTERM and SIGINT into an exception here and passes them on to the
    # ranks, each of which stops with a checkpoint. SIGUSR1 (Slurm's --signal=B:USR1@90 before
    # a time limit) it leaves alone: it killed this process and orphaned the ranks. It goes the
    # way of a SIGTERM.
    received: list[str] = []

    def as_sigterm(signum: int, frame: object) -> None:
        received.append(signal.Signals(signum).name)
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.signal(signal.SIGUSR1, as_sigterm)
    try:
        results = elastic_launch(launch, rank_entry)(config)
    except ChildFailedError as exc:
        raise launch_error(exc, config.run_dir, learners) from None
    except SignalException as exc:
        raise LearnersStopped(received[0] if received else exc.sigval.name) from None
    finally:
        signal.signal(signal.SIGUSR1, previous)
        remove_empty_dirs(elastic_dir)
    return results[0]


def remove_empty_dirs(top: str) -> None:
    """Remove ``top`` and the folders under it that hold no file (what the launcher wrote is
    kept, with the folders leading to it)."""
    for path, _, _ in os.walk(top, topdown=False):  # each folder after those under it
        with contextlib.suppress(OSError):  # a folder that holds a file stays
            os.rmdir(path)


def launch_error(exc: Any, run_dir: str, ranks: int) -> Exception:
    """What the failure of ``ranks`` ranks (torch's ``ChildFailedError``) is to seedq-train:
    a stop when every failed rank stopped on a signal (exit 75), a refusal when the rank that
    failed first refused the run (exit 2), else a failed run (exit 3)."""
    if all(f.exitcode == EXIT_STOPPED for f in exc.failures.values()):
        return LearnersStopped("a stop signal to the ranks")
    rank, failure = first_cause(exc)
    if failure.exitcode == EXIT_REFUSED:
        return LearnersRefused(describe_refusal(rank, failure))
    return LearnersFailed(describe_failure(exc, run_dir, ranks))


def first_cause(exc: Any) -> tuple[int, Any]:
    """The rank (and its failure) that failed first: one that died of a signal or failed by
    itself, not one that only stopped because it lost another (lowest rank first)."""
    failures = sorted(exc.failures.items())
    causes = [(r, f) for r, f in failures if f.exitcode != EXIT_RANK_LOST] or failures
    return causes[0]


def describe_failure(exc: Any, run_dir: str, ranks: int) -> str:
    """One line about the rank that failed first (:func:`first_cause`) among ``ranks``, the
    ranks stopped because of it, and what the run left to go on from."""
    rank, failure = first_cause(exc)
    if failure.exitcode < 0:
        how = f"was killed by {failure.signal_name()}"
    else:
        log_file = os.path.join(rank_log_dir_of(run_dir), f"rank-{rank}.log")
        how = f"exited with code {failure.exitcode} (its log: {log_file})"
    stopped = ", ".join(str(r) for r in range(ranks) if r != rank)
    return (
        f"learner rank {rank} (pid {failure.pid}) on {host()} {how}; the other ranks "
        f"({stopped}) were stopped. {how_to_go_on(run_dir)}"
    )


def describe_refusal(rank: int, failure: Any) -> str:
    """One line: rank ``rank`` refused the run, with the reason it left in its error file."""
    reason = failure.message if isinstance(failure.message, str) else ""
    if not reason or reason.startswith("To enable traceback"):  # torch's text for no file
        reason = "see its error above"
    return f"learner rank {rank} (pid {failure.pid}) on {host()} refused the run: {reason}"


def how_to_go_on(run_dir: str) -> str:
    """What a run of ranks that ended early left in ``run_dir``, and the command that goes on
    from it: a checkpoint to resume, metrics rows to start over beside, or nothing at all."""
    from seedq.arch.resume import metrics_in
    from seedq.learner.checkpoint_files import newest_checkpoint

    if newest_checkpoint(run_dir) is not None:
        return (
            f"The newest checkpoint is in {run_dir}/checkpoints: seedq-train resume={run_dir} "
            "continues it, with any hardware.learners"
        )
    if metrics_in(run_dir):
        return (
            "No checkpoint was saved, nothing to resume: the same command with resume=auto and "
            f"run_dir={run_dir} starts the run again (its metrics so far are kept aside)"
        )
    return "Nothing was saved (no checkpoint yet): the same command starts the run again"


def rank_entry(config: Any) -> Any:
    """The function each rank started by :func:`start_learners` runs (in a fresh process)."""
    info = launched_rank()
    if info is None:
        raise RuntimeError("rank_entry runs only under torch's elastic launcher")
    setup_rank_logging(info.rank)
    summary = rank_main_or_exit(info, config.hardware, lambda: (config, resume_state(config)))
    from seedq.arch.base import STOPPED

    if summary is not None and summary.stop_reason == STOPPED:
        # Stopped by a signal, its checkpoint written: the launcher is shutting down and will
        # not read a returned summary, while the process it started waits for that read (30 s,
        # then SIGKILL). Exit now, with the status of a stopped run.
        logging.shutdown()
        os._exit(EXIT_STOPPED)
    return summary


def resume_state(config: Any) -> dict | None:
    """The checkpoint ``config.resume`` names (rank 0 reads it), or None for a fresh run."""
    from seedq.learner.checkpoint import read_checkpoint

    return read_checkpoint(config.resume)[1] if config.resume else None


# ------------------------------------------------------------------------------ any rank


def host() -> str:
    return socket.gethostname()


def rank_log_dir(config: Any) -> str:
    return rank_log_dir_of(config.run_dir)


def rank_log_dir_of(run_dir: str) -> str:
    return os.path.join(run_dir, "learners")


def setup_rank_logging(rank: int) -> None:
    """A fresh rank process's console (rank 0 alone shows more than warnings)."""
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(RANK_LOG_FORMAT.format(rank=rank)))
    root.addHandler(console)
    quiet_console(rank)


def log_to_rank_file(rank: int, run_dir: str) -> None:
    """Everything this rank logs also goes to ``RUN_DIR/learners/rank-K.log`` (on its host),
    however it was started."""
    os.makedirs(rank_log_dir_of(run_dir), exist_ok=True)
    file = logging.FileHandler(os.path.join(rank_log_dir_of(run_dir), f"rank-{rank}.log"))
    file.setFormatter(logging.Formatter(RANK_LOG_FORMAT.format(rank=rank)))
    file.setLevel(logging.INFO)
    logging.getLogger().addHandler(file)


class _NotATerminal:
    """stderr as other ranks see it: the same stream, but never a terminal (so only rank 0
    draws a progress bar)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def quiet_console(rank: int) -> None:
    """Ranks other than 0 show only warnings and errors on the console (their log files keep
    everything) and no progress bar: the console shows one run."""
    if rank == 0:
        return
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:
            handler.setLevel(logging.WARNING)
    sys.stderr = _NotATerminal(sys.stderr)  # type: ignore[assignment]


def interrupt_once() -> None:
    """The first SIGINT stops the rank like Ctrl-C; later ones (the launcher passes the
    terminal's Ctrl-C on, which the rank already got) must not break its last checkpoint."""
    interrupted = False

    def handler(signum: int, frame: object) -> None:
        nonlocal interrupted
        if interrupted:
            log.warning("already stopping (signal %d ignored)", signum)
            return
        interrupted = True
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, handler)


def refusals() -> tuple[type[Exception], ...]:
    """The errors that refuse a run before it starts (exit 2, one line)."""
    from seedq.arch import ArchUnavailable
    from seedq.envs import EnvError
    from seedq.learner.checkpoint import CheckpointError
    from seedq.schema import ConfigError

    return (ConfigError, EnvError, CheckpointError, ArchUnavailable)


def rank_main_or_exit(
    info: RankInfo, hardware: Any, resolve: Callable[[], tuple[Any, dict | None]]
) -> Any:
    """:func:`rank_main`, with each way of failing turned into one log line and an exit code."""
    from seedq.core.stats import NonFiniteTraining
    from seedq.launch.actors import ActorFailure
    from seedq.parallel.group import LearnerRankLost

    try:
        return rank_main(info, hardware, resolve)
    except refusals() as exc:
        log.error("%s", exc)
        leave_reason(str(exc))
        sys.exit(EXIT_REFUSED)
    except LearnerRankLost as exc:
        log.error("stopped: %s", exc)
        sys.exit(EXIT_RANK_LOST)
    except (ActorFailure, NonFiniteTraining) as exc:
        log.error("learner rank %d: run failed: %s", info.rank, exc)
        sys.exit(EXIT_RUN_FAILED)


def leave_reason(reason: str) -> None:
    """Write ``reason`` where torch's launcher reads a failed rank's error (its error file,
    ``TORCHELASTIC_ERROR_FILE``; no file under srun), so the launcher's report can give it."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        with open(path, "w") as f:
            json.dump({"message": reason, "timestamp": int(time.time())}, f)
    except OSError as exc:
        log.warning("could not leave the reason in %s: %s", path, exc)


def rank_main(info: RankInfo, hardware: Any, resolve: Callable[[], tuple[Any, dict | None]]) -> Any:
    """Join the learner ranks and run rank ``info.rank`` of the run ``resolve`` describes
    (called on rank 0 only: its config is every rank's; its checkpoint, if it resumes one, is
    read there alone). ``hardware``: this process's own ``hardware`` section, which picks the
    backend before rank 0's config has arrived."""
    import torch

    from seedq.arch import run_class
    from seedq.config import validate
    from seedq.parallel.agreement import RankAgreement, joined
    from seedq.parallel.group import LearnerGroup
    from seedq.schema import ConfigError

    refused = refusals()
    check_learners(hardware.learners, info)
    interrupt_once()
    cuda = torch.cuda.device_count() if str(hardware.device).startswith("cuda") else 0
    device = torch.device(rank_device(str(hardware.device), info.local_rank, cuda))
    group = LearnerGroup(info, device, hardware.learner_timeout_s)
    agreement = RankAgreement(group)
    try:
        refusal, resumed_at = "", 0
        if group.rank == 0:
            try:
                config, state = resolve()
                # Checked again as the ranks will run it (torchrun's ranks, not the key, count).
                validate(rank_config(config, info, cuda))
            except refused as exc:
                group.broadcast_object((None, str(exc), 0))
                raise
            resumed_at = int(state["env_steps"]) if state is not None else 0
            group.broadcast_object((config, "", resumed_at))
        else:
            config, refusal, resumed_at = group.broadcast_object(None)
            state = None
        if refusal:
            raise ConfigError(f"rank 0 refused the run: {refusal}")
        log_to_rank_file(info.rank, config.run_dir)
        if group.rank == 0:
            log.info(
                "%d learner ranks (%s, %s) started by %s; rank 0 on %s writes the run",
                group.world_size,
                group.backend,
                device.type,
                info.launcher,
                info.host,
            )
        config = rank_config(config, info, cuda, resumed_at)
        with joined(agreement):
            run = run_class(config.arch.name)(config, config.run_dir, resume=state)
            group.align_agent(run.agent)
            summary = run.run()
            if agreement.stopped_together and not group.lost:
                group.compare_weights(run.agent, run.stats.env_steps)
        return summary
    finally:
        group.close()
