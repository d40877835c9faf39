"""Operating-system limits: the open files a process holding thousands of connections runs
into, and the memory a run may take before the kernel's OOM killer ends it without a word.

Every TCP connection is a file descriptor, and each ZeroMQ socket adds one or two more (its
mailbox), so a learner serving thousands of actor streams, or a load generator imitating them,
passes the usual soft limit of 1,024 open files long before memory or CPU matter.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; returns ``(soft before, soft now)``.

    Raising the soft limit up to the hard one needs no privilege; above it, the administrator
    must raise the hard limit (``ulimit -Hn``, ``LimitNOFILE=`` in a systemd unit).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return (0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
            return (soft, soft)
        log.info("open-file limit raised from %d to %d (the hard limit)", soft, target)
        return (soft, target)
    return (soft, soft)


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
