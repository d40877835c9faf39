"""V-trace's network: the shared body with policy-logits and baseline heads."""

from __future__ import annotations

from typing import Any, NamedTuple

from torch import Tensor, nn

from seedq.agents.common.models import CoreState, RecurrentBody, body_kwargs
from seedq.agents.common.torsos import orthogonal_
from seedq.agents.common.value_norm import ValueNorm
from seedq.agents.config import POLICY_INIT_GAIN, model_policy_init_gain


class AgentOutput(NamedTuple):
    """Network outputs for a ``[T, B]`` block of observations."""

    logits: Tensor  # [T, B, A] unnormalised policy logits
    baseline: Tensor  # [T, B] state-value estimate


class ActorCriticNet(RecurrentBody):
    """Body -> policy logits and baseline heads. Arguments as :class:`RecurrentBody`;
    ``value_norm``: the baseline head learns standardised targets (PopArt, ``ValueNorm``) and
    its outputs are mapped back to return units here."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int,
        *,
        policy_init_gain: float = POLICY_INIT_GAIN,
        value_norm: bool = False,
        **body: Any,
    ) -> None:
        super().__init__(obs_shape, num_actions, **body)
        self.policy = nn.Linear(self.core_out, num_actions)
        self.baseline = nn.Linear(self.core_out, 1)
        # A near-uniform initial policy (policy_init_gain) and a unit-scale value head.
        orthogonal_(self.policy, policy_init_gain)
        orthogonal_(self.baseline, 1.0)
        # Only when asked for: its buffers are part of the checkpoint's weights.
        self.value_norm = ValueNorm() if value_norm else None

    def popart(self) -> tuple[ValueNorm, nn.Linear] | None:
        """The PopArt normaliser and the head it rescales (None without ``value_norm``)."""
        return None if self.value_norm is None else (self.value_norm, self.baseline)

    def forward(
        self, obs: Tensor, done: Tensor, core_state: CoreState
    ) -> tuple[AgentOutput, CoreState]:
        """``(AgentOutput(logits [T, B, A], baseline [T, B]), state after step T-1)``."""
        T, B = obs.shape[0], obs.shape[1]
        features, new_state = self.embed(obs, done, core_state)
        logits = self.policy(features).view(T, B, self.num_actions)
        baseline = self.baseline(features).view(T, B)
        if self.value_norm is not None:
            baseline = self.value_norm(baseline)
        return AgentOutput(logits, baseline), new_state


def build_network(
    obs_shape: tuple[int, ...],
    num_actions: int,
    model_cfg: Any,
    *,
    channels_last: bool,
    value_norm: bool = False,
) -> ActorCriticNet:
    return ActorCriticNet(
        tuple(int(d) for d in obs_shape),
        int(num_actions),
        policy_init_gain=model_policy_init_gain(model_cfg),
        value_norm=value_norm,
        **body_kwargs(model_cfg, channels_last),
    )
