"""MetricsWriter: every scalar goes to one CSV file and to the trackers the ``logger`` section
chooses (TensorBoard by default; W&B, MLflow: ``seedq.tracking``)."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from seedq.files import replace_text  # noqa: F401 - this module's API too
from seedq.tracking import loggable, open_trackers

REQUIRED_COLUMNS = ("wall_time", "env_steps", "return_mean", "steps_per_s")
METRICS_NAME = "metrics.csv"
# episodes.csv: one row per finished episode, in the order the learner counted them.
EPISODES_NAME = "episodes.csv"
EPISODE_COLUMNS = ("env_steps", "return", "length")

log = logging.getLogger(__name__)


def read_whole_rows(path: str | os.PathLike) -> tuple[list[str], list[dict[str, str]], int]:
    """The header and the whole rows of a CSV file a run writes (``metrics.csv``,
    ``episodes.csv``), with the count of rows left out.

    The writer appends each row with its newline in one write, so a last line without its
    newline is a row cut short (a writer killed part way, or one still writing): read as a row,
    ``1.9,300`` of ``1.947,30080,...`` was a run at 300 env steps with no return. A line of
    another number of fields than the header (two rows glued together) is no row either.
    """
    with open(path, newline="", errors="replace") as f:
        text = f.read()
    torn = 0
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        torn = 1
    lines = [line for line in csv.reader(io.StringIO(text)) if line]
    header = lines[0] if lines else []
    rows = [dict(zip(header, line, strict=True)) for line in lines[1:] if len(line) == len(header)]
    return header, rows, torn + sum(len(line) != len(header) for line in lines[1:])


def rows_left_out(not_numbers: int, cut_short: int) -> str:
    """ "3 rows left out (1 not numbers, 2 cut short)", or "" when none was."""
    reasons = [(n, why) for n, why in ((not_numbers, "not numbers"), (cut_short, "cut short")) if n]
    if not reasons:
        return ""
    why = reasons[0][1] if len(reasons) == 1 else ", ".join(f"{n} {why}" for n, why in reasons)
    return f"{not_numbers + cut_short} rows left out ({why})"


def _continue_header(path: str, columns: list[str]) -> list[str]:
    """The columns to append to the existing ``path`` with: its own header, plus any of
    ``columns`` it lacks (a resumed run whose seedq logs more than the one that started it).

    New columns rewrite the file under the wider header (old rows blank there; a header lost
    to a kill is written again); appending rows of another shape under the old header would
    misalign every column after the first difference.
    """
    with open(path, newline="") as f:
        text = f.read()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # a row cut short when the writer was killed
    rows = list(csv.reader(text.splitlines()))
    header = rows[0] if rows else []
    added = [c for c in columns if c not in header]
    if not added:
        return header
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header + added)
    writer.writerows(row + [""] * len(added) for row in rows[1:] if len(row) == len(header))
    replace_text(path, out.getvalue())
    log.info("%s: new columns %s (blank in the earlier rows)", path, ", ".join(added))
    return header + added


class RowAppender:
    """Appends whole rows to a file or nothing: a write that fails part way (a full disk) is
    cut back to where it began, so the next write starts on a row of its own. A buffered
    file would keep the unwritten tail and later write it out, or leave half a row that the
    next row is glued onto (one merged row read as an episode's return of 267,392)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(self._fd).st_size
            if size:
                # A row cut short by a kill: dropped, not glued to the next one.
                with open(path, "rb") as f:
                    f.seek(max(0, size - 65536))
                    tail = f.read()
                if not tail.endswith(b"\n"):
                    newline = tail.rfind(b"\n")
                    cut = size - len(tail) + newline + 1 if newline >= 0 else 0
                    os.ftruncate(self._fd, cut)
        except BaseException:
            os.close(self._fd)
            raise

    @property
    def empty(self) -> bool:
        return os.fstat(self._fd).st_size == 0

    def append(self, text: str) -> None:
        data = memoryview(text.encode())
        start = os.fstat(self._fd).st_size
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise

    def close(self) -> None:
        os.close(self._fd)


class _Outage:
    """Write failures of one file, logged without flooding the log: the first in full, then
    one line a minute with the count, and one when writes succeed again."""

    EVERY_S = 60.0

    def __init__(self, path: str) -> None:
        self.path = path
        self.failures = 0
        self._logged_at = -math.inf

    def failed(self, message: str, *args: Any) -> None:
        self.failures += 1
        now = time.monotonic()
        if now - self._logged_at < self.EVERY_S:
            return
        self._logged_at = now
        more = f" ({self.failures} failed writes so far; the next line in a minute)"
        log.error(message + more, *args)

    def succeeded(self) -> None:
        if self.failures:
            log.warning("%s is written again, after %d failed writes", self.path, self.failures)
            self.failures, self._logged_at = 0, -math.inf


# How long the end of a run waits for a tracker that failed mid-run to close (its service may
# still be gone).
DROPPED_CLOSE_S = 10.0


def _close_quietly(tracker: Any) -> None:
    try:
        tracker.close()
    except Exception as exc:  # noqa: BLE001 - it failed once already; the run is over
        log.warning("closing %s (dropped mid-run) failed: %s", type(tracker).__name__, exc)


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
        self.path = os.path.join(run_dir, METRICS_NAME)
        new_file = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        if not new_file:
            self.columns = _continue_header(self.path, self.columns)
        self._file = RowAppender(self.path)
        self._line = io.StringIO()
        self._csv = csv.DictWriter(self._line, fieldnames=self.columns, restval="")
        self.trackers = open_trackers(cfg, run_dir)
        self.dropped: list[Any] = []  # trackers that failed: closed at the end if they can be
        self.episodes_path = os.path.join(run_dir, EPISODES_NAME)
        self._episodes: Any = None  # opened at the first finished episode
        self._metrics_outage = _Outage(self.path)
        self._episodes_outage = _Outage(self.episodes_path)

    def write(self, row: Mapping[str, float]) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise KeyError(f"metrics {sorted(unknown)} are not columns of {self.path}")
        written = {k: _fmt(v) for k, v in row.items()}
        try:
            if self._file.empty:  # the header goes with the first row written
                self._csv.writeheader()
            self._csv.writerow(written)
            self._file.append(self._take_line())
            self._metrics_outage.succeeded()
        except OSError as exc:
            # A full disk costs rows of metrics.csv (this one, whole), not the run: the
            # trackers still get it, and the checkpoint is untouched.
            self._metrics_outage.failed(
                "the metrics row at env_steps %s could not be written to %s: %s",
                written.get("env_steps"),
                self.path,
                exc,
            )
        values = loggable(written)
        for tracker in list(self.trackers):
            try:
                tracker.log_row(values)
            except Exception as exc:  # noqa: BLE001 - metrics.csv has the row; the run goes on
                log.error("%s failed (%s); no more rows go to it", type(tracker).__name__, exc)
                self.trackers.remove(tracker)
                self.dropped.append(tracker)

    def write_episodes(self, episodes: Sequence[tuple[int, float, int]]) -> None:
        """Append finished episodes (env steps when counted, return, length) to
        ``episodes.csv``: every episode's own return, where ``metrics.csv`` keeps the mean of
        the last 100. A resumed run appends to the same file."""
        if not episodes:
            return
        try:
            if self._episodes is None:
                self._episodes = RowAppender(self.episodes_path)
            head = ",".join(EPISODE_COLUMNS) + "\n" if self._episodes.empty else ""
            self._episodes.append(
                head + "".join(f"{s},{_fmt(float(r))},{n}\n" for s, r, n in episodes)
            )
            self._episodes_outage.succeeded()
        except OSError as exc:
            # A full disk or a bad folder costs these episodes' rows, not the run: metrics.csv
            # still has their mean, and the next row tries again.
            self._episodes_outage.failed(
                "%d episodes not written to %s: %s", len(episodes), self.episodes_path, exc
            )

    def _close_dropped(self) -> None:
        """Close the trackers that failed mid-run, so that their tracked runs end as finished
        (an MLflow run left open shows as running for good) where their service is back; each
        in a daemon thread given ``DROPPED_CLOSE_S``, since a dead server can keep a close
        waiting on its retries for minutes."""
        for tracker in self.dropped:
            name = type(tracker).__name__
            closing = threading.Thread(
                target=_close_quietly, args=(tracker,), name=f"close-{name}", daemon=True
            )
            closing.start()
            closing.join(DROPPED_CLOSE_S)
            if closing.is_alive():
                log.warning(
                    "%s (dropped mid-run) did not close within %g s; its tracked run may "
                    "still show as running",
                    name,
                    DROPPED_CLOSE_S,
                )
        self.dropped = []

    def _take_line(self) -> str:
        text = self._line.getvalue()
        self._line.seek(0)
        self._line.truncate()
        return text

    def close(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as exc:  # noqa: BLE001 - closing the others matters more
                log.error("closing %s failed: %s", type(tracker).__name__, exc)
        self._close_dropped()
        for name, file in (("metrics", self._file), ("episodes", self._episodes)):
            if file is None:
                continue
            try:
                file.close()
            except OSError as exc:  # nothing is buffered; the checkpoint is what matters
                log.error("closing the %s log failed: %s", name, exc)


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
