"""Single-machine training: learner + broker in this process, actors as subprocesses or threads.

This is the one place that wires the roles together; the roles talk only through
``seedq.messages``, and the algorithm is whatever agent the registry builds.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zmq

from seedq.agents.base import RunContext, build_agent
from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.broker.security import secure_server
from seedq.config import ConfigError, SeedqConfig
from seedq.envs import make_env_batch, rows_per_env
from seedq.launch.actors import ActorPool, spawn_local
from seedq.launch.monitor import Monitor, RunSummary
from seedq.launch.ssh import SshLauncher
from seedq.learner.central_inference import CentralInference
from seedq.learner.checkpoint import plain_config, save_checkpoint
from seedq.learner.inference import InferenceEngine
from seedq.messages import EnvSpec
from seedq.metrics import MetricsWriter
from seedq.security import curve_enabled

log = logging.getLogger(__name__)

__all__ = ["LocalRun", "RunSummary", "resolve_device", "probe_env_spec", "AMP_DTYPES"]

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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
        hw = cfg.hardware
        self.device = resolve_device(hw.device)
        # The broker and trainer threads share the GIL; torch releases it inside ops, and at
        # the default 5 ms switch interval the trainer then waits up to 5 ms to get it back,
        # many times per update. A short interval keeps both threads moving.
        sys.setswitchinterval(hw.gil_switch_interval_s)
        if hw.num_threads:
            torch.set_num_threads(hw.num_threads)
        torch.manual_seed(cfg.seed)
        self.spec = probe_env_spec(cfg)
        # Remote hosts are checked before the learner is built: nothing starts half-way.
        self.remote = SshLauncher.for_run(cfg, run_dir) if cfg.launcher.name == "ssh" else None
        self.stop = threading.Event()
        self.weights_lock = threading.Lock()
        self.errors: list[BaseException] = []
        amp = AMP_DTYPES[hw.amp]
        self.agent = build_agent(
            RunContext(
                cfg, self.spec, self.device, self.weights_lock, self.stop, amp, hw.pin_memory
            )
        )
        self.engine = InferenceEngine(
            self.agent.model,
            self.device,
            self.weights_lock,
            select=self.agent.selector,
            seed=cfg.seed,
            pin_memory=hw.pin_memory,
            amp_dtype=amp,
            compile_mode=hw.compile,
        )
        self.consumer = CentralInference.for_agent(self.engine, self.agent)
        self.ctx = context or zmq.Context()
        self._own_context = context is None
        self.socket = self.ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, cfg.broker.max_message_bytes)
        # CURVE (and its ZAP handler) must be set up before the socket binds.
        curve = cfg.actor.transport == "tcp" and curve_enabled(cfg.security, cfg.broker.host)
        self.curve = secure_server(self.socket, self.ctx, cfg.security.keys_dir) if curve else None
        self.keys_dir = cfg.security.keys_dir if curve else ""
        self.endpoint = self._bind()
        batcher = Batcher(cfg.broker.max_batch, cfg.broker.deadline_ms / 1000.0)
        self.broker = Broker(
            self.socket,
            self.spec,
            batcher,
            self.consumer,
            silent_timeout_s=cfg.broker.silent_timeout_s,
            max_message_bytes=cfg.broker.max_message_bytes,
        )
        if resume is not None:
            self._restore(resume)
        self.actors = ActorPool(
            endpoint=self.remote.actor_endpoint(cfg.broker, self.endpoint)
            if self.remote
            else self.endpoint,
            env=cfg.env,
            num_actors=self.remote.num_actors if self.remote else cfg.actor.num_actors,
            batches_per_actor=cfg.actor.batches_per_actor,
            envs_per_batch=cfg.actor.envs_per_batch,
            seed=cfg.seed,
            run_dir=run_dir,
            python=cfg.launcher.python,
            keys_dir=self.keys_dir,
            spawn=self.remote.spawn if self.remote else spawn_local,
            inproc_context=self.ctx if cfg.actor.transport == "inproc" else None,
        )

    def checkpoint_state(self, wall_time_s: float) -> dict:
        """Everything needed to continue this run; the agent's part copied under the lock."""
        with self.weights_lock:
            agent_state = copy.deepcopy(self.agent.state_dict())
        rng = {
            **agent_state.pop("rng", {}),
            "torch": torch.get_rng_state(),
            "inference": self.engine.generator.get_state(),
        }
        return {
            **agent_state,
            "rng": rng,
            "config": plain_config(self.cfg),
            "spec": {
                "obs_shape": list(self.spec.obs_shape),
                "obs_dtype": self.spec.obs_dtype,
                "num_actions": self.spec.num_actions,
            },
            "env_steps": self.broker.stats.env_steps,
            "episodes": self.broker.stats.episodes,
            "updates": self.agent.stats.updates,
            "wall_time_s": wall_time_s,
        }

    def _restore(self, state: dict) -> None:
        self.agent.load_state_dict(state)
        self.agent.restore_files(str(Path(self.cfg.resume or "").parent))
        torch.set_rng_state(state["rng"]["torch"])
        self.engine.generator.set_state(state["rng"]["inference"])
        self.broker.stats.env_steps = int(state["env_steps"])
        self.broker.stats.episodes = int(state["episodes"])
        self.agent.stats.updates = int(state["updates"])
        self.elapsed_before = float(state["wall_time_s"])
        log.info(
            "resumed at %d env steps, %d updates, %.0f s of training",
            self.broker.stats.env_steps,
            self.agent.stats.updates,
            self.elapsed_before,
        )

    def save(self, wall_time_s: float) -> str:
        # First, so that a checkpoint never points past the files saved beside it.
        self.agent.save_files(self.run_dir)
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

    def _thread(self, name: str, target: Callable[..., Any], *args: Any) -> threading.Thread:
        """A daemon thread whose exception is logged once, kept for the run loop, and stops
        the run (the thread bodies themselves catch nothing)."""

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
        writer = MetricsWriter(self.run_dir, Monitor.columns(self.agent))
        threads = [
            self._thread("broker", self.broker.serve, self.stop),
            self._thread("train", self.agent.train, lambda: self.broker.stats.env_steps),
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
        monitor = Monitor(cfg, self.agent, self.broker.stats, writer, start, curve=self.curve)
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
            if self.curve is not None:
                self.curve.stop()
            self.socket.close(linger=0)
            if self._own_context:
                self.ctx.term()
        summary = monitor.summary(reason)
        with open(os.path.join(self.run_dir, "summary.json"), "w") as f:
            json.dump(summary.__dict__, f, indent=2)
        log.info("run finished (%s): %s", reason, summary)
        return summary
