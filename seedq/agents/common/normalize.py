"""Observation normalisation, in the model: :class:`RunningNorm` lives inside the network
(``RecurrentBody``), its count, mean and variance are buffers, so checkpoints,
``seedq.load_policy`` and ``seedq-eval`` carry and apply it with no extra code.

Its statistics change only in :func:`update_obs_norm`, which the learner calls *after* an
update with the observations of the batch it just trained on, under the weights lock. So acting
and training always see the same statistics: a batch is trained on with exactly the statistics
it was collected with (inference never updates them), and inference never sees a half-written
mean/variance pair. They are merged and screened as ``seedq.agents.common.moments`` says, as
tensor code wherever the data is.
"""

from __future__ import annotations

import threading

import numpy as np
import torch
from torch import Tensor, nn

from seedq.agents.common.moments import (
    FRAME_ELEMENTS,
    OUTLIER_WARMUP_ROWS,
    OutlierCounter,
    as_tensor,
    merge_moments,
    outlier_bounds,
    running_bounds,
    screen_outliers,
)
from seedq.core.collective import LearnerCollective
from seedq.core.tensors import BufferDerived

# Frames (FRAME_ELEMENTS values or more a row) update the statistics from a strided subset of
# at most this many rows.
FRAME_ROWS = 64


class RunningNorm(nn.Module):
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)`` with running statistics (buffers).

    Bool observations (one-hots of a ``Discrete`` space, binary flags) are indicators already
    in ``[0, 1]``: they pass as 0/1 floats and never change the statistics. Standardising them
    is what cannot help: an indicator seen with frequency ``p`` has std ``sqrt(p (1 - p))``, so
    a rare state's unit would be scaled up to ``1/sqrt(p)`` (an unseen one to the clip) and
    every state's input would drift as the visit frequencies change.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        *,
        clip: float = 10.0,
        eps: float = 1e-8,
        initial_std: float = 1.0,
    ) -> None:
        """``initial_std``: the scale before the first update (255 for uint8 frames, so that
        an untrained normaliser maps pixels to ``[0, 1]`` as the conv torsos expect)."""
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.full(shape, initial_std**2, dtype=torch.float64))
        self._affine_cache = BufferDerived()  # float32 (mean, 1 / std)
        self.outliers = OutlierCounter("the observation statistics")

    def forward(self, x: Tensor) -> Tensor:
        """``[N, *shape]`` -> float32 ``[N, *shape]``; the identity until the first update
        and for bool inputs."""
        if x.dtype == torch.bool:
            return x.float()
        if x.dtype == torch.float64:
            x = x.float()
        mean, scale = self._affine()
        # One new tensor and three passes over it: a batch of 528 Pong frames (60 MB as
        # float32) took 99 ms of CPU as x.float(), -, / and clamp, each a fresh tensor (and
        # fresh pages), and takes 61 ms so (benchmarks/running_norm_forward.py); uint8 frames
        # are promoted by the subtraction.
        return torch.sub(x, mean).mul_(scale).clamp_(-self.clip, self.clip)

    def _affine(self) -> tuple[Tensor, Tensor]:
        """float32 ``(mean, 1 / sqrt(var + eps))``, recomputed only when the statistics change."""
        return self._affine_cache.get(
            (self.mean, self.var),
            lambda: (self.mean.float(), torch.rsqrt(self.var.float() + self.eps)),
        )

    @torch.no_grad()
    def update(
        self, batch: np.ndarray | Tensor, valid: Tensor | None = None, *, host: bool | None = None
    ) -> None:
        """Merge the rows of ``batch [N, *shape]`` (those where ``valid [N]``, if given); bool
        batches are left out (see the class). Float values far outside the statistics are
        screened first (:func:`screen_outliers`); frames (``FRAME_ELEMENTS`` values or more)
        and integer observations are merged as they are. ``host``: the batch came as a host
        array (default: ``batch`` is not a tensor), whose merge may read values on the host;
        a tensor's never does (Anakin's device-resident unrolls)."""
        rows = as_tensor(batch, self.mean.device).reshape(-1, *self.mean.shape)
        if rows.dtype == torch.bool:
            return
        if valid is None and self.mean.numel() >= FRAME_ELEMENTS and len(rows) > FRAME_ROWS:
            # Pixel statistics settle within a few batches; a strided subset keeps the update
            # cheap beside the training step it follows.
            rows = rows[:: -(-len(rows) // FRAME_ROWS)]
        if rows.is_floating_point() and self.mean.numel() < FRAME_ELEMENTS and len(rows):
            # On the host, once the statistics are trusted, the bounds need no batch median
            # (two sorts of a sample), and screening changes nothing unless a value lies
            # outside them: the plain merge stands when none does (one host read). A device's
            # statistics are never read: its batches are screened as they come.
            if host is None:
                host = not isinstance(batch, Tensor)
            on_host = host and self.count.device.type == "cpu"
            if on_host and valid is not None and bool(valid.all()):
                valid = None  # every row counts: the unweighted merge, ~0.3 ms a batch less
            if on_host and float(self.count) >= OUTLIER_WARMUP_ROWS:
                bounds = running_bounds(self.mean, self.var)
                outside = (rows - bounds[0].to(rows.dtype)).abs() > bounds[1].to(rows.dtype)
                if valid is not None:
                    outside &= valid.view(-1, *([1] * (rows.dim() - 1)))
                screened = None
                if bool(outside.any()):
                    rows, screened = screen_outliers(rows, *bounds, valid)
                self.outliers.add(screened)
            else:
                bounds = outlier_bounds(self.count, self.mean, self.var, rows, valid)
                rows, screened = screen_outliers(rows, *bounds, valid)
                self.outliers.add(screened)
        count, mean, var = merge_moments(self.count, self.mean, self.var, rows, valid)
        self.count.copy_(count)
        self.mean.copy_(mean)
        self.var.copy_(var)


def obs_norms(model: nn.Module) -> list[RunningNorm]:
    return [m for m in model.modules() if isinstance(m, RunningNorm)]


def update_obs_norm(
    model: nn.Module,
    obs: np.ndarray | Tensor,
    weights_lock: threading.Lock,
    collective: LearnerCollective | None = None,
) -> None:
    """Merge ``obs [T, B, *obs_shape]`` (host array or device tensor) into every observation
    normaliser of ``model``.

    Call after the update on this batch; under the weights lock so inference never acts with
    a half-written pair. Models without a normaliser pay nothing. Rows with a non-finite
    value are left out: one NaN observation would otherwise poison the statistics for good.
    With several learner ranks (``collective``), every rank merges the rows of all ranks' batches
    in rank order, so the statistics stay identical everywhere.
    """
    norms = obs_norms(model)
    if not norms:
        return
    host = not isinstance(obs, Tensor)
    flat = as_tensor(obs, norms[0].mean.device)
    flat = flat.reshape(-1, *flat.shape[2:])
    if collective is not None:
        flat = collective.gather_rows(flat)
    valid = None
    if flat.is_floating_point():
        valid = torch.isfinite(flat.reshape(len(flat), -1)).all(dim=1)
    with weights_lock:
        for norm in norms:
            norm.update(flat, valid, host=host)
