"""Values in return units from a head that learns standardised ones: :class:`ValueNorm`
(``algorithm.value_norm``, V-trace) is PopArt. The value head learns standardised targets and
the network maps its outputs back to return units; its moving moments are buffers of the
network, updated by the learner before each batch's updates, with the head's weights rewritten
so that no value changes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seedq.core.tensors import BufferDerived


class ValueNorm(nn.Module):
    """PopArt (van Hasselt et al. 2016, "Learning values across many orders of magnitude"):
    the value head learns its targets standardised by moving moments, and its outputs are
    rescaled so the values the rest of the learner sees keep their meaning.

    The network applies ``forward`` to its value head's output, so everything downstream
    (V-trace targets, bootstraps, logged values) sees values in return units, and the loss
    divides the value error by :meth:`std`: the gradient the head receives is that of the
    regression on standardised targets. :meth:`update` moves the moments with each batch's
    targets and, from the second batch on, rewrites the head's weights so that every output is
    the same after it as before ("preserving outputs precisely"): a change of statistics never
    moves a value. The first batch only sets the moments: an untrained head has no values
    worth keeping, and standing near 0 in standard units it starts at the targets' mean.

    The moments are moving averages with a step of ``max(step, 1 / batches seen)``: the plain
    mean of the first ``1 / step`` batches, then a window of about that many, so they follow
    the returns as a policy improves (Pong's move from -1 towards +1 per point) where a
    whole-run average would lag. Buffers, so checkpoints carry them.
    """

    def __init__(self, step: float = 0.01, *, min_std: float = 1e-2) -> None:
        super().__init__()
        if not 0.0 < step <= 1.0:
            raise ValueError(f"step must lie in (0, 1], got {step}")
        self.step, self.min_std = step, min_std
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean_sq", torch.ones((), dtype=torch.float64))
        self._float_cache = BufferDerived()

    def std(self) -> Tensor:
        """float32 ``[]``: the standard deviation the head's outputs are scaled by."""
        return self._float_moments()[0]

    def _float_moments(self) -> tuple[Tensor, Tensor]:
        """float32 ``(std, mean)``, recomputed only when the moments change: ~7 ops a forward
        otherwise, on every inference batch and every minibatch update."""
        return self._float_cache.get(
            (self.mean, self.mean_sq), lambda: (self._std64().float(), self.mean.float())
        )

    def _std64(self) -> Tensor:
        var = self.mean_sq - self.mean * self.mean
        return torch.sqrt(var.clamp(min=self.min_std**2))

    def forward(self, normalised: Tensor) -> Tensor:
        """The head's output ``[...]`` -> values in return units (float32)."""
        std, mean = self._float_moments()
        return normalised.float() * std + mean

    @torch.no_grad()
    def update(self, targets: Tensor, head: nn.Linear) -> None:
        """Move the moments with the finite entries of ``targets`` (any shape, return units)
        and rewrite ``head`` (the linear layer whose output :meth:`forward` takes) so that
        its values are unchanged (from the second batch with targets on; the first leaves it
        as it is). With no finite entry nothing changes. Runs as tensor code
        on the buffers' device: no host read."""
        x = targets.detach().reshape(-1).to(self.mean.device, torch.float64)
        valid = torch.isfinite(x)
        n = valid.sum().to(torch.float64)
        x = torch.where(valid, x, 0.0)
        safe_n = n.clamp(min=1.0)
        count = self.count + (n > 0).to(torch.float64)
        beta = torch.where(n > 0, torch.clamp(1.0 / count.clamp(min=1.0), min=self.step), 0.0)
        # An untrained head's outputs carry nothing to keep: the first targets set the moments
        # and the head stays as initialised (outputs near 0 in standard units, values near
        # the targets' mean). Preserved, a first batch of nearly equal targets would blow the
        # head's weights up by 1 / std and leave its outputs tens of deviations off.
        trained = self.count > 0
        old_mean, old_std = self.mean.clone(), self._std64()
        self.mean.lerp_(x.sum() / safe_n, beta)
        self.mean_sq.lerp_((x * x).sum() / safe_n, beta)
        self.count.copy_(count)
        new_std = self._std64()
        # w' = w sigma / sigma', b' = (sigma b + mu - mu') / sigma': the same outputs.
        scale = torch.where(trained, old_std / new_std, 1.0)
        head.weight.mul_(scale.to(head.weight.dtype))
        bias = (head.bias.to(torch.float64) * old_std + old_mean - self.mean) / new_std
        head.bias.copy_(torch.where(trained, bias, head.bias.to(torch.float64)).to(head.bias.dtype))


def value_norm_of(model: nn.Module) -> ValueNorm | None:
    """The model's :class:`ValueNorm`, or None (compiled wrappers included)."""
    return next((m for m in model.modules() if isinstance(m, ValueNorm)), None)


def popart_of(model: nn.Module) -> tuple[ValueNorm, nn.Linear] | None:
    """The normaliser of the model's PopArt value head and the linear layer whose outputs it
    rescales, from the network that has one (its ``popart()``), or None."""
    for module in model.modules():
        found = getattr(module, "popart", None)
        if callable(found) and (pair := found()) is not None:
            return pair
    return None
