"""The learner process's allocator: freed batches kept for reuse (``hardware.keep_freed_mb``)."""

from __future__ import annotations

import ctypes
import logging
import math
import sys

import numpy as np

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h) and its largest mmap threshold on 64-bit machines.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_MAX = 32 << 20
C_INT_MAX = 2**31 - 1


# What keep_freed_memory last set for this process: the default budget of ReusedArrays.
_kept_bytes = 0


def keep_freed_memory(megabytes: int) -> bool:
    """Have glibc keep up to ``megabytes`` of freed memory for reuse (``hardware.keep_freed_mb``);
    whether it took the setting (False on other C libraries, or for 0).

    The learner allocates a few MB to tens of MB per batch (inference batches, training batches,
    minibatches) and frees them soon after. By default glibc maps each block over 128 KB (up
    to 32 MB as its threshold adapts) on its own and unmaps it when freed, so the next batch is
    written into new pages the kernel must fault in and zero: writing an 18 MB training batch
    took 7.2 ms into fresh memory and 3.3 ms into reused memory on the 2-core box; with these
    settings a fresh allocation costs what a reused one does (benchmarks/RESULTS.md, "The
    learner's own CPU per env step"). Blocks over 32 MB, which glibc will not keep, are kept by
    the :class:`ReusedArrays` made after this call, up to the same budget.
    """
    global _kept_bytes
    _kept_bytes = max(megabytes, 0) << 20
    if megabytes <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    # mallopt takes a C int: ctypes masks a larger value to its low 32 bits (4096 MB read as
    # 0, trim everything), so the trim threshold is capped at the largest int.
    keep = min(megabytes << 20, C_INT_MAX)
    took = bool(mallopt(M_MMAP_THRESHOLD, min(keep, MMAP_THRESHOLD_MAX))) and bool(
        mallopt(M_TRIM_THRESHOLD, keep)
    )
    if not took:
        log.debug("glibc refused mallopt; freed memory goes back to the kernel as before")
    return took


class ReusedArrays:
    """Arrays of ``min_bytes`` or more, handed out again once nothing but this pool holds them.

    glibc will not raise its mmap threshold past 32 MB, so :func:`keep_freed_memory` cannot
    keep larger blocks: each is mapped on its own and unmapped when freed, and the next one is
    written into pages the kernel faults in and zeroes. A 128-step training batch of 16 Atari
    envs holds 58 MB of frames; writing it into fresh pages cost the unroll store 1.5-2x its
    CPU per env step (benchmarks/RESULTS.md, thirtieth session). This pool keeps up to
    ``budget_bytes`` of such arrays (default: what :func:`keep_freed_memory` set for the
    process) and gives one back out when its only reference is the pool's: a consumer that
    keeps the array, a view of it or a tensor made from it (``torch.from_numpy``) holds a
    reference, so a held array is never handed out twice. Returned arrays are uninitialised,
    as ``np.empty``'s are.
    """

    def __init__(
        self, budget_bytes: int | None = None, min_bytes: int = MMAP_THRESHOLD_MAX
    ) -> None:
        # None: the process's setting (keep_freed_memory, from hardware.keep_freed_mb).
        self.budget_bytes = _kept_bytes if budget_bytes is None else budget_bytes
        self.min_bytes = min_bytes
        self._arrays: list[np.ndarray] = []
        # An array only its list holds, read the way _free reads the pool's: its count is what
        # a free array's is on this interpreter (3.14 may skip some counts that 3.11 takes).
        self._unheld = [np.empty(0)]

    @property
    def pooled_bytes(self) -> int:
        return sum(array.nbytes for array in self._arrays)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < self.min_bytes or nbytes > self.budget_bytes:
            return np.empty(shape, dtype)
        for i in range(len(self._arrays)):
            if self._free(i) and self._arrays[i].shape == shape and self._arrays[i].dtype == dtype:
                return self._arrays[i]
        # Free arrays of other shapes (a batch that changed width) make room for this one.
        for i in reversed(range(len(self._arrays))):
            if self.pooled_bytes + nbytes <= self.budget_bytes:
                break
            if self._free(i):
                del self._arrays[i]
        array = np.empty(shape, dtype)
        if self.pooled_bytes + nbytes <= self.budget_bytes:
            self._arrays.append(array)
        return array

    def _free(self, i: int) -> bool:
        # Nobody but the pool holds it, so nobody else can come to hold it either.
        return sys.getrefcount(self._arrays[i]) == sys.getrefcount(self._unheld[0])
