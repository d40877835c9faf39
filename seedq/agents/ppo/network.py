"""PPO's network: policy and value heads on one shared body or on two (cleanrl's layout)."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from seedq.agents.common.distributions import ActionDistribution
from seedq.agents.common.models import CoreState, RecurrentBody, body_kwargs
from seedq.agents.common.policy_head import PolicyHead
from seedq.agents.common.torsos import orthogonal_
from seedq.agents.common.value_norm import ValueNorm
from seedq.agents.config import model_policy_init_gain
from seedq.messages import EnvSpec


class PolicyOutput(NamedTuple):
    """Network outputs for a ``[T, B]`` block of observations."""

    policy: Tensor  # [T, B, P] parameters of ``distribution``
    value: Tensor  # [T, B] state-value estimate
    distribution: ActionDistribution


class PPONet(nn.Module):
    """Body (or bodies) -> :class:`PolicyHead` and a value head.

    The recurrent state is the policy body's state followed by the value body's (two bodies
    with an LSTM: ``(h_pi, c_pi, h_v, c_v)``).
    """

    def __init__(
        self,
        spec: EnvSpec,
        *,
        shared_body: bool,
        head: dict,
        value_norm: bool = False,
        **body: Any,
    ) -> None:
        """``value_norm``: the value head learns standardised returns (PopArt, ``ValueNorm``)
        and its outputs are mapped back to return units here."""
        super().__init__()
        shape = tuple(int(d) for d in spec.obs_shape)
        self.policy_body = RecurrentBody(shape, spec.num_actions, **body)
        self.value_body = None if shared_body else RecurrentBody(shape, 1, **body)
        self.policy_head = PolicyHead(self.policy_body.core_out, spec, **head)
        value_in = (self.value_body or self.policy_body).core_out
        self.value_head = nn.Linear(value_in, 1)
        orthogonal_(self.value_head, 1.0)
        # Only when asked for: its buffers are part of the checkpoint's weights.
        self.value_norm = ValueNorm() if value_norm else None
        self.distribution = self.policy_head.distribution
        self._split = len(self.policy_body.initial_state(0))

    def popart(self) -> tuple[ValueNorm, nn.Linear] | None:
        """The PopArt normaliser and the head it rescales (None without ``value_norm``)."""
        return None if self.value_norm is None else (self.value_norm, self.value_head)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> CoreState:
        state = self.policy_body.initial_state(batch_size, device)
        if self.value_body is not None:
            state = state + self.value_body.initial_state(batch_size, device)
        return state

    def forward(
        self, obs: Tensor, done: Tensor, core_state: CoreState
    ) -> tuple[PolicyOutput, CoreState]:
        T, B = obs.shape[0], obs.shape[1]
        pi_state, v_state = core_state[: self._split], core_state[self._split :]
        features, new_state = self.policy_body.embed(obs, done, pi_state)
        value_features = features
        if self.value_body is not None:
            value_features, v_new = self.value_body.embed(obs, done, v_state)
            new_state = new_state + v_new
        policy = self.policy_head(features)
        policy = policy.view(T, B, policy.shape[-1])  # explicit: B may be 0
        value = self.value_head(value_features).view(T, B)
        if self.value_norm is not None:
            value = self.value_norm(value)
        return PolicyOutput(policy, value, self.distribution), new_state


def build_network(spec: EnvSpec, alg: Any, *, channels_last: bool) -> PPONet:
    head = dict(
        squash=bool(alg.squash),
        log_std=str(alg.log_std),
        init_log_std=float(alg.init_log_std),
        init_gain=model_policy_init_gain(alg.model),
    )
    return PPONet(
        spec,
        shared_body=bool(alg.shared_body),
        head=head,
        value_norm=bool(alg.value_norm),
        **body_kwargs(alg.model, channels_last),
    )
