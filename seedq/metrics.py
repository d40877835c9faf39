"""MetricsWriter: every scalar goes to one CSV file and to the trackers the ``logger`` section
chooses (TensorBoard by default; W&B, MLflow: ``seedq.tracking``)."""

from __future__ import annotations

import csv
import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from seedq.tracking import loggable, open_trackers

REQUIRED_COLUMNS = ("wall_time", "env_steps", "return_mean", "steps_per_s")
# episodes.csv: one row per finished episode, in the order the learner counted them.
EPISODE_COLUMNS = ("env_steps", "return", "length")

log = logging.getLogger(__name__)


class MetricsWriter:
    """Writes one row per logging interval to ``metrics.csv`` and the same values, as written
    there, to each tracker.

    The CSV header is fixed by ``columns`` (required columns first); a value not in it is a bug
    in the caller, so it raises instead of silently widening the file. ``cfg``: the run's
    config, whose ``logger`` section chooses the trackers (None: TensorBoard alone).
    """

    def __init__(self, run_dir: str, columns: list[str], cfg: Any = None) -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.columns = list(REQUIRED_COLUMNS) + [c for c in columns if c not in REQUIRED_COLUMNS]
        self.path = os.path.join(run_dir, "metrics.csv")
        new_file = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        self._file = open(self.path, "a", newline="")  # noqa: SIM115 - closed in close()
        self._csv = csv.DictWriter(self._file, fieldnames=self.columns, restval="")
        if new_file:
            self._csv.writeheader()
        self.trackers = open_trackers(cfg, run_dir)
        self.episodes_path = os.path.join(run_dir, "episodes.csv")
        self._episodes: Any = None  # opened at the first finished episode

    def write(self, row: Mapping[str, float]) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise KeyError(f"metrics {sorted(unknown)} are not columns of {self.path}")
        written = {k: _fmt(v) for k, v in row.items()}
        self._csv.writerow(written)
        self._file.flush()
        values = loggable(written)
        for tracker in list(self.trackers):
            try:
                tracker.log_row(values)
            except Exception as exc:  # noqa: BLE001 - metrics.csv has the row; the run goes on
                log.error("%s failed (%s); no more rows go to it", type(tracker).__name__, exc)
                self.trackers.remove(tracker)

    def write_episodes(self, episodes: Sequence[tuple[int, float, int]]) -> None:
        """Append finished episodes (env steps when counted, return, length) to
        ``episodes.csv``: every episode's own return, where ``metrics.csv`` keeps the mean of
        the last 100. A resumed run appends to the same file."""
        if not episodes:
            return
        if self._episodes is None:
            new_file = (
                not os.path.exists(self.episodes_path) or os.path.getsize(self.episodes_path) == 0
            )
            self._episodes = open(self.episodes_path, "a", newline="")  # noqa: SIM115 - close()
            if new_file:
                self._episodes.write(",".join(EPISODE_COLUMNS) + "\n")
        self._episodes.writelines(
            f"{steps},{_fmt(float(ret))},{length}\n" for steps, ret, length in episodes
        )
        self._episodes.flush()

    def close(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as exc:  # noqa: BLE001 - closing the others matters more
                log.error("closing %s failed: %s", type(tracker).__name__, exc)
        self._file.close()
        if self._episodes is not None:
            self._episodes.close()


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
