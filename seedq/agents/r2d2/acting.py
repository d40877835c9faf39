"""How R2D2 acts: epsilon-greedy in its Q-values."""

from __future__ import annotations

import torch

from seedq.agents.r2d2.loss import inverse_value_rescale
from seedq.core.agent import Selection


class EpsilonGreedy:
    """Greedy in Q with probability 1 - epsilon (per env), else a uniform action.

    ``epsilon``: float ``[N]`` on the device, or None for greedy actions. The value of a state is
    max_a Q mapped back through the value rescaling.
    """

    def __init__(self, rescale_eps: float) -> None:
        self.rescale_eps = rescale_eps

    def __call__(self, out, epsilon, generator: torch.Generator):  # noqa: ANN001, ANN204
        q = out.q[0].float()
        actions = q.argmax(-1)
        if epsilon is not None:
            device = q.device
            explore = torch.rand(q.shape[0], generator=generator, device=device) < epsilon
            random = torch.randint(q.shape[1], (q.shape[0],), generator=generator, device=device)
            actions = torch.where(explore, random, actions)
        values = inverse_value_rescale(q.max(-1).values, self.rescale_eps)
        return Selection(actions, q, values)
