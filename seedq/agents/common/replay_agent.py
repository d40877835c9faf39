"""What the replay agents (R2D2, SAC) share: a sink that fills the replay, a training thread that
samples it, and their checkpoint state (model, learner, replay RNG, and the replay's own file
beside the checkpoint with ``checkpoint.replay``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from seedq.agents.common.base import AgentBase
from seedq.core.unroll import Unroll
from seedq.learner.checkpoint import REPLAY_NAME, CheckpointError, load_arrays, save_arrays

log = logging.getLogger(__name__)

# How long one take waits for the rate limiter before handing the loop a None.
TAKE_PATIENCE_S = 0.5


class ReplayAgent(AgentBase):
    """An agent whose learner trains on batches sampled from a replay the sink fills.

    The subclass sets ``replay`` and ``sink`` (called with each completed unroll) in its
    ``__init__``; ``replay_items`` names what the replay holds, for the restore log line.
    """

    replay_items: ClassVar[str] = "items"
    replay: Any
    sink: Callable[[Unroll], None]

    @property
    def save_replay(self) -> bool:
        return bool(self.ctx.cfg.checkpoint.replay)

    def on_unroll(self, unroll: Unroll) -> None:
        self.sink(unroll)

    def train(self, env_steps: Callable[[], int]) -> None:
        self.training_loop(self._take, self.train_on)

    def _take(self, size: int | None = None) -> Any:
        """A sampled batch (of ``size`` items, the batch size by default), or None when the
        rate limiter allows none within a moment (the training loop then looks again; with
        several learner ranks it takes part in a round)."""
        stop, deadline = self.ctx.stop, time.monotonic() + TAKE_PATIENCE_S
        return self.replay.sample(
            size or self.alg.batch_size, lambda: stop.is_set() or time.monotonic() > deadline
        )

    def train_on(self, sample: Any) -> None:
        """One update on a sampled batch."""
        self.learner.train_step(sample)

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
            save_arrays(run_dir, self.replay.save_state)

    def restore_files(self, checkpoint_dir: str) -> None:
        saved = Path(checkpoint_dir) / REPLAY_NAME
        if not (self.save_replay and saved.exists()):
            return
        try:
            self.replay.load_state_dict(load_arrays(saved))
        except (KeyError, ValueError) as exc:
            raise CheckpointError(
                f"{saved}: {exc}; it was saved by a run with other settings: resume with the "
                "run's own, or move the file away to resume with an empty replay that refills"
            ) from None
        log.info("replay restored: %d %s", len(self.replay), self.replay_items)
