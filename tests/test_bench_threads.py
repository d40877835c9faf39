"""The learner process's CPU by thread (``seedq.bench.threads``), as ``seedq-bench train``
reports it."""

import sys
import threading
import time

import pytest

from seedq.bench.threads import NATIVE, ThreadSampler, cores_by_thread, thread_cpu

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/task")


def test_cores_by_thread_sums_native_threads_and_counts_new_ones_from_zero():
    before = {1: ("broker", 10.0), 2: ("train", 4.0), 3: ("[ZMQbg/IO/0]", 1.0), 9: ("gone", 5.0)}
    after = {
        1: ("broker", 11.0),
        2: ("train", 6.0),
        3: ("[ZMQbg/IO/0]", 1.5),
        4: ("[pt_thread]", 0.5),  # started in between
        5: ("late", 1.0),
    }
    cores = cores_by_thread(before, after, 2.0)
    assert cores == {"broker": 0.5, "train": 1.0, NATIVE: 0.5, "late": 0.5, "process": 2.5}


def test_cores_by_thread_needs_snapshots_apart_in_time():
    with pytest.raises(ValueError, match="apart in time"):
        cores_by_thread({}, {}, 0.0)


@linux_only
def test_a_busy_thread_shows_its_cpu_and_an_idle_one_does_not():
    done, leave = threading.Event(), threading.Event()

    def spin() -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.3:
            pass
        done.set()
        leave.wait()  # an ended thread leaves /proc: it stays until read

    idle = threading.Thread(target=leave.wait, name="idle", daemon=True)
    idle.start()
    before = thread_cpu()
    busy = threading.Thread(target=spin, name="spin", daemon=True)
    busy.start()
    while not done.is_set():
        time.sleep(0.01)
    after = thread_cpu()
    leave.set()
    busy.join()
    names = {name for name, _ in after.values()}
    assert {"spin", "idle", "MainThread"} <= names
    cores = cores_by_thread(before, after, 1.0)  # CPU seconds, per one second
    # The kernel counts in clock ticks (10 ms here); the spin used 0.3 s of its own clock.
    assert cores["spin"] >= 0.2
    assert cores["idle"] <= 0.05
    assert cores["process"] >= cores["spin"]


@linux_only
def test_the_sampler_reads_a_window_between_its_snapshots():
    with ThreadSampler(interval_s=0.05) as sampler:
        time.sleep(0.3)
    assert len(sampler.snapshots) >= 3
    cores = sampler.cores_between(0.0, 0.3)
    assert "MainThread" in cores and cores["process"] >= 0
    assert sampler.cores_between(0.2, 0.0) == {}  # no window
    # Only snapshots inside the window: the one taken on exit, after it, is not read.
    assert sampler.snapshots[-1][0] > 0.3


def test_a_thread_that_ended_in_the_window_keeps_its_last_count():
    # A run's threads end before its final metrics row: they were missing from the window.
    sampler = ThreadSampler()
    sampler.snapshots = [
        (0.0, {1: ("train", 1.0), 2: ("MainThread", 0.0)}),
        (1.0, {1: ("train", 1.5), 2: ("MainThread", 0.0)}),
        (2.0, {2: ("MainThread", 0.1)}),  # train has ended
    ]
    assert sampler.cores_between(0.0, 2.0) == {"train": 0.25, "MainThread": 0.05, "process": 0.3}
