"""Action distributions over a policy head's parameters, shared by every stochastic agent.

A policy head outputs one parameter vector per step, ``params [..., P]``; that vector is also
what central inference stores as the step's ``behaviour``, so a learner recomputes the
behaviour policy's log-probabilities from the unroll alone (PPO's old log-probs, V-trace's
importance weights, SAC's replayed actions).

* :class:`Categorical`: ``P = A`` logits; actions are integer indices.
* :class:`Gaussian`: ``P = 2 D`` (mean, log-std) of a diagonal Gaussian over ``D`` values.
  Without squashing the sample is sent as is and the env clips it to its bounds (the stored,
  unclipped sample keeps its exact log-probability). With ``squash`` the sample ``u`` goes
  through ``tanh`` and is rescaled to ``[low, high]``:
  ``a = low + (tanh(u) + 1) (high - low) / 2``, so
  ``log p(a) = log N(u) - sum log(1 - tanh(u)^2) - sum log((high - low) / 2)``
  (Haarnoja et al. 2018, "Soft Actor-Critic", appendix C).
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


class Gaussian:
    """Diagonal Gaussian over ``D`` values, optionally tanh-squashed into ``[low, high]``.

    params ``[..., 2 D]``: mean then log-std (clamped to ``[LOG_STD_MIN, LOG_STD_MAX]``);
    actions float ``[..., D]``.
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
            if low is None or high is None or not (low.isfinite().all() and high.isfinite().all()):
                raise ValueError("a squashed Gaussian needs finite action bounds low and high")
            self.center = (high + low) / 2
            self.half_range = (high - low) / 2
            self.log_half_range = float(torch.log(self.half_range).sum())

    def _split(self, params: Tensor) -> tuple[Tensor, Tensor]:
        mean, log_std = params.split(self.dim, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def _to_env(self, u: Tensor) -> Tensor:
        if not self.squash:
            return u
        center, half = self.center.to(u.device), self.half_range.to(u.device)
        return center + torch.tanh(u) * half

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
        log_p = (-0.5 * z.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
        if self.squash:
            # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|.
            log_p = log_p - (2 * (math.log(2.0) - u - F.softplus(-2 * u))).sum(-1)
            log_p = log_p - self.log_half_range
        return log_p

    def log_prob(self, params: Tensor, actions: Tensor) -> Tensor:
        """``[...]`` log pi(a) of env-unit actions ``[..., D]`` (squashed ones inverted)."""
        mean, log_std = self._split(params)
        u = actions
        if self.squash:
            unit = (actions - self.center.to(actions.device)) / self.half_range.to(actions.device)
            # float32 tanh saturates at |u| ~ 9; clamping keeps atanh finite for stored actions.
            u = torch.atanh(unit.clamp(-1 + 1e-6, 1 - 1e-6))
        return self._log_prob_u(mean, log_std, u)

    def entropy(self, params: Tensor) -> Tensor:
        """Entropy of the Gaussian before squashing (the squashed one has no closed form; its
        log-det term is bounded by the rescale, so this is the usual entropy bonus)."""
        _, log_std = self._split(params)
        return (log_std + 0.5 + _HALF_LOG_2PI).sum(-1)


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
