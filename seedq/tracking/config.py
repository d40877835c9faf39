"""The ``logger`` section (Hydra group ``logger``): where a run's metrics go besides metrics.csv.

``metrics.csv`` is always written. The group picks the trackers beside it, one or several::

    seedq-train                                  # TensorBoard (the default: logger=tensorboard)
    seedq-train logger=wandb                     # Weights & Biases only (offline by default)
    seedq-train 'logger=[tensorboard,mlflow]'    # both
    seedq-train +logger=wandb                    # add one to the default
    seedq-train 'logger=[]'                      # metrics.csv alone

Each option of the group sets its backend's ``enabled``; the backends' own settings are keys
of this section (``logger.wandb.project=...``). This module imports none of the backends:
:func:`validate_logger` imports only the chosen ones, to refuse a missing package before any
process starts.
"""

from __future__ import annotations

import importlib
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seedq.schema import ConfigError, choice, setting

# backend -> (the module it imports, how to install it)
INSTALL = {
    "tensorboard": ("tensorboard", "pip install tensorboard"),
    "wandb": ("wandb", "pip install 'seedq[wandb]'"),
    "mlflow": ("mlflow", "pip install 'seedq[mlflow]'"),
}
WANDB_MODES = ("offline", "online", "disabled")
WANDB_TAG_CHARS = 64  # W&B refuses a run whose tags are longer (or empty)


@dataclass
class TensorBoardConfig:
    enabled: bool = setting(True, "write the metrics as TensorBoard scalars to <run dir>/tb")


@dataclass
class WandbConfig:
    enabled: bool = setting(False, "log the run to Weights & Biases (logger=wandb turns it on)")
    project: str = setting("seedq", "the W&B project")
    entity: str | None = setting(None, "the W&B team or user (null: your default entity)")
    mode: str = setting(
        "offline",
        f"one of {list(WANDB_MODES)}: offline writes <run dir>/wandb (upload later with "
        "wandb sync), online streams to the server",
    )
    tags: list[str] = setting(help="tags of the W&B run", factory=list)


@dataclass
class MlflowConfig:
    enabled: bool = setting(False, "log the run to MLflow (logger=mlflow turns it on)")
    tracking_uri: str | None = setting(
        None,
        "the MLflow store: sqlite:///path.db, file:/path/mlruns (MLflow's file store) or a "
        "server's http(s) URL; null: $MLFLOW_TRACKING_URI if set, else sqlite:///runs/mlflow.db",
    )
    experiment: str = setting(
        "seedq", "the MLflow experiment of a single run (a sweep's jobs get one per sweep)"
    )


@dataclass
class LoggerConfig:
    tensorboard: TensorBoardConfig = setting(help="TensorBoard", factory=TensorBoardConfig)
    wandb: WandbConfig = setting(help="Weights & Biases", factory=WandbConfig)
    mlflow: MlflowConfig = setting(help="MLflow", factory=MlflowConfig)
    group: str | None = setting(
        None,
        "the name that groups runs (the W&B group, the MLflow experiment); null: a sweep's "
        "jobs are grouped by their multirun directory, a single run by nothing",
    )


def enabled_backends(logger: Any) -> list[str]:
    """The chosen backends, in a fixed order (``logger`` may be None: TensorBoard alone)."""
    if logger is None:
        return ["tensorboard"]
    return [name for name in INSTALL if getattr(logger, name).enabled]


def missing_package(backend: str) -> str | None:
    """The one-line error for a chosen backend whose package is not installed, else None."""
    module, install = INSTALL[backend]
    try:
        importlib.import_module(module)
    except ImportError:
        return f"logger={backend} needs the {module.split('.')[-1]} package; run: {install}"
    return None


def validate_logger(logger: Any) -> None:
    """Check the settings, and that every chosen backend's package can be imported.

    The chosen backends' values are checked here as their services would check them: a bad
    one started the run and cost its tracker, logged in the middle of the start's output."""
    choice("logger.wandb.mode", logger.wandb.mode, WANDB_MODES)
    backends = enabled_backends(logger)
    if "wandb" in backends:
        _check_wandb(logger.wandb)
    if "mlflow" in backends:
        _check_mlflow(logger.mlflow)
    for backend in backends:
        error = missing_package(backend)
        if error:
            raise ConfigError(error)


def _check_wandb(settings: WandbConfig) -> None:
    if not str(settings.project).strip():
        raise ConfigError("logger.wandb.project is empty: name the W&B project (default: seedq)")
    for tag in settings.tags:
        if not 1 <= len(str(tag)) <= WANDB_TAG_CHARS:
            raise ConfigError(
                f"logger.wandb.tags: {str(tag)[:20]!r}... is {len(str(tag))} characters; W&B "
                f"takes tags of 1 to {WANDB_TAG_CHARS}"
            )


def _check_mlflow(settings: MlflowConfig) -> None:
    if not str(settings.experiment).strip():
        raise ConfigError(
            "logger.mlflow.experiment is empty: name the MLflow experiment (default: seedq)"
        )
    uri = settings.tracking_uri or ""
    if uri.startswith("file:") or (uri and "://" not in uri):
        path = Path(urllib.parse.urlparse(uri).path if uri.startswith("file:") else uri)
        if path.exists() and not path.is_dir():
            raise ConfigError(
                f"logger.mlflow.tracking_uri={uri} is a file; MLflow's file store is a folder "
                "(file:/path/mlruns), or name a database: sqlite:///path.db"
            )
    elif uri.startswith("sqlite:///") and Path(uri.removeprefix("sqlite:///")).is_dir():
        raise ConfigError(
            f"logger.mlflow.tracking_uri={uri} is a folder; a SQLite store is a file "
            "(sqlite:///path/mlflow.db)"
        )
