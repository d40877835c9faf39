"""The learner process keeps freed memory for reuse (``hardware.keep_freed_mb``), and arrays
too large for glibc to keep are reused by the pool that hands them out."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import weakref

import numpy as np
import pytest
import torch

from seedq.learner.memory import ReusedArrays, keep_freed_memory

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


def pool(budget: int = 1 << 20) -> ReusedArrays:
    """A pool that takes arrays of 1 KB and more (the learner's takes them from 32 MB)."""
    return ReusedArrays(budget, min_bytes=1024)


def test_an_array_let_go_of_is_handed_out_again():
    arrays = pool()
    first = weakref.ref(arrays.empty((16, 64), np.float32))
    assert arrays.empty((16, 64), np.float32) is first()


@pytest.mark.parametrize(
    "hold",
    [
        lambda array: array,
        lambda array: array[1:],
        lambda array: torch.from_numpy(array),
        lambda array: [array],
    ],
    ids=["array", "view", "tensor", "container"],
)
def test_an_array_still_held_is_never_handed_out_twice(hold):
    arrays = pool()
    first = arrays.empty((16, 64), np.float32)
    first[:] = 7.0
    held = hold(first)
    del first
    second = arrays.empty((16, 64), np.float32)
    second[:] = 0.0
    assert float(np.asarray(held[0] if isinstance(held, list) else held).min()) == 7.0


def test_small_arrays_and_arrays_over_the_budget_are_not_pooled():
    arrays = pool(budget=8192)
    arrays.empty((8,), np.float32)
    arrays.empty((4096,), np.float32)
    assert arrays.pooled_bytes == 0


def test_the_pool_stays_within_its_budget_and_makes_room_from_free_arrays():
    arrays = pool(budget=3 * 4096)
    held = [arrays.empty((1024,), np.float32) for _ in range(4)]
    assert arrays.pooled_bytes == 3 * 4096
    del held
    # A new shape (a batch that changed width): the free arrays of the old one make room.
    wide = weakref.ref(arrays.empty((2048,), np.float32))
    assert arrays.pooled_bytes <= 3 * 4096
    assert arrays.empty((2048,), np.float32) is wide()


def test_the_pool_takes_the_process_budget_of_hardware_keep_freed_mb():
    """A learner process sets its budget once (prepare_learner_process), and the unroll store's
    pool, made after, takes it. In a child process: the setting is process-wide."""
    child = """
from seedq.learner.memory import ReusedArrays, keep_freed_memory
budgets = [ReusedArrays().budget_bytes]
keep_freed_memory(64)
budgets.append(ReusedArrays().budget_bytes)
keep_freed_memory(0)
budgets.append(ReusedArrays().budget_bytes)
print(*budgets)
"""
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", str(64 << 20), "0"]
