"""Starting the learner's broker shard processes (``broker.shards`` > 1) on this host.

Each shard is a child process (``spawn``: a fresh interpreter, no copy of the learner's torch
state) that exits with the learner: Linux's parent-death signal, and the hub's ``stop``.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any


def shard_main(index: int, bind: str, link: str, spec: dict, settings: dict, keys_dir: str) -> None:
    """The shard process: logging, exit with the learner, then serve."""
    from seedq.broker.shard_process import serve_shard
    from seedq.logging_setup import setup_logging
    from seedq.processes import exit_with_parent, leave_notices_to_the_learner

    log_dir = settings.get("log_dir")
    log_file = os.path.join(log_dir, f"broker-shard-{index}.log") if log_dir else None
    setup_logging(log_file, role=f"broker-shard-{index}")
    leave_notices_to_the_learner()
    if not exit_with_parent(settings["parent_pid"]):
        return
    serve_shard(index, bind, link, spec, settings, keys_dir)


def start_shard(index: int, bind: str, link: str, spec: dict, settings: dict, keys_dir: str) -> Any:
    """Start shard ``index`` (``seedq.broker.shards.StartShard``); returns its process."""
    settings = {**settings, "parent_pid": os.getpid()}
    proc = multiprocessing.get_context("spawn").Process(
        target=shard_main,
        args=(index, bind, link, spec, settings, keys_dir),
        name=f"seedq-broker-shard-{index}",
        daemon=True,
    )
    proc.start()
    return proc
