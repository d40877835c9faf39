"""Running moments, merged safely: the statistics every normaliser of observations or returns
keeps (``seedq.agents.common.normalize``, ``seedq.agents.common.reward_scaler``).

Statistics merge by Chan et al.'s parallel algorithm (1979): batches of any sizes give the
same mean and variance as one pass over all samples. Both run as tensor code wherever their
data is: host arrays (the SEED and Sebulba paths) are viewed as CPU tensors, Anakin's
device-resident unrolls stay on the device with no host read (rows are masked, not dropped, so
no shape depends on the data). One implementation, so the statistics and the checkpoint format
are the same on every architecture.

Faults. The statistics never forget, and a finite value passes every NaN/inf check: one
observation of 1e30 from a faulty peer, merged as it is, left the mean at 1e26 and the variance
at 1e56 for good, every real observation normalised to ~0, and CartPole at return ~22 after 1 M
steps. So float values are screened before they are merged (:func:`outlier_bounds`,
:func:`screen_outliers`): one further than ``OUTLIER_STDS`` standard deviations from the mean
is clamped to that bound, one ``OUTLIER_STDS`` times further still is taken for the mean
itself; until the statistics hold ``OUTLIER_WARMUP_ROWS`` rows, the batch's own median and
robust std stand in for them. Data from a real env never comes near the bound, so a normal
run's statistics are those of the plain merge, bit for bit; frames and integer observations
are left alone (uint8 pixels are bounded by their dtype). Screened values are counted and
reported by a warning. What this does not catch: values inside the bound (a peer that lies
plausibly), and garbage in more than half of one of the first batches.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import Tensor

Moments = tuple[Tensor, Tensor, Tensor]  # float64 count [], mean [*shape], var [*shape]

# Rows this large (a frame; 4 x 84 x 84 = 28,224) get float32 batch moments.
FRAME_ELEMENTS = 4096
# Rows of uint8 frames whose float32 sums of squares stay exact (255**2 * 258 < 2**24).
EXACT_UINT8_ROWS = 258

# Screening (see the module docstring). 100 standard deviations: at most 1/100**2 of any
# distribution lies that far out (Chebyshev); a policy that learns moves its observations
# far less (CartPole's cart position has std 0.07 under a random policy and ends episodes at
# +-2.4, 36 of those stds); and the network sees its input clipped at norm_clip = 10 stds
# anyway, so what lies beyond the bound only ever mattered through the statistics it fed.
OUTLIER_STDS = 100.0
# A std below this counts as this (so the bound is never narrower than +-2 in the data's
# units): a value that has been constant so far (variance 0) may change, and a float 0/1
# indicator never seen at 1 may turn on, without being screened.
OUTLIER_MIN_STD = 0.02
# Running statistics of fewer rows are not trusted to screen by: until then a batch is
# screened by its own median and median absolute deviation (which garbage in under half of
# its rows does not move), so a fault in the very first batch is caught too.
OUTLIER_WARMUP_ROWS = 256
# The batch's median and MAD are taken over at most this many evenly spaced rows: two sorts
# of a 256-row sample cost ~0.1 ms for CartPole's 4 values, one of a whole PPO batch seconds.
OUTLIER_SAMPLE_ROWS = 256
# A value is replaced (not clamped) only this far from the centre at least, in the data's own
# units: a feature constant so far (std 0, a bound of +-2) that starts moving by hundreds is a
# real change, which the clamped values let the statistics follow within a few merges; replaced,
# it would never be seen. A million units from everything seen is no observation nor return.
OUTLIER_REPLACE_MIN = 1e6
# The MAD of a normal distribution times this is its standard deviation.
MAD_TO_STD = 1.4826
# Screened values are read on the host (and reported) once every this many merges.
OUTLIER_REPORT_EVERY = 100

log = logging.getLogger(__name__)


def merge_moments(
    count: Tensor, mean: Tensor, var: Tensor, batch: Tensor, valid: Tensor | None = None
) -> Moments:
    """``(count, mean, var)`` after adding the rows of ``batch [N, *shape]`` where ``valid
    [N]`` (all rows when None); population variance, float64, on ``batch``'s device.

    Rows are weighted, not selected, so nothing here waits for the device.
    """
    if valid is None and batch[0].numel() >= FRAME_ELEMENTS:
        # Frames: float32 batch moments (float64 over [N, 4, 84, 84] costs ~1 s a batch on a
        # CPU); the merge itself stays float64.
        n = torch.tensor(float(batch.shape[0]), dtype=torch.float64, device=batch.device)
        if batch.dtype == torch.uint8 and batch.shape[0] <= EXACT_UINT8_ROWS:
            b_mean, b_var = _uint8_moments(batch)
        else:
            b_var, b_mean = torch.var_mean(batch.to(torch.float32), 0, correction=0)
        return _merge(count, mean, var, n, b_mean.to(torch.float64), b_var.to(torch.float64))
    batch = batch.to(torch.float64)
    weight = torch.ones(batch.shape[0], dtype=torch.float64, device=batch.device)
    if valid is not None:
        weight = valid.to(torch.float64)
        # 0 * NaN is NaN: zero the rows that are left out before summing.
        batch = torch.where(valid.view(-1, *([1] * (batch.dim() - 1))), batch, 0.0)
    w = weight.view(-1, *([1] * (batch.dim() - 1)))
    n = weight.sum()
    safe_n = n.clamp(min=1.0)
    b_mean = (batch * w).sum(0) / safe_n
    b_var = (((batch - b_mean) ** 2) * w).sum(0) / safe_n
    return _merge(count, mean, var, n, b_mean, b_var)


def _uint8_moments(batch: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and population variance (float64) over the rows of a uint8 ``batch [N, *shape]``,
    ``N <= EXACT_UINT8_ROWS``.

    Pixel values and their squares are integers, and so are their float32 sums below 2**24: the
    sums are exact whatever their order, and the moments from them are float64-accurate.
    torch's float32 ``var_mean`` took ~18 ms for 64 Atari frames (a per-element Welford update),
    a third of a batch's host time with the network's compute left out (issue 34); these two
    sums take ~1 ms.
    """
    x = batch.to(torch.float32)
    n = float(batch.shape[0])
    b_mean = x.sum(0).to(torch.float64) / n
    b_var = x.mul_(x).sum(0).to(torch.float64) / n - b_mean * b_mean
    return b_mean, b_var.clamp_(min=0.0)


