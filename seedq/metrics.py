"""MetricsWriter: every scalar goes to one CSV file and to TensorBoard."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping

from torch.utils.tensorboard import SummaryWriter

REQUIRED_COLUMNS = ("wall_time", "env_steps", "return_mean", "steps_per_s")


class MetricsWriter:
    """Writes one row per logging interval to ``metrics.csv`` and the same scalars to TensorBoard.

    The CSV header is fixed by ``columns`` (required columns first); a value not in it is a bug
    in the caller, so it raises instead of silently widening the file.
    """

    def __init__(self, run_dir: str, columns: list[str]) -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.columns = list(REQUIRED_COLUMNS) + [c for c in columns if c not in REQUIRED_COLUMNS]
        self.path = os.path.join(run_dir, "metrics.csv")
        new_file = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        self._file = open(self.path, "a", newline="")  # noqa: SIM115 - closed in close()
        self._csv = csv.DictWriter(self._file, fieldnames=self.columns, restval="")
        if new_file:
            self._csv.writeheader()
        self._tb = SummaryWriter(log_dir=os.path.join(run_dir, "tb"))

    def write(self, row: Mapping[str, float]) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise KeyError(f"metrics {sorted(unknown)} are not columns of {self.path}")
        step = int(row["env_steps"])
        self._csv.writerow({k: _fmt(v) for k, v in row.items()})
        self._file.flush()
        for key, value in row.items():
            if key not in ("env_steps",) and value is not None and math.isfinite(value):
                self._tb.add_scalar(key, value, global_step=step)
        self._tb.flush()

    def close(self) -> None:
        self._tb.close()
        self._file.close()


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
