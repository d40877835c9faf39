"""The reward a transition earns, as every learner computes it from unroll rows.

Row convention (V-trace unrolls and R2D2 sequences alike): row t holds obs t, the reward that
arrived with it, ``done[t]`` (obs t starts an episode), ``truncated[t]`` (the episode before
obs t was cut by a time limit) and ``truncation_value[t]`` (the acting network's value of that
episode's true last observation). Transition t -> t+1 earns ``reward[t+1]``; if obs t+1 starts
a new episode the return stops there. For a truncated episode the value of its true last
observation is added to the reward, so the return bootstraps from it and not from the next
episode's first observation (Pardo et al. 2018, "Time limits in reinforcement learning").
"""

from __future__ import annotations

import numpy as np
import torch

REWARD_CLIPS = ("none", "abs_one", "tanh")


def clip_rewards(rewards, mode: str):  # noqa: ANN001, ANN201 - an array or a tensor, as given
    """``rewards`` (a tensor, or a host array) clipped by ``mode`` (``REWARD_CLIPS``)."""
    if mode == "abs_one":
        if isinstance(rewards, np.ndarray):
            return np.clip(rewards, -1.0, 1.0)
        return rewards.clamp(-1.0, 1.0)
    if mode == "tanh":
        # IMPALA's soft clipping for Atari: keeps reward sign and rough magnitude order.
        if isinstance(rewards, np.ndarray):
            return (np.tanh(rewards / 5.0) * 5.0).astype(rewards.dtype)
        return torch.tanh(rewards / 5.0) * 5.0
    if mode != "none":
        raise ValueError(f"reward_clip={mode!r}: choose one of {list(REWARD_CLIPS)}")
    return rewards


def transition_rewards(
    reward: torch.Tensor,
    truncated: torch.Tensor,
    truncation_value: torch.Tensor,
    *,
    first: int,
    gamma: float,
    reward_clip: str,
) -> torch.Tensor:
    """Rewards ``[R - first, B]`` of the transitions into rows ``first ..`` of rows ``[R, B]``.

    ``first`` is 1 for a V-trace unroll (every transition) and ``burn_in + 1`` for an R2D2
    sequence (the trained transitions after the burn-in).
    """
    r = clip_rewards(reward[first:], reward_clip)
    return r + gamma * truncation_value[first:] * truncated[first:].to(r.dtype)
