"""Size-or-deadline micro-batcher for central inference.

The broker gathers inference requests from many actors and hands them to the model
in batches. Bigger batches use the accelerator better; waiting for a batch to fill
costs actors latency. :class:`Batcher` balances the two with a simple rule: a batch
is ready as soon as enough environments are waiting to fill it, or as soon as the
oldest waiting request has waited ``deadline_s`` seconds, whichever comes first.

The batcher is a pure object: no sockets, no threads and no sleeping. The broker
owns the event loop and uses the batcher like this::

    while running:
        timeout = batcher.time_until_ready()
        # Poll the socket for at most `timeout` (block indefinitely when None).
        for request, size in received_requests():
            batcher.add(request, size)
        while batcher.ready():
            run_inference(batcher.take())

It is **not thread-safe**. Use it from a single thread, or guard every call with
one lock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

Request = TypeVar("Request")


class _Pending(NamedTuple, Generic[Request]):
    """A queued request with the bookkeeping the batcher needs."""

    request: Request
    size: int
    arrival: float


class Batcher(Generic[Request]):
    """FIFO micro-batcher that releases a batch when it is full or its oldest request is due.

    Each request carries a ``size``: the number of environments it asks actions for.
    Batches are measured in environments, not requests, because that is what the
    model's batch dimension sees.

    Statistics for benchmarking are kept as plain attributes and updated by
    :meth:`take` only (``take_all`` is a shutdown drain, not a real batch):

    * ``batches_taken``: non-empty batches returned by :meth:`take`.
    * ``envs_taken``: environments in those batches.
    * ``size_triggered``: batches taken while at least ``max_batch`` envs were waiting.
    * ``deadline_triggered``: batches taken with fewer envs waiting than ``max_batch``.

    Args:
        max_batch: Largest batch, in environments, that :meth:`take` assembles from
            several requests. A single larger request is still released on its own.
        deadline_s: Longest time, in seconds, the oldest request should wait before
            a partial batch is released. Zero releases every request immediately.
        clock: Monotonic time source in seconds; injectable so tests need no sleeps.

    Raises:
        ValueError: If ``max_batch <= 0`` or ``deadline_s < 0``.
    """

    def __init__(
        self,
        max_batch: int,
        deadline_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_batch <= 0:
            raise ValueError(f"max_batch must be positive, got {max_batch}")
        if deadline_s < 0:
            raise ValueError(f"deadline_s must be non-negative, got {deadline_s}")
        self.max_batch = max_batch
        self.deadline_s = deadline_s
        self._clock = clock
        # A deque gives O(1) append on the right and pop on the left, and keeps
        # requests in arrival order, so the oldest request is always at index 0.
        self._queue: deque[_Pending[Request]] = deque()
        # Kept as a running total so `ready()` never has to walk the queue.
        self._pending_size = 0

        self.batches_taken = 0
        self.envs_taken = 0
        self.size_triggered = 0
        self.deadline_triggered = 0

    def add(self, request: Request, size: int) -> None:
        """Queue ``request``, which asks for actions for ``size`` environments.

        Raises:
            ValueError: If ``size <= 0``.
        """
        if size <= 0:
            raise ValueError(f"size must be positive, got {size}")
        self._queue.append(_Pending(request, size, self._clock()))
        self._pending_size += size

    @property
    def pending_size(self) -> int:
        """Number of environments waiting, summed over all queued requests."""
        return self._pending_size

    def __len__(self) -> int:
        """Number of requests waiting."""
        return len(self._queue)

    def _deadline(self) -> float:
        """Time at which the oldest request becomes due. The queue must be non-empty."""
        return self._queue[0].arrival + self.deadline_s

    def ready(self) -> bool:
        """Whether a batch should be taken now: it is full, or the oldest request is due."""
        if not self._queue:
            return False
        if self._pending_size >= self.max_batch:
            return True
        return self._clock() >= self._deadline()

    def time_until_ready(self) -> float | None:
        """Seconds until :meth:`ready` becomes true if nothing else arrives.

        Returns ``None`` when empty (nothing will ever become ready, so the caller
        may block until a request arrives), ``0.0`` when ready now, and otherwise
        the time left until the oldest request's deadline.
        """
        if not self._queue:
            return None
        if self._pending_size >= self.max_batch:
            return 0.0
        # Clamp at zero so a caller passing this to a poll never sees a negative timeout.
        return max(0.0, self._deadline() - self._clock())

    def take(self) -> list[Request]:
        """Remove and return the next batch, oldest request first.

        Requests are popped in arrival order while the batch's total size stays
        within ``max_batch``; the first request that would overflow it stays queued
        (it is not skipped, so order is preserved). At least one request is always
        popped, so a request larger than ``max_batch`` goes alone rather than being
        split or blocking the queue forever.

        Requests left behind keep their original arrival times: their deadline does
        not restart, so a busy queue cannot starve them.

        Returns an empty list when nothing is queued.
        """
        if not self._queue:
            return []
        # Decided before popping: it describes why this batch was released.
        if self._pending_size >= self.max_batch:
            self.size_triggered += 1
        else:
            self.deadline_triggered += 1

        first = self._queue.popleft()
        batch = [first.request]
        total = first.size
        while self._queue and total + self._queue[0].size <= self.max_batch:
            item = self._queue.popleft()
            batch.append(item.request)
            total += item.size

        self._pending_size -= total
        self.batches_taken += 1
        self.envs_taken += total
        return batch

    def remove(self, predicate: Callable[[Request], bool]) -> list[Request]:
        """Drop every queued request for which ``predicate`` is true; return them in order.

        For requests that must not be answered any more (their actor left or restarted). The
        others keep their place and arrival time; no statistic changes.
        """
        kept: deque[_Pending[Request]] = deque()
        dropped = []
        for item in self._queue:
            (dropped if predicate(item.request) else kept).append(item)
        self._queue = kept
        self._pending_size -= sum(item.size for item in dropped)
        return [item.request for item in dropped]

    def take_all(self) -> list[Request]:
        """Remove and return every queued request in arrival order (for shutdown).

        Ignores ``max_batch`` and does not update the batch statistics.
        """
        batch = [item.request for item in self._queue]
        self._queue.clear()
        self._pending_size = 0
        return batch

    @property
    def fill_ratio(self) -> float:
        """Mean fraction of ``max_batch`` filled by batches from :meth:`take`.

        ``envs_taken / (batches_taken * max_batch)``; 0.0 before the first batch.
        Can exceed 1.0 if oversize requests were taken.
        """
        if self.batches_taken == 0:
            return 0.0
        return self.envs_taken / (self.batches_taken * self.max_batch)
