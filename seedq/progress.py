"""A live progress bar for seedq-train on a terminal; plain log lines everywhere else.

On a terminal the bar shows env steps against ``total_env_steps``, steps/s, the recent return
and the ETA, and the per-interval log line leaves the console (it still goes to ``cli.log``).
When output is not a terminal (CI, nohup, a pipe) nothing changes: one log line per interval.
"""

from __future__ import annotations

import logging
import sys

PROGRESS_LOGGER = "seedq.progress"


class _NotProgress(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith(PROGRESS_LOGGER)


class ProgressBar:
    """``update`` once per logging interval; ``close`` at the end of the run."""

    def __init__(self, total: int, initial: int, *, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.bar = None
        self._filter = _NotProgress()
        self._filtered: list[logging.Handler] = []
        if not self.enabled:
            return
        from tqdm import tqdm

        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            desc="env steps",
            file=sys.stderr,
        )
        # The bar replaces the interval line on the console; log files keep it.
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler:
                handler.addFilter(self._filter)
                self._filtered.append(handler)

    def update(self, env_steps: int, steps_per_s: float, return_mean: float | None) -> None:
        if self.bar is None:
            return
        self.bar.n = min(env_steps, self.bar.total)
        ret = "n/a" if return_mean is None else f"{return_mean:.1f}"
        self.bar.set_postfix_str(f"{steps_per_s:,.0f} steps/s, return {ret}", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        for handler in self._filtered:
            handler.removeFilter(self._filter)
