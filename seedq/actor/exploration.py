"""Exploration schedules shared by the learner's action selection and its reports."""

from __future__ import annotations

import numpy as np


def epsilon_ladder(num_envs: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Per-env epsilons ``base ** (1 + alpha * i / (N - 1))`` for i = 0 .. N-1 (Ape-X, R2D2).

    Env 0 explores most (``base``), env N-1 least (``base ** (1 + alpha)``); a single env gets
    ``base``. Returns float64 ``[N]``.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if not 0.0 <= base <= 1.0:
        raise ValueError(f"base must be in [0, 1], got {base}")
    if num_envs == 1:
        return np.array([base], dtype=np.float64)
    i = np.arange(num_envs, dtype=np.float64)
    return base ** (1.0 + alpha * i / (num_envs - 1))
