"""Anakin (Podracer, Hessel et al. 2021): envs as tensor code on the learner's device, acting
and learning in one loop.

    seedq-train arch=anakin env=cartpole
    seedq-train arch=anakin env=gym env.id=Acrobot-v1 hardware=gpu

Each iteration collects one unroll of ``T`` steps from ``arch.anakin.num_envs`` envs
(:class:`~seedq.arch.rollout.DeviceRollout`) and trains on it at once with the agent's own
update (``arch.anakin.minibatches`` updates of equal column shares). Nothing crosses to the host
per step; counters are read once per logging interval. The run writes the SEED path's metrics
rows (through :class:`~seedq.launch.monitor.Monitor`), progress line, stop rules and
checkpoints, so ``seedq-eval``, ``seedq-plot`` and ``seedq-train resume=`` work unchanged;
``seedq-eval`` plays the gymnasium env of the same id, which the tensor env reproduces.

In the metrics, ``perf/learner_wait_frac`` is the share of time spent acting (the learner
waiting for its unroll) and ``perf/batch_fill`` stays empty (there is no broker). On resume the
envs start fresh episodes from a seed derived from the run's seed and step count.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time

import torch

from seedq.agents.base import RunContext, build_agent
from seedq.arch.rollout import DeviceRollout
from seedq.broker.router import BrokerStats
from seedq.config import SeedqConfig
from seedq.envs.tensor import make_tensor_env
from seedq.launch.local import AMP_DTYPES, resolve_device
from seedq.launch.monitor import Monitor, RunSummary
from seedq.learner.checkpoint import plain_config, save_checkpoint, snapshot
from seedq.messages import EnvSpec
from seedq.metrics import MetricsWriter

log = logging.getLogger(__name__)

__all__ = ["AnakinRun"]

ENV_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class AnakinRun:
    """One Anakin training run; ``run()`` blocks until a stop condition."""

    def __init__(self, cfg: SeedqConfig, run_dir: str, *, resume: dict | None = None) -> None:
        """``resume``: a loaded checkpoint (already checked against ``cfg``) to continue."""
        self.cfg, self.run_dir = cfg, run_dir
        hw, anakin = cfg.hardware, cfg.arch.anakin
        self.device = resolve_device(hw.device)
        if hw.num_threads:
            torch.set_num_threads(hw.num_threads)
        torch.manual_seed(cfg.seed)
        self.unroll_length = anakin.unroll_length or cfg.algorithm.unroll_length
        self.stats = BrokerStats()
        self.elapsed_before = 0.0
        env_seed = cfg.seed
        if resume is not None:
            # Fresh episodes on resume, from a seed no earlier start of this run used.
            env_seed = cfg.seed + int(resume["env_steps"])
        self.env = make_tensor_env(
            cfg.env.id,
            anakin.num_envs,
            self.device,
            seed=env_seed,
            max_episode_steps=cfg.env.max_episode_steps,
            dtype=ENV_DTYPES[anakin.env_dtype],
        )
        self.spec = EnvSpec(
            tuple(self.env.obs_shape),
            str(self.env.obs_dtype).removeprefix("torch."),
            self.env.num_actions,
        )
        self.stop = threading.Event()
        self.weights_lock = threading.Lock()
        self.agent = build_agent(
            RunContext(
                cfg, self.spec, self.device, self.weights_lock, self.stop, AMP_DTYPES[hw.amp]
            )
        )
        # The agent's own update (VTraceLearner.train_step) on device-resident unrolls.
        self.learner = self.agent.learner
        if hw.compile != "none":
            self.learner.model = torch.compile(self.agent.model, mode=hw.compile)
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        if resume is not None:
            self._restore(resume)
        self.rollout = DeviceRollout(
            self.env,
            self.agent.model,
            self.agent.selector,
            self.unroll_length,
            self.generator,
            compile_mode=hw.compile,
        )

    def checkpoint_state(self, wall_time_s: float) -> dict:
        """The SEED path's checkpoint: what ``seedq-eval`` and resume read."""
        agent_state = {
            key: snapshot(value) if hasattr(value, "state_dict") else value
            for key, value in (
                ("model", self.agent.model),
                ("optimizer", self.learner.optimizer),
            )
        }
        return {
            **agent_state,
            "rng": {"torch": torch.get_rng_state(), "inference": self.generator.get_state()},
            "config": plain_config(self.cfg),
            "spec": {
                "obs_shape": list(self.spec.obs_shape),
                "obs_dtype": self.spec.obs_dtype,
                "num_actions": self.spec.num_actions,
            },
            "env_steps": self.stats.env_steps,
            "episodes": self.stats.episodes,
            "updates": self.agent.stats.updates,
            "wall_time_s": wall_time_s,
        }

    def _restore(self, state: dict) -> None:
        self.agent.load_state_dict(state)
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

    def save(self, wall_time_s: float) -> str:
        return save_checkpoint(
            self.run_dir, self.checkpoint_state(wall_time_s), keep=self.cfg.checkpoint.keep
        )

    def train_iteration(self) -> None:
        """Collect one unroll, then train on it: the act-and-learn step."""
        stats, learner = self.agent.stats, self.learner
        begin = time.monotonic()
        unroll = self.rollout.collect()
        self.stats.env_steps += self.unroll_length * self.env.num_envs
        acted = time.monotonic()
        learner.set_progress(self.stats.env_steps)
        share = self.env.num_envs // self.cfg.arch.anakin.minibatches
        for start in range(0, self.env.num_envs, share):
            learner.train_step(unroll.columns(start, start + share))
        stats.wait_s += acted - begin
        stats.busy_s += time.monotonic() - acted

    def _drain_episodes(self) -> None:
        count, returns, lengths = self.rollout.episodes.drain()
        with self.stats.lock:
            self.stats.episodes += count
            self.stats.recent_returns.extend(returns)
            self.stats.recent_lengths.extend(lengths)

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
        log.info(
            "training %s on %s x %d tensor envs (%s), arch=anakin; run dir %s",
            cfg.algorithm.name,
            cfg.env.id,
            self.env.num_envs,
            self.device,
            self.run_dir,
        )
        start = time.monotonic() - self.elapsed_before
        monitor = Monitor(cfg, self.agent, self.stats, writer, start)
        every = cfg.checkpoint.every_minutes * 60
        last_save = time.monotonic()
        reason = "interrupted"
        try:
            next_row = time.monotonic() + cfg.log_interval_s
            while True:
                self.train_iteration()
                now = time.monotonic()
                if now < next_row and not monitor.budget_spent(now):
                    continue
                next_row = now + cfg.log_interval_s
                self._drain_episodes()
                reason = monitor.tick()
                if every and time.monotonic() - last_save >= every:
                    self.save(time.monotonic() - start)
                    last_save = time.monotonic()
                if reason:
                    break
        except KeyboardInterrupt:
            reason = "interrupted"
            log.warning("interrupted; saving a checkpoint")
        finally:
            self._drain_episodes()
            monitor.tick(final=True)
            monitor.progress.close()
            writer.close()
            self.save(time.monotonic() - start)
        summary = monitor.summary(reason)
        with open(os.path.join(self.run_dir, "summary.json"), "w") as f:
            json.dump(summary.__dict__, f, indent=2)
        log.info("run finished (%s): %s", reason, summary)
        return summary
