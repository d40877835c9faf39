"""R2D2 targets: invertible value rescaling, n-step double-Q targets, sequence priorities.

Reference: Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed Reinforcement
Learning" (R2D2), section 2 and appendix; the value rescaling h is from Pohlen et al. 2018,
"Observe and Look Further", proposition A.2.

Time-major throughout: ``[T+1, B, A]`` for Q-values over observations ``s_0 .. s_T``,
``[T, B]`` for per-transition quantities. Every function accepts torch tensors or NumPy arrays,
returns the same kind it was given, and keeps float64 when given float64.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

ArrayLike = Tensor | np.ndarray


def _to_tensor(x: ArrayLike) -> tuple[Tensor, bool]:
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.asarray(x)), True
    return torch.as_tensor(x), False


def _back(x: Tensor, numpy: bool) -> ArrayLike:
    return x.numpy() if numpy else x


def value_rescale(x: ArrayLike, eps: float = 1e-3) -> ArrayLike:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x.

    ``sqrt(|x| + 1) - 1`` is computed as ``|x| / (sqrt(|x| + 1) + 1)`` so small ``|x|`` loses
    no precision to cancellation.
    """
    t, numpy = _to_tensor(x)
    t = t if t.is_floating_point() else t.to(torch.get_default_dtype())
    a = t.abs()
    return _back(torch.sign(t) * a / (torch.sqrt(a + 1) + 1) + eps * t, numpy)


def inverse_value_rescale(x: ArrayLike, eps: float = 1e-3) -> ArrayLike:
    """h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1).

    The closed form cancels badly in float32 (``sqrt(1 + small) - 1`` and ``u^2 - 1`` with
    ``u`` near 1). With ``s = sqrt((1 + 2 eps)^2 + 4 eps |x|)`` (the same square root) it is
    ``u - 1 = |x| (2 - 4 eps / (1 + 2 eps + s)) / (1 + s)`` and ``h^-1 = sign(x) (u - 1)(u + 1)``:
    no difference of nearly equal numbers anywhere, and eps = 0 gives ``|x| (|x| + 2)``.
    """
    t, numpy = _to_tensor(x)
    t = t if t.is_floating_point() else t.to(torch.get_default_dtype())
    a = t.abs()
    s = torch.sqrt((1 + 2 * eps) ** 2 + 4 * eps * a)
    u_minus_1 = a * (2 - 4 * eps / (1 + 2 * eps + s)) / (1 + s)
    return _back(torch.sign(t) * u_minus_1 * (u_minus_1 + 2), numpy)


def n_step_double_q_targets(
    q_online: ArrayLike,
    q_target: ArrayLike,
    rewards: ArrayLike,
    dones: ArrayLike,
    *,
    gamma: float,
    n: int,
    eps: float = 1e-3,
) -> ArrayLike:
    """Rescaled n-step double-Q targets ``y: [T, B]`` for the transitions of a sequence.

    Args:
        q_online, q_target: ``[T+1, B, A]`` Q-values (in rescaled space) of ``s_0 .. s_T`` from
            the online and target networks; the online network picks ``a* = argmax``, the
            target network evaluates it.
        rewards: ``[T, B]``, ``rewards[t]`` of the transition ``s_t -> s_{t+1}``.
        dones: ``[T, B]``; ``dones[t] = 1`` means no reward after ``t`` and no bootstrap through
            ``s_{t+1}`` count towards the targets of earlier steps (episode end).
        gamma: discount; n: steps; eps: value-rescaling epsilon.

    Near the end of the sequence ``m = min(n, T - t)`` steps are used:

        y_t = h( sum_{k<m} gamma^k r_{t+k} prod_{j<k} (1 - d_{t+j})
                 + gamma^m prod_{j<m} (1 - d_{t+j}) h^-1(q_target[t+m, a*_{t+m}]) )
    """
    qo, numpy = _to_tensor(q_online)
    qt, _ = _to_tensor(q_target)
    r, _ = _to_tensor(rewards)
    d, _ = _to_tensor(dones)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if qo.dim() != 3 or qt.shape != qo.shape:
        raise ValueError(
            f"q_online and q_target must both be [T+1, B, A]; got {tuple(qo.shape)} and "
            f"{tuple(qt.shape)}"
        )
    steps, batch = qo.shape[0] - 1, qo.shape[1]
    if r.shape != (steps, batch) or d.shape != (steps, batch):
        raise ValueError(
            f"rewards and dones must be [T, B] = [{steps}, {batch}] for Q-values over T+1 "
            f"observations; got {tuple(r.shape)} and {tuple(d.shape)}"
        )
    dtype = qt.dtype
    r = r.to(dtype)
    live = 1 - d.to(dtype)  # [T, B]
    best = qo.argmax(-1, keepdim=True)
    bootstrap = inverse_value_rescale(qt.gather(-1, best).squeeze(-1), eps)  # [T+1, B]

    # Accumulate backwards over k for all t at once: the sums are over at most n terms, so
    # this costs n vectorised steps instead of a Python loop over T.
    ret = torch.zeros_like(r)
    alive = torch.ones_like(r)  # prod_{j<k} (1 - d_{t+j})
    discount = torch.ones_like(r)  # gamma^k, capped where the sequence ends
    index = torch.arange(steps, device=r.device)
    for k in range(n):
        inside = (index + k < steps).to(dtype).unsqueeze(-1)  # t + k is a transition
        row = torch.clamp(index + k, max=steps - 1)
        ret = ret + inside * discount * alive * r[row]
        new_alive = alive * torch.where(inside.bool(), live[row], torch.ones_like(live[row]))
        alive = new_alive
        discount = torch.where(inside.bool(), discount * gamma, discount)
    end = torch.clamp(index + n, max=steps)  # t + m
    target = ret + discount * alive * bootstrap[end]
    return _back(value_rescale(target, eps), numpy)


def sequence_priorities(td_errors: ArrayLike, eta: float = 0.9) -> ArrayLike:
    """``[T, B] -> [B]``: eta * max_t |td| + (1 - eta) * mean_t |td| (R2D2 section 2.3)."""
    td, numpy = _to_tensor(td_errors)
    if td.dim() != 2:
        raise ValueError(f"td_errors must be time-major [T, B], got shape {tuple(td.shape)}")
    a = td.abs()
    return _back(eta * a.max(0).values + (1 - eta) * a.mean(0), numpy)
