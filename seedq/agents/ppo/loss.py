"""PPO's targets and loss as pure, time-major functions.

References: Schulman et al. 2016, "High-dimensional continuous control using generalized
advantage estimation" (GAE, eq. 16); Schulman et al. 2017, "Proximal policy optimization
algorithms" (the clipped surrogate, eq. 7, and the combined objective, eq. 9). Value clipping
and per-minibatch advantage normalisation follow OpenAI baselines' ppo2 (as cleanrl does).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class PPOLoss(NamedTuple):
    """The PPO loss terms and their sum (0-dim tensors), plus diagnostics without gradient."""

    total: Tensor
    pg: Tensor
    value: Tensor
    entropy: Tensor
    approx_kl: Tensor  # mean of (ratio - 1) - log ratio (Schulman's low-variance estimator)
    clip_fraction: Tensor  # share of samples whose ratio left [1 - eps, 1 + eps]


def gae(
    rewards: Tensor, discounts: Tensor, values: Tensor, bootstrap_value: Tensor, lambda_: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimates and their value targets (no gradient).

    Args:
        rewards: [T, B] r_t of transition t -> t+1 (truncation bootstraps folded in, see
            ``seedq.agents.common.targets``).
        discounts: [T, B] gamma, or 0 where obs t+1 starts a new episode.
        values: [T, B] V(x_t); bootstrap_value: [B] V(x_T).
        lambda_: GAE lambda in [0, 1].

    Returns:
        ``(advantages [T, B], returns [T, B] = advantages + values)``.
    """
    if rewards.shape != values.shape or discounts.shape != values.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)}, discounts {tuple(discounts.shape)} and values "
            f"{tuple(values.shape)} must share one time-major [T, B] shape"
        )
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(f"bootstrap_value must be [B] = {tuple(values.shape[1:])}")
    with torch.no_grad():
        values_next = torch.cat([values[1:], bootstrap_value[None]], dim=0)
        deltas = rewards + discounts * values_next - values
        advantages = torch.empty_like(values)
        acc = torch.zeros_like(bootstrap_value)
        for t in range(values.shape[0] - 1, -1, -1):
            acc = deltas[t] + discounts[t] * lambda_ * acc
            advantages[t] = acc
    return advantages, advantages + values


def ppo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    entropy: Tensor,
    *,
    clip_eps: float,
    value_cost: float,
    entropy_cost: float,
    value_clip: float | None = None,
    normalize_advantages: bool = True,
    value_scale: Tensor | None = None,
) -> PPOLoss:
    """Clipped-surrogate PPO loss over a minibatch of ``N`` samples (any shape, all equal).

    Args:
        log_probs: log pi(a) under the current policy (gradient flows).
        old_log_probs: log mu(a) of the policy that acted (data).
        advantages, returns: GAE advantages and value targets (data).
        values: V(x) of the current value function (gradient flows); old_values: V(x) when
            the batch was collected (data), the centre of ``value_clip``.
        entropy: H(pi(.|x)) of the current policy (gradient flows).

    Returns:
        PPOLoss with pg = -mean(min(ratio A, clip(ratio, 1-eps, 1+eps) A)),
        value = value_cost * 0.5 * mean(max((V - R)^2, (V_clipped - R)^2)) (plain squared error
        without value_clip), entropy = -entropy_cost * mean(H), total = their sum. With
        ``value_scale`` (PopArt's std, a scalar) the errors are in standard deviations,
        ``(V - R) / value_scale``, and ``value_clip`` is too.
    """
    shape = log_probs.shape
    for name, t in (
        ("old_log_probs", old_log_probs),
        ("advantages", advantages),
        ("values", values),
        ("old_values", old_values),
        ("returns", returns),
        ("entropy", entropy),
    ):
        if t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; log_probs has {tuple(shape)}")
    advantages, old_log_probs = advantages.detach(), old_log_probs.detach()
    if normalize_advantages and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages)
    pg = -surrogate.mean()
    returns, old_values = returns.detach(), old_values.detach()
    scale = 1.0 if value_scale is None else value_scale.detach()
    value_err = ((values - returns) / scale).pow(2)
    if value_clip is not None:
        change = ((values - old_values) / scale).clamp(-value_clip, value_clip)
        value_err = torch.max(value_err, ((old_values - returns) / scale + change).pow(2))
    value = value_cost * 0.5 * value_err.mean()
    entropy_term = -entropy_cost * entropy.mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_eps).float().mean()
    return PPOLoss(pg + value + entropy_term, pg, value, entropy_term, approx_kl, clip_fraction)
