"""V-trace off-policy targets and the IMPALA actor-critic loss.

Reference: Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures", section 4 (eq. 1 and the policy-gradient update that follows it).

Every tensor is time-major: ``[T, B]`` for per-step quantities, ``[T, B, A]`` for logits, and
``[B]`` for the value bootstrapped after the last step of the unroll.
"""

from collections import Counter
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from seedq.agents.vtrace.config import PG_BOOTSTRAPS

ArrayLike = Tensor | np.ndarray


class VTraceReturns(NamedTuple):
    """V-trace targets, both without gradient.

    vs: [T, B] value targets v_s (eq. 1).
    pg_advantages: [T, B] importance-weighted advantages for the policy gradient.
    """

    vs: Tensor
    pg_advantages: Tensor


class VTraceLoss(NamedTuple):
    """The three IMPALA loss terms and their sum, each a 0-dim tensor, and two measures of how
    far the policy trained on has moved from the one that acted (no gradient)."""

    total: Tensor
    pg: Tensor
    baseline: Tensor
    entropy: Tensor
    # mean of (ratio - 1) - log ratio, ratio = pi(a) / mu(a): Schulman's low-variance estimator
    # of KL(mu || pi), as PPO logs it.
    approx_kl: Tensor
    # share of steps whose ratio left [1 - clip_eps, 1 + clip_eps] (0 without clip_eps).
    clip_fraction: Tensor


def _check_threshold(name: str, threshold: float | None) -> None:
    if threshold is not None and not threshold > 0:
        raise ValueError(f"{name} must be positive or None (no clipping), got {threshold}")


def _check_shapes(per_step: dict[str, Tensor], bootstrap_value: Tensor) -> None:
    """Raise naming the argument whose shape disagrees with the [T, B] the others share."""
    shapes = {name: tuple(tensor.shape) for name, tensor in per_step.items()}
    # The shape most arguments agree on is taken as intended, so that the message blames the
    # odd one out rather than whichever argument happened to be checked first.
    expected = Counter(shapes.values()).most_common(1)[0][0]
    if len(expected) != 2:
        raise ValueError(f"{', '.join(per_step)} must be time-major [T, B]; got shapes {shapes}")
    wrong = [name for name, shape in shapes.items() if shape != expected]
    if wrong:
        got = ", ".join(f"{name} has shape {shapes[name]}" for name in wrong)
        raise ValueError(
            f"{got} but the other per-step arguments have [T, B] = {expected}; "
            f"{', '.join(per_step)} must all share one time-major [T, B] shape"
        )
    if tuple(bootstrap_value.shape) != expected[1:]:
        raise ValueError(
            f"bootstrap_value has shape {tuple(bootstrap_value.shape)} but must be [B] = "
            f"{expected[1:]}: one value per batch column, for the state after the last step"
        )


