"""Observation normalisation and reward scaling as tensor code (arch=anakin's unrolls stay on the
device) against the host versions the SEED path runs on NumPy arrays: same statistics, same
scaled rewards, same checkpoint format, and no host read on the observation path."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from seedq.agents.common.normalize import RunningNorm, update_obs_norm
from seedq.agents.common.reward_scaler import RewardScaler

RNG = np.random.default_rng(7)


def unroll_like(T: int = 6, B: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    reward = rng.normal(size=(T + 1, B)).astype(np.float32)
    done = rng.random((T + 1, B)) < 0.2
    return reward, done


def test_device_reward_scaling_matches_the_host_version_unroll_after_unroll():
    host, device = RewardScaler(0.97), RewardScaler(0.97)
    env_id = np.arange(5)
    for seed in range(4):
        reward, done = unroll_like(seed=seed)
        expected = host.scale(reward, done, env_id)
        scaled = device.scale(torch.from_numpy(reward), torch.from_numpy(done), torch.arange(5))
        assert isinstance(scaled, torch.Tensor) and scaled.dtype == torch.float32
        np.testing.assert_allclose(scaled.numpy(), expected, rtol=1e-6)
    assert device.state_dict() == pytest.approx(host.state_dict(), rel=1e-12)


def test_device_reward_scaling_keeps_each_columns_return_when_unrolls_are_split():
    # arch.anakin.minibatches: each call sees an equal share of the env ids.
    whole, split = RewardScaler(0.9), RewardScaler(0.9)
    for seed in range(3):
        reward, done = (torch.from_numpy(a) for a in unroll_like(B=6, seed=seed))
        whole.scale(reward, done, torch.arange(6))
        for cols in (slice(0, 3), slice(3, 6)):
            split.scale(reward[:, cols], done[:, cols], torch.arange(6)[cols])
    torch.testing.assert_close(split._device_returns, whole._device_returns)


def test_a_host_checkpoint_of_the_scaler_restores_into_the_device_version():
    trained = RewardScaler(0.99)
    reward, done = unroll_like()
    trained.scale(reward, done, np.arange(5))
    on_host, on_device = RewardScaler(0.99), RewardScaler(0.99)
    on_host.load_state_dict(trained.state_dict())
    on_device.load_state_dict(trained.state_dict())
    reward2, done2 = unroll_like(seed=1)
    expected = on_host.scale(reward2, done2, np.arange(5))
    got = on_device.scale(torch.from_numpy(reward2), torch.from_numpy(done2), torch.arange(5))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_device_obs_statistics_equal_the_host_ones_and_leave_out_non_finite_rows():
    data = RNG.normal(loc=2.0, scale=[1.0, 4.0, 0.5], size=(5, 8, 3))
    data[1, 2, 0], data[3, 4, 2] = np.nan, np.inf
    host, device = torch.nn.Sequential(RunningNorm((3,))), torch.nn.Sequential(RunningNorm((3,)))
    for chunk in (data[:2], data[2:]):
        update_obs_norm(host, chunk, threading.Lock())
        update_obs_norm(device, torch.from_numpy(chunk).float(), threading.Lock())
    finite = data.reshape(-1, 3)[np.isfinite(data.reshape(-1, 3)).all(axis=1)]
    np.testing.assert_allclose(host[0].mean.numpy(), finite.mean(0), rtol=1e-12)
    # The device saw float32 observations and accumulates in float64: its statistics are those
    # of the float32-rounded data, taken in float64. (NumPy's float32 mean sums in float32, in
    # an order that depends on the CPU's vector width.)
    seen = finite.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(device[0].mean.numpy(), seen.mean(0), rtol=1e-12)
    np.testing.assert_allclose(device[0].var.numpy(), seen.var(0), rtol=1e-10)
    assert device[0].state_dict().keys() == host[0].state_dict().keys()
    assert float(device[0].count) == len(finite)


def test_obs_statistics_of_a_device_batch_need_no_host_read(monkeypatch):
    norm = torch.nn.Sequential(RunningNorm((4,)))
    obs = torch.randn(3, 16, 4)

    def host_read(*args, **kwargs):
        raise AssertionError("host read while merging observation statistics")

    for name in ("item", "tolist", "numpy", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, host_read)
    update_obs_norm(norm, obs, threading.Lock())
    monkeypatch.undo()
    assert float(norm[0].count) == 48


def test_an_all_non_finite_batch_leaves_the_statistics_alone():
    norm = RunningNorm((2,))
    norm.update(np.ones((4, 2)))
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    nan = torch.full((1, 3, 2), float("nan"))
    update_obs_norm(torch.nn.Sequential(norm), nan, threading.Lock())
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())


def test_bool_observations_pass_as_indicators_and_never_change_the_statistics():
    # One-hots of a Discrete space: standardising them would scale a state seen with frequency
    # p up to 1/sqrt(p); they are fed as 0/1 instead.
    norm = RunningNorm((4,))
    norm.update(np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32))
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    one_hots = torch.eye(4, dtype=torch.bool)[torch.tensor([0, 0, 0, 3])]

    update_obs_norm(torch.nn.Sequential(norm), one_hots[None], threading.Lock())

    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())
    torch.testing.assert_close(norm(one_hots), one_hots.float())


def test_uint8_frame_statistics_are_those_of_float64_numpy_over_the_rows_kept():
    """Atari frames: exact pixel moments (float32 sums of integers), merged over batches as a
    float64 pass over every row the update kept (a strided subset of at most 64 per batch)."""
    rng = np.random.default_rng(5)
    norm = RunningNorm((4, 84, 84), initial_std=255.0)
    kept = []
    for rows in (200, 37, 64):
        frames = rng.integers(0, 256, (rows, 4, 84, 84), dtype=np.uint8)
        frames[:, 0, :3, :3] = 17  # constant pixels: variance exactly 0
        norm.update(frames)
        kept.append(frames[:: -(-rows // 64)])
    every = np.concatenate(kept).astype(np.float64)

    assert float(norm.count) == len(every)
    np.testing.assert_allclose(norm.mean.numpy(), every.mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), every.var(0), rtol=1e-9, atol=1e-9)
    assert (norm.var.numpy()[0, :3, :3] == 0).all()
