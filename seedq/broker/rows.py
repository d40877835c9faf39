"""Learner state rows: which global env rows are free, handed out lowest first.

Rows index the learner's per-env state (recurrent state, unroll columns). They are allocated
when an actor's Hello is valid and returned when it leaves, restarts or is evicted, so hello/bye
churn never grows the state table.
"""

from __future__ import annotations

import numpy as np


class RowPool:
    """The learner's state rows: freed rows are handed out again, lowest first.

    The table therefore never grows past the peak number of envs connected at once.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.high = 0  # rows [0, high) have been handed out at some point
        self._free = np.empty(0, dtype=np.int64)  # sorted

    @property
    def in_use(self) -> int:
        return self.high - len(self._free)

    @property
    def free(self) -> int:
        """Rows that can still be handed out."""
        return self.limit - self.in_use

    def allocate(self, n: int) -> np.ndarray | None:
        """``n`` rows, or None when fewer than ``n`` are left."""
        reused = self._free[:n]
        fresh = n - len(reused)
        if self.high + fresh > self.limit:
            return None
        self._free = self._free[len(reused) :]
        rows = np.concatenate([reused, np.arange(self.high, self.high + fresh, dtype=np.int64)])
        self.high += fresh
        return rows

    def release(self, rows: np.ndarray) -> None:
        self._free = np.sort(np.concatenate([self._free, rows]))
