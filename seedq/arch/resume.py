"""What a resumed run does to the files of the run it continues, so that one run stopped and
resumed any number of times reads as one run.

The metrics of a run killed after its last checkpoint go past the step the resumed run starts
from; :func:`continue_metrics` drops them, so ``metrics.csv``, ``episodes.csv`` and TensorBoard
hold one curve: no step range twice, and missing only what the killed run did after its
checkpoint.
"""

from __future__ import annotations

import collections
import csv
import itertools
import logging
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

from seedq.files import free_name, replace_text
from seedq.metrics import EPISODES_NAME, METRICS_NAME
from seedq.tracking import SESSION_FILE, hold_back_trackers

log = logging.getLogger(__name__)

TENSORBOARD_DIR = "tb"


def start_over(run_dir: str) -> list[str]:
    """``resume=auto`` with no checkpoint that reads: the run starts from step 0 in
    ``run_dir``. Metrics and episodes already there (a start killed before its first
    checkpoint, or a run whose checkpoints were deleted or all damaged) are moved aside, not
    cut, so no curve is lost, and so is ``tracking.json`` (new W&B and MLflow runs); TensorBoard
    is told to hide its earlier events. Returns the names they were moved to."""
    moved = []
    for name in (METRICS_NAME, EPISODES_NAME):
        path = Path(run_dir) / name
        if has_rows(path):
            stem, dot, ext = name.rpartition(".")
            aside = free_name(path, f"{stem}.earlier", f"{dot}{ext}")
            path.replace(aside)
            moved.append(aside.name)
    sessions = Path(run_dir) / SESSION_FILE
    if sessions.exists():
        # The W&B and MLflow runs it names hold those rows: this start from step 0 gets runs
        # of its own, instead of rewinding theirs.
        aside = free_name(sessions, "tracking.earlier", ".json")
        sessions.replace(aside)
        moved.append(aside.name)
    if moved:
        log.warning(
            "%s holds metrics but no checkpoint to continue them from; the run starts at env "
            "step 0 and the earlier rows are kept in %s",
            run_dir,
            ", ".join(moved),
        )
    continue_metrics(run_dir, 0)  # a header alone, and TensorBoard's earlier events
    return moved


def has_rows(path: Path) -> bool:
    """``path`` holds a header and at least one row (False where it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return sum(1 for line in itertools.islice(f, 2) if line.strip()) > 1
    except OSError:
        return False


def metrics_in(run_dir: str | Path) -> str | None:
    """The name of ``run_dir``'s first log that holds rows (``metrics.csv``, ``episodes.csv``),
    or None: a run stopped before its first checkpoint left them."""
    return next((n for n in (METRICS_NAME, EPISODES_NAME) if has_rows(Path(run_dir) / n)), None)


def continue_metrics(run_dir: str, env_steps: int) -> int:
    """Make ``run_dir``'s metrics end at ``env_steps`` (the checkpoint's): rows past it are
    removed from ``metrics.csv`` (and a row cut short by a kill), and TensorBoard is told to
    hide its events past it; so are the episodes past it from ``episodes.csv``. Returns the
    metrics rows removed."""
    dropped, furthest = _truncate_csv(Path(run_dir) / METRICS_NAME, env_steps)
    episodes, _ = _truncate_csv(Path(run_dir) / EPISODES_NAME, env_steps)
    if furthest is not None:
        hold_back_trackers(run_dir, furthest)
    tb = Path(run_dir) / TENSORBOARD_DIR
    if tb.is_dir() and any(tb.iterdir()):
        # A SessionLog START at step S makes TensorBoard drop the events of earlier files from
        # step S on (SummaryWriter's purge_step): the killed run's tail after the checkpoint.
        try:
            SummaryWriter(log_dir=str(tb), purge_step=env_steps + 1).close()
        except OSError as exc:  # a read-only tb/: TensorBoard shows the tail, the run goes on
            log.error("%s: the events after env step %d not hidden (%s)", tb, env_steps, exc)
    if dropped or episodes:
        log.info(
            "metrics: %d rows and %d episodes after env step %d dropped (the resumed run "
            "redoes them)",
            dropped,
            episodes,
            env_steps,
        )
    return dropped


def recent_episodes(run_dir: str, keep: int = 100) -> tuple[list[float], list[int]]:
    """The returns and lengths of the last ``keep`` episodes in ``run_dir``'s ``episodes.csv``
    (none without one): a resumed run's ``return_mean`` goes on from them instead of starting
    a new 100-episode window."""
    path = Path(run_dir) / EPISODES_NAME
    if not path.exists():
        return [], []
    returns: collections.deque = collections.deque(maxlen=keep)
    lengths: collections.deque = collections.deque(maxlen=keep)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                if None in row or None in row.values():
                    raise ValueError("a row of another width")  # rows glued together
                ret, length = float(row["return"]), int(row["length"])
            except (KeyError, TypeError, ValueError):
                continue  # a damaged row costs that episode, not the resume
            returns.append(ret)
            lengths.append(length)
    return list(returns), list(lengths)


def _truncate_csv(path: Path, env_steps: int) -> tuple[int, int | None]:
    """Drop the rows of ``path`` past ``env_steps``: ``(rows dropped, the furthest step among
    them or None)``."""
    if not path.exists():
        return 0, None
    raw = path.read_bytes()
    # Bytes that are not text (a disk or copy that damaged the file) become U+FFFD: a row they
    # break is dropped below, as a row cut short is, not the resume.
    text = raw.decode("utf-8", errors="replace")
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # a row cut short when the writer was killed
    lines = text.splitlines(keepends=True)
    if not lines:
        return 0, None
    header = next(csv.reader([lines[0]]), [])
    if "env_steps" not in header:
        # Its rows cannot be placed against the checkpoint: kept beside, and the resumed run
        # starts the file again.
        aside = free_name(path, f"{path.name}.damaged")
        path.replace(aside)
        log.warning(
            "%s has no env_steps column in its header (damaged); moved to %s, and the resumed "
            "run writes a new one",
            path,
            aside.name,
        )
        return len(lines) - 1, None
    column = header.index("env_steps")
    kept, furthest = [lines[0]], None
    for line in lines[1:]:
        row = next(csv.reader([line]), [])
        try:
            # A row of another width is damaged (a row glued onto half of another, written by
            # a seedq before whole-row appends): dropped, as a row cut short is.
            step = int(row[column])
            if len(row) == len(header) and step <= env_steps:
                kept.append(line)
            elif len(row) == len(header):
                furthest = max(step, furthest or step)
        except (IndexError, ValueError):
            continue
    dropped = len(lines) - len(kept)
    if dropped or text.encode() != raw:
        replace_text(str(path), "".join(kept))
    return dropped, furthest


def read_steps(path: Path) -> list[int]:
    """The ``env_steps`` column of a metrics file (tests and the chaos tool check continuity)."""
    with open(path, newline="") as f:
        return [int(row["env_steps"]) for row in csv.DictReader(f)]
