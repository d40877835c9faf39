"""SAC's network: a tanh-squashed Gaussian actor, twin Q critics and the temperature, in one
module so that inference, checkpoints and ``seedq-eval`` handle them as one model.

Internally the policy acts in ``[-1, 1]^D`` (its log-probabilities, the critics' action input
and the target entropy live there, as in the paper's implementation, whose envs are rescaled);
the distribution central inference samples from maps those actions to the env's bounds.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from seedq.agents.common.distributions import ActionDistribution, Gaussian, spec_bounded
from seedq.agents.common.models import CoreState
from seedq.agents.common.normalize import RunningNorm
from seedq.agents.common.policy_head import PolicyHead
from seedq.agents.common.torsos import MLPTorso, orthogonal_
from seedq.agents.config import NORM_CLIP, model_activation, model_norm_clip
from seedq.messages import EnvSpec
from seedq.schema import ConfigError


class SACOutput(NamedTuple):
    """Acting outputs for a ``[T, B]`` block of observations."""

    policy: Tensor  # [T, B, 2 D] mean and log-std of the Gaussian before squashing
    value: Tensor  # [T, B] soft value min_i Q_i(s, a) - alpha log pi(a|s), one sample a ~ pi
    distribution: ActionDistribution  # squashed into the env's bounds


class QNetwork(nn.Module):
    """``[N, obs + D]`` (normalised obs, action in [-1, 1]) -> Q ``[N]``."""

    def __init__(
        self, in_features: int, hidden_sizes: tuple[int, ...], activation: str = "relu"
    ) -> None:
        super().__init__()
        self.torso = MLPTorso(in_features, hidden_sizes, activation)
        self.out = nn.Linear(self.torso.out_size, 1)
        orthogonal_(self.out, 1.0)

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        return self.out(self.torso(torch.cat([obs, action], dim=-1))).squeeze(-1)


class SACNet(nn.Module):
    def __init__(
        self,
        spec: EnvSpec,
        *,
        hidden_sizes: tuple[int, ...],
        obs_norm: bool,
        init_temperature: float,
        activation: str = "relu",
        norm_clip: float = NORM_CLIP,
    ) -> None:
        super().__init__()
        check_spec(spec)
        obs_dim, dim = int(spec.obs_shape[0]), spec.num_actions
        self.obs_norm = RunningNorm((obs_dim,), clip=norm_clip) if obs_norm else None
        self.actor_torso = MLPTorso(obs_dim, hidden_sizes, activation)
        self.policy_head = PolicyHead(
            self.actor_torso.out_size, spec, squash=True, log_std="learned"
        )
        self.critics = nn.ModuleList(
            [QNetwork(obs_dim + dim, hidden_sizes, activation) for _ in range(2)]
        )
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_temperature)))
        self.distribution = self.policy_head.distribution
        ones = torch.ones(dim)
        self.unit = Gaussian(dim, squash=True, low=-ones, high=ones)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> CoreState:
        return ()

    def normalize(self, obs: Tensor) -> Tensor:
        """``[N, obs]`` -> float ``[N, obs]``, through the running statistics when kept."""
        return obs.float() if self.obs_norm is None else self.obs_norm(obs)

    def policy(self, x: Tensor) -> Tensor:
        """Normalised obs ``[N, obs]`` -> Gaussian parameters ``[N, 2 D]``."""
        return self.policy_head(self.actor_torso(x))

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        """Reparameterised actions in ``[-1, 1]`` ``[N, D]`` and their log-probs ``[N]``."""
        return self.unit.rsample(params)

    def q(self, x: Tensor, action: Tensor, critics: nn.ModuleList | None = None) -> Tensor:
        """``[2, N]``: both critics (the online ones, or ``critics``) at (x, action in [-1, 1])."""
        return torch.stack([c(x, action) for c in (critics or self.critics)])

    def to_unit(self, actions: Tensor) -> Tensor:
        """Env-unit actions ``[N, D]`` (as the replay stores them) -> ``[-1, 1]``."""
        dist = self.distribution
        assert isinstance(dist, Gaussian)
        center, half = dist.center.to(actions.device), dist.half_range.to(actions.device)
        return ((actions - center) / half).clamp(-1.0, 1.0)

    def forward(
        self, obs: Tensor, done: Tensor, core_state: CoreState
    ) -> tuple[SACOutput, CoreState]:
        T, B = obs.shape[0], obs.shape[1]
        x = self.normalize(obs.reshape(T * B, -1))
        params = self.policy(x)
        action, log_prob = self.sample(params)
        value = self.q(x, action).min(0).values - self.log_alpha.exp() * log_prob
        return SACOutput(
            params.view(T, B, params.shape[-1]), value.view(T, B), self.distribution
        ), ()


def check_spec(spec: EnvSpec) -> None:
    """Refuse what SAC cannot act in (discrete actions, unbounded or fixed ones, non-vector
    obs) as a config error: the run stops before it starts, naming the alternative."""
    if not spec.continuous:
        raise ConfigError(
            f"algorithm=sac needs continuous (Box) actions; this env has {spec.num_actions} "
            "discrete ones: use algorithm=ppo, vtrace or r2d2"
        )
    if not spec_bounded(spec):
        raise ConfigError(
            "algorithm=sac squashes actions into the env's bounds; this env's Box has infinite "
            "bounds, or bounds so large (1e10 or more: np.finfo(np.float32).max, sys.maxsize) "
            f"that they stand for none (low {spec.action_low}, high {spec.action_high}): use "
            "algorithm=ppo"
        )
    pairs = zip(spec.action_low, spec.action_high, strict=True)
    fixed = [i for i, (lo, hi) in enumerate(pairs) if lo == hi]
    if fixed:
        # Its critics and target entropy see every dimension in [-1, 1]; a fixed one has no
        # such range (log(half_range) = -inf made every log-prob inf or NaN).
        raise ConfigError(
            "algorithm=sac squashes actions into the env's bounds; this env's Box has zero width "
            f"(low == high) in action dimension(s) {fixed}: use algorithm=ppo, which holds them "
            "at their bound"
        )
    if len(spec.obs_shape) != 1:
        raise ConfigError(
            f"algorithm=sac builds MLPs over vector observations; this env's are frames of shape "
            f"{spec.obs_shape}: use algorithm=ppo, whose conv torsos read them"
        )


def build_network(spec: EnvSpec, alg: Any) -> SACNet:
    return SACNet(
        spec,
        hidden_sizes=tuple(int(h) for h in alg.model.hidden_sizes),
        obs_norm=bool(alg.model.obs_norm),
        init_temperature=float(alg.init_temperature),
        activation=model_activation(alg.model),
        norm_clip=model_norm_clip(alg.model),
    )
