"""Running normalisation shared by every agent: observations (in the model) and rewards.

Observations. :class:`RunningNorm` lives inside the network (``RecurrentBody``), its count,
mean and variance are buffers, so checkpoints, ``seedq.load_policy`` and ``seedq-eval`` carry and
apply it with no extra code. Its statistics change only in :func:`update_obs_norm`, which the
learner calls *after* an update with the observations of the batch it just trained on, under
the weights lock. So acting and training always see the same statistics: a batch is trained on
with exactly the statistics it was collected with (inference never updates them), and
inference never sees a half-written mean/variance pair.

Rewards. :class:`RewardScaler` divides rewards by the running standard deviation of the
discounted return (the scaling of OpenAI baselines' ``VecNormalize`` and cleanrl's
``NormalizeReward``): advantages and value targets keep a scale near one whatever the env's
reward units, so an entropy bonus and a learning rate mean the same thing on CartPole (+1 a
step) and MountainCar (-1 a step). It runs on the learner over the unrolls it trains on; each
env's running return is kept by global env id.

Values. :class:`ValueNorm` (``algorithm.value_norm``, V-trace) is PopArt: the value head
learns standardised targets and the network maps its outputs back to return units; its moving
moments are buffers of the network, updated by the learner before each batch's updates, with
the head's weights rewritten so that no value changes.

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

Statistics merge by Chan et al.'s parallel algorithm (1979): batches of any sizes give the
same mean and variance as one pass over all samples. Both run as tensor code wherever their
data is: host arrays (the SEED and Sebulba paths) are viewed as CPU tensors, Anakin's
device-resident unrolls stay on the device with no host read (rows are masked, not dropped, so
no shape depends on the data). One implementation, so the statistics and the checkpoint format
are the same on every architecture.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from seedq.core.collective import LearnerCollective
from seedq.core.tensors import capturing

Moments = tuple[Tensor, Tensor, Tensor]  # float64 count [], mean [*shape], var [*shape]

# Observations this large (a frame; 4 x 84 x 84 = 28,224) get float32 batch moments from a
# strided subset of at most FRAME_ROWS rows per update.
FRAME_ELEMENTS = 4096
FRAME_ROWS = 64
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


class BufferDerived:
    """Tensors computed from a module's buffers, recomputed only when one of them changes.

    Any write to a buffer (an update, ``load_state_dict``, a rank's broadcast) bumps its
    version, and ``module.to`` replaces it, so the key (the buffers themselves, held so that no
    new tensor can take their place unseen, and their versions) notices each. One tuple is
    swapped in whole, so a thread reading it never pairs one key with another's values.
    """

    def __init__(self) -> None:
        self._entry: tuple[tuple[tuple[Tensor, int], ...], Any] | None = None

    def get(self, buffers: tuple[Tensor, ...], make: Callable[[], Any]) -> Any:  # noqa: ANN401 - what make returns
        if torch.compiler.is_compiling() or capturing():
            return make()
        entry = self._entry
        if entry is not None and all(
            held is buffer and version == buffer._version
            for (held, version), buffer in zip(entry[0], buffers, strict=True)
        ):
            return entry[1]
        key = tuple((buffer, buffer._version) for buffer in buffers)
        value = make()
        self._entry = (key, value)
        return value


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


class RewardScaler:
    """Rewards divided by the running std of each env's discounted return.

    Host arrays keep each env's running return by global env id (any ids, as actors come and
    go); device tensors keep them in a tensor indexed by env id (Anakin's ids are 0..N-1), so
    the device path never reads a value on the host.

    Returns are screened as they are accumulated (:func:`screen_outliers`): a return far
    outside the statistics is seen, and carried on, as its screened value. Carried on as it
    was, one reward of 1e30 would keep its env's return astronomical for thousands of steps
    (0.99**t * 1e30), each step one more sample to screen; the reward itself is still scaled
    and clipped like any other (one update's worth of harm).
    """

    def __init__(self, gamma: float, *, eps: float = 1e-8, clip: float = 10.0) -> None:
        self.gamma, self.eps, self.clip = gamma, eps, clip
        zero = torch.zeros((), dtype=torch.float64)
        self._moments: Moments = (zero, zero, torch.ones((), dtype=torch.float64))
        self._rows = 0.0  # the count of the moments, kept on the host
        self._returns: dict[int, float] = {}
        self._device_returns: Tensor | None = None
        self.outliers = OutlierCounter("the reward scaler's return statistics")

    @property
    def count(self) -> float:
        return float(self._moments[0])

    @property
    def mean(self) -> float:
        return float(self._moments[1])

    @property
    def var(self) -> float:
        return float(self._moments[2])

    def scale(  # noqa: ANN201 - an array for arrays, a tensor for tensors
        self,
        reward: np.ndarray | Tensor,
        done: np.ndarray | Tensor,
        env_id: np.ndarray | Tensor,
    ):
        """Scaled rewards ``[T+1, B]`` of an unroll (rows as in ``seedq.agents.common.targets``):
        a float32 array for host arrays, a float32 tensor on their device for tensors.

        Row 0 repeats the previous unroll's last row, so only rows ``1..T`` advance the returns;
        row 0 is scaled like the others (its reward is never trained on).
        """
        rewards = as_tensor(reward)
        dones = as_tensor(done).to(rewards.device, torch.bool)
        if isinstance(reward, Tensor):
            index = as_tensor(env_id).to(rewards.device, torch.long)
            start = self._device_table(index)[index]
        else:
            start = torch.tensor(
                [self._returns.get(int(e), 0.0) for e in env_id], dtype=torch.float64
            )
        moments = tuple(m.to(rewards.device) for m in self._moments)
        # The bounds come from the running statistics (how many rows were merged is known here
        # without reading the device), or (the first batches) from these returns as they would
        # be unscreened. Screening changes nothing unless a return lies outside them, so on the
        # host the plain pass stands when none does (one host read, ~8 ops a step fewer); on a
        # device, which is never read, the returns are screened as they are carried on.
        on_host = rewards.device.type == "cpu"
        plain = None
        if on_host or self._rows < OUTLIER_WARMUP_ROWS:
            plain = self._returns_seen(start, rewards, dones)
        if self._rows >= OUTLIER_WARMUP_ROWS:
            bounds = running_bounds(moments[1], moments[2])
        else:
            bounds = outlier_bounds(*moments, plain[0].reshape(-1))
        if on_host and not bool(((plain[0] - bounds[0]).abs() > bounds[1]).any()):
            seen, last, screened = plain
        else:
            seen, last, screened = self._returns_seen(start, rewards, dones, bounds)
        self._rows += seen.numel()
        self.outliers.add(screened)
        if isinstance(reward, Tensor):
            self._device_returns[index] = last
        else:
            for e, r in zip(env_id.tolist(), last.tolist(), strict=True):
                self._returns[int(e)] = r
        self._moments = merge_moments(*moments, seen.reshape(-1))
        var = self._moments[2]
        scaled = (rewards.to(torch.float64) / torch.sqrt(var + self.eps)).clamp(
            -self.clip, self.clip
        )
        scaled = scaled.to(torch.float32)
        return scaled if isinstance(reward, Tensor) else scaled.numpy()

    def _returns_seen(
        self,
        start: Tensor,
        reward: Tensor,
        done: Tensor,
        bounds: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(seen [T, B], last [B], screened [])``: the discounted returns after rows ``1..T``
        of ``reward`` from the running returns ``start [B]``, each screened by ``bounds``
        (``(centre, half_width)``) when given; the returns to carry into the next unroll; how
        many were screened."""
        returns, seen = start, []
        screened = torch.zeros((), dtype=torch.int64, device=start.device)
        for t in range(1, reward.shape[0]):
            # done[t]: obs t starts an episode, so reward[t] ended the previous one.
            returns = returns * self.gamma + reward[t].to(torch.float64)
            if bounds is not None:
                returns, outside = screen_outliers(returns, *bounds)
                screened = screened + outside
            seen.append(returns)
            returns = torch.where(done[t], 0.0, returns)
        return torch.stack(seen), returns, screened

    def _device_table(self, index: Tensor) -> Tensor:
        """The running returns by env id on ``index``'s device, grown to hold its largest id."""
        table = self._device_returns
        # One small host read per unroll (the largest id), beside the loss values the learner
        # reads anyway; the table grows only when a larger env id appears.
        size = int(index.max()) + 1
        if table is None or table.device != index.device or table.numel() < size:
            grown = torch.zeros(size, dtype=torch.float64, device=index.device)
            if table is not None:
                grown[: table.numel()] = table.to(index.device)
            table = grown
        self._device_returns = table
        return table

    def state_dict(self) -> dict:
        return {"count": self.count, "var": self.var, "mean": self.mean}

    def load_state_dict(self, state: dict) -> None:
        self._moments = tuple(
            torch.tensor(float(state[key]), dtype=torch.float64) for key in ("count", "mean", "var")
        )
        self._rows = float(state["count"])
