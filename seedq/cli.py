"""Command-line entry points. ``seedq-train`` is a Hydra app over ``seedq/conf``.

Its exit statuses (:mod:`seedq.exit_status`): 0 the run finished; 2 refused before anything
started; 3 a fault the run could not survive, or a finish whose final checkpoint could not be
written; 75 stopped by SIGINT, SIGTERM or SIGUSR1 after a
checkpoint, to be continued by the same command with ``resume=auto``.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from seedq.command_keys import AUTO, key_refusal, missing_launcher, print_keys, whole_numbers
from seedq.config import ConfigError, SeedqConfig, register_configs, schema_for, validate
from seedq.cores import usable_cores
from seedq.exit_status import (
    EXIT_REFUSED,
    EXIT_RUN_FAILED,
    EXIT_STOPPED,
    STOP_SIGNALS,
    StoppedWhileStarting,
    exit_while_starting,
    stop_while_starting,
)
from seedq.launch.sizing import size_config, size_run
from seedq.launch.sweep_jobs import (
    COMMAND,
    WORKER_LOST,
    stopped_between_jobs,
    sweep_failed,
    sweep_job,
    wait_for_the_jobs,
)
from seedq.launch.sweeps import jobs_elsewhere, sweep_refusal, sweeping
from seedq.learner.errors import CheckpointError
from seedq.logging_setup import quiet_file_errors
from seedq.parallel.ranks import check_ranks_fit, launched_rank
from seedq.run_dirs import RunDirRecord, live_run_dir, unusable_run_dir, with_hydra_dir

log = logging.getLogger("seedq")

register_configs()


def to_config(cfg: DictConfig) -> SeedqConfig:
    """Size a composed DictConfig to this machine (its 0 keys, ``seedq.launch.sizing``),
    validate it and turn it into the typed dataclass tree."""
    size_config(cfg)
    validate(cfg)
    if cfg.security.keys_dir:
        # The run saves it in its checkpoints and hands it to actors: relative, a resume from
        # another directory, and actors that run in another (an ssh login dir, launcher.workdir
        # with remote_keys_dir=""), looked for the keys in the wrong folder.
        cfg.security.keys_dir = os.path.abspath(os.path.expanduser(cfg.security.keys_dir))
    return OmegaConf.to_object(cfg)


RESUME_GROUPS = ("algorithm", "env", "launcher")


def compatible(path: Any, saved: dict, current: dict) -> None:
    """Refuse a checkpoint whose run differs from this one in a setting that shapes the
    network: the model, the env, and the keys the saved algorithm declares with
    ``setting(..., network=True)``."""
    from seedq.agents.registry import agent_names, config_class
    from seedq.learner.checkpoint import check_compatible
    from seedq.schema import network_keys

    name = str(saved.get("algorithm", {}).get("name", ""))
    keys = network_keys(config_class(name)) if name in agent_names() else ()
    check_compatible(path, saved, current, keys)


def resumed_config(composed: DictConfig, overrides: list[str]) -> tuple[SeedqConfig, dict]:
    """The config of the run ``composed.resume`` points at, with this command line on top.

    ``seedq-train resume=RUN`` alone continues RUN as it was; ``key=value`` overrides change
    what may change (``max_minutes=30``, ``total_env_steps=...``, ``hardware=gpu``). Choosing
    ``algorithm``, ``env`` or ``launcher`` groups is allowed only if they match the checkpoint.
    """
    from seedq.learner.checkpoint import read_checkpoint
    from seedq.learner.checkpoint_files import run_dir_of

    # A run dir's newest checkpoint that reads; a damaged newer one is then set aside with the
    # other newer ones (set_aside_newer), so the resumed run's own checkpoints are the newest.
    path, state = read_checkpoint(str(composed.resume))
    saved = OmegaConf.create(state["config"])
    current = OmegaConf.to_container(composed, resolve=True)
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key == "resume" or key.startswith("hydra"):
            continue
        if key in RESUME_GROUPS:
            compatible(path, state["config"], current)
        elif key in ("hardware", "arch", "logger"):
            saved[key] = composed[key]
        else:
            OmegaConf.update(saved, key, override.value(), merge=False)
    # A key override may reshape the network (algorithm.model.*, algorithm.value_norm): refuse
    # it here, naming the key, rather than when the weights do not fit.
    compatible(path, state["config"], OmegaConf.to_container(saved, resolve=True))
    saved.resume = str(path)
    if not any(o.startswith("run_dir=") for o in overrides):
        # The run goes on where its checkpoint lies, not in the folder it was saved from (a
        # run moved or copied elsewhere): a lone checkpoint file goes on in Hydra's new folder.
        saved.run_dir = str(run_dir_of(path) or composed.run_dir)
    schema = schema_for(saved.algorithm.name, saved.env.get("kind", "cartpole"))
    try:
        typed = OmegaConf.merge(OmegaConf.structured(schema), saved)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"resuming {path}: {str(exc).splitlines()[0]}") from None
    return to_config(typed), state


def fixed_run_dir(hydra_cfg: Any) -> bool:
    """Whether this command line names the run directory (else Hydra makes a new one)."""
    # A sweep's jobs have fixed folders when its sweep dir is named: DIR/<job number>.
    fixed = ("hydra.run.dir=", "hydra.sweep.dir=")
    return any(o.startswith("run_dir=") for o in hydra_cfg.overrides.task) or any(
        o.startswith(fixed) for o in hydra_cfg.overrides.hydra
    )


def auto_resumed(composed: DictConfig, hydra_cfg: Any) -> tuple[SeedqConfig, dict | None]:
    """``resume=auto``: this command line's config, continued from the newest checkpoint of its
    run directory that reads (None: there is none yet, the run starts from scratch)."""
    from seedq.arch.resume import start_over
    from seedq.learner.checkpoint import load_newest

    if not fixed_run_dir(hydra_cfg):
        example = (
            # One folder for every job of a sweep would be refused: one per job.
            "'run_dir=runs/sweep/${hydra:job.num}', one per job of this sweep"
            if hydra_cfg.mode == RunMode.MULTIRUN
            else "run_dir=runs/pong-1"
        )
        raise ConfigError(
            f"resume=auto needs the same run directory at every start: add run_dir=DIR (e.g. "
            f"{example}); without it each start gets a new dated directory with nothing to "
            "resume"
        )
    run_dir = str(composed.run_dir)
    found = load_newest(run_dir)
    if found is None:
        log.info("resume=auto: no checkpoint in %s yet; starting the run", run_dir)
        start_over(run_dir)  # rows already there are kept aside, never cut
        composed.resume = None
        return to_config(composed), None
    path, state = found
    compatible(path, state["config"], OmegaConf.to_container(composed, resolve=True))
    saved_seed = state["config"].get("seed")
    if saved_seed is not None and int(saved_seed) != int(composed.seed):
        # Another seed is another run: continuing this one under it would mix two runs in
        # one curve (a sweep's seeds reordered, a run dir reused).
        raise ConfigError(
            f"resume=auto: the run in {run_dir} is seed={saved_seed}; this command line says "
            f"seed={composed.seed}, another run: give it its own run_dir, or seed={saved_seed} "
            "to continue this one"
        )
    composed.resume = str(path)
    return to_config(composed), state


def finished_reason(state: dict, cfg: SeedqConfig) -> str:
    """The stop rule a checkpointed run already met under ``cfg``'s budgets ("" if none)."""
    reason = state.get("stop_reason", "")
    if state["env_steps"] >= cfg.total_env_steps:
        # Whatever stopped it (a periodic checkpoint resumed under a smaller budget too).
        reason = "total_env_steps"
    saved_target = state["config"].get("stop_at_return")
    met = {
        "total_env_steps": state["env_steps"] >= cfg.total_env_steps,
        "max_minutes": bool(cfg.max_minutes) and state["wall_time_s"] >= cfg.max_minutes * 60,
        "target_return": cfg.stop_at_return is not None
        and saved_target is not None
        and cfg.stop_at_return <= saved_target,
    }
    return reason if met.get(reason) else ""


