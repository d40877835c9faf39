"""A Sebulba run's checkpoint: the same dict as ``LocalRun.checkpoint_state`` writes.

Kept key for key with :mod:`seedq.launch.local` so that ``seedq-eval``, ``seedq-train
resume=...`` and either architecture read the other's checkpoints; the env-step counters come
from the run's in-process stats instead of the broker's.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import torch

from seedq.learner.checkpoint import plain_config

log = logging.getLogger(__name__)


def checkpoint_state(run: Any, wall_time_s: float) -> dict:
    """Everything needed to continue ``run``; the agent's part copied under the lock."""
    with run.weights_lock:
        agent_state = copy.deepcopy(run.agent.state_dict())
    rng = {
        **agent_state.pop("rng", {}),
        "torch": torch.get_rng_state(),
        "inference": run.engine.generator.get_state(),
    }
    return {
        **agent_state,
        "rng": rng,
        "config": plain_config(run.cfg),
        "spec": run.spec.to_dict(),
        "env_steps": run.stats.env_steps,
        "episodes": run.stats.episodes,
        "updates": run.agent.stats.updates,
        "wall_time_s": wall_time_s,
    }


def restore_state(run: Any, state: dict) -> None:
    """Load ``state`` (a checkpoint of this config) into ``run`` before it starts."""
    run.agent.load_state_dict(state)
    run.agent.restore_files(str(Path(run.cfg.resume or "").parent))
    torch.set_rng_state(state["rng"]["torch"])
    run.engine.generator.set_state(state["rng"]["inference"])
    run.stats.env_steps = int(state["env_steps"])
    run.stats.episodes = int(state["episodes"])
    run.agent.stats.updates = int(state["updates"])
    run.elapsed_before = float(state["wall_time_s"])
    log.info(
        "resumed at %d env steps, %d updates, %.0f s of training",
        run.stats.env_steps,
        run.agent.stats.updates,
        run.elapsed_before,
    )
