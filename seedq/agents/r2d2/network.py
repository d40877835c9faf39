"""R2D2's network: the shared body with dueling Q heads (Wang et al. 2016)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from torch import Tensor, nn

from seedq.agents.common.models import CoreState, RecurrentBody, body_kwargs
from seedq.agents.common.torsos import orthogonal_


class QOutput(NamedTuple):
    """Q-values for a ``[T, B]`` block of observations (in value-rescaled space)."""

    q: Tensor  # [T, B, A]


class RecurrentQNet(RecurrentBody):
    """Body -> Q-values; dueling: ``Q = V + A - mean_a A``, each head a hidden layer of
    ``head_size`` then linear."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int,
        *,
        dueling: bool = True,
        head_size: int = 512,
        **body: Any,
    ) -> None:
        super().__init__(obs_shape, num_actions, **body)
        self.dueling = dueling

        def head(out: int) -> nn.Sequential:
            hidden = nn.Linear(self.core_out, head_size)
            last = nn.Linear(head_size, out)
            orthogonal_(hidden, math.sqrt(2))
            orthogonal_(last, 1.0)
            return nn.Sequential(hidden, nn.ReLU(), last)

        self.advantage = head(num_actions)
        self.value = head(1) if dueling else None

    def forward(
        self, obs: Tensor, done: Tensor, core_state: CoreState
    ) -> tuple[QOutput, CoreState]:
        """``(QOutput(q [T, B, A]), state after step T-1)``."""
        T, B = obs.shape[0], obs.shape[1]
        features, new_state = self.embed(obs, done, core_state)
        q = self.advantage(features)
        if self.value is not None:
            q = self.value(features) + q - q.mean(-1, keepdim=True)
        return QOutput(q.view(T, B, self.num_actions)), new_state


def build_network(
    obs_shape: tuple[int, ...], num_actions: int, model_cfg: Any, *, channels_last: bool
) -> RecurrentQNet:
    return RecurrentQNet(
        tuple(int(d) for d in obs_shape),
        int(num_actions),
        dueling=bool(model_cfg.dueling),
        head_size=int(model_cfg.head_size),
        **body_kwargs(model_cfg, channels_last),
    )
