"""Single-machine training: learner + broker in this process, actors as subprocesses or threads.

This is the one place that wires the roles together; the roles talk only through
``seedq.messages``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import zmq

from seedq.actor.exploration import epsilon_ladder
from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.config import ConfigError, SeedqConfig
from seedq.envs import make_env_batch, rows_per_env
from seedq.launch.actors import ActorPool
from seedq.learner.checkpoint import (
    REPLAY_NAME,
    CheckpointError,
    load_arrays,
    plain_config,
    save_arrays,
    save_checkpoint,
    snapshot,
)
from seedq.learner.inference import EpsilonGreedy, InferenceEngine
from seedq.learner.models import build_model
from seedq.learner.r2d2 import R2D2Learner, ReplaySink, make_replay, run_r2d2_training
from seedq.learner.server import CentralInference, Exploration, TrainQueueSink
from seedq.learner.train import VTraceLearner, run_training
from seedq.messages import EnvSpec
from seedq.metrics import MetricsWriter
from seedq.progress import PROGRESS_LOGGER, ProgressBar

log = logging.getLogger(__name__)
progress_log = logging.getLogger(PROGRESS_LOGGER)

COMMON_COLUMNS = [
    "episodes",
    "return_max",
    "episode_length_mean",
    "updates",
    "updates_per_s",
    "batch_fill",
    "learner_wait_frac",
    "bad_messages",
]
ALGORITHM_COLUMNS = {
    "vtrace": ["loss/total", "loss/pg", "loss/baseline", "loss/entropy", "grad_norm", "lr"],
    "r2d2": [
        "eval_return_mean",
        "eval_episodes",
        "eval_epsilon",
        "loss/td",
        "q_mean",
        "priority_mean",
        "replay_size",
        "replay_ratio",
        "grad_norm",
        "lr",
    ],
}


@dataclass
class RunSummary:
    env_steps: int
    wall_time_s: float
    steps_per_s: float
    return_mean: float | None
    episodes: int
    updates: int
    time_to_target_s: float | None
    stop_reason: str


def resolve_device(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"hardware.device={name!r} but this machine has no usable CUDA device "
            f"(torch {torch.__version__}, cuda build: {torch.version.cuda}); "
            "use hardware=cpu, or install a CUDA build of torch on a GPU machine"
        )
    return torch.device(name)


def probe_env_spec(cfg: SeedqConfig) -> EnvSpec:
    """Build one env to learn its spec; fails fast on a bad id or a missing package."""
    # One football game fills a row per controlled player.
    env = make_env_batch(cfg.env, rows_per_env(cfg.env), seed=cfg.seed)
    try:
        return EnvSpec(tuple(env.obs_shape), np.dtype(env.obs_dtype).name, env.num_actions)
    finally:
        env.close()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class LocalRun:
    """Everything one training run owns; ``run()`` blocks until a stop condition."""

    def __init__(
        self,
        cfg: SeedqConfig,
        run_dir: str,
        *,
        context: zmq.Context | None = None,
        resume: dict | None = None,
    ):
        """``resume``: a loaded checkpoint (already checked against ``cfg``) to continue."""
        self.cfg = cfg
        self.run_dir = run_dir
        self.elapsed_before = 0.0
        self.device = resolve_device(cfg.hardware.device)
        # The broker and trainer threads share the GIL; torch releases it inside ops, and at
        # the default 5 ms switch interval the trainer then waits up to 5 ms to get it back,
        # many times per update. A short interval keeps both threads moving.
        sys.setswitchinterval(cfg.hardware.gil_switch_interval_s)
        if cfg.hardware.num_threads:
            torch.set_num_threads(cfg.hardware.num_threads)
        torch.manual_seed(cfg.seed)
        self.spec = probe_env_spec(cfg)
        alg, hw = cfg.algorithm, cfg.hardware
        self.model = build_model(
            self.spec.obs_shape, self.spec.num_actions, alg.model, channels_last=hw.channels_last
        ).to(self.device)
        amp = AMP_DTYPES[hw.amp]
        self.stop = threading.Event()
        self.weights_lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.engine = InferenceEngine(
            self.model,
            self.device,
            self.weights_lock,
            select=EpsilonGreedy(alg.value_rescale_eps) if alg.name == "r2d2" else None,
            seed=cfg.seed,
            pin_memory=hw.pin_memory,
            amp_dtype=amp,
            compile_mode=hw.compile,
        )
        if alg.name == "r2d2":
            self._build_r2d2(amp)
        else:
            self._build_vtrace(amp)
        self.ctx = context or zmq.Context()
        self._own_context = context is None
        self.socket = self.ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, cfg.broker.max_message_bytes)
        self.endpoint = self._bind()
        batcher = Batcher(cfg.broker.max_batch, cfg.broker.deadline_ms / 1000.0)
        self.broker = Broker(self.socket, self.spec, batcher, self.consumer)
        if resume is not None:
            self._restore(resume)
        self.actors = ActorPool(
            endpoint=self.endpoint,
            env=cfg.env,
            num_actors=cfg.actor.num_actors,
            batches_per_actor=cfg.actor.batches_per_actor,
            envs_per_batch=cfg.actor.envs_per_batch,
            seed=cfg.seed,
            run_dir=run_dir,
            python=cfg.launcher.python,
            inproc_context=self.ctx if cfg.actor.transport == "inproc" else None,
        )

    def _build_vtrace(self, amp: torch.dtype | None) -> None:
        cfg, alg, hw = self.cfg, self.cfg.algorithm, self.cfg.hardware
        self.replay = None
        self.train_queue: queue.Queue = queue.Queue(maxsize=alg.train_queue_batches)
        self.learner = VTraceLearner(
            self.model,
            alg,
            self.device,
            self.weights_lock,
            total_env_steps=cfg.total_env_steps,
            pin_memory=hw.pin_memory,
            amp_dtype=amp,
        )
        sink = TrainQueueSink(alg.batch_size, self.train_queue, self.stop)
        self.consumer = CentralInference(self.engine, alg.unroll_length, sink)
        self._train_args = (
            run_training,
            self.learner,
            self.train_queue,
            self.stop,
            lambda: self.broker.stats.env_steps,
            self.errors,
        )

    def _build_r2d2(self, amp: torch.dtype | None) -> None:
        cfg, alg, actor = self.cfg, self.cfg.algorithm, self.cfg.actor
        # The replay is the big allocation: check it fits before anything starts.
        self.replay = make_replay(alg, self.spec, self.model, cfg.seed)
        self.learner = R2D2Learner(
            self.model,
            alg,
            self.device,
            self.weights_lock,
            pin_memory=cfg.hardware.pin_memory,
            amp_dtype=amp,
        )
        batches = actor.num_actors * actor.batches_per_actor
        exploring_envs = (batches - alg.eval_batches) * actor.envs_per_batch
        exploration = Exploration(
            epsilon_ladder(exploring_envs, alg.epsilon_base, alg.epsilon_alpha), alg.eval_epsilon
        )
        self.consumer = CentralInference(
            self.engine,
            alg.burn_in + alg.sequence_length,
            ReplaySink(self.replay, alg, self.stop),
            overlap=alg.burn_in + 1,
            exploration=exploration,
        )
        self._train_args = (run_r2d2_training, self.learner, self.replay, self.stop, self.errors)

    def checkpoint_state(self, wall_time_s: float) -> dict:
        """Everything needed to continue this run, copied under the weights lock."""
        with self.weights_lock:
            state = {
                "model": snapshot(self.model),
                "optimizer": snapshot(self.learner.optimizer),
            }
            if self.replay is not None:
                state["target"] = snapshot(self.learner.target)
        rng = {"torch": torch.get_rng_state(), "inference": self.engine.generator.get_state()}
        if self.replay is not None:
            rng["replay"] = self.replay.rng.bit_generator.state
        return {
            **state,
            "rng": rng,
            "config": plain_config(self.cfg),
            "spec": {
                "obs_shape": list(self.spec.obs_shape),
                "obs_dtype": self.spec.obs_dtype,
                "num_actions": self.spec.num_actions,
            },
            "env_steps": self.broker.stats.env_steps,
            "episodes": self.broker.stats.episodes,
            "updates": self.learner.stats.updates,
            "wall_time_s": wall_time_s,
        }

    def _restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.learner.optimizer.load_state_dict(state["optimizer"])
        if self.replay is not None:
            self.learner.target.load_state_dict(state["target"])
            self.replay.rng.bit_generator.state = state["rng"]["replay"]
            saved_replay = Path(self.cfg.resume or "").parent / REPLAY_NAME
            if self.cfg.checkpoint.replay and saved_replay.exists():
                try:
                    self.replay.load_state_dict(load_arrays(saved_replay))
                except (KeyError, ValueError) as exc:
                    raise CheckpointError(f"{saved_replay}: {exc}") from None
                log.info("replay restored: %d sequences", len(self.replay))
        torch.set_rng_state(state["rng"]["torch"])
        self.engine.generator.set_state(state["rng"]["inference"])
        self.broker.stats.env_steps = int(state["env_steps"])
        self.broker.stats.episodes = int(state["episodes"])
        self.learner.stats.updates = int(state["updates"])
        self.elapsed_before = float(state["wall_time_s"])
        log.info(
            "resumed at %d env steps, %d updates, %.0f s of training",
            self.broker.stats.env_steps,
            self.learner.stats.updates,
            self.elapsed_before,
        )

    def save(self, wall_time_s: float) -> str:
        if self.replay is not None and self.cfg.checkpoint.replay:
            # First, so that a checkpoint never points past the replay saved beside it.
            save_arrays(self.run_dir, self.replay.state_dict())
        return save_checkpoint(
            self.run_dir, self.checkpoint_state(wall_time_s), keep=self.cfg.checkpoint.keep
        )

    def _bind(self) -> str:
        broker = self.cfg.broker
        if self.cfg.actor.transport == "inproc":
            endpoint = f"inproc://seedq-{os.getpid()}-{id(self)}"
            self.socket.bind(endpoint)
            return endpoint
        if broker.port == 0:
            port = self.socket.bind_to_random_port(f"tcp://{broker.host}")
        else:
            port = broker.port
            try:
                self.socket.bind(f"tcp://{broker.host}:{port}")
            except zmq.ZMQError as exc:
                raise ConfigError(
                    f"broker.port={port}: cannot bind {broker.host}:{port} ({exc}); "
                    "choose another port or broker.port=0 for a free one"
                ) from None
        return f"tcp://{broker.host}:{port}"

    def _thread(self, name: str, target, *args) -> threading.Thread:  # noqa: ANN001
        def body() -> None:
            try:
                target(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by the run loop
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
        columns = COMMON_COLUMNS + ALGORITHM_COLUMNS[cfg.algorithm.name]
        writer = MetricsWriter(self.run_dir, columns)
        threads = [
            self._thread("broker", self.broker.serve, self.stop),
            self._thread("train", *self._train_args),
        ]
        self.actors.start()
        log.info(
            "training %s on %s (%s) at %s; run dir %s",
            cfg.algorithm.name,
            cfg.env.id,
            self.device,
            self.endpoint,
            self.run_dir,
        )
        # A resumed run's clock goes on from where it stopped.
        start = time.monotonic() - self.elapsed_before
        monitor = _Monitor(self, writer, start)
        every = cfg.checkpoint.every_minutes * 60
        last_save = time.monotonic()
        reason = "interrupted"
        try:
            next_row = time.monotonic() + cfg.log_interval_s
            while True:
                # Wake often so a step or time budget stops the run promptly; write a metrics
                # row every log interval (and at the stop).
                self.stop.wait(timeout=min(cfg.log_interval_s, 0.25))
                now = time.monotonic()
                if now < next_row and not monitor.budget_spent(now) and not self.errors:
                    continue
                next_row = now + cfg.log_interval_s
                reason = monitor.tick()
                if every and time.monotonic() - last_save >= every:
                    self.save(time.monotonic() - start)
                    last_save = time.monotonic()
                if self.errors:
                    raise self.errors[0]
                self.actors.check()
                if reason:
                    break
        except KeyboardInterrupt:
            reason = "interrupted"
            log.warning("interrupted; stopping the actors and saving a checkpoint")
        finally:
            self.stop.set()
            self.actors.stop()
            for thread in threads:
                thread.join(timeout=10)
            monitor.tick(final=True)
            monitor.progress.close()
            writer.close()
            self.save(time.monotonic() - start)
            self.socket.close(linger=0)
            if self._own_context:
                self.ctx.term()
        summary = monitor.summary(reason)
        with open(os.path.join(self.run_dir, "summary.json"), "w") as f:
            json.dump(summary.__dict__, f, indent=2)
        log.info("run finished (%s): %s", reason, summary)
        return summary


class _Monitor:
    """Turns counters into one metrics row per interval and decides when to stop."""

    def __init__(self, run: LocalRun, writer: MetricsWriter, start: float) -> None:
        self.run, self.writer, self.start = run, writer, start
        self.last_time = time.monotonic()
        self.last_steps, self.last_updates = run.broker.stats.env_steps, run.learner.stats.updates
        self.last_batches, self.last_batch_envs = 0, 0
        self.last_wait, self.last_busy = 0.0, 0.0
        self.time_to_target: float | None = None
        self.return_mean: float | None = None
        self.progress = ProgressBar(run.cfg.total_env_steps, run.broker.stats.env_steps)

    def tick(self, final: bool = False) -> str:
        run, cfg = self.run, self.run.cfg
        stats, learner_stats = run.broker.stats, run.learner.stats
        now = time.monotonic()
        elapsed = now - self.start
        steps, updates = stats.env_steps, learner_stats.updates
        dt = max(now - self.last_time, 1e-9)
        with stats.lock:
            returns = list(stats.recent_returns)
            lengths = list(stats.recent_lengths)
            episodes = stats.episodes
        self.return_mean = float(np.mean(returns)) if returns else None
        batches = stats.batches - self.last_batches
        fill = (
            (stats.batch_envs - self.last_batch_envs) / (batches * cfg.broker.max_batch)
            if batches
            else None
        )
        wait = learner_stats.wait_s - self.last_wait
        busy = learner_stats.busy_s - self.last_busy
        row = {
            "wall_time": round(elapsed, 3),
            "env_steps": steps,
            "return_mean": self.return_mean,
            "steps_per_s": (steps - self.last_steps) / dt,
            "episodes": episodes,
            "return_max": float(np.max(returns)) if returns else None,
            "episode_length_mean": float(np.mean(lengths)) if lengths else None,
            "updates": updates,
            "updates_per_s": (updates - self.last_updates) / dt,
            "batch_fill": fill,
            "learner_wait_frac": wait / (wait + busy) if wait + busy > 0 else None,
            "bad_messages": sum(stats.bad_messages.values()),
            **learner_stats.pop_means(),
            **self._r2d2_row(),
        }
        self.writer.write(row)
        if "loss/pg" in row:
            losses = (
                f"loss pg {row['loss/pg']:.3g} baseline {row['loss/baseline']:.3g} "
                f"entropy {row['loss/entropy']:.3g}"
            )
        elif "loss/td" in row:
            losses = (
                f"loss td {row['loss/td']:.3g} q {row['q_mean']:.3g} | replay "
                f"{row['replay_size']} ratio {row['replay_ratio']:.2f} | eval return "
                + ("n/a" if row["eval_return_mean"] is None else f"{row['eval_return_mean']:.1f}")
            )
        else:
            losses = "no update this interval"
        self.progress.update(steps, row["steps_per_s"], self.return_mean)
        progress_log.info(
            "steps %d | %.0f steps/s | return %s (%d ep) | updates %d | %s",
            steps,
            row["steps_per_s"],
            "n/a" if self.return_mean is None else f"{self.return_mean:.1f}",
            episodes,
            updates,
            losses,
        )
        self.last_time, self.last_steps, self.last_updates = now, steps, updates
        self.last_batches, self.last_batch_envs = stats.batches, stats.batch_envs
        self.last_wait, self.last_busy = learner_stats.wait_s, learner_stats.busy_s
        target = cfg.stop_at_return
        if run.replay is not None and cfg.algorithm.eval_batches:
            # R2D2's exploring envs act with epsilon up to 0.4: judge it by its eval episodes.
            returns = list(run.consumer.eval_returns)
            self.return_mean = row["eval_return_mean"]
        if (
            target is not None
            and self.time_to_target is None
            and len(returns) >= 100
            and self.return_mean is not None
            and self.return_mean >= target
        ):
            self.time_to_target = elapsed
            return "target_return"
        return "" if final else self.budget_spent(now)

    def budget_spent(self, now: float) -> str:
        """Which budget the run has used up ("total_env_steps", "max_minutes"), or ""."""
        cfg = self.run.cfg
        if self.run.broker.stats.env_steps >= cfg.total_env_steps:
            return "total_env_steps"
        if cfg.max_minutes and now - self.start >= cfg.max_minutes * 60:
            return "max_minutes"
        return ""

    def _r2d2_row(self) -> dict[str, float | None]:
        run = self.run
        if run.replay is None:
            return {}
        consumer, limiter = run.consumer, run.replay.limiter
        evals = list(consumer.eval_returns)
        return {
            "eval_return_mean": float(np.mean(evals)) if evals else None,
            "eval_episodes": consumer.eval_episodes,
            "eval_epsilon": run.cfg.algorithm.eval_epsilon,
            "priority_mean": run.replay.mean_priority(),
            "replay_size": len(run.replay),
            "replay_ratio": limiter.replay_ratio(),
        }

    def summary(self, reason: str) -> RunSummary:
        elapsed = time.monotonic() - self.start
        steps = self.run.broker.stats.env_steps
        return RunSummary(
            env_steps=steps,
            wall_time_s=round(elapsed, 2),
            steps_per_s=round(steps / max(elapsed, 1e-9), 1),
            return_mean=self.return_mean,
            episodes=self.run.broker.stats.episodes,
            updates=self.run.learner.stats.updates,
            time_to_target_s=None if self.time_to_target is None else round(self.time_to_target, 1),
            stop_reason=reason,
        )