def _merge(
    count: Tensor, mean: Tensor, var: Tensor, n: Tensor, b_mean: Tensor, b_var: Tensor
) -> Moments:
    """Chan et al.'s merge of ``(count, mean, var)`` with a batch of ``n`` rows' moments."""
    total = count + n
    safe_total = total.clamp(min=1.0)
    delta = b_mean - mean
    new_mean = mean + delta * (n / safe_total)
    m2 = var * count + b_var * n + delta**2 * (count * n / safe_total)
    empty = total == 0
    return (
        total,
        torch.where(empty, mean, new_mean),
        torch.where(empty, var, m2 / safe_total),
    )


def outlier_bounds(
    count: Tensor, mean: Tensor, var: Tensor, batch: Tensor, valid: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``(centre, half_width)``, float64 ``[*shape]``: a value of ``batch [N, *shape]`` (rows
    where ``valid [N]``, when given) further than ``half_width`` from ``centre`` is screened.

    ``centre``: the running mean once ``count >= OUTLIER_WARMUP_ROWS``, the batch's median
    before; ``half_width``: ``OUTLIER_STDS`` times the running std, or the batch's robust std
    (``MAD_TO_STD`` x its median absolute deviation) before, and never narrower than
    ``OUTLIER_STDS * OUTLIER_MIN_STD``. Where no finite bound is known (no valid row in the
    sample, statistics that are not finite), ``half_width`` is inf: nothing is screened.
    Tensor code (no host read), so both are taken and ``count`` picks one.
    """
    sample = batch[:: -(-len(batch) // OUTLIER_SAMPLE_ROWS)].to(torch.float64)
    if valid is not None:
        kept = valid[:: -(-len(batch) // OUTLIER_SAMPLE_ROWS)]
        sample = torch.where(kept.view(-1, *([1] * (sample.dim() - 1))), sample, torch.nan)
    median = sample.nanmedian(0).values
    mad = (sample - median).abs().nanmedian(0).values
    trusted = count >= OUTLIER_WARMUP_ROWS
    centre = torch.where(trusted, mean, median)
    std = torch.where(trusted, var.sqrt(), MAD_TO_STD * mad)
    return _bounds(centre, std)


def running_bounds(mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`outlier_bounds` once ``count >= OUTLIER_WARMUP_ROWS``, when it reads no batch:
    around the running mean, ``OUTLIER_STDS`` running stds wide."""
    return _bounds(mean, var.sqrt())


def _bounds(centre: Tensor, std: Tensor) -> tuple[Tensor, Tensor]:
    half_width = OUTLIER_STDS * std.clamp(min=OUTLIER_MIN_STD)
    known = torch.isfinite(centre) & torch.isfinite(half_width)
    return torch.where(known, centre, 0.0), torch.where(known, half_width, torch.inf)


def screen_outliers(
    batch: Tensor, centre: Tensor, half_width: Tensor, valid: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``batch [N, *shape]`` with each value further than ``half_width`` from ``centre``
    (``[*shape]``) clamped to ``centre +- half_width``, and each value ``OUTLIER_STDS`` times
    further still replaced by ``centre``; and how many values were changed (an int64 tensor
    ``[]``; rows where ``valid [N]`` only, when given).

    A value within the bound comes back unchanged, bit for bit, in ``batch``'s dtype (float32
    observations are screened as float32, half the memory traffic of float64). Clamped, a value
    1,000 std out enters at 100 and adds ~100**2 / N variances; 1e30 sent by a peer of 8 envs
    for a whole unroll (a quarter of a 640-row batch), clamped, would still leave the std ~50
    times too large: what cannot be data takes the centre, and adds nothing.
    """
    c, h = centre.to(batch.dtype), half_width.to(batch.dtype)
    bounded = torch.minimum(torch.maximum(batch, c - h), c + h)
    off = (batch - c).abs()
    screened = torch.where(off > (OUTLIER_STDS * h).clamp(min=OUTLIER_REPLACE_MIN), c, bounded)
    outside = off > h
    if valid is not None:
        outside &= valid.view(-1, *([1] * (batch.dim() - 1)))
    return screened, torch.count_nonzero(outside)


class OutlierCounter:
    """The values screened out of one set of running statistics, counted on their device (no
    host read per merge) and reported by a warning at most once every
    ``OUTLIER_REPORT_EVERY`` merges, when there are new ones."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._screened: Tensor | None = None
        self._merges = 0
        self._reported = 0

    def add(self, screened: Tensor | None) -> None:
        """Count one merge and the values it screened (None: it screened none)."""
        held = self._screened
        if screened is not None:
            self._screened = screened if held is None else held.to(screened.device) + screened
        self._merges += 1
        if self._merges % OUTLIER_REPORT_EVERY == 0:
            self.report()

    @property
    def total(self) -> int:
        """Values screened so far (a host read)."""
        return 0 if self._screened is None else int(self._screened)

    def report(self) -> None:
        total = self.total
        if total > self._reported:
            log.warning(
                "%d value(s) more than %g standard deviations from the mean of %s were clamped "
                "or replaced before merging (%d in all): a peer sent garbage, or the env's "
                "values jumped far beyond anything seen before; the run goes on",
                total - self._reported, OUTLIER_STDS, self.what, total,
            )  # fmt: skip
            self._reported = total


def as_tensor(data: np.ndarray | Tensor, device: torch.device | None = None) -> Tensor:
    """``data`` as a tensor: a host array is viewed (no copy), a tensor is left where it is
    unless ``device`` names another."""
    tensor = data if isinstance(data, Tensor) else torch.from_numpy(np.asarray(data))
    return tensor if device is None else tensor.to(device)
