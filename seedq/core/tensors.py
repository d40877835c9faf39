"""Host arrays to the learner's device: zero-copy on CPU, pinned + non-blocking on CUDA."""

from __future__ import annotations

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