def supervise(cfg: DictConfig, hydra_cfg: Any) -> int:
    """``supervise=true``: this run's learner as a child process, restarted when it dies."""
    from seedq.launch.supervise import Supervisor, learner_command

    if hydra_cfg.mode == RunMode.MULTIRUN:
        raise ConfigError("supervise=true supervises one run, not a sweep (-m)")
    if cfg.resume not in (None, AUTO):
        raise ConfigError(
            f"supervise=true resumes with resume=auto by itself; drop resume={cfg.resume} "
            "(run_dir=DIR continues the run in DIR)"
        )
    config = to_config(cfg)  # refused here, once, rather than by every learner
    command = learner_command(
        list(hydra_cfg.overrides.task), list(hydra_cfg.overrides.hydra), config.run_dir
    )
    log.info("supervising the run in %s", config.run_dir)
    return Supervisor(command, config.supervisor, config.run_dir).run()


def another_run_in(run_dir: str) -> str:
    """What of a run ``run_dir`` holds ("" if nothing): its newest checkpoint, or the metrics
    of a run stopped before its first checkpoint (which resume=auto starts over)."""
    from seedq.arch.resume import metrics_in
    from seedq.learner.checkpoint_files import DIR_NAME, newest_checkpoint

    if saved := newest_checkpoint(run_dir):
        return f"{DIR_NAME}/{saved.name}"
    if name := metrics_in(run_dir):
        return f"{name}, no checkpoint"
    return ""


