"""The mechanics every learner's update shares, written once.

Host arrays go to the device (pinned, non-blocking on CUDA); the forward runs under autocast
when ``hardware.amp`` asks for it; the loss is scaled for fp16 (bf16 has fp32's range and needs
no scaler); gradients are unscaled and clipped, and only the optimizer step (the in-place write
to the weights inference reads) is taken under the weights lock, so actors always act with a
whole set of weights. A loss or gradient that is not finite skips the step: the weights stay
the last good ones and the skip is counted. V-trace's and PPO's updates on CUDA skip it on the
device (:meth:`GradientStep.apply_deferred`) and count their skips once a batch, so the host
runs ahead of the GPU instead of waiting for each update to finish. With several learner
ranks (``hardware.learners``), the gradients are averaged across them right after the backward
pass (``Placement.collective``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.optim import optimizer as torch_optimizer

from seedq.core.collective import LearnerCollective
from seedq.core.tensors import amp_autocast, to_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """Where a learner computes and what it shares with inference: the device, the lock around
    in-place weight writes, the autocast dtype (None: fp32), whether uploads are pinned, and
    the other learner ranks of a data-parallel run."""

    device: torch.device
    weights_lock: threading.Lock
    amp_dtype: torch.dtype | None = None
    pin_memory: bool = False
    # The other learner ranks (hardware.learners > 1): gradients are averaged across them.
    collective: LearnerCollective | None = None

    @classmethod
    def cpu(cls) -> Placement:
        """fp32 on the CPU with a lock of its own (tests, tools)."""
        return cls(torch.device("cpu"), threading.Lock())


class GradientStep:
    """Autocast, backward, clip-then-step under the weights lock for one optimizer."""

    def __init__(
        self,
        parameters: Iterable[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        placement: Placement,
        *,
        grad_clip: float,
    ) -> None:
        self.parameters = list(parameters)
        self.optimizer = optimizer
        self.device = device = placement.device
        self.weights_lock = placement.weights_lock
        self.grad_clip = grad_clip
        self.amp_dtype = placement.amp_dtype
        self.collective = placement.collective
        self.pin_memory = placement.pin_memory and device.type == "cuda"
        self.scaler = torch.amp.GradScaler(
            device.type, enabled=placement.amp_dtype == torch.float16
        )
        # Whether a non-finite update is skipped on the device (a fused Adam's found_inf)
        # rather than after a host read of its loss and norm: on CUDA, where that read waits
        # for the GPU to finish the update (on the CPU it costs less than the ops that skip
        # on the device); not with a grad scaler (fp16), which skips its own, nor with several
        # ranks, which agree on the loss on the host.
        self.defers = (
            device.type == "cuda"
            and placement.collective is None
            and not self.scaler.is_enabled()
            and type(optimizer) is torch.optim.Adam
            and bool(optimizer.defaults.get("fused"))
        )

    @classmethod
    def adam(
        cls, parameters: Iterable[torch.nn.Parameter], cfg: Any, placement: Placement
    ) -> GradientStep:
        """An Adam step with ``cfg.lr``, ``cfg.adam_eps`` and ``cfg.grad_clip``."""
        params = list(parameters)
        optimizer = make_adam(params, lr=cfg.lr, eps=cfg.adam_eps)
        return cls(params, optimizer, placement, grad_clip=cfg.grad_clip)

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        return to_device(array, self.device, self.pin_memory)

    def autocast(self, *, cache: bool = True) -> contextlib.AbstractContextManager:
        return amp_autocast(self.device, self.amp_dtype, cache=cache)

    def zero_grad(self) -> None:
        """``optimizer.zero_grad(set_to_none=True)`` for the parameters this step clips and
        steps (every learner's optimizer holds exactly those), without the optimizer's
        profiling hooks and group walk: ~0.2 ms per update on the 2-core box, a twentieth of a
        V-trace minibatch update's host time."""
        for p in self.parameters:
            p.grad = None

    def apply(self, loss: torch.Tensor, after_step: Callable[[], None] | None = None) -> float:
        """Backward ``loss`` and step; returns the gradient norm before clipping (NaN: skipped).

        ``after_step`` runs under the weights lock right after a taken step (e.g. a target
        network copy, so a checkpoint never sees a half-updated pair).
        """
        self.zero_grad()
        self.scaler.scale(loss).backward()
        if self.collective is not None:
            # Averaged before unscaling, the finiteness check and clipping: every rank then
            # clips, steps or skips exactly the same gradients, so the weights stay identical.
            grads = [p.grad for p in self.parameters if p.grad is not None]
            self.collective.average_gradients(grads, math.isfinite(loss.item()))
        self.scaler.unscale_(self.optimizer)
        grad_norm = float(clip_grad_norm(self.parameters, self.grad_clip))
        if self.scaler.is_enabled():
            # fp16: the scaler itself skips steps whose gradients overflowed and lowers its
            # scale; that is normal operation, not a fault.
            with self.weights_lock:
                self.scaler.step(self.optimizer)
                self.scaler.update()
                if after_step is not None:
                    after_step()
            return grad_norm
        if not (math.isfinite(grad_norm) and math.isfinite(loss.item())):
            self.zero_grad()
            return math.nan
        with self.weights_lock:
            optimizer_step(self.optimizer)
            if after_step is not None:
                after_step()
        return grad_norm

    def step_prepared(
        self, loss: torch.Tensor, grad_norm: torch.Tensor, grads: list[torch.Tensor | None]
    ) -> float:
        """Step with gradients an update already computed and clipped (a CUDA graph's,
        :class:`~seedq.agents.common.graphs.GraphedUpdate`): ``grads`` per parameter, in
        :attr:`parameters`' order, and ``grad_norm`` their norm before clipping. One host
        read of the loss and the norm; the step is taken only when both are finite, under the
        weights lock, as :meth:`apply` takes it. Returns the norm (NaN: skipped)."""
        norm, total = torch.stack((grad_norm.float(), loss.detach().float())).tolist()
        if not (math.isfinite(norm) and math.isfinite(total)):
            return math.nan
        # The graph's own gradient tensors: whatever set .grad since (an eager update) must
        # not be what the optimizer reads.
        for param, grad in zip(self.parameters, grads, strict=True):
            param.grad = grad
        with self.weights_lock:
            optimizer_step(self.optimizer)
        return norm

    def apply_deferred(self, loss: torch.Tensor) -> torch.Tensor:
        """:meth:`apply` without a host read: backward, clip, and a step the device skips when
        the loss or the norm is not finite (:attr:`defers`; else :meth:`apply`'s host check).
        Returns the norm before clipping as a 0-dim tensor, NaN where the step was skipped:
        read a batch's norms once (:class:`~seedq.agents.common.onpolicy.LossMeans`), so the
        host does not wait for the device after every update (on a GPU, a stall each time)."""
        if not self.defers:
            return torch.tensor(self.apply(loss))
        self.zero_grad()
        loss.backward()
        return self._step_if_finite(loss, clip_grad_norm(self.parameters, self.grad_clip))

    def step_prepared_deferred(
        self, loss: torch.Tensor, grad_norm: torch.Tensor, grads: list[torch.Tensor | None]
    ) -> torch.Tensor:
        """:meth:`step_prepared` without a host read, as :meth:`apply_deferred`."""
        if not self.defers:
            return torch.tensor(self.step_prepared(loss, grad_norm, grads))
        for param, grad in zip(self.parameters, grads, strict=True):
            param.grad = grad
        return self._step_if_finite(loss, grad_norm)

    def _step_if_finite(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
        norm = grad_norm.detach().float()
        bad = ~(torch.isfinite(norm) & torch.isfinite(loss.detach().float()))
        with self.weights_lock:
            # The kernel leaves weights and moments alone where found_inf is 1, and the step
            # counts are taken back, as for a grad scaler's overflowed step.
            optimizer_step(self.optimizer, found_inf=bad.float())
        return norm.masked_fill(bad, math.nan)


def clip_grad_norm(parameters: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (2-norm) with its operations and so its bits, for
    gradients on one device in one dtype (every learner's): it regroups the tensors by device
    and dtype on each call, ~90 µs of host time against ~60 µs for the five operations."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads or len({(g.device, g.dtype) for g in grads}) > 1:
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def linear_lr(
    optimizer: torch.optim.Optimizer, lr: float, env_steps: int, total: int, start: float = 0.0
) -> None:
    """Set every group's learning rate to ``lr`` held for the first ``start`` share of ``total``
    env steps, then decayed linearly to 0 at ``total`` (times the group's ``lr_scale``, where it
    has one: see ``seedq.agents.common.indicators``). ``start`` 0 decays from the first step."""
    hold = start * total
    fraction = max(0.0, 1.0 - max(0.0, env_steps - hold) / (total - hold))
    for group in optimizer.param_groups:
        group["lr"] = lr * fraction * group.get("lr_scale", 1.0)


def make_adam(
    params: list[torch.nn.Parameter] | list[dict[str, Any]], *, lr: float, eps: float
) -> torch.optim.Adam:
    """Adam over ``params`` (tensors or param groups), with one fused kernel per step where
    torch has one (floating parameters on the CPU or CUDA): the unfused step runs ~10 small
    ops per tensor, a tenth of a V-trace minibatch update's host time with the Atari preset's
    16 updates per batch (issue 34). Same update; the fused kernel rounds differently (~1 ulp)."""
    grouped = bool(params) and isinstance(params[0], dict)
    tensors = [p for group in params for p in group["params"]] if grouped else params
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in tensors)
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=fused)


# A key of each optimizer's param groups that the other optimizers' groups lack: which one
# wrote a saved state (algorithm.optimizer may change between a run and its resume).
OPTIMIZER_MARKS = {"betas": "Adam", "alpha": "RMSprop"}


def optimizer_kind(saved: dict[str, Any]) -> str | None:
    """The class of the optimizer that wrote ``saved`` (a state dict); None if unknown."""
    groups = saved.get("param_groups") or [{}]
    return next((kind for key, kind in OPTIMIZER_MARKS.items() if key in groups[0]), None)


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> bool:
    """Load ``saved`` into ``optimizer`` when the same kind of optimizer wrote it. Another
    kind's state does not fit (its moments and its groups' settings are other ones): the
    optimizer starts afresh, with a warning, and the weights resume as they are. Whether it
    was loaded."""
    there, here = optimizer_kind(saved), type(optimizer).__name__
    if there is not None and there != here:
        log.warning(
            "the checkpoint was trained with %s and this run uses %s (algorithm.optimizer): "
            "the weights resume, the optimizer starts afresh without the checkpoint's moments",
            there,
            here,
        )
        return False
    optimizer.load_state_dict(saved)
    return True


def optimizer_step(optimizer: torch.optim.Optimizer, found_inf: torch.Tensor | None = None) -> None:
    """``optimizer.step()``; a fused Adam's kernel is called directly where it can be.
    ``found_inf`` (a fused Adam only): a 0-dim float tensor on the parameters' device, 1 to
    skip the step on the device (weights, moments and step counts left as they were).

    ``Optimizer.step`` wraps the kernel in profiling, hooks and a regrouping of every tensor
    by device and dtype: ~120 µs of host time per step on the loaded 2-core box against ~50
    for the kernel and the step counts (issue 34, benchmarks/RESULTS.md), at 16 steps per 512
    env steps with the Atari preset.
    The same state, kernel and bits (tests/test_optim.py); every other case (another optimizer,
    unfused, amsgrad, a grad scaler's ``found_inf``, step hooks, a parameter with a gradient
    but no state yet, mixed devices or dtypes) takes ``optimizer.step()``."""
    groups = _direct_adam_groups(optimizer)
    if groups is None:
        if found_inf is None:
            optimizer.step()
            return
        # torch's fused Adam reads a grad scaler's found_inf from the optimizer.
        optimizer.found_inf = found_inf
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
        return
    for group, params, grads, states in groups:
        steps = [state["step"] for state in states]
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params,
            grads,
            [state["exp_avg"] for state in states],
            [state["exp_avg_sq"] for state in states],
            [],
            steps,
            amsgrad=False,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=found_inf,
        )
        if found_inf is not None:
            torch._foreach_sub_(steps, [found_inf] * len(steps))


def _direct_adam_groups(optimizer: torch.optim.Optimizer) -> list[tuple] | None:
    """Per param group ``(group, params, grads, states)`` when ``optimizer`` is a fused Adam
    whose kernel can be called as its own step would call it, else None."""
    if (
        type(optimizer) is not torch.optim.Adam
        or not optimizer.defaults.get("fused")
        or getattr(optimizer, "grad_scale", None) is not None
        or getattr(optimizer, "found_inf", None) is not None
        or optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or getattr(torch_optimizer, "_global_optimizer_pre_hooks", None)
        or getattr(torch_optimizer, "_global_optimizer_post_hooks", None)
    ):
        return None
    groups, where = [], set()
    for group in optimizer.param_groups:
        if (
            group["amsgrad"]
            or group["maximize"]
            or group["differentiable"]
            or group["capturable"]
            or group.get("decoupled_weight_decay", False)
            or any(isinstance(x, torch.Tensor) for x in (group["lr"], *group["betas"]))
        ):
            return None
        # As torch's step: a parameter without a gradient is left alone (a frozen torso).
        params = [p for p in group["params"] if p.grad is not None]
        grads = [p.grad for p in params]
        states = [optimizer.state.get(p) for p in params]
        if any(g.is_sparse for g in grads) or not all(states):
            return None
        where.update((p.device, p.dtype) for p in params)
        if params:
            groups.append((group, params, grads, states))
    return groups if len(where) == 1 else None
