"""What a learner's update needs from the other learner ranks of a data-parallel run.

With ``hardware.learners=N`` every rank trains its own copy of the networks on its own data;
the copies stay bit-identical because every rank takes the same updates with the same averaged
gradients (``seedq.parallel`` implements this protocol over torch.distributed). A run of one
learner passes no collective (None) and nothing here is called. The protocol sits below the
agents and the runtime, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from torch import Tensor


class LearnerCollective(Protocol):
    world_size: int

    def next_turn(self, ready: bool, stopping: bool) -> tuple[bool, bool]:
        """One round of the training threads' lockstep: ``(all ranks ready, any rank
        stopping)``. A rank is ready when it holds a batch to train on; an update is taken only
        in a round where every rank is ready, so every rank takes the same number of updates
        (and of the collectives inside them)."""
        ...

    def average_gradients(self, grads: Sequence[Tensor], finite: bool) -> None:
        """Replace each gradient by its mean over the ranks, in place. ``finite``: this rank's
        loss was finite; when it was not, the mean is NaN on every rank, so every rank skips
        the step together."""
        ...

    def gather_rows(self, rows: Tensor) -> Tensor:
        """``rows [N, ...]`` of every rank, concatenated in rank order ``[world_size * N, ...]``
        (the observations an update merges into the normalisation statistics)."""
        ...