def resolve_config(
    cfg: DictConfig, hydra_cfg: Any, ranks_here: int = 1, *, rank_zero: bool = False
) -> tuple[SeedqConfig | None, dict | None]:
    """The typed config of this command line and, when it resumes (``resume=DIR`` or
    ``resume=auto``), the checkpoint it continues; ``(None, None)`` when ``resume=auto`` finds
    the run already finished under this command line's budgets.

    ``ranks_here``: learner ranks sharing this machine, each taking its share of the cores
    (``hardware.runs_at_once``) unless the command line says otherwise. ``rank_zero``: this
    process is rank 0 of several learner ranks a launcher started (torchrun, srun), which
    holds the run dir's lock.
    """
    from seedq.learner.checkpoint_files import run_dir_of, set_aside_newer
    from seedq.learner.run_lock import claim_run_dir

    # One process holds the run dir for the run's life: the learner; with several ranks, the
    # command line that starts them on this machine, or rank 0 where a launcher started them
    # (torchrun, srun, or launcher.learner_hosts' torchrun over ssh: there the command line
    # that starts them does not hold it, or their rank 0 would find it held).
    local_ranks = not cfg.launcher.learner_hosts
    claim = (
        claim_run_dir
        if cfg.hardware.learners == 1 or rank_zero or local_ranks
        else (lambda _: None)
    )
    if cfg.resume not in (None, AUTO):
        config, state = resumed_config(cfg, list(hydra_cfg.overrides.task))
        own = run_dir_of(Path(config.resume))
        elsewhere = own is None or own.resolve() != Path(config.run_dir).resolve()
        if elsewhere and (held := another_run_in(config.run_dir)):
            raise ConfigError(
                f"run_dir={config.run_dir} holds another run ({held}); resuming "
                f"{config.resume} there would mix the two runs' metrics and checkpoints: "
                "give it an empty run_dir, or leave run_dir out to go on in the checkpoint's own"
            )
        claim(config.run_dir)
        if done := finished_reason(state, config):
            log.info(
                "resume: %s already finished (%s at %d env steps); nothing to do, nothing "
                "changed (a larger total_env_steps or max_minutes on this command line "
                "continues it)",
                config.resume,
                done,
                state["env_steps"],
            )
            return None, None
        log.info("resuming %s in %s", config.resume, config.run_dir)
        set_aside_newer(Path(config.resume), Path(config.run_dir))
        return config, state
    if ranks_here > 1 and not cfg.hardware.runs_at_once:
        cfg.hardware.runs_at_once = ranks_here
    size_run(cfg, hydra_cfg.overrides.task, hydra_cfg.launcher)
    if cfg.resume != AUTO:
        config = to_config(cfg)
        if held := another_run_in(config.run_dir):
            remedy = (
                # run_dir= alone on a sweep's command line is refused (one folder for all).
                "continue the sweep with resume=auto added to its command line, or give the "
                "sweep another folder (hydra.sweep.dir=DIR)"
                if hydra_cfg.mode == RunMode.MULTIRUN
                else f"continue it with resume=auto run_dir={config.run_dir}, or give this run "
                "another run_dir"
            )
            raise ConfigError(
                f"{config.run_dir} holds another run ({held}); {remedy} (a fresh run there "
                "would mix both runs' metrics and checkpoints)"
            )
        claim(config.run_dir)
        return config, None
    claim(str(cfg.run_dir))
    config, state = auto_resumed(cfg, hydra_cfg)
    if state is None:
        return config, None
    done = finished_reason(state, config)
    if done:
        log.info(
            "resume=auto: the run in %s already finished (%s at %d env steps); nothing to "
            "do (a larger total_env_steps or max_minutes, or another stop_at_return, on this "
            "command line continues it)",
            config.run_dir,
            done,
            state["env_steps"],
        )
        return None, None
    log.info("resuming %s in %s", config.resume, config.run_dir)
    return config, state


