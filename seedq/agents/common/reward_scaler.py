"""Rewards scaled on the learner: :class:`RewardScaler` divides rewards by the running standard
deviation of the discounted return (the scaling of OpenAI baselines' ``VecNormalize`` and
cleanrl's ``NormalizeReward``): advantages and value targets keep a scale near one whatever the
env's reward units, so an entropy bonus and a learning rate mean the same thing on CartPole (+1
a step) and MountainCar (-1 a step). It runs on the learner over the unrolls it trains on; each
env's running return is kept by global env id. Its statistics are merged and screened as
``seedq.agents.common.moments`` says.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from seedq.agents.common.moments import (
    OUTLIER_WARMUP_ROWS,
    Moments,
    OutlierCounter,
    as_tensor,
    merge_moments,
    outlier_bounds,
    running_bounds,
    screen_outliers,
)


class RewardScaler:
    """Rewards divided by the running std of each env's discounted return.

    Host arrays keep each env's running return by global env id (any ids, as actors come and
    go); device tensors keep them in a tensor indexed by env id (Anakin's ids are 0..N-1), so
    the device path never reads a value on the host.

    Returns are screened as they are accumulated (:func:`screen_outliers`): a return far
    outside the statistics is seen, and carried on, as its screened value. Carried on as it
    was, one reward of 1e30 would keep its env's return astronomical for thousands of steps
    (0.99**t * 1e30), each step one more sample to screen; the reward itself is still scaled
    and clipped like any other (one update's worth of harm).
    """

    def __init__(self, gamma: float, *, eps: float = 1e-8, clip: float = 10.0) -> None:
        self.gamma, self.eps, self.clip = gamma, eps, clip
        zero = torch.zeros((), dtype=torch.float64)
        self._moments: Moments = (zero, zero, torch.ones((), dtype=torch.float64))
        self._rows = 0.0  # the count of the moments, kept on the host
        self._returns: dict[int, float] = {}
        self._device_returns: Tensor | None = None
        self.outliers = OutlierCounter("the reward scaler's return statistics")

    @property
    def count(self) -> float:
        return float(self._moments[0])

    @property
    def mean(self) -> float:
        return float(self._moments[1])

    @property
    def var(self) -> float:
        return float(self._moments[2])

    def scale(  # noqa: ANN201 - an array for arrays, a tensor for tensors
        self,
        reward: np.ndarray | Tensor,
        done: np.ndarray | Tensor,
        env_id: np.ndarray | Tensor,
    ):
        """Scaled rewards ``[T+1, B]`` of an unroll (rows as in ``seedq.agents.common.targets``):
        a float32 array for host arrays, a float32 tensor on their device for tensors.

        Row 0 repeats the previous unroll's last row, so only rows ``1..T`` advance the returns;
        row 0 is scaled like the others (its reward is never trained on).
        """
        rewards = as_tensor(reward)
        dones = as_tensor(done).to(rewards.device, torch.bool)
        if isinstance(reward, Tensor):
            index = as_tensor(env_id).to(rewards.device, torch.long)
            start = self._device_table(index)[index]
        else:
            start = torch.tensor(
                [self._returns.get(int(e), 0.0) for e in env_id], dtype=torch.float64
            )
        moments = tuple(m.to(rewards.device) for m in self._moments)
        # The bounds come from the running statistics (how many rows were merged is known here
        # without reading the device), or (the first batches) from these returns as they would
        # be unscreened. Screening changes nothing unless a return lies outside them, so on the
        # host the plain pass stands when none does (one host read, ~8 ops a step fewer); on a
        # device, which is never read, the returns are screened as they are carried on.
        on_host = rewards.device.type == "cpu"
        plain = None
        if on_host or self._rows < OUTLIER_WARMUP_ROWS:
            plain = self._returns_seen(start, rewards, dones)
        if self._rows >= OUTLIER_WARMUP_ROWS:
            bounds = running_bounds(moments[1], moments[2])
        else:
            bounds = outlier_bounds(*moments, plain[0].reshape(-1))
        if on_host and not bool(((plain[0] - bounds[0]).abs() > bounds[1]).any()):
            seen, last, screened = plain
        else:
            seen, last, screened = self._returns_seen(start, rewards, dones, bounds)
        self._rows += seen.numel()
        self.outliers.add(screened)
        if isinstance(reward, Tensor):
            self._device_returns[index] = last
        else:
            for e, r in zip(env_id.tolist(), last.tolist(), strict=True):
                self._returns[int(e)] = r
        self._moments = merge_moments(*moments, seen.reshape(-1))
        var = self._moments[2]
        scaled = (rewards.to(torch.float64) / torch.sqrt(var + self.eps)).clamp(
            -self.clip, self.clip
        )
        scaled = scaled.to(torch.float32)
        return scaled if isinstance(reward, Tensor) else scaled.numpy()

    def _returns_seen(
        self,
        start: Tensor,
        reward: Tensor,
        done: Tensor,
        bounds: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(seen [T, B], last [B], screened [])``: the discounted returns after rows ``1..T``
        of ``reward`` from the running returns ``start [B]``, each screened by ``bounds``
        (``(centre, half_width)``) when given; the returns to carry into the next unroll; how
        many were screened."""
        returns, seen = start, []
        screened = torch.zeros((), dtype=torch.int64, device=start.device)
        for t in range(1, reward.shape[0]):
            # done[t]: obs t starts an episode, so reward[t] ended the previous one.
            returns = returns * self.gamma + reward[t].to(torch.float64)
            if bounds is not None:
                returns, outside = screen_outliers(returns, *bounds)
                screened = screened + outside
            seen.append(returns)
            returns = torch.where(done[t], 0.0, returns)
        return torch.stack(seen), returns, screened

    def _device_table(self, index: Tensor) -> Tensor:
        """The running returns by env id on ``index``'s device, grown to hold its largest id."""
        table = self._device_returns
        # One small host read per unroll (the largest id), beside the loss values the learner
        # reads anyway; the table grows only when a larger env id appears.
        size = int(index.max()) + 1
        if table is None or table.device != index.device or table.numel() < size:
            grown = torch.zeros(size, dtype=torch.float64, device=index.device)
            if table is not None:
                grown[: table.numel()] = table.to(index.device)
            table = grown
        self._device_returns = table
        return table

    def state_dict(self) -> dict:
        return {"count": self.count, "var": self.var, "mean": self.mean}

    def load_state_dict(self, state: dict) -> None:
        self._moments = tuple(
            torch.tensor(float(state[key]), dtype=torch.float64) for key in ("count", "mean", "var")
        )
        self._rows = float(state["count"])
