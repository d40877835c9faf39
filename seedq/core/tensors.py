"""Host arrays to the learner's device (zero-copy on CPU, pinned + non-blocking on CUDA), and
the autocast a forward pass runs under."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

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
    device: torch.device, amp_dtype: torch.dtype | None, *, cache: bool = True
) -> contextlib.AbstractContextManager:
    """Autocast to ``amp_dtype`` on ``device`` (``hardware.amp``); nothing when it is None.
    ``cache=False``: no cache of the weights' low-precision copies, which a CUDA graph must not
    capture (it would replay casts of the weights it was captured with)."""
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=amp_dtype, cache_enabled=cache)


_capture = threading.local()


def capturing() -> bool:
    """Whether this thread is recording an update for a CUDA graph (:func:`recording`): code
    that caches tensors between calls computes them afresh instead, since a graph replays the
    tensors it read at capture, never a cache's later ones."""
    return getattr(_capture, "active", False)


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Mark this thread as recording (:func:`capturing`) for the block's duration."""
    before = capturing()
    _capture.active = True
    try:
        yield
    finally:
        _capture.active = before
