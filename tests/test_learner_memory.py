"""The learner process keeps freed memory for reuse (``hardware.keep_freed_mb``)."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from seedq.learner.memory import keep_freed_memory

GLIBC = sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


def test_zero_keeps_glibcs_defaults():
    assert keep_freed_memory(0) is False


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_a_freed_batch_is_reused_without_new_pages():
    """With the setting, allocating 18 MB blocks while older ones are freed (as training
    batches come and go) takes almost no new page faults (the kernel's count of minor faults);
    with glibc's defaults each new block faults its pages in again. In a child
    process: the setting is process-wide."""
    child = """
import resource, sys
import numpy as np
from seedq.learner.memory import keep_freed_memory
took = keep_freed_memory(int(sys.argv[1]))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
# As batches live: a few alive at once, the oldest freed as the next one is written.
alive = [np.ones(18 << 20, np.uint8) for _ in range(3)]
before = faults()
for _ in range(6):
    alive.append(np.ones(18 << 20, np.uint8))
    alive.pop(0)
print(took, faults() - before)
"""
    runs = {}
    for megabytes in (0, 1024):
        out = subprocess.run(
            [sys.executable, "-c", child, str(megabytes)], capture_output=True, text=True
        )
        took, faults = out.stdout.split()
        runs[megabytes] = (took == "True", int(faults))
    # Transparent huge pages make the default's faults fewer but no cheaper to take.
    assert runs[1024][0] and not runs[0][0]
    assert 3 * runs[1024][1] < runs[0][1], runs
