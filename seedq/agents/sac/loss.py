"""SAC's target and losses as pure functions over a batch of ``B`` transitions.

Reference: Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (arXiv
1812.05905): the soft Q target (eq. 3 with the soft value of eq. 3's V), the critic loss (eq.
5), the policy loss (eq. 7, reparameterised as eq. 8) and the temperature loss (eq. 18). Twin
critics with the minimum in the target and the policy loss follow section 5 (after Fujimoto et
al. 2018's clipped double Q). Log-probabilities are of the policy's actions in its ``[-1, 1]``
action space, where the target entropy -|A| is defined.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check(shape: torch.Size, **named: Tensor) -> None:
    for name, t in named.items():
        if t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected [B] = {tuple(shape)}")


def soft_q_target(
    rewards: Tensor,
    discounts: Tensor,
    next_q1: Tensor,
    next_q2: Tensor,
    next_log_prob: Tensor,
    alpha: Tensor | float,
) -> Tensor:
    """``y = r + discount (min(Q1', Q2') - alpha log pi(a'|s'))`` (no gradient).

    Args:
        rewards: [B] reward of each transition, a truncated episode's bootstrap folded in (see
            ``seedq.agents.common.targets``).
        discounts: [B] gamma, or 0 where the next observation starts a new episode (terminated
            or truncated: a truncated return continues through ``rewards``, not through s').
        next_q1, next_q2: [B] the target critics at (s', a'), a' ~ pi(.|s').
        next_log_prob: [B] log pi(a'|s').
        alpha: the temperature (scalar).
    """
    _check(rewards.shape, discounts=discounts, next_q1=next_q1, next_q2=next_q2)
    _check(rewards.shape, next_log_prob=next_log_prob)
    with torch.no_grad():
        soft_value = torch.min(next_q1, next_q2) - alpha * next_log_prob
        return rewards + discounts * soft_value


def critic_loss(q1: Tensor, q2: Tensor, target: Tensor) -> Tensor:
    """``0.5 mean((Q1 - y)^2) + 0.5 mean((Q2 - y)^2)``; q1, q2: [B] at the replayed actions,
    target: [B] from :func:`soft_q_target` (treated as data)."""
    _check(target.shape, q1=q1, q2=q2)
    target = target.detach()
    return 0.5 * ((q1 - target).pow(2).mean() + (q2 - target).pow(2).mean())


def actor_loss(log_prob: Tensor, q1: Tensor, q2: Tensor, alpha: Tensor | float) -> Tensor:
    """``mean(alpha log pi(a|s) - min(Q1, Q2)(s, a))`` with a = f(eps; s) reparameterised.

    log_prob: [B] (gradient flows); q1, q2: [B] the online critics at (s, a) (gradient flows to
    a; the caller steps only the actor); alpha: the temperature, a constant here.
    """
    _check(log_prob.shape, q1=q1, q2=q2)
    alpha = alpha.detach() if isinstance(alpha, Tensor) else alpha
    return (alpha * log_prob - torch.min(q1, q2)).mean()


def temperature_loss(log_alpha: Tensor, log_prob: Tensor, target_entropy: float) -> Tensor:
    """``mean(-alpha (log pi(a|s) + target_entropy))``, alpha = exp(log_alpha) (eq. 18).

    log_alpha: 0-dim (gradient flows); log_prob: [B] of fresh policy samples (data). Alpha grows
    while the policy's entropy -log pi is below the target and shrinks while it is above.
    """
    if log_alpha.dim() != 0:
        raise ValueError(f"log_alpha must be 0-dim, got shape {tuple(log_alpha.shape)}")
    return -(log_alpha.exp() * (log_prob.detach() + target_entropy)).mean()
