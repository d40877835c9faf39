"""Unrolls gathered into training batches of a fixed number of env columns."""

from __future__ import annotations

from seedq.core.unroll import Unroll, concat_unrolls


class BatchAssembler:
    """Collects unrolls until exactly ``batch_size`` env columns, splitting the remainder."""

    def __init__(self, batch_size: int) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        self.batch_size = batch_size
        self._pending: list[Unroll] = []
        self._pending_columns = 0

    def add(self, unroll: Unroll) -> list[Unroll]:
        """Add an unroll; return the batches it completed (often none, sometimes several)."""
        self._pending.append(unroll)
        self._pending_columns += unroll.num_columns
        batches = []
        while self._pending_columns >= self.batch_size:
            joined = concat_unrolls(self._pending)
            batches.append(joined.columns(0, self.batch_size))
            rest = joined.num_columns - self.batch_size
            self._pending = [joined.columns(self.batch_size, joined.num_columns)] if rest else []
            self._pending_columns = rest
        return batches
