"""A peer that sends one huge but finite value (1e30 passes every NaN/inf check) costs one
message, not the run: observation and return statistics screen what they merge
(``seedq.agents.common.moments.screen_outliers``). Against the plain merge (the statistics as
they were before screening) and NumPy: normal data gives the same statistics bit for bit,
garbage leaves them within a small factor of the clean ones, and frames are never touched."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
import torch

from seedq.agents.common import normalize
from seedq.agents.common.moments import (
    OUTLIER_REPORT_EVERY,
    OUTLIER_STDS,
    OUTLIER_WARMUP_ROWS,
    merge_moments,
)
from seedq.agents.common.normalize import RunningNorm, update_obs_norm
from seedq.agents.common.reward_scaler import RewardScaler

GARBAGE = 1e30


def plain_merge(chunks: list[np.ndarray], shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """``(count, mean, var)`` of ``chunks`` merged as they are, as before screening (float
    chunks leave out their rows with a non-finite value, as ``update_obs_norm`` does)."""
    count = torch.zeros((), dtype=torch.float64)
    mean = torch.zeros(shape, dtype=torch.float64)
    var = torch.ones(shape, dtype=torch.float64)
    for chunk in chunks:
        rows = torch.from_numpy(chunk).reshape(-1, *shape)
        valid = torch.isfinite(rows.reshape(len(rows), -1)).all(1)
        count, mean, var = merge_moments(count, mean, var, rows, valid)
    return count.numpy(), mean.numpy(), var.numpy()


def normalised(chunks: list[np.ndarray], shape: tuple[int, ...]) -> RunningNorm:
    norm = RunningNorm(shape)
    for chunk in chunks:
        update_obs_norm(torch.nn.Sequential(norm), chunk[None], threading.Lock())
    return norm


def normal_observations(seed: int) -> np.ndarray:
    """``[3000, 7]`` float32 observations of the kinds real envs give: CartPole-like small
    scales, a large offset, heavy tails, a rare float indicator, a feature constant for the
    first 600 rows (variance 0) that then starts moving, and a tiny scale."""
    rng = np.random.default_rng(seed)
    n = 3000
    obs = np.stack(
        [
            rng.normal(0.0, 0.05, n),  # a pole angle under a random policy
            rng.normal(0.0, 0.5, n) * np.linspace(1.0, 8.0, n),  # grows as the policy learns
            rng.normal(1000.0, 3.0, n),
            rng.standard_t(3, n) * 2.0,
            (rng.random(n) < 1e-3).astype(np.float64),
            np.where(np.arange(n) < 600, 0.0, rng.uniform(-1.5, 1.5, n)),
            rng.normal(0.0, 1e-4, n),
        ],
        axis=1,
    )
    return obs.astype(np.float32)


def split(data: np.ndarray, sizes: tuple[int, ...]) -> list[np.ndarray]:
    return np.split(data, np.cumsum(sizes)[:-1])


@pytest.mark.parametrize("sizes", [(640,) * 4 + (440,), (7, 93, 300, 2600), (3000,)])
def test_normal_observations_give_the_plain_statistics_bit_for_bit(sizes):
    chunks = split(normal_observations(seed=len(sizes)), sizes)

    norm = normalised(chunks, (7,))

    count, mean, var = plain_merge(chunks, (7,))
    assert float(norm.count) == count
    assert np.array_equal(norm.mean.numpy(), mean) and np.array_equal(norm.var.numpy(), var)
    assert norm.outliers.total == 0
    every = np.concatenate(chunks).astype(np.float64)
    np.testing.assert_allclose(norm.mean.numpy(), every.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), every.var(0), rtol=1e-9, atol=1e-15)


def garbage_free(chunks: list[np.ndarray]) -> list[np.ndarray]:
    return [c[~(np.abs(c) >= GARBAGE).any(axis=1)] for c in chunks]


def assert_near_clean(norm: RunningNorm, clean: list[np.ndarray], factor: float) -> None:
    _, mean, var = plain_merge(clean, norm.mean.shape)
    std, clean_std = norm.var.sqrt().numpy(), np.sqrt(var)
    assert np.all(std <= factor * clean_std) and np.all(std >= clean_std / factor)
    assert np.all(np.abs(norm.mean.numpy() - mean) <= 0.1 * clean_std)


def test_one_row_of_1e30_leaves_the_observation_statistics_near_the_clean_ones():
    chunks = split(normal_observations(seed=1)[:, :4], (640,) * 4)
    chunks[2][100] = GARBAGE  # one message, in the middle of a run

    norm = normalised(chunks, (4,))

    assert_near_clean(norm, garbage_free(chunks), factor=1.01)
    assert norm.outliers.total == 4


def test_one_value_1000_stds_out_is_clamped_and_moves_the_std_by_at_most_k_over_root_n():
    """The clamp, not the replacement: what enters is the bound, 100 stds out, and its share
    of the variance is ~OUTLIER_STDS**2 / n."""
    rng = np.random.default_rng(2)
    chunks = [rng.normal(0.0, 1.0, (5000, 1)) for _ in range(2)]
    chunks[1][7] = 1000.0

    norm = normalised(chunks, (1,))

    n = sum(len(c) for c in chunks)
    bound = np.sqrt(1.0 + OUTLIER_STDS**2 / n) * 1.02
    assert 1.2 < float(norm.var.sqrt()) < bound
    assert norm.outliers.total == 1


def test_a_quarter_of_a_batch_of_garbage_leaves_the_statistics_near_the_clean_ones():
    """A peer of 8 envs among 24 sends 1e30 for a whole unroll."""
    chunks = split(normal_observations(seed=3)[:, :4], (640,) * 4)
    chunks[1][:160] = GARBAGE

    norm = normalised(chunks, (4,))

    assert_near_clean(norm, garbage_free(chunks), factor=1.15)


@pytest.mark.parametrize("rows", [[5], list(range(0, 640, 4))])
def test_garbage_in_the_very_first_batch_is_screened_by_that_batch_median(rows):
    """Before OUTLIER_WARMUP_ROWS rows the running statistics screen nothing: the batch's own
    median and MAD do, which garbage in under half of its rows does not move."""
    chunks = split(normal_observations(seed=4)[:, :4], (640,) * 3)
    chunks[0][rows] = GARBAGE

    norm = normalised(chunks, (4,))

    assert_near_clean(norm, garbage_free(chunks), factor=1.15)


def test_a_feature_constant_so_far_that_jumps_by_hundreds_is_followed_within_a_few_merges():
    """A real change, not garbage: a value constant for 600 rows (std 0, a bound of +-2) that
    then sits 300 units away is clamped while the statistics catch up, never replaced by the
    mean (which would leave it unseen, the network's input saturated, for good)."""
    rows = np.zeros((1200, 1), dtype=np.float32)
    rows[600:] = 300.0 + np.random.default_rng(0).normal(0.0, 1.0, (600, 1))
    norm = normalised(list(rows.reshape(20, 60, 1)), (1,))
    assert float(norm.mean[0]) > 100.0  # plain merge: ~150; replaced, it would stay at 0
    assert float(norm.outliers.total) > 0


@pytest.mark.parametrize("shape", [(4, 84, 84), (1, 8, 8)])
def test_uint8_frames_are_merged_as_they_are(shape):
    """Frames are bounded by their dtype; a pixel constant for a long time that then changes
    is normal there (a sprite passing a wall) and must move the statistics as it always did."""
    rng = np.random.default_rng(5)
    chunks = [rng.integers(0, 8, (64, *shape), dtype=np.uint8) for _ in range(6)]
    for chunk in chunks[:5]:
        chunk[:, 0, 0, 0] = 0
    chunks[5][3, 0, 0, 0] = 255

    norm = RunningNorm(shape, initial_std=255.0)
    for chunk in chunks:
        update_obs_norm(torch.nn.Sequential(norm), chunk[None], threading.Lock())

    count = torch.zeros((), dtype=torch.float64)
    mean = torch.zeros(shape, dtype=torch.float64)
    var = torch.full(shape, 255.0**2, dtype=torch.float64)
    for chunk in chunks:
        count, mean, var = merge_moments(count, mean, var, torch.from_numpy(chunk))
    assert torch.equal(norm.mean, mean) and torch.equal(norm.var, var)
    assert norm.outliers.total == 0


def test_screened_values_are_reported_by_one_warning_per_report_period(caplog):
    norm = RunningNorm((2,))
    rng = np.random.default_rng(6)
    with caplog.at_level(logging.WARNING, logger="seedq.agents.common.moments"):
        for i in range(2 * OUTLIER_REPORT_EVERY):
            rows = rng.normal(size=(300, 2))
            if i in (10, 20):
                rows[0] = GARBAGE
            norm.update(rows)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith("4 value(s) more than 100 standard")


# Rewards


def unrolls(seed: int, count: int, T: int = 20, B: int = 32) -> list[tuple[np.ndarray, ...]]:
    """``(reward [T+1, B], done [T+1, B])`` of consecutive unrolls, row 0 repeating the last
    row of the one before; CartPole-like: +1 a step, episodes of ~20-60 steps."""
    rng = np.random.default_rng(seed)
    out, last_r, last_d = [], np.ones(B, np.float32), np.zeros(B, bool)
    for _ in range(count):
        reward = np.vstack([last_r, np.ones((T, B), np.float32)])
        done = np.vstack([last_d, rng.random((T, B)) < 1 / 40])
        out.append((reward, done))
        last_r, last_d = reward[-1], done[-1]
    return out


def plain_scale(
    data: list[tuple[np.ndarray, ...]], gamma: float, env_id: np.ndarray
) -> tuple[list[np.ndarray], tuple[float, ...]]:
    """The scaler as it was before screening, in NumPy: each env's discounted return, merged
    as it is."""
    returns = np.zeros(len(env_id))
    moments = (torch.zeros((), dtype=torch.float64),) * 2 + (torch.ones((), dtype=torch.float64),)
    scaled = []
    for reward, done in data:
        seen = np.empty_like(reward[1:], dtype=np.float64)
        for t in range(1, reward.shape[0]):
            returns = returns * gamma + reward[t]
            seen[t - 1] = returns
            returns = np.where(done[t], 0.0, returns)
        moments = merge_moments(*moments, torch.from_numpy(seen.reshape(-1)))
        std = np.sqrt(float(moments[2]) + 1e-8)
        scaled.append(np.clip(reward.astype(np.float64) / std, -10, 10).astype(np.float32))
    return scaled, tuple(float(m) for m in moments)


@pytest.mark.parametrize("on_device", [False, True])
def test_normal_rewards_are_scaled_exactly_as_before(on_device):
    data, env_id = unrolls(seed=7, count=12), np.arange(100, 132)
    scaler = RewardScaler(0.99)

    got = []
    for reward, done in data:
        if on_device:
            args = (torch.from_numpy(reward), torch.from_numpy(done), torch.from_numpy(env_id))
            got.append(scaler.scale(*args).numpy())
        else:
            got.append(scaler.scale(reward, done, env_id))

    expected, (count, mean, var) = plain_scale(data, 0.99, env_id)
    assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
    assert (scaler.count, scaler.mean, scaler.var) == (count, mean, var)
    assert scaler.outliers.total == 0


def test_once_warmed_up_the_returns_are_run_once_per_unroll(monkeypatch):
    """The unscreened pass only feeds the first batches' median bounds: past
    OUTLIER_WARMUP_ROWS merged rows (counted, or restored from a checkpoint) the bounds are the
    running statistics', and each unroll's returns are accumulated once, not twice."""
    passes = []
    run = RewardScaler._returns_seen
    monkeypatch.setattr(
        RewardScaler, "_returns_seen", lambda self, *a: passes.append(len(a)) or run(self, *a)
    )
    data, env_id = unrolls(seed=7, count=4), np.arange(32)  # 32 x 32 rows each: 1024 rows
    scaler = RewardScaler(0.99)
    for reward, done in data:
        scaler.scale(reward, done, env_id)
    restored = RewardScaler(0.99)
    restored.load_state_dict(scaler.state_dict())
    restored.scale(*data[0], env_id)

    # Host arrays of clean rewards: each unroll's plain pass (3 arguments) stands, none of its
    # returns lying outside the bounds; a screened one (4) only where one does.
    assert passes == [3] * 5
    garbage = [a.copy() for a in data[0]]
    garbage[0][4, 2] = GARBAGE
    restored.scale(*garbage, env_id)
    assert passes[5:] == [3, 4]


def scaled_std(data: list[tuple[np.ndarray, ...]]) -> tuple[float, RewardScaler]:
    scaler, env_id = RewardScaler(0.99), np.arange(32)
    for reward, done in data:
        scaler.scale(reward, done, env_id)
    return np.sqrt(scaler.var), scaler


@pytest.mark.parametrize("unroll", [0, 6])
def test_one_reward_of_1e30_leaves_the_return_statistics_near_the_clean_ones(unroll):
    """In the first unroll (screened by its own median) or later; the env's return is carried
    on screened, not as 0.99**t * 1e30 for thousands of steps."""
    clean_std, _ = scaled_std(unrolls(seed=8, count=12))
    data = unrolls(seed=8, count=12)
    data[unroll][0][5, 3] = GARBAGE

    std, scaler = scaled_std(data)

    assert clean_std / 1.05 < std < 1.05 * clean_std
    assert all(abs(r) < 1e4 for r in scaler._returns.values())


def test_a_peer_whose_every_reward_is_1e30_leaves_the_return_statistics_near_the_clean_ones():
    clean_std, _ = scaled_std(unrolls(seed=9, count=12))
    data = unrolls(seed=9, count=12)
    for unroll in (0, 1, 5):
        data[unroll][0][1:, :8] = GARBAGE

    std, _ = scaled_std(data)

    assert clean_std / 1.3 < std < 1.3 * clean_std


def test_host_batches_skip_the_batch_median_once_trusted_and_merge_as_tensors_do(monkeypatch):
    # The batch's median and MAD were taken on every batch and discarded once the running
    # statistics were trusted; screening a batch with nothing outside changed nothing.
    calls = []
    real = normalize.outlier_bounds
    monkeypatch.setattr(normalize, "outlier_bounds", lambda *a: calls.append(1) or real(*a))
    host, tensors = RunningNorm((3,)), RunningNorm((3,))
    rng = np.random.default_rng(7)
    batches = [rng.normal(size=(100, 3)) for _ in range(8)]
    batches[5][4] = GARBAGE  # after warm-up: screened on both paths
    for batch in batches:
        valid = torch.ones(len(batch), dtype=torch.bool)
        valid[-1] = False  # a row left out, as update_obs_norm leaves out non-finite ones
        host.update(batch, valid)
        tensors.update(torch.from_numpy(batch), valid)
    warmup = -(-OUTLIER_WARMUP_ROWS // 99)  # batches until 256 rows were merged
    assert len(calls) == warmup + len(batches)  # the host's warm-up, every tensor batch
    assert all(torch.equal(a, b) for a, b in zip(host.buffers(), tensors.buffers(), strict=True))
    assert host.outliers.total == tensors.outliers.total == 3