def vtrace_returns(
    log_rhos: ArrayLike,
    discounts: ArrayLike,
    rewards: ArrayLike,
    values: ArrayLike,
    bootstrap_value: ArrayLike,
    *,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
    pg_bootstrap: str = "vs",
) -> VTraceReturns:
    """V-trace value targets and policy-gradient advantages (IMPALA eq. 1).

    Args:
        log_rhos: [T, B] log pi(a_t|x_t) - log mu(a_t|x_t), target minus behaviour policy.
        discounts: [T, B] gamma * (1 - terminated_t); 0 where the episode ended at step t.
        rewards: [T, B] r_t.
        values: [T, B] V(x_t) under the current value function.
        bootstrap_value: [B] V(x_T), the value of the state after the last step.
        clip_rho_threshold: rho-bar, the clip on the importance weights inside delta_t;
            None disables it.
        clip_pg_rho_threshold: the clip on the importance weight of the policy-gradient
            advantage; None disables it.
        lambda_: trace coefficient in [0, 1] multiplying every c_i (Remark 2 of the paper).
        pg_bootstrap: what the policy-gradient advantage bootstraps from after its own step.
            "vs": the next V-trace target v_{s+1} (the paper's section 4.2, seed_rl's), so
            with lambda_ < 1 the TD error k steps ahead weighs gamma^k lambda^(k-1).
            "lambda": lambda_ v_{s+1} + (1 - lambda_) V(x_{s+1}) (rlax's
            ``vtrace_td_error_and_advantage``), so it weighs (gamma lambda)^k: on-policy the
            advantage is GAE's. The two agree at lambda_ = 1.

    Returns:
        VTraceReturns with vs and pg_advantages, both [T, B], detached from any graph, in the
        floating dtype the inputs promote to (float64 in gives float64 out).

    Raises:
        ValueError: an argument has the wrong shape, or a threshold, lambda_ or pg_bootstrap is
            out of range.
    """
    _check_threshold("clip_rho_threshold", clip_rho_threshold)
    if pg_bootstrap not in PG_BOOTSTRAPS:
        raise ValueError(
            f"pg_bootstrap must be one of {', '.join(PG_BOOTSTRAPS)}, got {pg_bootstrap!r}"
        )
    _check_threshold("clip_pg_rho_threshold", clip_pg_rho_threshold)
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"lambda_ must lie in [0, 1], got {lambda_}")

    values_t = torch.as_tensor(values).detach()
    device = values_t.device
    per_step = {
        "log_rhos": torch.as_tensor(log_rhos, device=device).detach(),
        "discounts": torch.as_tensor(discounts, device=device).detach(),
        "rewards": torch.as_tensor(rewards, device=device).detach(),
        "values": values_t,
    }
    bootstrap_t = torch.as_tensor(bootstrap_value, device=device).detach()
    _check_shapes(per_step, bootstrap_t)

    dtype = bootstrap_t.dtype
    for tensor in per_step.values():
        dtype = torch.promote_types(dtype, tensor.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    log_rhos_t, discounts_t, rewards_t, values_t = (t.to(dtype) for t in per_step.values())
    bootstrap_t = bootstrap_t.to(dtype)

    with torch.no_grad():
        rhos = torch.exp(log_rhos_t)
        clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
        # c_i = lambda * min(c-bar, rho_i) with c-bar = 1 (paper, section 4.1 and Remark 2).
        cs = lambda_ * rhos.clamp(max=1.0)

        values_next = torch.cat([values_t[1:], bootstrap_t.unsqueeze(0)], dim=0)
        deltas = clipped_rhos * (rewards_t + discounts_t * values_next - values_t)

        # Backward form of eq. 1: v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1})),
        # with v_T - V(x_T) = 0 because the bootstrap is taken as its own target.
        vs = backward_recursion(deltas, discounts_t * cs) + values_t

        # The policy gradient estimates Q(x_s, a_s) by r_s + gamma_s v_{s+1} (paper, section
        # 4.2), so it looks one target ahead, bootstrapping at the end of the unroll; "lambda"
        # mixes in V(x_{s+1}) as a lambda-return does (v_T = V(x_T) either way).
        vs_next = torch.cat([vs[1:], bootstrap_t.unsqueeze(0)], dim=0)
        if pg_bootstrap == "lambda":
            vs_next = lambda_ * vs_next + (1.0 - lambda_) * values_next
        pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
        pg_advantages = pg_rhos * (rewards_t + discounts_t * vs_next - values_t)

    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def backward_recursion(deltas: Tensor, decays: Tensor) -> Tensor:
    """``acc [T, B]`` with ``acc[t] = deltas[t] + decays[t] * acc[t + 1]`` and ``acc[T] = 0``.

    The same two float operations per element and step everywhere, so both paths give the same
    bits. On the CPU the T steps run in NumPy on views of the tensors: a step is two operations
    on ``[B]`` rows, and torch's per-call overhead (~3 µs here, against ~1 µs for NumPy) made
    this loop most of a minibatch update's host time (issue 34).
    """
    if deltas.device.type == "cpu" and deltas.dtype in (torch.float32, torch.float64):
        return torch.from_numpy(_backward_recursion_numpy(deltas.numpy(), decays.numpy()))
    return _backward_recursion_torch(deltas, decays)


def _backward_recursion_numpy(deltas: np.ndarray, decays: np.ndarray) -> np.ndarray:
    out = np.empty_like(deltas)
    acc = np.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + decays[t] * acc
        out[t] = acc
    return out


def _backward_recursion_torch(deltas: Tensor, decays: Tensor) -> Tensor:
    if not deltas.shape[0]:
        return torch.empty_like(deltas)
    d, g = deltas.unbind(0), decays.unbind(0)
    acc = torch.zeros_like(d[0])
    rows = [acc] * len(d)
    for t in range(len(d) - 1, -1, -1):
        acc = d[t] + g[t] * acc
        rows[t] = acc
    return torch.stack(rows)


def action_log_probs(logits: Tensor, actions: Tensor) -> Tensor:
    """Log-probability of the taken actions under a categorical policy.

    Args:
        logits: [T, B, A] unnormalised action scores.
        actions: [T, B] integer action indices in [0, A).

    Returns:
        [T, B] log pi(a_t | x_t), differentiable with respect to logits.
    """
    if logits.shape[:-1] != actions.shape:
        raise ValueError(
            f"actions has shape {tuple(actions.shape)} but logits has shape "
            f"{tuple(logits.shape)}; expected actions [T, B] for logits [T, B, A]"
        )
    log_probs = F.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def policy_entropy(logits: Tensor) -> Tensor:
    """Entropy of a categorical policy.

    Args:
        logits: [T, B, A] unnormalised action scores; -inf marks an impossible action.

    Returns:
        [T, B] -sum_a pi(a|x) log pi(a|x), differentiable with respect to logits.
    """
    log_probs = F.log_softmax(logits, dim=-1)
    probs = log_probs.exp()
    # For an impossible action p = 0 and log p = -inf; 0 * -inf would be NaN in the value and in
    # the gradient, so replace log p by 0 there before multiplying (0 log 0 = 0 by convention).
    safe_log_probs = torch.where(probs > 0, log_probs, torch.zeros_like(log_probs))
    return -(probs * safe_log_probs).sum(dim=-1)


def vtrace_loss(
    target_logits: Tensor,
    behaviour_logits: Tensor,
    actions: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    rewards: Tensor,
    discounts: Tensor,
    *,
    baseline_cost: float,
    entropy_cost: float,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
    pg_bootstrap: str = "vs",
    clip_eps: float | None = None,
    normalize_advantages: bool = False,
    value_scale: Tensor | None = None,
) -> VTraceLoss:
    """IMPALA actor-critic loss with V-trace targets.

    Args:
        target_logits: [T, B, A] logits of the learner's current policy pi.
        behaviour_logits: [T, B, A] logits of the actors' policy mu when they acted.
        actions: [T, B] actions the actors took.
        values: [T, B] V(x_t) from the learner's current value head.
        bootstrap_value: [B] V(x_T) after the last step.
        rewards: [T, B] r_t.
        discounts: [T, B] gamma * (1 - terminated_t).
        baseline_cost: weight of the value-regression term.
        entropy_cost: weight of the entropy bonus.
        clip_rho_threshold, clip_pg_rho_threshold, lambda_, pg_bootstrap: as in
            `vtrace_returns`.
        clip_eps: None for IMPALA's policy gradient; else the clipped surrogate of PPO
            (Schulman et al. 2017, eq. 7) on the V-trace advantages, with the ratio
            pi(a) / mu(a) to the behaviour policy: Sample Factory's APPO. It keeps several
            passes over one batch (``algorithm.epochs``) from moving the policy too far.
        normalize_advantages: standardise the advantages over the batch first.
        value_scale: the std of a PopArt value head (``ValueNorm``): the value error is
            divided by it, so the head regresses on standardised targets; None: 1.

    Returns:
        VTraceLoss of 0-dim tensors, each a mean over the T * B steps:
        pg = -mean(log pi(a) * pg_adv) (or the clipped surrogate), baseline = baseline_cost *
        0.5 * mean((vs - V)^2), entropy = -entropy_cost * mean(H(pi)), total = pg + baseline +
        entropy. Gradients reach target_logits and values only.
    """
    if behaviour_logits.shape != target_logits.shape:
        raise ValueError(
            f"behaviour_logits has shape {tuple(behaviour_logits.shape)} but target_logits has "
            f"shape {tuple(target_logits.shape)}; both must be [T, B, A]"
        )
    if values.shape != actions.shape:
        raise ValueError(
            f"values has shape {tuple(values.shape)} but actions has shape "
            f"{tuple(actions.shape)}; both must be [T, B]"
        )

    target_log_probs = action_log_probs(target_logits, actions)
    # The behaviour policy is data recorded by the actors: never differentiate through it.
    behaviour_log_probs = action_log_probs(behaviour_logits.detach(), actions)
    # V-trace targets are fixed regression targets and fixed advantage weights (stop-gradient
    # on values and on the importance ratios), as in the paper's update rules of section 4.2.
    returns = vtrace_returns(
        target_log_probs.detach() - behaviour_log_probs,
        discounts,
        rewards,
        values.detach(),
        bootstrap_value.detach(),
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        lambda_=lambda_,
        pg_bootstrap=pg_bootstrap,
    )

    return actor_critic_loss(
        target_logits,
        target_log_probs,
        behaviour_log_probs,
        values,
        returns,
        baseline_cost=baseline_cost,
        entropy_cost=entropy_cost,
        clip_eps=clip_eps,
        normalize_advantages=normalize_advantages,
        value_scale=value_scale,
    )


def actor_critic_loss(
    target_logits: Tensor,
    target_log_probs: Tensor,
    behaviour_log_probs: Tensor,
    values: Tensor,
    returns: VTraceReturns,
    *,
    baseline_cost: float,
    entropy_cost: float,
    clip_eps: float | None = None,
    normalize_advantages: bool = False,
    value_scale: Tensor | None = None,
) -> VTraceLoss:
    """The loss terms of :func:`vtrace_loss` from targets computed before (``returns``, without
    gradient): what a minibatch of transitions drawn from a batch whose V-trace targets were
    computed as a whole is trained on. Every tensor has the same leading shape (``[T, B]``, or
    ``[N]`` transitions), logits one more axis; means are over all of them."""
    advantages = returns.pg_advantages
    if normalize_advantages and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    log_ratio = target_log_probs - behaviour_log_probs
    ratio = torch.exp(log_ratio)
    if clip_eps is None:
        pg = -(target_log_probs * advantages).mean()
    else:
        clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
        pg = -torch.min(ratio * advantages, clipped * advantages).mean()
    value_error = returns.vs - values
    if value_scale is not None:
        value_error = value_error / value_scale.detach()
    baseline = baseline_cost * 0.5 * value_error.pow(2).mean()
    entropy = -entropy_cost * policy_entropy(target_logits).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = (
            ((ratio - 1).abs() > clip_eps).float().mean()
            if clip_eps is not None
            else torch.zeros((), device=ratio.device)
        )
    return VTraceLoss(
        total=pg + baseline + entropy,
        pg=pg,
        baseline=baseline,
        entropy=entropy,
        approx_kl=approx_kl,
        clip_fraction=clip_fraction,
    )