def resolve_rank_config(cfg: DictConfig, hydra_cfg: Any, ranks_here: int) -> tuple[Any, Any]:
    """:func:`resolve_config` for a rank started by torchrun or srun (on rank 0)."""
    config, state = resolve_config(cfg, hydra_cfg, ranks_here, rank_zero=True)
    if config is None:
        raise ConfigError("resume=auto: the run already finished; nothing for the ranks to do")
    return config, state


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def _train(cfg: DictConfig) -> float | None:
    # Hydra's joblib launcher sends this function to its workers by value, with copies of
    # the module's objects it names (COMMAND): the job's work is a function sent by name.
    return train_job(cfg)


def train_job(cfg: DictConfig) -> float | None:
    """One run, or one job of a sweep, of a composed config."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return _train_job(cfg)
    return sweep_job(
        _train_job, cfg, hydra_cfg, resumes=cfg.resume == AUTO, fixed=fixed_run_dir(hydra_cfg)
    )


def _train_job(cfg: DictConfig) -> float | None:
    from seedq import learner_ranks
    from seedq.arch import ArchUnavailable, run_class
    from seedq.core.stats import RunFault
    from seedq.envs import EnvError

    COMMAND.composed = True
    hydra_cfg = HydraConfig.get()
    quiet_file_errors()  # Hydra's cli.log on a full disk: one line, not a trace per record
    if not os.path.isabs(cfg.run_dir):
        # The directory the command started in, as the run lock's check before Hydra read it:
        # with hydra.job.chdir=true this process now runs inside the run dir, and the run went
        # into DIR/DIR (a supervised one into DIR/DIR/DIR), apart from Hydra's files in DIR.
        cfg.run_dir = os.path.join(hydra_cfg.runtime.cwd, cfg.run_dir)
    try:
        ranks = learner_ranks.launched_rank()
        if ranks is not None:
            # torchrun or an srun step started this process as one of several learner ranks.
            learner_ranks.quiet_console(ranks.rank)
            resolve = functools.partial(resolve_rank_config, cfg, hydra_cfg, ranks.local_world_size)
            summary = learner_ranks.rank_main_or_exit(ranks, cfg.hardware, resolve)
            return summary.return_mean
        COMMAND.output_dir = str(hydra_cfg.runtime.output_dir)
        if cfg.supervise:
            COMMAND.started = True
            sys.exit(supervise(cfg, hydra_cfg))
        ranks_here = 1 if cfg.launcher.learner_hosts else cfg.hardware.learners
        check_ranks_fit(ranks_here, usable_cores())
        config, state = resolve_config(cfg, hydra_cfg, ranks_here)
        if config is None:
            return None
        if config.hardware.learners > 1:
            if not config.launcher.learner_hosts and config.hardware.learners != ranks_here:
                # A resumed run's own count, when the command line does not set it.
                check_ranks_fit(config.hardware.learners, usable_cores())
            COMMAND.started = True
            return start_learners(
                config,
                list(hydra_cfg.overrides.task),
                quiet_after=hydra_cfg.mode != RunMode.MULTIRUN,
            )
        # torch comes in here: a config refused above costs no torch import (~2 s).
        from seedq.arch.base import STOPPED

        run = run_class(config.arch.name)(config, config.run_dir, resume=state)
    except (ConfigError, EnvError, CheckpointError, ArchUnavailable) as exc:
        log.error("%s", exc)
        sys.exit(EXIT_REFUSED)
    except RunFault as exc:
        # A part of the run that failed while it started (a broker shard that could not bind
        # refuses in its own log line): the reason, not a trace; nothing was trained.
        log.error("run failed while starting: %s", exc)
        sys.exit(EXIT_RUN_FAILED)
    except OSError as exc:
        if exc.errno not in DISK_ERRORS:
            raise
        # A resume on a disk still full, a metrics file that cannot be replaced: nothing was
        # trained, and what is on disk is as it was.
        log.error(
            "run failed while starting: %s; free space or fix the folder's permissions, then the "
            "same command (resume=auto continues from the newest checkpoint) (exit status %d)",
            exc,
            EXIT_RUN_FAILED,
        )
        sys.exit(EXIT_RUN_FAILED)
    COMMAND.started = True
    if hydra_cfg.mode == RunMode.MULTIRUN:
        COMMAND.next_job = hydra_cfg.job.num + 1
    try:
        summary = run.run()
    except RunFault as exc:
        # The run already saved its last good weights; the user needs the reason, not a trace.
        log.error("run failed: %s (the newest checkpoint is in %s)", exc, run.run_dir)
        sys.exit(EXIT_RUN_FAILED)
    finally:
        if hydra_cfg.mode != RunMode.MULTIRUN:
            # A sweep's next job starts as a single run does: a signal then stops the sweep.
            ended_quietly_on_stop_signals()
    from seedq.learner.checkpoint_files import newest_checkpoint

    # A checkpoint to go on from: the last one written, or (when it failed) an earlier one.
    on_disk = run.last_checkpoint_written or newest_checkpoint(run.run_dir) is not None
    if summary.stop_reason == STOPPED:
        saved = (
            "with a checkpoint"
            if run.last_checkpoint_written
            else "but its stop checkpoint could not be written (see above; the newest one "
            "written is kept)"
            if on_disk
            else "but its stop checkpoint could not be written (see above), and none was "
            "before it: nothing of the run is saved"
        )
        if hydra_cfg.mode != RunMode.MULTIRUN:
            log.warning(
                "stopped by %s %s (exit status %d); the same command with resume=auto and "
                "run_dir=%s %s",
                run.stop_signal or "Ctrl-C",
                saved,
                EXIT_STOPPED,
                run.run_dir,
                "continues the run" if on_disk else "starts it again",
            )
        else:
            log.warning("stopped by %s %s", run.stop_signal or "Ctrl-C", saved)
        sys.exit(EXIT_STOPPED)
    if not run.last_checkpoint_written and run.weights_not_finite:
        # Not the disk: the training diverged, and a NaN state is never written.
        log.error(
            "the run finished (%s) but its weights or optimizer state hold NaN or inf (see "
            "above): the training diverged, and nothing since the newest checkpoint on disk is "
            "saved. Lower algorithm.lr (or the loss weights), then resume=auto with run_dir=%s "
            "continues from that checkpoint (exit status %d)",
            summary.stop_reason,
            run.run_dir,
            EXIT_RUN_FAILED,
        )
        sys.exit(EXIT_RUN_FAILED)
    if not run.last_checkpoint_written:
        # Finished, but what it learned since the newest checkpoint on disk would go with the
        # process: not a finish a script or scheduler may take for one.
        log.error(
            "the run finished (%s) but its final checkpoint could not be written (see above): "
            "what it learned since the newest checkpoint on disk is not saved%s. Free space or "
            "fix the folder's permissions; the same command with resume=auto and run_dir=%s "
            "then %s (exit status %d)",
            summary.stop_reason,
            "" if on_disk else " (there is none: nothing of the run is)",
            run.run_dir,
            "continues from the newest checkpoint" if on_disk else "starts the run again",
            EXIT_RUN_FAILED,
        )
        sys.exit(EXIT_RUN_FAILED)
    # Returned to Hydra so sweeps (and optimisation sweepers) see the final return.
    return summary.return_mean


def ended_quietly_on_stop_signals() -> None:
    """After the run has ended, its files written: a stop signal in the second or so the
    process takes to exit (a scheduler's SIGTERM as the run finishes) is noted, not a kill
    with status 143 of a run that finished. A second one still ends the process."""

    def noted(signum: int, frame: object) -> None:
        log.info("%s after the run ended: it exits as it is", signal.Signals(signum).name)
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)

    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, noted)


def start_learners(
    config: SeedqConfig, overrides: list[str], *, quiet_after: bool = False
) -> float | None:
    """``hardware.learners=N``: N ranks on this machine, or on ``launcher.learner_hosts`` over
    ssh, as one run; exit 3 naming the rank (or host) that failed, 2 when a rank refused.
    ``quiet_after``: a stop signal once the ranks ended is noted, as a single run's is
    (:func:`ended_quietly_on_stop_signals`): torch's launcher had given the signals back to
    their defaults, and a scheduler's second SIGTERM turned the exit status of a run that
    stopped with its checkpoint (75) into 143."""
    from seedq.launch.learner_hosts import LearnerHostFailed, run_on_learner_hosts
    from seedq.learner_ranks import LearnersFailed, LearnersRefused, LearnersStopped
    from seedq.learner_ranks import start_learners as start_here

    try:
        if config.launcher.learner_hosts:
            run_on_learner_hosts(config, overrides)
            return None
        return start_here(config).return_mean
    except LearnersRefused as exc:
        log.error("%s", exc)
        sys.exit(EXIT_REFUSED)
    except (LearnersFailed, LearnerHostFailed) as exc:
        log.error("run failed: %s", exc)
        sys.exit(EXIT_RUN_FAILED)
    except LearnersStopped as exc:
        log.warning("%s", stopped_ranks_message(str(exc), config.run_dir))
        sys.exit(EXIT_STOPPED)
    finally:
        if quiet_after:
            ended_quietly_on_stop_signals()


def stopped_ranks_message(signal_name: str, run_dir: str) -> str:
    """What ``seedq-train`` says when a stop signal ended its learner ranks: a checkpoint to
    continue with ``resume=auto``, or (stopped while they started) that nothing was saved."""
    from seedq.learner.checkpoint_files import newest_checkpoint
    from seedq.learner_ranks import how_to_go_on

    if newest_checkpoint(run_dir) is not None:
        return (
            f"stopped by {signal_name}: the learner ranks stopped, rank 0 saving a checkpoint "
            f"first (exit status {EXIT_STOPPED}); the same command with resume=auto and "
            f"run_dir={run_dir} continues the run"
        )
    return (
        f"stopped by {signal_name} before the learner ranks saved a checkpoint (exit status "
        f"{EXIT_STOPPED}). {how_to_go_on(run_dir)}"
    )


# What a full disk, a quota or a folder this user cannot write raise while a run starts.
DISK_ERRORS = frozenset(
    [errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO]
)
HYDRA_ERROR = 1  # Hydra's exit status for any error it reports itself


# Hydra's options that print something and exit, trained nothing.
PRINTING_OPTIONS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--resolve")


def reader_left() -> None:
    """After a BrokenPipeError on stdout (``seedq-train --help | head``: the reader left):
    point stdout at /dev/null, or Python's flush at exit raises again on the same pipe."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class ReaderMayLeave:
    """stdout for what Hydra prints and exits (help, the config): a reader that left
    (``| head``) ends the printing quietly, where Hydra reported the BrokenPipeError with a
    traceback (exit 1) or let it escape."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            reader_left()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            reader_left()

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the stream's own attributes
        return getattr(self._stream, name)


def train_main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--keys":
        try:
            print_keys(sys.argv[2:])
        except BrokenPipeError:
            reader_left()
        return
    COMMAND.main_pid = os.getpid()
    sys.argv[1:] = argv = whole_numbers(sys.argv[1:])
    if refusal := (
        key_refusal(argv) or missing_launcher(argv) or sweep_refusal(argv) or unusable_run_dir(argv)
    ):
        print(f"seedq-train: {refusal}", file=sys.stderr)
        sys.exit(EXIT_REFUSED)
    sys.argv[1:] = with_hydra_dir(sys.argv[1:])
    if refusal := live_run_dir(sys.argv[1:]):
        print(f"seedq-train: {refusal}", file=sys.stderr)
        sys.exit(EXIT_REFUSED)
    multirun = sweeping(sys.argv[1:])
    record = None if multirun or launched_rank() is not None else RunDirRecord(sys.argv[1:])
    # A sweep into Hydra's dated folder, its jobs run here (Hydra's basic launcher).
    named = ("hydra.sweep.dir=", "hydra.sweep.subdir=")
    dated = not any(a.startswith(named) for a in sys.argv[1:])
    in_here = multirun and dated and not jobs_elsewhere(sys.argv[1:])
    sweep_record = RunDirRecord([]) if in_here else None
    stop_while_starting()
    if multirun and jobs_elsewhere(sys.argv[1:]):
        wait_for_the_jobs()
    if any(a in PRINTING_OPTIONS for a in sys.argv[1:]):
        sys.stdout = ReaderMayLeave(sys.stdout)  # `seedq-train --help | head`
    try:
        _train()
    except KeyboardInterrupt as exc:
        if multirun and COMMAND.started:
            stopped_between_jobs(exc)
        # Ctrl-C before the run took over the signal (imports, config, start-up): one line,
        # not an import's traceback. A started run saves a checkpoint and exits 75 itself.
        if COMMAND.started and not isinstance(exc, StoppedWhileStarting):
            raise
        # StoppedWhileStarting: raised only while no run (nor a supervisor or a ranks'
        # launcher) held the signals, so nothing trained yet.
        exit_while_starting("seedq-train", exc)
    except SystemExit as exc:
        if multirun and type(exc.__context__).__name__ in WORKER_LOST:
            # A joblib worker died (the OOM killer, a kill -9): joblib killed the others with
            # it, their jobs mid-run. Hydra printed joblib's traceback and exited 1, which
            # read as a command line Hydra refused (exit 2).
            print(
                "seedq-train: a process of the sweep's jobs died (see above: SIGKILL is the "
                "kernel's out-of-memory killer or a kill -9), and joblib ended the jobs still "
                f"running with it (exit status {EXIT_RUN_FAILED}); resume=auto with the "
                "sweep's folder (hydra.sweep.dir) continues each job from its newest "
                "checkpoint",
                file=sys.stderr,
            )
            raise SystemExit(EXIT_RUN_FAILED) from None
        if multirun and COMMAND.job_codes:
            # Hydra ended the sweep after its jobs ran in other processes (it reported the
            # first failed one above), or a stopped job ended it: the sweep's status is still
            # its worst job's (2, 3, 75).
            if exc.code == HYDRA_ERROR:
                sweep_failed()
            raise SystemExit(max(COMMAND.job_codes)) from None
        if exc.code == HYDRA_ERROR and not COMMAND.composed:
            # Hydra refused the command line (an unknown key or group option, a value of the
            # wrong type; for a sweep, before any job ran) in its own words, before seedq saw
            # it: a refusal, as seedq's are.
            raise SystemExit(EXIT_REFUSED) from None
        # Refused: put the folder back. Any other end (a failure, a stop) keeps its log.
        if record is not None and exc.code == EXIT_REFUSED:
            record.settle(COMMAND)
        raise
    if multirun and COMMAND.job_codes:
        if sweep_record is not None:
            sweep_record.settle_sweep(COMMAND)
        sweep_failed()
    if record is not None:
        record.settle(COMMAND)


if __name__ == "__main__":
    # `python -m seedq.cli` runs this file as __main__, a module beside the seedq.cli that a
    # sweep's jobs run in other processes come back into (JobFailed): one COMMAND for both.
    from seedq.cli import train_main as main

    main()
