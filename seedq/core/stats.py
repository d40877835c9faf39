"""The run's counters, read by the monitor: what the learner did (:class:`TrainStats`, one per
agent) and what reached it (:class:`RunStats`: env steps, episodes, batches and the faults
survived, fed by whatever produces env steps: the broker, Sebulba's desk, Anakin's loop)."""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from seedq.messages import ERROR_CODES, Step

# Finished episodes kept for the episode log (episodes.csv) between two metrics rows; the
# monitor drains them every log interval, so only a run that never writes rows reaches it.
MAX_UNLOGGED_EPISODES = 100_000

# Updates in a row whose loss or gradient was not finite before the run stops: a few are a
# bad batch, this many mean the model or the data are broken and training on is pointless.
MAX_CONSECUTIVE_SKIPS = 100


class RunFault(RuntimeError):
    """A fault that ends a run for a known reason (an actor that keeps dying, a lost learner
    rank or broker shard, training that is no longer finite): the message says it all, so it
    is reported in one line without a traceback, and the run's last checkpoint stands.
    ``seedq-train`` exits 3 on it (``supervise=true`` restarts the run from that checkpoint)."""


class NonFiniteTraining(RunFault):
    """Training keeps producing NaN or inf losses or gradients; the message says what to try."""


@dataclass
class TrainStats:
    updates: int = 0
    samples: int = 0
    skipped_updates: int = 0
    consecutive_skips: int = 0
    wait_s: float = 0.0
    busy_s: float = 0.0
    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record_step(self, grad_norm: float) -> bool:
        """Count an update (True), or a skipped one when ``grad_norm`` is not finite (False).

        Raises :class:`NonFiniteTraining` after ``MAX_CONSECUTIVE_SKIPS`` skips in a row.
        """
        if math.isfinite(grad_norm):
            self.updates += 1
            self.consecutive_skips = 0
            return True
        self.skipped_updates += 1
        self.consecutive_skips += 1
        if self.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
            raise NonFiniteTraining(
                f"{self.consecutive_skips} updates in a row had a NaN or inf loss or gradient "
                f"({self.skipped_updates} skipped in all, {self.updates} taken); the last good "
                "weights are in the newest checkpoint. Lower algorithm.lr, check the env's "
                "rewards and observations for NaN/inf, or try algorithm.reward_clip=abs_one"
            )
        return False

    def add(self, values: dict[str, float]) -> None:
        with self.lock:
            for key, value in values.items():
                self.sums[key] = self.sums.get(key, 0.0) + value
            self.count += 1

    def pop_means(self) -> dict[str, float]:
        """Mean of each scalar since the last call (losses for one logging interval)."""
        with self.lock:
            means = {k: v / self.count for k, v in self.sums.items()} if self.count else {}
            self.sums, self.count = {}, 0
        return means


# The bad messages of a resumed run's earlier starts, whatever their codes (its checkpoint keeps
# the totals only).
EARLIER_STARTS = "earlier_starts"


def _zero_counts() -> collections.Counter:
    # Every code present from the start: the dict never changes size, so a monitor thread can
    # sum its values while the broker counts.
    return collections.Counter(dict.fromkeys([*sorted(ERROR_CODES), EARLIER_STARTS], 0))


@dataclass
class RunStats:
    """What reached the learner: env steps, inference batches, finished episodes, and the bad
    messages and evicted actors the run survived (those two stay 0 without a broker)."""

    env_steps: int = 0
    messages: int = 0
    batches: int = 0
    batch_envs: int = 0
    bad_messages: collections.Counter = field(default_factory=_zero_counts)
    evicted: int = 0
    # CURVE handshakes refused by broker shards' guards and in earlier starts of the run (the
    # learner's own guard counts its own: refused_peers_with).
    refused_peers: int = 0
    episodes: int = 0
    recent_returns: collections.deque = field(default_factory=lambda: collections.deque(maxlen=100))
    recent_lengths: collections.deque = field(default_factory=lambda: collections.deque(maxlen=100))
    # (env_steps when it was counted, return, length) of each episode not yet in episodes.csv.
    unlogged: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=MAX_UNLOGGED_EPISODES)
    )
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set by the counting thread once env_steps reaches budget (see stop_at).
    budget: int = 0
    at_budget: threading.Event | None = None
    others_steps: Callable[[], int] = lambda: 0

    def refused_peers_with(self, curve: Any) -> int:
        """Refused CURVE handshakes of the whole run: these and ``curve``'s (the learner's
        socket guard, or None)."""
        return self.refused_peers + (curve.refused if curve is not None else 0)

    def stop_at(
        self, budget: int, event: threading.Event, others: Callable[[], int] = lambda: 0
    ) -> None:
        """Set ``event`` as soon as ``env_steps`` plus ``others()`` (the other learner ranks'
        steps as last known) reaches ``budget``: the thread that answers batches stops the
        run's roles at the step that spends the budget, not a loop wake later (CartPole runs at
        10-40 k env steps/s, so a quarter second is thousands of steps)."""
        self.budget, self.at_budget, self.others_steps = budget, event, others
        self._check_budget()

    def _check_budget(self) -> None:
        if self.at_budget is not None and self.env_steps + self.others_steps() >= self.budget:
            self.at_budget.set()

    def record_batch(self, envs: int, steps: Iterable[Step]) -> None:
        """One inference batch answered: ``envs`` env steps, and the episodes its ``steps``
        report finished. Under the lock, all of it: Sebulba's threads call this at once (a
        ``+=`` can lose another thread's), and a checkpoint reads the steps and the episodes
        together (:meth:`counts`), never the steps of a batch without its episodes."""
        with self.lock:
            self.batches += 1
            self.batch_envs += envs
            self.env_steps += envs
            for step in steps:
                self.episodes += len(step.episode_returns)
                self.recent_returns.extend(step.episode_returns)
                self.recent_lengths.extend(step.episode_lengths)
                self._unlog(step.episode_returns, step.episode_lengths)
        self._check_budget()

    def counts(self) -> tuple[int, int]:
        """``(env_steps, episodes)`` of one moment: every episode logged at or before those
        env steps is among those episodes."""
        with self.lock:
            return self.env_steps, self.episodes

    def record_episodes(self, count: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        """``count`` finished episodes, the most recent of which have these returns/lengths."""
        with self.lock:
            self.episodes += count
            self.recent_returns.extend(returns)
            self.recent_lengths.extend(lengths)
            self._unlog(returns, lengths)

    def _unlog(self, returns: Sequence[float], lengths: Sequence[int]) -> None:
        for ret, length in zip(returns, lengths, strict=False):
            self.unlogged.append((self.env_steps, float(ret), int(length)))

    def drain_episodes(self) -> list[tuple[int, float, int]]:
        """The episodes finished since the last call: (env steps counted then, return,
        length), oldest first."""
        with self.lock:
            episodes = list(self.unlogged)
            self.unlogged.clear()
        return episodes

    def add_unlogged(self, episodes: Iterable[tuple[int, float, int]]) -> None:
        """Episodes another rank finished, for this (summed) record's episode log."""
        with self.lock:
            self.unlogged.extend(episodes)
