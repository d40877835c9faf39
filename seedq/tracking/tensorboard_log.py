"""``logger=tensorboard``: the metrics as TensorBoard scalars in ``<run dir>/tb``."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any


def _quiet_writer_thread_errors() -> None:
    """TensorBoard writes events in a thread of its own, which re-raises a failed write (a full
    disk) to Python's thread hook: a traceback on stderr. The writer raises the same error
    again at the next row, where the metrics writer logs it in one line and drops the tracker
    (``seedq.metrics``), so OSErrors of that thread go unprinted here. Installed once."""
    previous = threading.excepthook
    if getattr(previous, "seedq_tensorboard", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        thread = type(args.thread).__name__ if args.thread is not None else ""
        if thread == "_AsyncWriterThread" and issubclass(args.exc_type, OSError):
            return
        previous(args)

    hook.seedq_tensorboard = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class TensorBoardTracker:
    """One scalar per column and row, at ``global_step=env_steps``."""

    def __init__(self, run_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        _quiet_writer_thread_errors()
        self._writer = SummaryWriter(log_dir=os.path.join(run_dir, "tb"))

    def log_row(self, values: Mapping[str, float]) -> None:
        step = int(values["env_steps"])
        for key, value in values.items():
            if key != "env_steps":
                self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def session(self) -> dict[str, Any]:
        return {}  # nothing to find again: the events files are in the run dir

    def close(self) -> None:
        self._writer.close()
