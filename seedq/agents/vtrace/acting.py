"""How V-trace acts: sample from its softmax policy (or take the argmax for evaluation)."""

from __future__ import annotations

import torch

from seedq.core.agent import Selection


class SampleFromPolicy:
    """Sample from softmax(logits) by Gumbel-max (one kernel, our own generator)."""

    def __init__(self, greedy: bool = False) -> None:
        self.greedy = greedy

    def __call__(self, out, epsilon, generator: torch.Generator) -> Selection:  # noqa: ANN001
        # epsilon: unused; sampling from the policy is V-trace's exploration.
        logits = out.logits[0].float()
        if self.greedy:
            actions = logits.argmax(-1)
        else:
            noise = torch.rand(logits.shape, generator=generator, device=logits.device)
            actions = torch.argmax(logits - torch.log(-torch.log(noise + 1e-20)), -1)
        return Selection(actions, logits, out.baseline[0].float())
