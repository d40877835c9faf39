"""Stochastic policy heads for any action space, and the selector that samples from them.

Agents with a stochastic policy (PPO now; SAC reuses both) put a :class:`PolicyHead` on their
body's features. It outputs the parameter vector of :func:`seedq.agents.common.distributions.
distribution_for` the env's spec: logits for discrete actions, a Gaussian's mean and log-std
for continuous ones (the log-std either one learned parameter per dimension, independent of
the state, as in PPO's continuous-control setting, or a second linear output, as SAC needs).
The network returns the distribution with its output so the :class:`SampleFromDistribution`
selector needs no spec of its own, and ``seedq-eval`` acts exactly as training did.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor, nn

from seedq.agents.common.distributions import (
    ActionDistribution,
    Gaussian,
    distribution_for,
    spec_bounded,
)
from seedq.agents.common.torsos import orthogonal_
from seedq.agents.config import LOG_STD_KINDS, POLICY_INIT_GAIN
from seedq.core.agent import Selection
from seedq.messages import EnvSpec

log = logging.getLogger(__name__)

# The buffer that says in which units a continuous policy's Gaussian acts: 1, in units of the
# Box's bounds (a = centre + half_range * u, since 2026-12-07); 0, in the env's own units (u sent
# as is). A checkpoint written before the buffer existed lacks it and was trained the old way.
UNITS_BUFFER = "acts_in_bound_units"


class PolicyHead(nn.Module):
    """Features ``[N, F]`` -> distribution parameters ``[N, P]``."""

    def __init__(
        self,
        in_features: int,
        spec: EnvSpec,
        *,
        squash: bool = False,
        log_std: str = "state_independent",
        init_log_std: float = 0.0,
        init_gain: float = POLICY_INIT_GAIN,
    ) -> None:
        super().__init__()
        if log_std not in LOG_STD_KINDS:
            raise ValueError(f"log_std={log_std!r}: choose one of {list(LOG_STD_KINDS)}")
        self.distribution = distribution_for(spec, squash=squash and spec_bounded(spec))
        self.continuous = spec.continuous
        # A small gain (0.01 by default): a near-uniform (or near-zero-mean) initial policy.
        self.out = nn.Linear(in_features, spec.num_actions)
        orthogonal_(self.out, init_gain)
        if self.continuous:
            self.register_buffer(UNITS_BUFFER, torch.ones(()))
        self.log_std_param: nn.Parameter | None = None
        self.log_std_layer: nn.Linear | None = None
        if self.continuous and log_std == "state_independent":
            self.log_std_param = nn.Parameter(torch.full((spec.num_actions,), init_log_std))
        elif self.continuous:
            self.log_std_layer = nn.Linear(in_features, spec.num_actions)
            orthogonal_(self.log_std_layer, 0.01)
            nn.init.constant_(self.log_std_layer.bias, init_log_std)

    def _load_from_state_dict(  # noqa: ANN001, PLR0913 - nn.Module's signature
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ) -> None:
        key = prefix + UNITS_BUFFER
        if self.continuous and key not in state_dict and prefix + "out.weight" in state_dict:
            state_dict[key] = torch.zeros(())  # load_state_dict's own copy of the dict
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )
        units = getattr(self, UNITS_BUFFER, None)
        dist = self.distribution
        if units is None or not isinstance(dist, Gaussian):
            return
        # The buffer alone says how the loaded policy acts: a head that loads a checkpoint of
        # either kind after one of the other acts as the last one was trained.
        dist.act_in_bound_units(True)
        if float(units) == 0:
            if dist.maps_to_bounds and not dist.squash:
                log.warning(
                    "this checkpoint's policy was trained before 2026-12-07, when its Gaussian "
                    "acted in the env's units (clipped to the Box): it goes on acting so; a new "
                    "run's acts in units of the Box's bounds (centre + half-range x sample)"
                )
            dist.act_in_bound_units(False)

    def forward(self, features: Tensor) -> Tensor:
        out = self.out(features)
        if not self.continuous:
            return out
        if self.log_std_param is not None:
            log_std = self.log_std_param.expand_as(out)
        else:
            assert self.log_std_layer is not None
            log_std = self.log_std_layer(features)
        return torch.cat([out, log_std], dim=-1)


class SampleFromDistribution:
    """Sample (or, ``greedy``, take the mode of) the network's action distribution.

    Reads ``out.policy [1, N, P]``, ``out.value [1, N]`` and ``out.distribution``; stores the
    parameters as the step's behaviour.
    """

    def __init__(self, greedy: bool = False) -> None:
        self.greedy = greedy

    def __call__(self, out: Any, epsilon: Any, generator: torch.Generator) -> Selection:
        # epsilon: unused; sampling from the policy is the exploration.
        params = out.policy[0].float()
        dist: ActionDistribution = out.distribution
        actions = dist.mode(params) if self.greedy else dist.sample(params, generator)
        return Selection(actions, params, out.value[0].float())
