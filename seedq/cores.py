"""The cores this process may use: its CPU affinity, capped by a container's CPU quota.

``os.cpu_count()`` counts the machine's cores, not this process's: under ``taskset``, a Slurm
step or a container with ``--cpus=4`` it overstates what runs at once, and a run sized from it
starts more actors and threads than the scheduler will give time to. Both limits are read here,
once, for everything that sizes threads or processes (``seedq.launch.sizing``, the vector envs'
C++ thread pools).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def affinity_cores() -> int:
    """Cores in this process's affinity mask (``taskset``, cpusets); the machine's elsewhere."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_quota_cores(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (``docker --cpus``, Kubernetes limits),
    or None without one. Reads cgroup v2 ``cpu.max`` (``"200000 100000"``: 2 cores; ``"max
    100000"``: none), else cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1:
    none)."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota == "max" or not period:
            return None
        return int(quota) / int(period)
    quota = _read(root / "cpu" / "cpu.cfs_quota_us")
    period = _read(root / "cpu" / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def usable_cores(affinity: int | None = None, cgroup_root: Path = CGROUP_ROOT) -> int:
    """Cores this process may keep busy: the affinity mask, capped by the cgroup quota (rounded
    up: a quota of 2.5 cores gives three threads time each); at least 1.

    ``affinity`` and ``cgroup_root`` stand in for the machine's (tests).
    """
    cores = affinity_cores() if affinity is None else affinity
    quota = cgroup_quota_cores(cgroup_root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def share_of_cores(runs: int, cores: int | None = None) -> int:
    """A run's cores when ``runs`` runs share ``cores`` (default: this process's usable
    cores): ``cores // runs``, at least one."""
    return max(1, (cores or usable_cores()) // max(1, runs))
