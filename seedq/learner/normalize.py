"""Running normalisation shared by every agent: observations (in the model) and rewards.

Observations. :class:`RunningNorm` lives inside the network (``RecurrentBody``), its count,
mean and variance are buffers, so checkpoints, ``seedq.load_policy`` and ``seedq-eval`` carry and
apply it with no extra code. Its statistics change only in :func:`update_obs_norm`, which the
learner calls *after* an update with the observations of the batch it just trained on, under
the weights lock. So acting and training always see the same statistics: a batch is trained on
with exactly the statistics it was collected with (inference never updates them), and
inference never sees a half-written mean/variance pair.

Rewards. :class:`RewardScaler` divides rewards by the running standard deviation of the
discounted return (the scaling of OpenAI baselines' ``VecNormalize`` and cleanrl's
``NormalizeReward``): advantages and value targets keep a scale near one whatever the env's
reward units, so an entropy bonus and a learning rate mean the same thing on CartPole (+1 a
step) and MountainCar (-1 a step). It runs on the learner over the unrolls it trains on; each
env's running return is kept by global env id.

Statistics merge by Chan et al.'s parallel algorithm (1979): batches of any sizes give the
same mean and variance as one pass over all samples.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn


def merge_moments(
    count: float, mean: np.ndarray, var: np.ndarray, batch: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """``(count, mean, var)`` after adding ``batch [N, ...]`` (population variance)."""
    n = batch.shape[0]
    if n == 0:
        return count, mean, var
    b_mean, b_var = batch.mean(0), batch.var(0)
    total = count + n
    delta = b_mean - mean
    new_mean = mean + delta * (n / total)
    m2 = var * count + b_var * n + delta**2 * (count * n / total)
    return total, new_mean, m2 / total


class RunningNorm(nn.Module):
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)`` with running statistics (buffers)."""

    def __init__(self, shape: tuple[int, ...], *, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))

    def forward(self, x: Tensor) -> Tensor:
        """``[N, *shape]`` -> float32 ``[N, *shape]``; the identity until the first update."""
        mean, std = self.mean.float(), torch.sqrt(self.var.float() + self.eps)
        return ((x.float() - mean) / std).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, batch: np.ndarray) -> None:
        """Merge ``batch [N, *shape]`` into the statistics."""
        batch = np.asarray(batch, dtype=np.float64).reshape(-1, *self.mean.shape)
        count, mean, var = merge_moments(
            float(self.count), self.mean.cpu().numpy(), self.var.cpu().numpy(), batch
        )
        self.count.fill_(count)
        self.mean.copy_(torch.from_numpy(mean))
        self.var.copy_(torch.from_numpy(var))


def obs_norms(model: nn.Module) -> list[RunningNorm]:
    return [m for m in model.modules() if isinstance(m, RunningNorm)]


def update_obs_norm(model: nn.Module, obs: np.ndarray, weights_lock: threading.Lock) -> None:
    """Merge ``obs [T, B, *obs_shape]`` into every observation normaliser of ``model``.

    Call after the update on this batch; under the weights lock so inference never acts with
    a half-written pair. Models without a normaliser pay nothing. Rows with a non-finite
    value are left out: one NaN observation would otherwise poison the statistics for good.
    """
    norms = obs_norms(model)
    if not norms:
        return
    flat = np.asarray(obs).reshape(-1, *obs.shape[2:])
    if np.issubdtype(flat.dtype, np.floating):
        finite = np.isfinite(flat.reshape(len(flat), -1)).all(axis=1)
        if not finite.all():
            flat = flat[finite]
        if not len(flat):
            return
    with weights_lock:
        for norm in norms:
            norm.update(flat)


class RewardScaler:
    """Rewards divided by the running std of each env's discounted return."""

    def __init__(self, gamma: float, *, eps: float = 1e-8, clip: float = 10.0) -> None:
        self.gamma, self.eps, self.clip = gamma, eps, clip
        self.count, self.mean, self.var = 0.0, np.zeros(()), np.ones(())
        self._returns: dict[int, float] = {}

    def scale(self, reward: np.ndarray, done: np.ndarray, env_id: np.ndarray) -> np.ndarray:
        """Scaled rewards ``[T+1, B]`` of an unroll (rows as in ``seedq.learner.targets``).

        Row 0 repeats the previous unroll's last row, so only rows ``1..T`` advance the returns;
        row 0 is scaled like the others (its reward is never trained on).
        """
        returns = np.array([self._returns.get(int(e), 0.0) for e in env_id])
        seen = np.empty_like(reward[1:], dtype=np.float64)
        for t in range(1, reward.shape[0]):
            # done[t]: obs t starts an episode, so reward[t] ended the previous one.
            returns = returns * self.gamma + reward[t]
            seen[t - 1] = returns
            returns = np.where(done[t], 0.0, returns)
        for e, r in zip(env_id.tolist(), returns.tolist(), strict=True):
            self._returns[int(e)] = r
        self.count, self.mean, self.var = merge_moments(
            self.count, self.mean, self.var, seen.reshape(-1)
        )
        scaled = reward / np.sqrt(self.var + self.eps)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict:
        return {"count": self.count, "var": float(self.var), "mean": float(self.mean)}

    def load_state_dict(self, state: dict) -> None:
        self.count = float(state["count"])
        self.mean, self.var = np.asarray(state["mean"]), np.asarray(state["var"])


class OptimizerAndScalerState:
    """Checkpoint state of a learner that owns ``optimizer`` and an optional ``reward_scaler``
    (V-trace and PPO): the part of the agent's checkpoint its learner holds."""

    optimizer: Any
    reward_scaler: RewardScaler | None

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"optimizer": self.optimizer.state_dict()}
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.reward_scaler is not None and "reward_scaler" in state:
            self.reward_scaler.load_state_dict(state["reward_scaler"])
