"""Experiment tracking: the backends a run's metrics rows go to besides ``metrics.csv``.

``MetricsWriter`` (``seedq.metrics``) opens the trackers the ``logger`` section chooses
(:mod:`seedq.tracking.config`) and hands each the row it wrote to the CSV, with the values as
written there. A tracker records the run's resolved config when it opens, one row per logging
interval (x-axis: ``env_steps``), and where the run directory and its checkpoints are;
``seedq-eval`` adds its returns, the checkpoint it played and its videos to the same tracked
run (:func:`attach_evaluation`). The ids a run got are kept in ``<run dir>/tracking.json``, so
``seedq-train resume=`` and ``seedq-eval`` find the run again.

Grouping: the jobs of a Hydra sweep share one group named by the multirun directory (W&B's
``group``, MLflow's experiment), unless ``logger.group`` names one.

Backends are imported only when chosen; a tracker that fails to open or to log is reported
once in the log and dropped: the run and its ``metrics.csv`` go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from seedq.files import free_name, replace_text
from seedq.tracking.config import LoggerConfig, enabled_backends, missing_package, validate_logger

__all__ = [
    "Evaluation",
    "LoggerConfig",
    "RunInfo",
    "Tracker",
    "attach_evaluation",
    "open_trackers",
    "validate_logger",
]

log = logging.getLogger(__name__)

SESSION_FILE = "tracking.json"
# A session's key: the env step up to which its tracked run holds rows a resume redid.
HELD_BACK = "rows_held_to_env_step"
TRACKERS = {
    "tensorboard": "seedq.tracking.tensorboard_log:TensorBoardTracker",
    "wandb": "seedq.tracking.wandb_log:WandbTracker",
    "mlflow": "seedq.tracking.mlflow_log:MlflowTracker",
}


@dataclass
class RunInfo:
    """What a tracker records about the run it opens for."""

    run_dir: str
    config: dict[str, Any]  # the resolved config, nested as seedq-train --cfg job prints it
    name: str  # the sweep job's overrides, or the run directory's name
    group: str | None  # the sweep's multirun directory, logger.group, or None

    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.run_dir, "checkpoints")


@dataclass
class Evaluation:
    """What one ``seedq-eval`` of a checkpoint found."""

    checkpoint: str
    returns: list[float]
    videos: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        mean = sum(self.returns) / len(self.returns)
        return {"evaluation/return_mean": mean, "evaluation/episodes": len(self.returns)}


class Tracker(Protocol):
    def log_row(self, values: Mapping[str, float]) -> None:
        """One metrics row: the CSV's finite values, ``env_steps`` among them."""
        ...

    def session(self) -> dict[str, Any]:
        """What ``tracking.json`` keeps to find this tracked run again."""
        ...

    def close(self) -> None: ...


def _load(backend: str) -> Any:
    module, _, attr = TRACKERS[backend].partition(":")
    return getattr(importlib.import_module(module), attr)


