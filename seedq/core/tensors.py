"""Host arrays to the learner's device (zero-copy on CPU, pinned + non-blocking on CUDA), and
the autocast a forward pass runs under."""

from __future__ import annotations

import contextlib

import numpy as np
import torch


def to_device(
    array: np.ndarray | torch.Tensor, device: torch.device, pin_memory: bool
) -> torch.Tensor:
    """``array`` as a tensor on ``device``.

    On the CPU the tensor shares the array's memory. On CUDA, with ``pin_memory`` the host
    copy is page-locked first so the transfer is asynchronous (``non_blocking``) and overlaps
    with work already queued on the device. A tensor already there (arch=anakin's unrolls,
    collected on the device) is returned as it is.
    """
    if isinstance(array, torch.Tensor):
        return array.to(device, non_blocking=True)
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cpu":
        return tensor
    if pin_memory:
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def amp_autocast(
    device: torch.device, amp_dtype: torch.dtype | None
) -> contextlib.AbstractContextManager:
    """Autocast to ``amp_dtype`` on ``device`` (``hardware.amp``); nothing when it is None."""
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=amp_dtype)
