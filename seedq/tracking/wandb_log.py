"""``logger=wandb``: the run in Weights & Biases, offline by default (``<run dir>/wandb``;
``wandb sync <run dir>/wandb/offline-run-*`` uploads it later).

Charts use ``env_steps`` as their x-axis; the config is the run's W&B config; the run
directory and the checkpoint folder are in its summary (``seedq/run_dir``,
``seedq/checkpoint_dir``); a sweep's jobs share the W&B group named by the multirun directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from seedq.tracking import Evaluation, RunInfo, held_back, videos_by_name
from seedq.tracking.config import WandbConfig


def _init(wandb: Any, session: dict[str, Any], config: dict[str, Any] | None = None) -> Any:
    """Start (or, with an ``id`` in ``session``, continue) the W&B run ``session`` describes."""
    return wandb.init(
        project=session["project"],
        entity=session["entity"],
        mode=session["mode"],
        dir=session["dir"],
        group=session["group"],
        name=session["name"],
        id=session.get("id"),
        resume="allow" if session.get("id") else None,
        config=config,
        tags=session.get("tags") or None,
        reinit="create_new",
        # seedq writes its own console log (cli.log); W&B need not wrap stdout.
        settings=wandb.Settings(console="off", silent=True),
    )


class WandbTracker:
    def __init__(self, settings: WandbConfig, run: RunInfo, session: dict[str, Any] | None) -> None:
        import wandb

        self._wandb = wandb
        resumed = session is not None
        self._session = session or {
            "project": settings.project,
            "entity": settings.entity,
            "mode": settings.mode,
            "dir": run.run_dir,
            "group": run.group,
            "name": run.name,
            "tags": list(settings.tags),
        }
        self.run = _init(wandb, self._session, None if resumed else run.config)
        self._session["id"] = self.run.id
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")
        self.run.summary.update(
            {"seedq/run_dir": run.run_dir, "seedq/checkpoint_dir": run.checkpoint_dir}
        )

    def log_row(self, values: Mapping[str, float]) -> None:
        if self._session["mode"] == "offline" and not os.path.exists(self.run.settings.sync_file):
            # W&B's service writes on into the file it opened: a folder removed under it took
            # every later row without a word, and the run was lost to wandb sync.
            raise FileNotFoundError(f"{self.run.settings.sync_file} was removed")
        if not held_back(self._session, values):
            self.run.log(dict(values))

    def session(self) -> dict[str, Any]:
        return dict(self._session)

    def close(self) -> None:
        self.run.finish()


def attach(session: dict[str, Any], evaluation: Evaluation) -> None:
    """Continue the run of ``session`` with ``evaluation``'s figures, checkpoint and videos."""
    import wandb

    run = _init(wandb, session)
    try:
        run.summary.update({**evaluation.figures(), "evaluation/checkpoint": evaluation.checkpoint})
        videos = videos_by_name(evaluation.videos)
        if videos:
            run.log({key: wandb.Video(path, format="mp4") for key, path in videos.items()})
    finally:
        run.finish()
