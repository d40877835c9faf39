"""The mechanics every learner's update shares, written once.

Host arrays go to the device (pinned, non-blocking on CUDA); the forward runs under autocast
when ``hardware.amp`` asks for it; the loss is scaled for fp16 (bf16 has fp32's range and needs
no scaler); gradients are unscaled and clipped, and only the optimizer step (the in-place write
to the weights inference reads) is taken under the weights lock, so actors always act with a
whole set of weights. A loss or gradient that is not finite skips the step: the weights stay
the last good ones and the skip is counted.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterable

import numpy as np
import torch

from seedq.learner.tensors import to_device


class GradientStep:
    """Autocast, backward, clip-then-step under the weights lock for one optimizer."""

    def __init__(
        self,
        parameters: Iterable[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        weights_lock: threading.Lock,
        *,
        grad_clip: float,
        amp_dtype: torch.dtype | None = None,
        pin_memory: bool = False,
    ) -> None:
        self.parameters = list(parameters)
        self.optimizer = optimizer
        self.device = device
        self.weights_lock = weights_lock
        self.grad_clip = grad_clip
        self.amp_dtype = amp_dtype
        self.pin_memory = pin_memory and device.type == "cuda"
        self.scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        return to_device(array, self.device, self.pin_memory)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def apply(self, loss: torch.Tensor, after_step: Callable[[], None] | None = None) -> float:
        """Backward ``loss`` and step; returns the gradient norm before clipping (NaN: skipped).

        ``after_step`` runs under the weights lock right after a taken step (e.g. a target
        network copy, so a checkpoint never sees a half-updated pair).
        """
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, self.grad_clip))
        if self.scaler.is_enabled():
            # fp16: the scaler itself skips steps whose gradients overflowed and lowers its
            # scale; that is normal operation, not a fault.
            with self.weights_lock:
                self.scaler.step(self.optimizer)
                self.scaler.update()
                if after_step is not None:
                    after_step()
            return grad_norm
        if not (math.isfinite(grad_norm) and math.isfinite(float(loss.detach()))):
            self.optimizer.zero_grad(set_to_none=True)
            return math.nan
        with self.weights_lock:
            self.optimizer.step()
            if after_step is not None:
                after_step()
        return grad_norm
