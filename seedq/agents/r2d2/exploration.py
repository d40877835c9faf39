"""R2D2's exploration: an epsilon per env (the Ape-X ladder), and evaluation envs beside it."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

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


class Exploration:
    """Epsilon per global env id: a ladder over the exploring envs, ``eval_epsilon`` beyond.

    Env ids ``>= len(epsilons)`` are evaluation envs; an actor whose first env is one is an
    eval actor, and its episodes' returns are kept apart (the run is judged by them).
    """

    def __init__(self, epsilons: np.ndarray, eval_epsilon: float) -> None:
        self.epsilons = np.asarray(epsilons, dtype=np.float32)
        self.eval_epsilon = eval_epsilon
        self.eval_returns: collections.deque[float] = collections.deque(maxlen=100)
        self.eval_episodes = 0
        # Per actor, fixed while it stays connected: looked up on every request, so computed
        # once when it joins.
        self._epsilon: dict[int, np.ndarray] = {}
        self._eval_actors: set[int] = set()

    def for_envs(self, env_ids: np.ndarray) -> np.ndarray:
        inside = env_ids < len(self.epsilons)
        ladder = self.epsilons[np.minimum(env_ids, len(self.epsilons) - 1)]
        return np.where(inside, ladder, np.float32(self.eval_epsilon))

    def actor_started(self, actor_id: int, env_ids: np.ndarray) -> None:
        self._epsilon[actor_id] = self.for_envs(env_ids)
        if env_ids[0] >= len(self.epsilons):
            self._eval_actors.add(actor_id)
        else:
            self._eval_actors.discard(actor_id)

    def actor_left(self, actor_id: int) -> None:
        self._epsilon.pop(actor_id, None)
        self._eval_actors.discard(actor_id)

    def epsilon(self, actor_id: int) -> np.ndarray:
        return self._epsilon[actor_id]

    def observe_returns(self, actor_id: int, returns: Sequence[float]) -> None:
        if actor_id in self._eval_actors and len(returns):
            self.eval_returns.extend(returns)
            self.eval_episodes += len(returns)

    def state_dict(self) -> dict[str, Any]:
        """The evaluation episodes so far: their count and the last 100 returns, which a
        resumed run goes on judging itself by (``stop_at_return``, ``eval/return_mean``)."""
        return {
            "returns": [float(r) for r in list(self.eval_returns)],
            "episodes": self.eval_episodes,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.eval_returns.clear()
        self.eval_returns.extend(float(r) for r in state["returns"])
        self.eval_episodes = int(state["episodes"])
