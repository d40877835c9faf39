"""Action distributions over a policy head's parameters, shared by every stochastic agent.

A policy head outputs one parameter vector per step, ``params [..., P]``; that vector is also
what central inference stores as the step's ``behaviour``, so a learner recomputes the
behaviour policy's log-probabilities from the unroll alone (PPO's old log-probs, V-trace's
importance weights, SAC's replayed actions).

* :class:`Categorical`: ``P = A`` logits; actions are integer indices.
* :class:`Gaussian`: ``P = 2 D`` (mean, log-std) of a diagonal Gaussian over ``D`` values
  ``u``, each expressed relative to its dimension's bounds: ``a = centre + half_range * u``
  with ``centre = (high + low) / 2`` and ``half_range = (high - low) / 2``, so the policy's
  unit range covers ``[low, high]`` whatever the env's units (a Box of ``[10, 20]`` is not
  explored around 0, where every sample would clip to 10). The env clips ``a`` to its bounds;
  the stored, unclipped action keeps its exact log-probability,
  ``log p(a) = log N(u) - sum log(half_range)``. With ``squash`` ``u`` goes through ``tanh``
  first: ``a = centre + half_range * tanh(u)``, so
  ``log p(a) = log N(u) - sum log(1 - tanh(u)^2) - sum log(half_range)``
  (Haarnoja et al. 2018, "Soft Actor-Critic", appendix C). A dimension with an infinite bound
  (or one beyond ``NO_BOUND``, which stands for none) is not mapped; one of zero width is the
  constant ``low``.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from seedq.messages import EnvSpec

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class ActionDistribution(Protocol):
    num_params: int

    def sample(self, params: Tensor, generator: torch.Generator | None = None) -> Tensor: ...

    def mode(self, params: Tensor) -> Tensor: ...

    def log_prob(self, params: Tensor, actions: Tensor) -> Tensor: ...

    def entropy(self, params: Tensor) -> Tensor: ...


class Categorical:
    """Softmax over ``A`` logits; actions are long ``[...]``."""

    def __init__(self, num_actions: int) -> None:
        self.num_params = num_actions

    def sample(self, params: Tensor, generator: torch.Generator | None = None) -> Tensor:
        # Gumbel-max: one kernel, and our own generator.
        noise = torch.rand(params.shape, generator=generator, device=params.device)
        return torch.argmax(params - torch.log(-torch.log(noise + 1e-20)), -1)

    def mode(self, params: Tensor) -> Tensor:
        return params.argmax(-1)

    def log_prob(self, params: Tensor, actions: Tensor) -> Tensor:
        """``[...]`` log pi(a); params ``[..., A]``, actions ``[...]``."""
        log_probs = F.log_softmax(params, dim=-1)
        return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, params: Tensor) -> Tensor:
        log_probs = F.log_softmax(params, dim=-1)
        probs = log_probs.exp()
        return -(probs * torch.where(probs > 0, log_probs, torch.zeros_like(log_probs))).sum(-1)


# A bound this large stands for none: envs write np.finfo(np.float32).max, sys.maxsize or 1e10
# for an unbounded action. Mapped into such a range, u ~ N(0, 1) became +-inf (3.4e38 * u
# overflows float32: the actors refused every reply) or steps of 1e10 (SAC's rewards -inf).
NO_BOUND = 1e10


def bounded(low: Tensor, high: Tensor) -> Tensor:
    """``[D]`` bool: whether each dimension has both bounds, finite and within ``NO_BOUND``."""
    return (low.abs() < NO_BOUND) & (high.abs() < NO_BOUND)


def spec_bounded(spec: EnvSpec) -> bool:
    """Whether every action dimension of a continuous ``spec`` is :func:`bounded`."""
    low = torch.tensor(spec.action_low, dtype=torch.float64)
    high = torch.tensor(spec.action_high, dtype=torch.float64)
    return bool(len(low)) and bool(bounded(low, high).all())


def unit_to_bounds(low: Tensor, high: Tensor) -> tuple[Tensor, Tensor]:
    """``(centre [D], half_range [D])`` of the map ``a = centre + half_range * x`` that takes
    ``x`` in ``[-1, 1]`` to ``[low, high]``; a dimension without a bound (infinite, or beyond
    ``NO_BOUND``) keeps ``a = x`` (centre 0, half-range 1)."""
    finite = bounded(low, high)
    centre = torch.where(finite, high / 2 + low / 2, torch.zeros_like(low))
    half_range = torch.where(finite, high / 2 - low / 2, torch.ones_like(low))
    return centre, half_range


class Gaussian:
    """Diagonal Gaussian over ``D`` values ``u``, mapped into the env's bounds ``[low, high]``.

    params ``[..., 2 D]``: mean then log-std (clamped to ``[LOG_STD_MIN, LOG_STD_MAX]``) of
    ``u``; actions float ``[..., D]`` in env units, ``a = centre + half_range * f(u)``
    (:func:`unit_to_bounds`) with ``f = tanh`` (``squash``) or the identity. A dimension with an
    infinite bound sends ``u`` as is; one of zero width (``low == high``) sends its bound, a
    constant that adds nothing to log-probabilities or entropy. Without bounds: ``a = u``.
    """

    def __init__(
        self,
        dim: int,
        *,
        squash: bool = False,
        low: Tensor | None = None,
        high: Tensor | None = None,
    ) -> None:
        self.dim = dim
        self.num_params = 2 * dim
        self.squash = squash
        if squash:
            if low is None or high is None or not bounded(low, high).all():
                raise ValueError("a squashed Gaussian needs finite action bounds low and high")
        if low is None or high is None:
            low, high = torch.full((dim,), -math.inf), torch.full((dim,), math.inf)
        self._bound_map = unit_to_bounds(low, high)
        self._on_device: dict[torch.device, tuple[Tensor, Tensor, Tensor]] = {}
        self._varies_on: dict[torch.device, Tensor] = {}
        self.act_in_bound_units(True)

    def act_in_bound_units(self, bound_units: bool) -> None:
        """Map an unsquashed sample into the Box's bounds (True, the default since 2026-12-07)
        or send it in the env's own units, the env clipping it (False: how every continuous
        policy without ``squash`` acted before, kept for checkpoints trained so;
        :class:`~seedq.agents.common.policy_head.PolicyHead` sets it from the checkpoint). A
        squashed sample is always mapped into the bounds."""
        center, half_range = self._bound_map
        if not (bound_units or self.squash):
            center, half_range = torch.zeros_like(center), torch.ones_like(half_range)
        self.center, self.half_range = center, half_range
        constant = half_range == 0
        # A zero-width dimension's log(half_range) is -inf: it is left out of the sums (mask of
        # the dimensions that vary) and inverted with a stand-in scale of 1, which keeps u finite.
        self.varies = None if not constant.any() else ~constant
        self._scale = torch.where(constant, torch.ones_like(half_range), half_range)
        self.log_half_range = float(torch.log(self._scale).sum())
        self._on_device.clear()
        self._varies_on.clear()

    @property
    def maps_to_bounds(self) -> bool:
        """Whether an unsquashed sample is mapped at all (False: sent in the env's units)."""
        return bool((self.center != 0).any() or (self.half_range != 1).any())

    def _split(self, params: Tensor) -> tuple[Tensor, Tensor]:
        mean, log_std = params.split(self.dim, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def _bounds(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """``(centre, half_range, scale)`` on ``device``, copied there once (inference and the
        learner map every batch; a host-to-device copy each time would cost a sync)."""
        if device not in self._on_device:
            host = (self.center, self.half_range, self._scale)
            center, half, scale = (t.to(device) for t in host)
            self._on_device[device] = (center, half, scale)
        return self._on_device[device]

    def _to_env(self, u: Tensor) -> Tensor:
        center, half, _ = self._bounds(u.device)
        return center + (torch.tanh(u) if self.squash else u) * half

    def _to_u(self, actions: Tensor) -> Tensor:
        """The inverse of :meth:`_to_env` (0 in a zero-width dimension)."""
        center, _, scale = self._bounds(actions.device)
        unit = (actions - center) / scale
        if not self.squash:
            return unit
        # float32 tanh saturates at |u| ~ 9; clamping keeps atanh finite for stored actions.
        return torch.atanh(unit.clamp(-1 + 1e-6, 1 - 1e-6))

    def _sum_varying(self, terms: Tensor) -> Tensor:
        """``[..., D]`` -> ``[...]``, summed over the dimensions that are not constant."""
        if self.varies is not None:
            varies = self._varies_on.get(terms.device)
            if varies is None:  # copied once per device, as the bounds are
                varies = self._varies_on[terms.device] = self.varies.to(terms.device)
            terms = torch.where(varies, terms, torch.zeros_like(terms))
        return terms.sum(-1)

    def sample(self, params: Tensor, generator: torch.Generator | None = None) -> Tensor:
        mean, log_std = self._split(params)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        return self._to_env(mean + noise * log_std.exp())

    def rsample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        """A reparameterised sample and its log-prob (gradients reach params; for SAC)."""
        mean, log_std = self._split(params)
        u = mean + torch.randn_like(mean) * log_std.exp()
        return self._to_env(u), self._log_prob_u(mean, log_std, u)

    def mode(self, params: Tensor) -> Tensor:
        return self._to_env(self._split(params)[0])

    def _log_prob_u(self, mean: Tensor, log_std: Tensor, u: Tensor) -> Tensor:
        z = (u - mean) * torch.exp(-log_std)
        terms = -0.5 * z.pow(2) - log_std - _HALF_LOG_2PI
        if self.squash:
            # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|.
            terms = terms - 2 * (math.log(2.0) - u - F.softplus(-2 * u))
        # The affine part's Jacobian: a constant, which cancels in PPO's ratio.
        return self._sum_varying(terms) - self.log_half_range

    def log_prob(self, params: Tensor, actions: Tensor) -> Tensor:
        """``[...]`` log pi(a) of env-unit actions ``[..., D]`` (mapped back to ``u``)."""
        mean, log_std = self._split(params)
        return self._log_prob_u(mean, log_std, self._to_u(actions))

    def entropy(self, params: Tensor) -> Tensor:
        """Entropy of ``u``, before the map: the affine map would add the constant
        ``log_half_range``; the squashed one has no closed form, its log-det bounded by that.
        Either way this is the usual entropy bonus."""
        _, log_std = self._split(params)
        return self._sum_varying(log_std + 0.5 + _HALF_LOG_2PI)


def distribution_for(spec: EnvSpec, *, squash: bool = False) -> ActionDistribution:
    """The policy distribution of ``spec``'s action space."""
    if not spec.continuous:
        return Categorical(spec.num_actions)
    bounds = [torch.tensor(b, dtype=torch.float32) for b in (spec.action_low, spec.action_high)]
    return Gaussian(spec.num_actions, squash=squash, low=bounds[0], high=bounds[1])


def max_entropy(spec: EnvSpec) -> float:
    """A scale for entropy bonuses: log A for discrete actions, D for continuous ones (a unit
    Gaussian per dimension has entropy ~1.42)."""
    return math.log(spec.num_actions) if not spec.continuous else float(spec.num_actions)
