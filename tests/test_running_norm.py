"""``RunningNorm``'s forward against NumPy: ``clip((x - mean) / sqrt(var + eps))`` with the
statistics as they are now, however they last changed (an update, a checkpoint load, a rank's
broadcast written in place, a move to new buffers). The float32 mean and scale are cached
between changes, so each test changes the statistics after a forward has filled that cache."""

from __future__ import annotations

import numpy as np
import torch

from seedq.agents.common.normalize import RunningNorm

RNG = np.random.default_rng(3)


def reference(norm: RunningNorm, x: np.ndarray) -> np.ndarray:
    mean, var = norm.mean.numpy(), norm.var.numpy()
    return np.clip((x.astype(np.float64) - mean) / np.sqrt(var + norm.eps), -norm.clip, norm.clip)


def frames(n: int, static: float = 0.0) -> np.ndarray:
    """uint8 frames ``[n, 2, 6, 6]`` whose first column of pixels never changes when
    ``static`` is 1 (so their variance is 0 and any other value hits the clip)."""
    x = RNG.integers(0, 256, size=(n, 2, 6, 6)).astype(np.uint8)
    if static:
        x[:, :, :, 0] = 87
    return x


def close(norm: RunningNorm, x: np.ndarray) -> bool:
    out = norm(torch.from_numpy(x))
    assert out.dtype == torch.float32 and out.shape == x.shape
    return np.allclose(out.numpy(), reference(norm, x), atol=1e-5)


def test_frames_follow_every_update_of_the_statistics():
    norm = RunningNorm((2, 6, 6), initial_std=255.0)
    x = frames(8)
    assert close(norm, x)  # before any update: pixels / 255
    for _ in range(3):
        norm.update(torch.from_numpy(frames(16, static=1.0)))
        assert close(norm, x) and close(norm, frames(4, static=1.0))
    # A pixel that never changed is 0 when it has its usual value and at the clip otherwise.
    out = norm(torch.from_numpy(x)).numpy()[:, :, :, 0]
    assert np.all((np.abs(out) == norm.clip) | (x[:, :, :, 0] == 87))


def test_a_checkpoint_load_or_an_in_place_write_is_seen_by_the_next_forward():
    norm = RunningNorm((2, 6, 6), initial_std=255.0)
    norm.update(torch.from_numpy(frames(32)))
    x = frames(5)
    before = norm(torch.from_numpy(x)).clone()
    other = RunningNorm((2, 6, 6), initial_std=255.0)
    other.update(torch.from_numpy(frames(32) // 2))
    norm.load_state_dict(other.state_dict())
    assert close(norm, x) and not torch.equal(norm(torch.from_numpy(x)), before)
    with torch.no_grad():  # what a broadcast from rank 0 does to the buffers
        norm.mean.copy_(torch.full_like(norm.mean, 100.0))
        norm.var.fill_(400.0)
    assert close(norm, x)


def test_new_buffers_are_seen_and_float64_and_float_inputs_give_float32():
    norm = RunningNorm((3,))
    norm.update(torch.from_numpy(RNG.normal(5.0, 2.0, size=(50, 3))))
    x = RNG.normal(5.0, 2.0, size=(7, 3))
    assert close(norm, x) and close(norm, x.astype(np.float32))
    norm.mean = torch.full((3,), -1.0, dtype=torch.float64)  # what module.to() does
    norm.var = torch.full((3,), 9.0, dtype=torch.float64)
    assert close(norm, x)
