"""The run monitor: one metrics row per interval, the progress line, and when to stop.

Columns (``metrics.csv`` and TensorBoard), documented in docs/architecture.md: ``wall_time``,
``env_steps``, ``return_mean`` and ``steps_per_s`` first (every tool reads them), then groups:
``episode/``, ``train/``, ``perf/``, ``faults/``, and the agent's own (``loss/``, ``replay/``,
``eval/``, more ``train/``), which it supplies with ``metric_columns`` and ``metrics()``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedq.core.agent import Agent
from seedq.core.stats import RunStats
from seedq.metrics import MetricsWriter
from seedq.progress import PROGRESS_LOGGER, ProgressBar

progress_log = logging.getLogger(PROGRESS_LOGGER)

RUN_COLUMNS = [
    "episode/count",
    "episode/return_max",
    "episode/length_mean",
    "train/updates",
    "train/updates_per_s",
    "train/skipped_updates",
    "perf/batch_fill",
    "perf/learner_wait_frac",
    "faults/bad_messages",
    "faults/evicted_actors",
    "faults/refused_peers",
]


@dataclass
class RunSummary:
    env_steps: int
    wall_time_s: float
    steps_per_s: float
    return_mean: float | None
    episodes: int
    updates: int
    time_to_target_s: float | None
    # The mean that met ``stop_at_return`` (None if none did). ``return_mean`` is the final
    # window's, which holds the episodes that ended while the roles stopped: on short episodes
    # it can be a fresh sample below the target.
    return_at_target: float | None
    stop_reason: str


class Monitor:
    """Turns the broker's and the agent's counters into rows; decides when the run stops."""

    def __init__(
        self,
        cfg: Any,
        agent: Agent,
        broker_stats: RunStats,
        writer: MetricsWriter,
        start: float,
        *,
        curve: Any = None,
    ) -> None:
        """``curve``: the CURVE guard of the broker's socket (counts refused handshakes)."""
        self.cfg, self.agent, self.stats, self.writer = cfg, agent, broker_stats, writer
        self.curve = curve
        self.start = start
        self.last_time = time.monotonic()
        self.last_steps, self.last_updates = broker_stats.env_steps, agent.stats.updates
        self.last_batches, self.last_batch_envs = 0, 0
        self.last_wait, self.last_busy = 0.0, 0.0
        self.time_to_target: float | None = None
        self.return_at_target: float | None = None
        self.return_mean: float | None = None
        self.progress = ProgressBar(cfg.total_env_steps, broker_stats.env_steps)

    @staticmethod
    def columns(agent: Agent) -> list[str]:
        return [*RUN_COLUMNS, *agent.metric_columns]

    def tick(self, final: bool = False) -> str:
        """Write one row; the reason to stop ("" to go on). The ``final`` row's progress line
        gives the run's average steps/s (the CSV row keeps the interval's)."""
        cfg, stats, learner = self.cfg, self.stats, self.agent.stats
        now = time.monotonic()
        elapsed = now - self.start
        steps, updates = stats.env_steps, learner.updates
        dt = max(now - self.last_time, 1e-9)
        with stats.lock:
            returns = list(stats.recent_returns)
            lengths = list(stats.recent_lengths)
            episodes = stats.episodes
        batches = stats.batches - self.last_batches
        fill = (
            (stats.batch_envs - self.last_batch_envs) / (batches * cfg.broker.max_batch)
            if batches
            else None
        )
        wait = learner.wait_s - self.last_wait
        busy = learner.busy_s - self.last_busy
        agent_row = self.agent.metrics()
        judged = self.agent.judged_returns(returns)
        self.return_mean = float(np.mean(judged)) if judged else None
        row = {
            "wall_time": round(elapsed, 3),
            "env_steps": steps,
            "steps_per_s": (steps - self.last_steps) / dt,
            "return_mean": float(np.mean(returns)) if returns else None,
            "episode/count": episodes,
            "episode/return_max": float(np.max(returns)) if returns else None,
            "episode/length_mean": float(np.mean(lengths)) if lengths else None,
            "train/updates": updates,
            "train/updates_per_s": (updates - self.last_updates) / dt,
            "train/skipped_updates": learner.skipped_updates,
            "perf/batch_fill": fill,
            "perf/learner_wait_frac": wait / (wait + busy) if wait + busy > 0 else None,
            "faults/bad_messages": sum(stats.bad_messages.values()),
            "faults/evicted_actors": stats.evicted,
            "faults/refused_peers": stats.refused_peers_with(self.curve),
            **agent_row,
        }
        self.writer.write_episodes(stats.drain_episodes())
        self.writer.write(row)
        # The last interval can be a fraction of a second (the run stopped right after a row):
        # the final line reports the whole run's rate, as summary.json does.
        rate = steps / max(elapsed, 1e-9) if final else row["steps_per_s"]
        self.progress.update(steps, rate, self.return_mean)
        progress_log.info(
            "steps %d | %.0f steps/s%s | return %s (%d ep) | updates %d | %s",
            steps,
            rate,
            " on average" if final else "",
            "n/a" if row["return_mean"] is None else f"{row['return_mean']:.1f}",
            episodes,
            updates,
            self.agent.progress(row),
        )
        self.last_time, self.last_steps, self.last_updates = now, steps, updates
        self.last_batches, self.last_batch_envs = stats.batches, stats.batch_envs
        self.last_wait, self.last_busy = learner.wait_s, learner.busy_s
        target = cfg.stop_at_return
        if (
            target is not None
            and self.time_to_target is None
            and len(judged) >= 100
            and self.return_mean is not None
            and self.return_mean >= target
        ):
            self.time_to_target = elapsed
            self.return_at_target = self.return_mean
            return "target_return"
        return "" if final else self.budget_spent(now)

    def target_met(self) -> bool:
        """Whether ``stop_at_return`` is met now, by the rule :meth:`tick` stops on. Checked
        between rows, so the run stops and times its target within a wake of the crossing, not
        at the next row (``log_interval_s`` later: every CartPole time to 475 read 5 s)."""
        target = self.cfg.stop_at_return
        if target is None or self.time_to_target is not None:
            return False
        with self.stats.lock:
            returns = list(self.stats.recent_returns)
        judged = self.agent.judged_returns(returns)
        return len(judged) >= 100 and float(np.mean(judged)) >= target

    def budget_spent(self, now: float) -> str:
        """Which budget the run has used up ("total_env_steps", "max_minutes"), or ""."""
        cfg = self.cfg
        if self.stats.env_steps >= cfg.total_env_steps:
            return "total_env_steps"
        if cfg.max_minutes and now - self.start >= cfg.max_minutes * 60:
            return "max_minutes"
        return ""

    def summary(self, reason: str) -> RunSummary:
        elapsed = time.monotonic() - self.start
        steps = self.stats.env_steps
        return RunSummary(
            env_steps=steps,
            wall_time_s=round(elapsed, 2),
            steps_per_s=round(steps / max(elapsed, 1e-9), 1),
            return_mean=None if self.return_mean is None else round(self.return_mean, 4),
            episodes=self.stats.episodes,
            updates=self.agent.stats.updates,
            time_to_target_s=None if self.time_to_target is None else round(self.time_to_target, 1),
            return_at_target=self.return_at_target,
            stop_reason=reason,
        )
