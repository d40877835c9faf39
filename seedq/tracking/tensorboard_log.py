"""``logger=tensorboard``: the metrics as TensorBoard scalars in ``<run dir>/tb``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


class TensorBoardTracker:
    """One scalar per column and row, at ``global_step=env_steps``."""

    def __init__(self, run_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

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
