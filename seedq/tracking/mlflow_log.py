"""``logger=mlflow``: the run in an MLflow tracking store.

The store is ``logger.mlflow.tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else
``sqlite:///runs/mlflow.db`` with artifacts in ``runs/mlartifacts`` (``mlflow ui
--backend-store-uri sqlite:///runs/mlflow.db`` shows it). A single run goes to the experiment
``logger.mlflow.experiment``; a sweep's jobs to one experiment named by the multirun directory.
Each run gets the flattened config as parameters and whole as ``config.yaml``, every metrics
row at ``step=env_steps``, and tags ``seedq.run_dir`` and ``seedq.checkpoint_dir``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from seedq.tracking import Evaluation, RunInfo, held_back, videos_by_name
from seedq.tracking.config import MlflowConfig

DEFAULT_STORE = "runs/mlflow.db"
DEFAULT_ARTIFACTS = "runs/mlartifacts"
PARAMS_PER_CALL = 100  # MLflow's limit of parameters in one log_batch
PARAM_VALUE_CHARS = 6000  # and of one parameter value's length


def tracking_uri(settings: MlflowConfig) -> tuple[str, bool]:
    """The store's URI, and whether it is seedq's default (an absolute path, so that
    ``seedq-eval`` finds it from any directory)."""
    uri = settings.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        _allow_file_store(uri)
        _bounded_http(uri)
        return uri, False
    return f"sqlite:///{Path(DEFAULT_STORE).resolve()}", True


def _allow_file_store(uri: str) -> None:
    if uri.startswith("file:") or "://" not in uri:
        # MLflow 3 refuses its file store unless asked; naming one in the config is asking.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


# MLflow retries a tracking server 7 times with a backoff factor of 2 and a 120 s timeout per
# request: a server that does not answer held the run's start for minutes before the tracker
# was reported and dropped. A user's own MLFLOW_HTTP_REQUEST_* settings are kept.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


def _bounded_http(uri: str) -> None:
    if uri.startswith(("http://", "https://")):
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Hold a lock beside a SQLite store while it may be created: the jobs of a parallel
    sweep would otherwise race to create its tables."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{db}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _flatten(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    for key, value in config.items():
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", str(value)[:PARAM_VALUE_CHARS]


def _experiment_id(client: Any, name: str, default_store: bool) -> str:
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    artifacts = Path(DEFAULT_ARTIFACTS).resolve().as_uri() if default_store else None
    try:
        return client.create_experiment(name, artifact_location=artifacts)
    except MlflowException:  # another job of the sweep created it first
        return client.get_experiment_by_name(name).experiment_id


class MlflowTracker:
    def __init__(
        self, settings: MlflowConfig, run: RunInfo, session: dict[str, Any] | None
    ) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri, default_store = tracking_uri(settings)
        with _store_lock(uri):
            self.client = MlflowClient(tracking_uri=uri)
            if session is not None:
                self.run_id = session["run_id"]
                self.client.update_run(self.run_id, status="RUNNING")
                self._session = session
                return
            name = run.group or settings.experiment
            experiment = _experiment_id(self.client, name, default_store)
        tags = {"seedq.run_dir": run.run_dir, "seedq.checkpoint_dir": run.checkpoint_dir}
        self.run_id = self.client.create_run(experiment, run_name=run.name, tags=tags).info.run_id
        self._session = {"tracking_uri": uri, "run_id": self.run_id, "experiment": name}
        params = [Param(k, v) for k, v in _flatten(run.config)]
        for start in range(0, len(params), PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=params[start : start + PARAMS_PER_CALL])
        self.client.log_dict(self.run_id, run.config, "config.yaml")

    def log_row(self, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        if held_back(self._session, values):
            return
        stamp, step = int(time.time() * 1000), int(values["env_steps"])
        metrics = [Metric(key, float(value), stamp, step) for key, value in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def session(self) -> dict[str, Any]:
        return dict(self._session)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def attach(session: dict[str, Any], evaluation: Evaluation) -> None:
    """Add ``evaluation``'s figures, checkpoint and videos to the run of ``session``."""
    from mlflow.tracking import MlflowClient

    _allow_file_store(session["tracking_uri"])
    client = MlflowClient(tracking_uri=session["tracking_uri"])
    run_id = session["run_id"]
    for key, value in evaluation.figures().items():
        client.log_metric(run_id, key, value)
    client.set_tag(run_id, "seedq.evaluated_checkpoint", evaluation.checkpoint)
    for path in videos_by_name(evaluation.videos).values():
        client.log_artifact(run_id, path, "videos")
