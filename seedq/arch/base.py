"""What every architecture's run shares: the checkpoint, resume, thread reporting and the loop
that writes metrics rows, saves checkpoints and stops the run.

``SeedRun`` (``arch=seed``), ``SebulbaRun`` and ``AnakinRun`` differ only in how env steps
reach the agent; each subclasses :class:`TrainingRun` and fills in its hooks:

- ``_start_roles()``: start what produces env steps (broker, actors, threads); return threads
  to join at the end;
- ``_wait()``: what the loop does between metrics rows (wait on ``stop``, or train);
- ``_check_roles()``: raise if a role failed in a way the run cannot survive;
- ``_before_row()``: bring counters up to date before a row is written;
- ``_stop_roles()``: stop what ``_start_roles`` started (before its threads are joined);
- ``_close_roles()``: release sockets and envs (after the last checkpoint);
- ``fault_counts()``: the faults survived, written to ``faults.json``.

They all keep the same attributes: ``cfg``, ``run_dir``, ``spec``, ``agent``, ``stats`` (a
``BrokerStats``: env steps, episodes, returns), ``generator`` (the acting RNG), ``stop``,
``weights_lock``, ``errors``.

Checkpoints are cheap so they can be frequent: :meth:`TrainingRun.save` copies the state's
tensors under the weights lock and a :class:`~seedq.learner.checkpoint_writer.CheckpointWriter`
thread writes them. SIGINT, SIGTERM and SIGUSR1 stop the run the orderly way, checkpoint first
(stop reason ``interrupted``: ``seedq-train`` exits with status 75, "stopped to be resumed").
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from seedq.agents.registry import build_agent
from seedq.arch.monitor import Monitor, RunSummary
from seedq.arch.resume import continue_metrics, recent_episodes
from seedq.core.agent import RunContext
from seedq.core.stats import EARLIER_STARTS, RunFault
from seedq.envs.config import resumed_seed
from seedq.exit_status import stop_signals_to
from seedq.learner.central_inference import CentralInference
from seedq.learner.checkpoint import (
    CheckpointWriteError,
    NonFiniteState,
    copy_tensors,
    plain_config,
)
from seedq.learner.checkpoint_writer import CheckpointWriter
from seedq.learner.device import AMP_DTYPES, prepare_learner_thread
from seedq.learner.errors import CheckpointError
from seedq.learner.inference import InferenceEngine
from seedq.metrics import MetricsWriter, replace_text
from seedq.parallel.agreement import this_process

log = logging.getLogger(__name__)

STOPPED = "interrupted"  # the stop reason of a run stopped by one of exit_status.STOP_SIGNALS
# Seconds the end of a run waits for its last checkpoint to reach the disk.
LAST_WRITE_WAIT_S = 600.0
# The thread that runs the agent's updates: it takes hardware.train_threads torch threads.
TRAIN_THREAD = "train"


class TrainingRun:
    """The shared part of a run; subclasses set the attributes above and the hooks."""

    cfg: Any
    run_dir: str
    agent: Any
    stats: Any
    generator: torch.Generator
    device: torch.device
    curve: Any = None
    elapsed_before: float = 0.0
    # The fault counts of the starts before this one (a resumed run's checkpoint): faults.json
    # and the faults/* metrics count over the whole run, not from the last restart.
    faults_before: dict[str, int] = {}  # noqa: RUF012 - replaced, never mutated

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.weights_lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.stop_signal = ""  # the name of the signal that stopped the run ("" if none did)
        self.replay_failures = 0  # failed writes of the files kept beside the checkpoints
        self.snapshots = 0
        self.snapshot_s = 0.0  # seconds under the weights lock copying state, all snapshots
        self.snapshot_max_s = 0.0
        self._writer: CheckpointWriter | None = None
        # One learner, or one of several ranks (hardware.learners): who writes, summed counters.
        self.dist = this_process()

    # ----------------------------------------------------------------- hooks

    def _start_roles(self) -> list[threading.Thread]:
        return []

    def _wait(self) -> None:
        self.stop.wait(timeout=min(self.cfg.log_interval_s, 0.25))

    def _check_roles(self) -> None:
        """Nothing to check by default."""

    def _before_row(self) -> None:
        """Nothing to bring up to date by default."""

    def _stop_roles(self) -> None:
        """Nothing to stop by default."""

    def _close_roles(self) -> None:
        """Nothing to release by default."""

    def describe(self) -> str:
        return f"arch={self.cfg.arch.name}"

    def monitor_config(self) -> Any:
        """The config the monitor reads (batch layout); Sebulba passes its own layout."""
        return self.cfg

    def fault_counts(self) -> dict[str, int]:
        """What went wrong during the run and was survived (``faults.json`` in the run dir)."""
        return {
            "evicted_actors": self.stats.evicted,
            "bad_messages": sum(self.stats.bad_messages.values()),
            "non_finite_messages": self.stats.bad_messages["non_finite"],
            "skipped_updates": self.agent.stats.skipped_updates,
            "checkpoint_failures": self.checkpoint_failures,
            "refused_peers": self.stats.refused_peers_with(self.curve),
        }

    def restore_faults(self, before: dict[str, int]) -> None:
        """Carry a checkpoint's fault counts (:meth:`fault_counts`) into this start's counters,
        which the metrics rows and ``faults.json`` read."""
        self.faults_before = before
        bad, non_finite = before.get("bad_messages", 0), before.get("non_finite_messages", 0)
        self.stats.bad_messages["non_finite"] += non_finite
        self.stats.bad_messages[EARLIER_STARTS] += bad - non_finite
        self.stats.evicted += before.get("evicted_actors", 0)
        self.stats.refused_peers += before.get("refused_peers", 0)
        self.agent.stats.skipped_updates += before.get("skipped_updates", 0)

    def _build_acting(self, agent_cfg: Any) -> None:
        """The agent (built for ``agent_cfg``), its inference engine and central inference:
        what ``arch=seed`` and ``arch=sebulba`` act with. Needs ``cfg``, ``spec``, ``device``."""
        hw = self.cfg.hardware
        amp = AMP_DTYPES[hw.amp]
        context = RunContext(
            agent_cfg,
            self.spec,
            self.device,
            self.weights_lock,
            self.stop,
            amp,
            hw.pin_memory,
            collective=self.dist.collective,
        )
        self.agent = build_agent(context)
        self.engine = InferenceEngine(
            self.agent.model,
            self.device,
            self.weights_lock,
            select=self.agent.selector,
            seed=self.cfg.seed,
            pin_memory=hw.pin_memory,
            amp_dtype=amp,
            compile_mode=hw.compile,
        )
        self.consumer = CentralInference.for_agent(self.engine, self.agent)
        self.generator = self.engine.generator

    # ------------------------------------------------------------- checkpoints

    @property
    def checkpoints(self) -> CheckpointWriter:
        """The thread that writes this run's checkpoints (started on first use)."""
        if self._writer is None:
            self._writer = CheckpointWriter(self.run_dir, self.cfg.checkpoint.keep)
        return self._writer

    @property
    def checkpoint_failures(self) -> int:
        written = self._writer.failures if self._writer is not None else 0
        return written + self.replay_failures + self.faults_before.get("checkpoint_failures", 0)

    @property
    def last_checkpoint_written(self) -> bool:
        """Whether the newest checkpoint this run took was written (False: it failed, and the
        one before it is the newest on disk; also False when none was taken)."""
        return self._writer is not None and self._writer.last_ok is True

    @property
    def weights_not_finite(self) -> bool:
        """Whether the newest checkpoint was refused because the state held NaN or inf (the
        training diverged), not for the disk."""
        return self._writer is not None and isinstance(self._writer.last_error, NonFiniteState)

    def checkpoint_state(self, wall_time_s: float) -> dict:
        """Everything needed to continue this run; the agent's part copied under the lock.

        Only tensor copies happen under the lock (no serialisation): the pause of inference
        and training is a memory copy of the model and optimizer. The same dict for every
        architecture, so ``seedq-eval`` and ``resume`` read any run's.
        """
        spare = self.checkpoints.take_spare()
        with self.weights_lock:
            begin = time.perf_counter()  # the pause of inference and training, not our wait
            agent_state = copy_tensors(self.agent.state_dict(), into=spare)
            run_stats = self.dist.run_stats(self.stats)  # summed over the learner ranks
            counters = (*run_stats.counts(), self.agent.stats.updates)
            held = time.perf_counter() - begin
        self.snapshots += 1
        self.snapshot_s += held
        self.snapshot_max_s = max(self.snapshot_max_s, held)
        rng = {
            **agent_state.pop("rng", {}),
            "torch": torch.get_rng_state(),
            "inference": self.generator.get_state(),
        }
        return {
            **agent_state,
            "rng": rng,
            "config": plain_config(self.cfg),
            "spec": self.spec.to_dict(),
            "env_steps": counters[0],
            "episodes": counters[1],
            "updates": counters[2],
            "wall_time_s": wall_time_s,
            "faults": self.fault_counts(),
        }

    def restore(self, state: dict) -> None:
        """Load a checkpoint of this config before the run starts; the run's metrics are cut
        back to the checkpoint's step, so the resumed run continues one curve."""
        try:
            self.agent.load_state_dict(state)
        except (RuntimeError, ValueError) as exc:
            if "state_dict" not in str(exc) and "state dict" not in str(exc):
                raise
            # The settings check names the keys it knows shape the network; this is the rest.
            detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise CheckpointError(
                f"{self.cfg.resume}: its weights do not fit this run's network ({detail[:400]}); "
                "resume it with the algorithm, model and env settings it was written with, or "
                "start a new run"
            ) from None
        self.agent.restore_files(str(Path(self.cfg.resume or "").parent))
        torch.set_rng_state(state["rng"]["torch"])
        acting = state["rng"]["inference"]
        if acting.numel() == self.generator.get_state().numel():
            self.generator.set_state(acting)
        else:
            # Saved by a run on another kind of device (a CUDA generator's state is 16 bytes,
            # a CPU one's 5,056): a RuntimeError and a traceback here. This start acts from a
            # stream of its own instead.
            self.generator.manual_seed(resumed_seed(self.cfg.seed, int(state["env_steps"])))
            log.info(
                "the checkpoint's acting RNG is another device's; this start seeds its own (%s)",
                self.device.type,
            )
        self.stats.env_steps = int(state["env_steps"])
        self.stats.episodes = int(state["episodes"])
        self.agent.stats.updates = int(state["updates"])
        self.elapsed_before = float(state["wall_time_s"])
        before = dict(state.get("faults", {}))
        if self.dist.collective is None:  # one learner: faults.json holds its own counts
            before = faults_since_checkpoint(self.run_dir, before)
        self.restore_faults(before)
        continue_metrics(self.run_dir, self.stats.env_steps)
        if self.dist.is_writer:  # the ranks share rank 0's log; one of them refills from it
            returns, lengths = recent_episodes(self.run_dir)
            self.stats.recent_returns.extend(returns)
            self.stats.recent_lengths.extend(lengths)
        log.info(
            "resumed at %d env steps, %d updates, %.0f s of training",
            self.stats.env_steps,
            self.agent.stats.updates,
            self.elapsed_before,
        )

    def save(self, wall_time_s: float, stop_reason: str = "", *, with_files: bool = True) -> None:
        """Take a checkpoint: the state is copied now and written by the checkpoint writer's
        thread. ``with_files``: then write the large state kept beside the checkpoints (the
        replay, with ``checkpoint.replay``) here, itself atomically. ``stop_reason``: why the
        run ends ("" while it goes on), so ``resume=auto`` knows a finished run. A failed write
        is logged and counted, and the run goes on with the previous file intact.

        The one function that writes checkpoints: of several learner ranks, rank 0 alone.
        """
        if not self.dist.is_writer:
            return
        self.checkpoints.submit({**self.checkpoint_state(wall_time_s), "stop_reason": stop_reason})
        if with_files:
            self.save_files()

    def save_files(self) -> None:
        """Write what the agent keeps beside the checkpoints (R2D2's and SAC's replay); of
        several learner ranks, rank 0's shard alone."""
        if not self.dist.is_writer:
            return
        try:
            self.agent.save_files(self.run_dir)
        except CheckpointWriteError as exc:
            self.replay_failures += 1
            log.error("checkpoint failed (%d so far): %s", self.checkpoint_failures, exc)

    def checkpoint_timing(self) -> dict[str, float]:
        """What checkpoints cost this run: milliseconds under the weights lock (mean, max) and
        of the last background write (benchmarks read it)."""
        writer = self._writer
        return {
            "snapshots": self.snapshots,
            "lock_ms_mean": 1000 * self.snapshot_s / max(self.snapshots, 1),
            "lock_ms_max": 1000 * self.snapshot_max_s,
            "write_ms_last": 1000 * writer.write_s if writer is not None else 0.0,
            "written": writer.written if writer is not None else 0,
        }

    # ------------------------------------------------------------------ running

    def training_env_steps(self) -> int:
        """The env steps the learner's schedules read: this run's count, or with several
        learner ranks the run's total as the ranks last agreed on it."""
        return self.dist.training_env_steps(self.stats.env_steps)

    def _thread(self, name: str, target: Callable[..., Any], *args: Any) -> threading.Thread:
        """A daemon thread whose exception is logged once, kept for the run loop, and stops
        the run (the thread bodies themselves catch nothing)."""

        def body() -> None:
            try:
                prepare_learner_thread(self.cfg.hardware, training=name == TRAIN_THREAD)
                target(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by the run loop
                if isinstance(exc, RunFault):
                    log.error("%s thread stopped: %s", name, exc)  # expected: no traceback
                else:
                    log.exception("%s thread failed", name)
                self.errors.append(exc)
                self.stop.set()

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        return thread

    def run(self) -> RunSummary:
        """Train until a stop condition; SIGINT, SIGTERM and SIGUSR1 stop it the same orderly
        way (stop reason ``interrupted``)."""
        if threading.current_thread() is not threading.main_thread():
            return self._run()
        with stop_signals_to(self._on_stop_signal):
            return self._run()

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        # Only a flag and the stop event: the loop and the threads wind down themselves, so no
        # exception lands in the middle of a checkpoint. A repeated signal (Slurm sends SIGTERM
        # to every process of a job step, a supervisor forwards its own) changes nothing.
        name = signal.Signals(signum).name
        if not self.stop_signal:
            self.stop_signal = name
            log.warning("%s: saving a checkpoint and stopping (resume=auto continues)", name)
        self.stop.set()

    def _run(self) -> RunSummary:
        cfg = self.cfg
        writer = self.dist.metrics_writer(self.run_dir, Monitor.columns(self.agent), cfg)
        stats = self.dist.run_stats(self.stats)  # summed over learner ranks, before they train
        # The step budget stops the roles where the counting happens. A learner rank counts
        # the others' steps as last summed: it stops once the run's steps surely reached the
        # budget (its stop is agreed at its training round and its loop's next row), where
        # the ranks stepped on until a row's sum and overshot a small budget many times over.
        self.stats.stop_at(cfg.total_env_steps, self.stop, self.dist.others_env_steps)
        threads = self._start_roles()
        log.info(
            "training %s on %s (%s), %s; run dir %s",
            cfg.algorithm.name,
            cfg.env.id,
            self.device,
            self.describe(),
            self.run_dir,
        )
        self._announce_budget(stats.env_steps)
        # A resumed run's clock goes on from where it stopped.
        start = time.monotonic() - self.elapsed_before
        monitor = Monitor(self.monitor_config(), self.agent, stats, writer, start, curve=self.curve)
        every = cfg.checkpoint.every_minutes * 60
        replay_every = cfg.checkpoint.replay_every_minutes * 60
        last_save = last_replay_save = time.monotonic()
        reason = ""  # stays "" only while an exception is on its way out
        try:
            next_row = time.monotonic() + cfg.log_interval_s
            while True:
                # Wake often so a step or time budget stops the run promptly; write a metrics
                # row every log interval (and at the stop).
                self._wait()
                self._check_roles()
                now = time.monotonic()
                due = now >= next_row or bool(
                    monitor.budget_spent(now)
                    or self.errors
                    or self.stop.is_set()
                    or monitor.target_met()
                )
                # Several learner ranks sum their counters here and write rows together; a stop
                # signal is agreed like a stop rule, so no rank leaves a collective behind.
                if not self.dist.agree_row(due):
                    continue
                next_row = now + cfg.log_interval_s
                self._before_row()
                self.dist.sum_counters(self.fault_counts())
                signalled = bool(self.stop_signal)
                local = STOPPED if signalled else monitor.tick()
                reason = self.dist.agree_reason(
                    local, failed=bool(self.errors), signalled=signalled
                )
                if reason == STOPPED:
                    break  # the stop checkpoint is taken on the way out
                if every and time.monotonic() - last_save >= every:
                    replay_due = bool(replay_every) and now - last_replay_save >= replay_every
                    self.save(time.monotonic() - start, with_files=replay_due)
                    # Every episode the checkpoint counts goes to episodes.csv now, while the
                    # writer thread serialises it: a run killed before the next row resumes
                    # from this checkpoint, and its log must hold them (episodes that ended
                    # after the count are cut at the resume, as rows past it are).
                    writer.write_episodes(stats.drain_episodes())
                    last_save = time.monotonic()
                    last_replay_save = last_save if replay_due else last_replay_save
                if self.errors:
                    raise self.errors[0]
                if reason:
                    break
        except KeyboardInterrupt:
            # Ctrl-C where no handler of ours was installed (a run outside the main thread).
            reason = STOPPED
            log.warning("interrupted; stopping and saving a checkpoint")
        finally:
            self.stop.set()
            try:
                if reason == STOPPED:
                    # A grace period is short (Slurm's KillWait, a spot VM's notice): copy the
                    # state first and let it be written while the roles stop; the replay, if
                    # kept, comes after (seconds for gigabytes, and it may be cut short).
                    self.save(time.monotonic() - start, reason, with_files=False)
            finally:
                self._wind_down(threads, monitor, writer, time.monotonic() - start, reason)
        summary = monitor.summary(reason)
        if self.dist.is_writer:
            path = os.path.join(self.run_dir, "summary.json")
            try:
                replace_text(path, json.dumps(summary.__dict__, indent=2))
            except OSError as exc:
                log.error(
                    "could not write %s (%s); free disk space there: the summary is on the "
                    "next line, and resume=auto takes the run as unfinished without it",
                    path,
                    exc,
                )
        log.info("run finished (%s): %s", reason, summary)
        skipped = self.agent.stats.skipped_updates
        if self.dist.is_writer and summary.updates == 0 and skipped and reason != STOPPED:
            # Batches were trained on, and every update was thrown away: not a short budget.
            log.warning(
                "the run ended (%s) without a single update taken: all %d were skipped for a "
                "NaN or inf loss or gradient (see above), so it learned nothing. Lower "
                "algorithm.lr, check the env's rewards and observations, or try "
                "algorithm.reward_clip=abs_one",
                reason,
                skipped,
            )
        elif self.dist.is_writer and summary.updates == 0 and reason != STOPPED:
            steps, what = self._before_training()
            log.warning(
                "the run ended (%s) without a single update: it learned nothing. "
                "algorithm=%s trains once %s, at least %d env steps (and the time the update "
                "takes); raise total_env_steps or max_minutes, or lower the settings named",
                reason,
                cfg.algorithm.name,
                what,
                steps,
            )
        return summary

    def _before_training(self) -> tuple[int, str]:
        """The env steps a fresh run takes at least before its first update, and what they
        fill (the agent says, for the envs this learner rank starts; every rank fills its own
        first batch; an architecture that always trains says 0)."""
        ranks = self.dist.group.world_size if self.dist.group is not None else 1
        steps, what = self.agent.before_training(self.launched_envs())
        return steps * ranks, what

    def launched_envs(self) -> int:
        """The envs this learner starts (hand-started actors not counted); 1 if none."""
        return 1

    def _announce_budget(self, env_steps_done: int) -> None:
        """What the step budget allows, said at the start: a fresh run whose budget ends
        before the agent's first update is warned, not left to finish having learned nothing
        (an architecture adds where its budget really ends)."""
        steps, what = self._before_training()
        total = self.cfg.total_env_steps
        if self.dist.is_writer and env_steps_done == 0 and total < steps:
            log.warning(
                "total_env_steps=%d ends before the first update: algorithm=%s trains once %s, "
                "at least %d env steps; raise total_env_steps or lower the settings named",
                total,
                self.cfg.algorithm.name,
                what,
                steps,
            )

    def _wind_down(
        self,
        threads: list[threading.Thread],
        monitor: Monitor,
        writer: MetricsWriter,
        elapsed_s: float,
        reason: str,
    ) -> None:
        """Stop the roles, write the last metrics row and (unless a stop signal already took
        it) the last checkpoint, wait for it to reach the disk, release the rest."""
        try:
            self._stop_roles()
        finally:
            # Ten seconds for all of them: a thread stuck for good (a hung env) is left to the
            # process's exit, and several such threads do not add up.
            deadline = time.monotonic() + 10
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
            self._before_row()
            self.dist.sum_counters(self.fault_counts(), final=True)
            monitor.tick(final=True)
            monitor.progress.close()
            writer.close()
            if reason != STOPPED:
                self.save(elapsed_s, reason or "failed")
            else:
                self.save_files()
            self._finish_writing()
            self._close_roles()
            self._write_fault_counts()

    def _finish_writing(self) -> None:
        if not self.checkpoints.close(timeout_s=LAST_WRITE_WAIT_S):
            log.error("the last checkpoint was not written within %.0f s", LAST_WRITE_WAIT_S)

    def _write_fault_counts(self) -> None:
        # faults_since_checkpoint reads it back at a resume.
        if not self.dist.is_writer:
            return
        try:
            faults = self.dist.summed_faults(self.fault_counts())
            replace_text(os.path.join(self.run_dir, "faults.json"), json.dumps(faults, indent=2))
        except OSError as exc:
            log.error("could not write faults.json (the previous one is kept): %s", exc)


def faults_since_checkpoint(run_dir: str, saved: dict[str, int]) -> dict[str, int]:
    """The fault counts a resumed run goes on from: the checkpoint's (``saved``), or where
    the run's ``faults.json`` counts more, its: what went wrong after the newest checkpoint
    (a checkpoint that failed for a full disk is never in one) would be lost otherwise."""
    try:
        written = json.loads(Path(run_dir, "faults.json").read_text())
    except (OSError, ValueError):
        return saved
    if not isinstance(written, dict):
        return saved
    counts = dict(saved)
    for key, value in written.items():
        if isinstance(value, int) and not isinstance(value, bool) and value > counts.get(key, 0):
            counts[key] = value
    return counts
