"""V-trace off-policy targets and the IMPALA actor-critic loss.

Reference: Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures", section 4 (eq. 1 and the policy-gradient update that follows it).

Every tensor is time-major: ``[T, B]`` for per-step quantities, ``[T, B, A]`` for logits, and
``[B]`` for the value bootstrapped after the last step of the unroll.
"""

from collections import Counter
from typing import Any, NamedTuple

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

    # The behaviour policy is data recorded by the actors: never differentiate through it.
    # V-trace targets are fixed regression targets and fixed advantage weights (stop-gradient
    # on values and on the importance ratios), as in the paper's update rules of section 4.2.
    with torch.no_grad():
        target_log_probs = action_log_probs(target_logits, actions)
        behaviour_log_probs = action_log_probs(behaviour_logits, actions)
    returns = vtrace_returns(
        target_log_probs - behaviour_log_probs,
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
        actions,
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
    actions: Tensor,
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
    computed as a whole is trained on. ``target_logits [..., A]``; ``actions``,
    ``behaviour_log_probs``, ``values`` and the returns share its leading shape (``[T, B]``,
    or ``[N]`` transitions); means are over all of them. Gradients reach ``target_logits`` and
    ``values`` only.

    One autograd node with its gradient written out (``_ActorCriticLoss``): built from torch
    ops, the terms cost each update dozens of ops forward and of autograd nodes backward, a few
    µs of host time each (a kernel launch each on a GPU) for a few hundred rows. With the
    node, a minibatch update of the Atari preset runs 364 aten ops instead of 496 (issue 34,
    benchmarks/RESULTS.md). Tested against that composition (tests/test_vtrace.py).
    """
    if values.shape != actions.shape or target_logits.shape[:-1] != actions.shape:
        raise ValueError(
            f"target_logits has shape {tuple(target_logits.shape)}, actions "
            f"{tuple(actions.shape)} and values {tuple(values.shape)}; expected logits "
            "[..., A] with actions and values [...] of the same leading shape"
        )
    terms = _ActorCriticLoss.apply(
        target_logits,
        values,
        actions,
        # No gradient reaches these (the node's backward gives them None): not detached.
        behaviour_log_probs,
        returns.pg_advantages,
        returns.vs,
        value_scale,
        (baseline_cost, entropy_cost, clip_eps, normalize_advantages),
    )
    return VTraceLoss(*terms)


class _ActorCriticLoss(torch.autograd.Function):
    """The six terms of :class:`VTraceLoss` in one node; its backward is the gradient of
    ``total``, ``pg``, ``baseline`` and ``entropy`` with respect to the logits and values.

    With z the logits of one row, p = softmax(z), a its action, A its advantage, r the ratio
    pi(a) / mu(a) and H the entropy, over N rows:
    - d log p_a / d z_j = [j = a] - p_j;
    - the policy term -mean(A log p_a) gives d / d log p_a = -A / N; the clipped surrogate
      -mean(min(r A, clip(r) A)) gives -r A / N where r A is the smaller (the clip's gradient
      is 0 outside its range; inside it the two are equal and their halves add to r A);
    - the entropy term -c_H mean(H) gives -c_H / N (-p_j log p_j - p_j H);
    - the value term c_V 0.5 mean(((vs - v) / s)^2) gives -c_V (vs - v) / (s^2 N).
    """

    @staticmethod
    def forward(  # noqa: PLR0913 - the loss's inputs, as actor_critic_loss takes them
        ctx: Any,
        logits: Tensor,
        values: Tensor,
        actions: Tensor,
        anchor: Tensor,
        advantages: Tensor,
        vs: Tensor,
        scale: Tensor | None,
        costs: tuple[float, float, float | None, bool],
    ) -> tuple[Tensor, ...]:
        baseline_cost, entropy_cost, clip_eps, normalize = costs
        log_probs = F.log_softmax(logits, dim=-1)
        probs = log_probs.exp()
        # -p log p, 0 where p = 0 (an impossible action's -inf logit): no 0 * -inf.
        entr = torch.special.entr(probs)
        entropies = entr.sum(-1)
        if actions.dtype != torch.int64:
            actions = actions.long()
        taken = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        if normalize and advantages.numel() > 1:
            std, mean = torch.std_mean(advantages)
            advantages = (advantages - mean) / (std + 1e-8)
        log_ratio = taken - anchor
        ratio = torch.exp(log_ratio)
        if clip_eps is None:
            surrogate = taken * advantages
            pg_weight = advantages  # d surrogate / d log p_a
        else:
            unclipped = ratio * advantages
            surrogate = torch.minimum(
                unclipped, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantages
            )
            # r A where the unclipped term is the smaller (it carries the gradient), else 0.
            pg_weight = torch.where(unclipped <= surrogate, unclipped, 0.0)
        pg = -surrogate.mean()
        value_error = vs - values
        if scale is not None:
            value_error = value_error / scale
        baseline = baseline_cost * 0.5 * value_error.pow(2).mean()
        entropy = -entropy_cost * entropies.mean()
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = (
            ((ratio - 1).abs() > clip_eps).float().mean()
            if clip_eps is not None
            else torch.zeros((), device=ratio.device)
        )
        ctx.mark_non_differentiable(approx_kl, clip_fraction)
        ctx.set_materialize_grads(False)
        ctx.costs = baseline_cost, entropy_cost
        ctx.save_for_backward(probs, entr, entropies, actions, pg_weight, value_error, scale)
        return pg + baseline + entropy, pg, baseline, entropy, approx_kl, clip_fraction

    @staticmethod
    def backward(
        ctx: Any,
        d_total: Tensor | None,
        d_pg: Tensor | None,
        d_baseline: Tensor | None,
        d_entropy: Tensor | None,
        *_: Tensor | None,
    ) -> tuple[Tensor | None, ...]:
        probs, entr, entropies, actions, pg_weight, value_error, scale = ctx.saved_tensors
        baseline_cost, entropy_cost = ctx.costs
        count = value_error.numel()
        d_pg, d_baseline, d_entropy = (
            _sum_grads(d_total, d) for d in (d_pg, d_baseline, d_entropy)
        )
        d_logits = d_values = None
        if ctx.needs_input_grad[0] and (d_pg is not None or d_entropy is not None):
            # d loss / d log p_a per row, then through the log-softmax; the entropy's
            # -c_H / N (entr_j - p_j H) joins as one more multiple of p and of entr.
            d_taken = None if d_pg is None else pg_weight * (d_pg * (-1.0 / count))
            if d_entropy is None:
                d_logits = probs * -d_taken.unsqueeze(-1)
            else:
                k = d_entropy * (-entropy_cost / count)
                per_row = entropies * k if d_taken is None else torch.addcmul(d_taken, entropies, k)
                d_logits = torch.addcmul(entr * k, probs, per_row.unsqueeze(-1), value=-1.0)
            if d_taken is not None:
                d_logits.scatter_add_(-1, actions.unsqueeze(-1), d_taken.unsqueeze(-1))
        if ctx.needs_input_grad[1] and d_baseline is not None:
            error = value_error if scale is None else value_error / scale
            d_values = error * (d_baseline * (-baseline_cost / count))
        return d_logits, d_values, None, None, None, None, None, None


def _sum_grads(d_total: Tensor | None, d_term: Tensor | None) -> Tensor | None:
    """The gradient reaching one term: through ``total`` and through the term itself."""
    if d_term is None:
        return d_total
    return d_term if d_total is None else d_total + d_term
