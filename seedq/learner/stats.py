"""Counters a learner keeps for the run monitor: updates, samples, wait/busy time, loss means."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

# Updates in a row whose loss or gradient was not finite before the run stops: a few are a
# bad batch, this many mean the model or the data are broken and training on is pointless.
MAX_CONSECUTIVE_SKIPS = 100


class NonFiniteTraining(RuntimeError):
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
