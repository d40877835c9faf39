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
"""

from __future__ import annotations

import copy
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
from seedq.core.agent import RunContext
from seedq.core.stats import NonFiniteTraining
from seedq.learner.central_inference import CentralInference
from seedq.learner.checkpoint import CheckpointWriteError, plain_config, save_checkpoint
from seedq.learner.device import AMP_DTYPES, prepare_learner_thread
from seedq.learner.inference import InferenceEngine
from seedq.metrics import MetricsWriter

log = logging.getLogger(__name__)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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
    checkpoint_failures: int = 0

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.weights_lock = threading.Lock()
        self.errors: list[BaseException] = []

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
        }

    def _build_acting(self, agent_cfg: Any) -> None:
        """The agent (built for ``agent_cfg``), its inference engine and central inference:
        what ``arch=seed`` and ``arch=sebulba`` act with. Needs ``cfg``, ``spec``, ``device``."""
        hw = self.cfg.hardware
        amp = AMP_DTYPES[hw.amp]
        context = RunContext(
            agent_cfg, self.spec, self.device, self.weights_lock, self.stop, amp, hw.pin_memory
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

    def checkpoint_state(self, wall_time_s: float) -> dict:
        """Everything needed to continue this run; the agent's part copied under the lock.

        The same dict for every architecture, so ``seedq-eval`` and ``resume`` read any run's.
        """
        with self.weights_lock:
            agent_state = copy.deepcopy(self.agent.state_dict())
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
            "env_steps": self.stats.env_steps,
            "episodes": self.stats.episodes,
            "updates": self.agent.stats.updates,
            "wall_time_s": wall_time_s,
        }

    def restore(self, state: dict) -> None:
        """Load a checkpoint of this config before the run starts."""
        self.agent.load_state_dict(state)
        self.agent.restore_files(str(Path(self.cfg.resume or "").parent))
        torch.set_rng_state(state["rng"]["torch"])
        self.generator.set_state(state["rng"]["inference"])
        self.stats.env_steps = int(state["env_steps"])
        self.stats.episodes = int(state["episodes"])
        self.agent.stats.updates = int(state["updates"])
        self.elapsed_before = float(state["wall_time_s"])
        log.info(
            "resumed at %d env steps, %d updates, %.0f s of training",
            self.stats.env_steps,
            self.agent.stats.updates,
            self.elapsed_before,
        )

    def save(self, wall_time_s: float) -> str | None:
        """Write a checkpoint; a failed write is logged and counted, and the run goes on with
        the previous checkpoint intact (None)."""
        try:
            # First, so that a checkpoint never points past the files saved beside it.
            self.agent.save_files(self.run_dir)
            return save_checkpoint(
                self.run_dir, self.checkpoint_state(wall_time_s), keep=self.cfg.checkpoint.keep
            )
        except CheckpointWriteError as exc:
            self.checkpoint_failures += 1
            log.error("checkpoint failed (%d so far): %s", self.checkpoint_failures, exc)
            return None

    # ------------------------------------------------------------------ running

    def _thread(self, name: str, target: Callable[..., Any], *args: Any) -> threading.Thread:
        """A daemon thread whose exception is logged once, kept for the run loop, and stops
        the run (the thread bodies themselves catch nothing)."""

        def body() -> None:
            try:
                prepare_learner_thread(self.cfg.hardware)
                target(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by the run loop
                if isinstance(exc, NonFiniteTraining):
                    log.error("%s thread stopped: %s", name, exc)  # expected: no traceback
                else:
                    log.exception("%s thread failed", name)
                self.errors.append(exc)
                self.stop.set()

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        return thread

    def run(self) -> RunSummary:
        """Train until a stop condition; Ctrl-C or SIGTERM stop it the same orderly way."""
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _interrupt) if on_main_thread else None
        try:
            return self._run()
        finally:
            if on_main_thread:
                signal.signal(signal.SIGTERM, previous)

    def _run(self) -> RunSummary:
        cfg = self.cfg
        writer = MetricsWriter(self.run_dir, Monitor.columns(self.agent), cfg)
        threads = self._start_roles()
        log.info(
            "training %s on %s (%s), %s; run dir %s",
            cfg.algorithm.name,
            cfg.env.id,
            self.device,
            self.describe(),
            self.run_dir,
        )
        # A resumed run's clock goes on from where it stopped.
        start = time.monotonic() - self.elapsed_before
        monitor = Monitor(
            self.monitor_config(), self.agent, self.stats, writer, start, curve=self.curve
        )
        every = cfg.checkpoint.every_minutes * 60
        last_save = time.monotonic()
        reason = "interrupted"
        try:
            next_row = time.monotonic() + cfg.log_interval_s
            while True:
                # Wake often so a step or time budget stops the run promptly; write a metrics
                # row every log interval (and at the stop).
                self._wait()
                self._check_roles()
                now = time.monotonic()
                if now < next_row and not monitor.budget_spent(now) and not self.errors:
                    continue
                next_row = now + cfg.log_interval_s
                self._before_row()
                reason = monitor.tick()
                if every and time.monotonic() - last_save >= every:
                    self.save(time.monotonic() - start)
                    last_save = time.monotonic()
                if self.errors:
                    raise self.errors[0]
                if reason:
                    break
        except KeyboardInterrupt:
            reason = "interrupted"
            log.warning("interrupted; stopping and saving a checkpoint")
        finally:
            self.stop.set()
            try:
                self._stop_roles()
            finally:
                for thread in threads:
                    thread.join(timeout=10)
                self._before_row()
                monitor.tick(final=True)
                monitor.progress.close()
                writer.close()
                self.save(time.monotonic() - start)
                self._close_roles()
                self._write_fault_counts()
        summary = monitor.summary(reason)
        with open(os.path.join(self.run_dir, "summary.json"), "w") as f:
            json.dump(summary.__dict__, f, indent=2)
        log.info("run finished (%s): %s", reason, summary)
        return summary

    def _write_fault_counts(self) -> None:
        try:
            with open(os.path.join(self.run_dir, "faults.json"), "w") as f:
                json.dump(self.fault_counts(), f, indent=2)
        except OSError as exc:
            log.error("could not write faults.json: %s", exc)
