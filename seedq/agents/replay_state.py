"""Checkpoint state of agents that learn from a replay (R2D2, SAC): one implementation."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from seedq.learner.checkpoint import REPLAY_NAME, CheckpointError, load_arrays, save_arrays

log = logging.getLogger(__name__)


class ReplayCheckpointState:
    """``state_dict``/``load_state_dict`` (model, learner, replay RNG) and the replay's own file
    beside the checkpoint (``save_files``/``restore_files``, with ``checkpoint.replay``).

    The agent provides ``model``, ``learner``, ``replay`` and ``save_replay``; ``replay_items``
    names what the replay holds, for the restore log line.
    """

    replay_items: ClassVar[str] = "items"
    model: Any
    learner: Any
    replay: Any
    save_replay: bool

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            **self.learner.state_dict(),
            "rng": {"replay": self.replay.rng.bit_generator.state},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.learner.load_state_dict(state)
        self.replay.rng.bit_generator.state = state["rng"]["replay"]

    def save_files(self, run_dir: str) -> None:
        if self.save_replay:
            save_arrays(run_dir, self.replay.state_dict())

    def restore_files(self, checkpoint_dir: str) -> None:
        saved = Path(checkpoint_dir) / REPLAY_NAME
        if not (self.save_replay and saved.exists()):
            return
        try:
            self.replay.load_state_dict(load_arrays(saved))
        except (KeyError, ValueError) as exc:
            raise CheckpointError(f"{saved}: {exc}") from None
        log.info("replay restored: %d %s", len(self.replay), self.replay_items)
