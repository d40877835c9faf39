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
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


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


def own_cgroups(proc_cgroup: Path = PROC_CGROUP) -> tuple[str, str]:
    """``(cgroup v2 path, cgroup v1 cpu controller's path)`` of this process, from
    ``/proc/self/cgroup`` (``"0::/path"``, ``"4:cpu,cpuacct:/path"``); ``"/"`` for one it does
    not name."""
    v2 = v1 = "/"
    for line in (_read(proc_cgroup) or "").splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and not controllers:
            v2 = path or "/"
        elif "cpu" in controllers.split(","):
            v1 = path or "/"
    return v2, v1


def _folders(mount: Path, path: str) -> list[Path]:
    """The folder of cgroup ``path`` under ``mount`` and each of its parents up to the mount,
    those that exist: a quota set on any of them limits this process. Inside a container the
    mount is often the container's own cgroup while ``path`` names it from the host's root;
    then only the mount exists."""
    parts = PurePosixPath(path).parts[1:]
    folders = (mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1))
    return [folder for folder in folders if folder.is_dir()]


def _v2_quota(folder: Path) -> float | None:
    quota, _, period = (_read(folder / "cpu.max") or "max").partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _v1_quota(folder: Path) -> float | None:
    quota = _read(folder / "cpu.cfs_quota_us")
    period = _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def cgroup_quota_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in cores (``docker --cpus``, Kubernetes limits,
    ``systemd-run -p CPUQuota=``, a Slurm job's cgroup), or None without one: the smallest
    quota of its cgroup and the cgroups above it. Reads cgroup v2 ``cpu.max`` (``"200000
    100000"``: 2 cores; ``"max 100000"``: none), else cgroup v1 ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us`` (quota -1: none). The cgroup is the one ``/proc/self/cgroup`` names,
    not the mount's root: a process in a child cgroup with a quota read the root's "none"."""
    v2_path, v1_path = own_cgroups(proc_cgroup)
    quotas = [quota for folder in _folders(root, v2_path) if (quota := _v2_quota(folder))]
    if not quotas:
        mounts = [root / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
        mount = next((mount for mount in mounts if mount.is_dir()), None)
        if mount is not None:
            quotas = [quota for folder in _folders(mount, v1_path) if (quota := _v1_quota(folder))]
    return min(quotas, default=None)


def usable_cores(
    affinity: int | None = None, cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP
) -> int:
    """Cores this process may keep busy: the affinity mask, capped by the cgroup quota (rounded
    up: a quota of 2.5 cores gives three threads time each); at least 1.

    ``affinity``, ``cgroup_root`` and ``proc_cgroup`` stand in for the machine's (tests).
    """
    cores = affinity_cores() if affinity is None else affinity
    quota = cgroup_quota_cores(cgroup_root, proc_cgroup)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def share_of_cores(runs: int, cores: int | None = None) -> int:
    """A run's cores when ``runs`` runs share ``cores`` (default: this process's usable
    cores): ``cores // runs``, at least one."""
    return max(1, (cores or usable_cores()) // max(1, runs))
