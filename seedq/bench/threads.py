"""CPU time of each thread of this process, by thread name: where a learner process spends its
cores (issue 34).

``seedq-bench train`` reports it for the learner process over its measured seconds: the
``broker`` thread (receiving requests, batching them, central inference, replies), the
``train`` thread (batch assembly, the updates' host work) and the rest. On one process the
Python threads share the GIL: when ``train`` and ``broker`` together keep about one core busy
and the learner never waits for data, the interpreter, not the device or the cores, is the
limit; native threads (torch's intra-op pool, ZeroMQ's I/O threads, the CUDA driver's) run
beside it without the GIL.

Linux only (``/proc/self/task``); elsewhere the figures are empty.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

TASKS = Path("/proc/self/task")
# A named Python thread of this process; every other thread is reported under its kernel
# name (``comm``: e.g. ``ZMQbg/IO/0``, ``pt_main_thread``) and summed in ``native``.
NATIVE = "native"


def _ticks(tid: str) -> int | None:
    """utime + stime of one thread, in clock ticks; None once it has exited."""
    try:
        text = (TASKS / tid / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count from after it.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _comm(tid: str) -> str:
    try:
        return (TASKS / tid / "comm").read_text().strip()
    except OSError:
        return "?"


def thread_cpu() -> dict[int, tuple[str, float]]:
    """``{thread id: (name, CPU seconds so far)}`` for every thread of this process: Python
    threads under their ``threading`` name, the others under their kernel name in brackets."""
    if not TASKS.is_dir():
        return {}
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for tid in os.listdir(TASKS):
        ticks = _ticks(tid)
        if ticks is None:
            continue
        name = names.get(int(tid))
        found[int(tid)] = (name if name is not None else f"[{_comm(tid)}]", ticks / tick)
    return found


def cores_by_thread(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float
) -> dict[str, float]:
    """CPU seconds per wall second (cores) of each named Python thread between two
    :func:`thread_cpu` snapshots, the unnamed native threads summed under ``native``, and the
    whole process under ``process``. A thread that started in between counts from zero; one
    that ended in between is missing from ``after`` and is left out."""
    if seconds <= 0:
        raise ValueError(f"seconds={seconds}: the snapshots must be apart in time")
    cores: dict[str, float] = {}
    for tid, (name, spent) in after.items():
        earlier = before.get(tid)
        used = spent - (earlier[1] if earlier is not None else 0.0)
        key = NATIVE if name.startswith("[") else name
        cores[key] = cores.get(key, 0.0) + used / seconds
    cores["process"] = sum(cores.values())
    return {k: round(v, 3) for k, v in cores.items()}


class ThreadSampler:
    """Snapshots of :func:`thread_cpu` every ``interval_s`` on a thread of its own, so a window
    of a run that blocks the caller can be read afterwards (:meth:`cores_between`)."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.snapshots: list[tuple[float, dict[int, tuple[str, float]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="thread-sampler", daemon=True)

    def __enter__(self) -> ThreadSampler:
        self.start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            self.snapshots.append((time.monotonic() - self.start, thread_cpu()))
            if self._stop.wait(self.interval_s):
                self.snapshots.append((time.monotonic() - self.start, thread_cpu()))
                return

    def cores_between(self, begin_s: float, end_s: float) -> dict[str, float]:
        """:func:`cores_by_thread` between the first and the last snapshot taken within
        ``[begin_s, end_s]`` (seconds since the sampler started), each thread at its last
        count in the window (none from after it). Empty when the window holds fewer than two
        snapshots."""
        inside = [s for s in self.snapshots if begin_s <= s[0] <= end_s and s[1]]
        if len(inside) < 2:
            return {}
        (start, first), (end, _) = inside[0], inside[-1]
        # Each thread as last seen: a run's threads end before its final row is written, and
        # one that ended is missing from the last snapshot.
        last: dict[int, tuple[str, float]] = {}
        for _, snapshot in inside:
            last.update(snapshot)
        return cores_by_thread(first, last, end - start)
