"""Host arrays to the learner's device (zero-copy on CPU, pinned + non-blocking on CUDA), the
autocast a forward pass runs under, and tensors cached from a module's buffers, never while an
update is recorded for a CUDA graph."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

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


class BufferDerived:
    """Tensors computed from a module's buffers, recomputed only when one of them changes.

    Any write to a buffer (an update, ``load_state_dict``, a rank's broadcast) bumps its
    version, and ``module.to`` replaces it, so the key (the buffers themselves, held so that no
    new tensor can take their place unseen, and their versions) notices each. One tuple is
    swapped in whole, so a thread reading it never pairs one key with another's values.
    """

    def __init__(self) -> None:
        self._entry: tuple[tuple[tuple[torch.Tensor, int], ...], Any] | None = None

    def get(self, buffers: tuple[torch.Tensor, ...], make: Callable[[], Any]) -> Any:  # noqa: ANN401 - what make returns
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
