"""``env.kind=catch``: bsuite's Catch drawn as Atari-like pixel frames, a pixel task that an agent
solves in seconds on a CPU.

A ball falls one row a step from a random column of the top row; the agent moves a paddle on the
bottom row left, not at all or right. When the ball reaches the bottom row (after ``ROWS - 1``
steps) the episode ends with reward +1 if the paddle is under it, else -1 (Osband et al. 2020,
"Behaviour Suite for Reinforcement Learning"). The optimal return is +1; a uniformly random
policy scores about -0.6.

The frames are what makes it a check of a pixel pipeline rather than of a toy: uint8
``[1, ROWS * CELL, COLUMNS * CELL]``, the ball and paddle a faint ``CONTRAST`` brighter than a
static textured background, as Atari's small moving objects sit on walls, scores and a
playfield that never change. An agent has to find a few changing pixels among many that carry
nothing, which is what Pong asks of it too (seedq's tests run V-trace and PPO on it through the
real actor, broker and learner).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seedq.envs.base import BatchBase, EnvError, StepBatch
from seedq.envs.config import EnvConfig, kind_setting
from seedq.schema import setting

ROWS, COLUMNS, CELL = 10, 5, 4
# The ball and paddle add this to the background's grey level (0-255).
CONTRAST = 24
ACTIONS = 3  # left, stay, right

IDS = ("Catch", "catch")


@dataclass
class CatchConfig(EnvConfig):
    """``env=catch``: one game, no keys of its own."""

    kind: str = kind_setting("catch")
    id: str = setting("Catch", "Catch, the only game; names the run.")
    max_episode_steps: int | None = setting(
        None, f"Must be null: every Catch episode ends after {ROWS - 1} steps."
    )

    def check(self) -> None:
        """The one game, no seedq time limit."""
        if self.id not in IDS:
            raise EnvError(f"env.kind=catch has one game, 'Catch'; got env.id={self.id!r}")
        if self.max_episode_steps is not None:
            raise EnvError(
                f"env.max_episode_steps must be null for env.kind=catch: every episode ends "
                f"after {ROWS - 1} steps"
            )


def _background() -> np.ndarray:
    """The static playfield: a fixed texture, one grey level in [64, 192] per pixel."""
    texture = np.random.default_rng(2020).integers(64, 193, size=(ROWS * CELL, COLUMNS * CELL))
    return texture.astype(np.uint8)


class CatchBatch(BatchBase):
    """``num_envs`` Catch games stepped together with same-step autoreset (no truncation)."""

    def __init__(self, num_envs: int, seed: int | None, env_offset: int = 0) -> None:
        super().__init__(
            num_envs,
            (1, ROWS * CELL, COLUMNS * CELL),
            np.dtype(np.uint8),
            ACTIONS,
            seed,
            env_offset,
        )
        self._background = _background()
        self._rng = np.random.default_rng(seed)
        self._ball_row = np.zeros(num_envs, np.int64)
        self._ball_col = np.zeros(num_envs, np.int64)
        self._paddle = np.zeros(num_envs, np.int64)
        self._all = np.arange(num_envs)
        self._no_done = np.zeros(num_envs, bool)

    def _start(self, envs: np.ndarray) -> None:
        self._ball_row[envs] = 0
        self._ball_col[envs] = self._rng.integers(0, COLUMNS, size=len(envs))
        self._paddle[envs] = COLUMNS // 2

    def _render(self) -> np.ndarray:
        frames = np.repeat(self._background[None], self.num_envs, axis=0).astype(np.int16)
        for row, col in ((self._ball_row, self._ball_col), (ROWS - 1, self._paddle)):
            rows = np.broadcast_to(row, (self.num_envs,))
            for dy in range(CELL):
                for dx in range(CELL):
                    frames[self._all, rows * CELL + dy, col * CELL + dx] += CONTRAST
        return np.minimum(frames, 255).astype(np.uint8)[:, None]

    def reset(self, seed: int | None = None) -> np.ndarray:
        base = self._reset_seed(seed)
        if base is not None:
            self._rng = np.random.default_rng(base)
        self._start(self._all)
        return self._render()

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        self._paddle = np.clip(self._paddle + actions - 1, 0, COLUMNS - 1)
        self._ball_row += 1
        ended = self._ball_row == ROWS - 1
        reward = np.where(self._ball_col == self._paddle, 1.0, -1.0).astype(np.float32)
        reward[~ended] = 0.0
        if ended.any():
            self._start(np.flatnonzero(ended))
        return StepBatch(self._render(), reward, ended, self._no_done.copy(), self._no_final_obs)

    def close(self) -> None:
        pass


def make_catch(cfg: CatchConfig, num_envs: int, seed: int, env_offset: int) -> CatchBatch:
    """The registry's factory; ``env.id`` must be ``Catch`` (the only game)."""
    cfg.check()
    return CatchBatch(num_envs, seed, env_offset)
