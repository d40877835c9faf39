"""The learner process's allocator: freed batches kept for reuse (``hardware.keep_freed_mb``)."""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h) and its largest mmap threshold on 64-bit machines.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_MAX = 32 << 20


def keep_freed_memory(megabytes: int) -> bool:
    """Have glibc keep up to ``megabytes`` of freed memory for reuse (``hardware.keep_freed_mb``);
    whether it took the setting (False on other C libraries, or for 0).

    The learner allocates a few MB to tens of MB per batch (inference batches, training batches,
    minibatches) and frees them soon after. By default glibc maps each block over 128 KB (up
    to 32 MB as its threshold adapts) on its own and unmaps it when freed, so the next batch is
    written into new pages the kernel must fault in and zero: writing an 18 MB training batch
    took 7.2 ms into fresh memory and 3.3 ms into reused memory on the 2-core box; with these
    settings a fresh allocation costs what a reused one does (benchmarks/RESULTS.md, "The
    learner's own CPU per env step").
    """
    if megabytes <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    keep = megabytes << 20
    took = bool(mallopt(M_MMAP_THRESHOLD, min(keep, MMAP_THRESHOLD_MAX))) and bool(
        mallopt(M_TRIM_THRESHOLD, keep)
    )
    if not took:
        log.debug("glibc refused mallopt; freed memory goes back to the kernel as before")
    return took