def hydra_job() -> tuple[str | None, str | None]:
    """``(multirun directory, job name)`` when this process runs a job of a Hydra sweep."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None, None
    hydra = HydraConfig.get()
    if hydra.mode != RunMode.MULTIRUN:
        return None, None
    return str(hydra.sweep.dir), hydra.job.override_dirname or f"job {hydra.job.num}"


def config_dict(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain nested dicts (a SeedqConfig or a DictConfig)."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def run_info(cfg: Any, run_dir: str) -> RunInfo:
    sweep_dir, job = hydra_job()
    group = cfg.logger.group or sweep_dir
    return RunInfo(os.path.abspath(run_dir), config_dict(cfg), job or Path(run_dir).name, group)


def _read_sessions(run_dir: str | Path, owner: bool = False) -> dict[str, dict[str, Any]]:
    """The tracked runs of ``tracking.json``; none where it is damaged. The run that holds
    ``run_dir`` (``owner``) sets a damaged one aside, so it is reported once and kept to read."""
    path = Path(run_dir, SESSION_FILE)
    if not path.exists():
        return {}
    try:
        sessions = json.loads(path.read_text())
        runs = sessions.values() if isinstance(sessions, dict) else [None]
        if not all(isinstance(run, dict) for run in runs):
            raise ValueError("not an object of tracked runs")
    except (OSError, ValueError) as exc:  # damaged: new tracked runs, not a dead resume
        aside = ""
        if owner and not isinstance(exc, OSError):
            with contextlib.suppress(OSError):
                aside = path.replace(free_name(path, "tracking.damaged", ".json")).name
        kept = f"; it is kept as {aside}" if aside else ""
        log.error("%s could not be read (%s); the trackers start new runs%s", path, exc, kept)
        return {}
    return sessions


def open_trackers(cfg: Any, run_dir: str) -> list[Tracker]:
    """The trackers ``cfg.logger`` chooses (TensorBoard alone when ``cfg`` has no ``logger``),
    reopening the tracked runs of ``<run dir>/tracking.json`` when a run is resumed."""
    logger = getattr(cfg, "logger", None)
    backends = enabled_backends(logger)
    if backends == ["tensorboard"]:  # no config, run info or sessions needed
        info, sessions = None, {}
    else:
        info, sessions = run_info(cfg, run_dir), _read_sessions(run_dir, owner=True)
    opened: dict[str, Tracker] = {}
    for backend in backends:
        try:
            if backend == "tensorboard":
                opened[backend] = _load(backend)(run_dir)
            else:
                settings = getattr(logger, backend)
                opened[backend] = _load(backend)(settings, info, sessions.get(backend))
        except Exception as exc:  # noqa: BLE001 - a dashboard must not cost the run
            log.error("logger=%s could not start (%s); the run goes on without it", backend, exc)
    # Merged, so a resumed run that leaves a backend out keeps that backend's ids.
    sessions.update({b: t.session() for b, t in opened.items() if t.session()})
    if sessions:
        _write_sessions(run_dir, sessions)
    return list(opened.values())


def _write_sessions(run_dir: str | Path, sessions: dict[str, dict[str, Any]]) -> bool:
    """Write ``tracking.json``; False, logged, where it cannot be written (a resume or
    seedq-eval then cannot find these tracked runs: they start new ones)."""
    try:  # whole or not at all: a kill mid-write must not leave half of it
        replace_text(str(Path(run_dir, SESSION_FILE)), json.dumps(sessions, indent=2))
    except OSError as exc:
        log.error("%s could not be written (%s)", Path(run_dir, SESSION_FILE), exc)
        return False
    return True


def hold_back_trackers(run_dir: str | Path, furthest: int) -> None:
    """A resume dropped ``metrics.csv``'s rows past its checkpoint, up to env step
    ``furthest``: the tracked runs of ``tracking.json`` got them already and cannot take them
    back (W&B and MLflow keep what they were sent). Noted there, so that the resumed run sends
    them rows past ``furthest`` only: its rows before it would put a second value at steps
    they hold, and draw the curve back to the checkpoint."""
    sessions = _read_sessions(run_dir, owner=True)
    if not sessions:
        return
    for session in sessions.values():
        session[HELD_BACK] = max(furthest, session.get(HELD_BACK, furthest))
    if not _write_sessions(run_dir, sessions):
        return
    log.warning(
        "the tracked runs (%s) hold this run's rows up to env step %d, past its checkpoint; "
        "the resumed run's rows go to them from there on (metrics.csv and TensorBoard get all)",
        ", ".join(sessions),
        furthest,
    )


def held_back(session: Mapping[str, Any], values: Mapping[str, float]) -> bool:
    """Whether the tracked run of ``session`` holds this row's step already: a resumed run's row
    at or before the furthest step of the rows its resume dropped (:func:`hold_back_trackers`)."""
    return values["env_steps"] <= session.get(HELD_BACK, -1)


def loggable(row: Mapping[str, str]) -> dict[str, float]:
    """The finite numbers of a CSV row as written (empty cells, text and inf/nan dropped)."""
    values: dict[str, float] = {}
    for key, text in row.items():
        if text == "":
            continue
        try:
            number = int(text) if text.lstrip("-").isdigit() else float(text)
        except ValueError:  # not a number (a flag written as text): the CSV has it
            continue
        if math.isfinite(number):
            values[key] = number
    return values


def attach_evaluation(evaluation: Evaluation, run_dir: str | Path) -> list[str]:
    """Add ``evaluation`` to the tracked runs of ``run_dir`` (none without ``tracking.json``);
    returns one line per backend that could not take it, and never raises for one."""
    problems: list[str] = []
    for backend, session in _read_sessions(run_dir).items():
        error = missing_package(backend)
        if error is None:
            try:
                module = importlib.import_module(TRACKERS[backend].partition(":")[0])
                module.attach(session, evaluation)
                continue
            except Exception as exc:  # noqa: BLE001 - the evaluation itself succeeded
                error = f"logger={backend}: could not add the evaluation ({exc})"
        problems.append(error)
    return problems


def videos_by_name(paths: Sequence[str]) -> dict[str, str]:
    """``evaluation/video/<file stem>`` -> path, the key each backend files a video under."""
    return {f"evaluation/video/{Path(p).stem}": str(p) for p in paths}
