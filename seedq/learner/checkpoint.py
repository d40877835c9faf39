"""Writing the learner's state to the run directory, atomically."""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import asdict, is_dataclass
from typing import Any

import torch
from omegaconf import OmegaConf

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"


def _plain_config(cfg: Any) -> dict:
    if is_dataclass(cfg):
        return asdict(cfg)
    return OmegaConf.to_container(cfg, resolve=True)


def save_checkpoint(
    run_dir: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    cfg: Any,
    *,
    env_steps: int,
    updates: int,
) -> str:
    """Write ``checkpoint.pt`` via a temp file + rename: a failed write never clobbers the last
    good checkpoint."""
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    state = {
        "format": 1,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "config": _plain_config(cfg),
        "env_steps": env_steps,
        "updates": updates,
    }
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".checkpoint-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    log.info("checkpoint written to %s (%d env steps, %d updates)", path, env_steps, updates)
    return path
