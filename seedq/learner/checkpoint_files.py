"""Where a run keeps its checkpoints and how they are named, apart from the checkpoint code (and
torch), so the command line can find a run's checkpoints before it imports either."""

from __future__ import annotations

import logging
from pathlib import Path

from seedq.files import unwritable
from seedq.learner.errors import CheckpointError

log = logging.getLogger(__name__)

DIR_NAME = "checkpoints"
PREFIX = "ckpt-"


def checkpoints_refusal(run_dir: str | Path) -> str | None:
    """Why no checkpoint could be written in ``run_dir`` (its ``checkpoints`` a file, or a
    folder that takes no files), or None: said at start, where the run would train to its end
    with every checkpoint failing."""
    folder = Path(run_dir) / DIR_NAME
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file, not a folder, so no checkpoint can be written: move it away"
    if folder.is_dir() and (reason := unwritable(folder)):
        return f"{folder} cannot be written ({reason}), so no checkpoint can be: fix it"
    return None


def list_checkpoints(folder: Path) -> list[Path]:
    """Checkpoints in ``folder``, oldest first (names sort by env steps)."""
    return sorted(folder.glob(f"{PREFIX}*.pt"))


def newest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint of the run in ``run_dir``, or None before its first."""
    saved = list_checkpoints(Path(run_dir) / DIR_NAME)
    return saved[-1] if saved else None


def find_checkpoint(path: str) -> Path:
    """A checkpoint file itself, or the newest checkpoint of a run directory."""
    target = Path(path).expanduser()
    if target.is_file():
        return target
    for folder in (target / DIR_NAME, target):
        found = list_checkpoints(folder) if folder.is_dir() else []
        if found:
            return found[-1]
    runs = runs_inside(target) if target.is_dir() else []
    inside = (
        f"; it is a folder of runs ({', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''}): "
        "name one of them"
        if runs
        else ""
    )
    raise CheckpointError(
        f"{path}: no checkpoint there; give a run directory that has "
        f"{DIR_NAME}/{PREFIX}*.pt or a checkpoint file{inside}"
    )


def runs_inside(folder: Path, most: int = 100) -> list[str]:
    """The run directories (relative names) one or two levels below ``folder`` that hold
    checkpoints: a sweep's or a runs/ folder, named by a user who meant one run in it."""
    found = []
    # Two levels down (runs/<name>, a sweep's <dir>/<job>, runs/<day>/<time>), not a walk of
    # whatever tree was named.
    below = [*folder.glob(f"*/{DIR_NAME}"), *folder.glob(f"*/*/{DIR_NAME}")]
    for checkpoints in sorted(below):
        if checkpoints.is_dir() and list_checkpoints(checkpoints):
            found.append(str(checkpoints.parent.relative_to(folder)))
            if len(found) >= most:
                break
    return found


def run_dir_of(checkpoint: Path) -> Path | None:
    """The run directory ``checkpoint`` belongs to (``<run dir>/checkpoints/ckpt-*.pt``), or
    None for a checkpoint file kept anywhere else."""
    return checkpoint.parent.parent if checkpoint.parent.name == DIR_NAME else None


def resumed_run_dir(path: str) -> Path | None:
    """The run directory ``resume=path`` continues: ``path`` itself when it holds checkpoints,
    the run a checkpoint file or ``checkpoints`` folder belongs to, else None (a lone
    checkpoint file, or nothing there: the run's new directory is Hydra's)."""
    target = Path(path)
    if target.is_file():
        return run_dir_of(target)
    if list_checkpoints(target / DIR_NAME):
        return target
    if target.name == DIR_NAME and list_checkpoints(target):
        return target.parent
    return None


def set_aside_newer(checkpoint: Path, run_dir: Path) -> list[Path]:
    """Resuming ``run_dir`` from ``checkpoint``, one of its own older checkpoints: move the
    newer ones into ``checkpoints/superseded-<steps>/`` (kept, but no longer taken for the
    run's newest by ``resume=auto`` or ``seedq-eval``). Returns the files moved."""
    if run_dir_of(checkpoint) is None or run_dir_of(checkpoint).resolve() != run_dir.resolve():
        return []
    newer = [p for p in list_checkpoints(checkpoint.parent) if p.name > checkpoint.name]
    if not newer:
        return []
    steps = checkpoint.stem.removeprefix(PREFIX)
    aside = move_aside(newer, checkpoint.parent / f"superseded-{steps}")
    log.warning(
        "resuming from %s: its %d newer checkpoint(s) (%s) moved to %s, so that this run's own "
        "are the newest",
        checkpoint.name,
        len(newer),
        ", ".join(p.name for p in newer),
        aside,
    )
    return [aside / p.name for p in newer]


def move_aside(paths: list[Path], aside: Path) -> Path:
    """Move ``paths`` into the folder ``aside`` (made if need be): kept, but no longer among
    the run's checkpoints. Returns ``aside``."""
    aside.mkdir(exist_ok=True)
    for path in paths:
        path.rename(aside / path.name)
    return aside
