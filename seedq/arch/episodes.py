"""Finished episodes of a device env batch, kept on the device until the monitor asks.

Every step folds the envs that finished into a ring of the most recent ``keep`` returns and
lengths with a fixed number of tensor ops (a cumulative sum ranks the finished envs, a scatter
writes them), so nothing is read on the host until :meth:`EpisodeTracker.drain`, once per
logging interval. It needs only each step's reward and done flags, so it works for any
:class:`~seedq.envs.tensor.TensorEnv`.
"""

from __future__ import annotations

import torch


class EpisodeTracker:
    """Running and recently finished episodes of ``num_envs`` envs on ``device``."""

    def __init__(self, num_envs: int, device: torch.device, keep: int = 100) -> None:
        self.keep = keep
        self.running_return = torch.zeros(num_envs, dtype=torch.float32, device=device)
        self.running_length = torch.zeros(num_envs, dtype=torch.int64, device=device)
        # One slot more than kept: the envs not kept this step all write into the last one.
        self.returns = torch.zeros(keep + 1, dtype=torch.float32, device=device)
        self.lengths = torch.zeros(keep + 1, dtype=torch.int64, device=device)
        self.next_slot = torch.zeros((), dtype=torch.int64, device=device)
        self.finished = torch.zeros((), dtype=torch.int64, device=device)

    def record(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        """One env step: ``reward [N]`` float, ``done [N]`` bool (the episode ended on it)."""
        self.running_return += reward
        self.running_length += 1
        rank = done.cumsum(0) - 1  # [N]: the i-th finished env (in env order) has rank i
        count = rank[-1] + 1
        # When more than `keep` finish at once, the last `keep` of them are the ones kept.
        kept = done & (rank >= count - self.keep)
        slot = torch.where(kept, (self.next_slot + rank) % self.keep, self.keep)
        self.returns.scatter_(0, slot, self.running_return)
        self.lengths.scatter_(0, slot, self.running_length)
        self.next_slot = (self.next_slot + count) % self.keep
        self.finished += count
        self.running_return.masked_fill_(done, 0.0)
        self.running_length.masked_fill_(done, 0)

    def drain(self) -> tuple[int, list[float], list[int]]:
        """``(episodes finished since the last drain, the returns and lengths of the most
        recent min(that, keep) of them, oldest first)``; the one host sync."""
        count, next_slot = (int(v) for v in torch.stack([self.finished, self.next_slot]).tolist())
        held = min(count, self.keep)
        # The ring's oldest entry is at next_slot once it has wrapped, else at 0.
        order = torch.arange(held, device=self.returns.device)
        if count > self.keep:
            order = (order + next_slot) % self.keep
        returns = self.returns[order].tolist()
        lengths = self.lengths[order].tolist()
        self.finished.zero_()
        self.next_slot.zero_()
        return count, returns, lengths
