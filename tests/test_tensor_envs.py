"""Tensor envs (seedq.envs.tensor): step for step against gymnasium, resets, auto-reset, stats."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from seedq.envs.tensor import (
    EpisodeStats,
    TensorEnv,
    TensorEnvBase,
    make_tensor_env,
    tensor_env_ids,
)

ENV_IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"]

# Tensor env against gymnasium: torch's vectorised cos/sin (SLEEF, within 1 ulp) and the libm
# gymnasium calls differ in the last float64 bit on a few inputs (0.04 % to 0.3 % on an AVX2 CPU,
# other inputs on other CPUs), which can move a float32 observation by one rounding. A few float32
# roundings at any magnitude, far below what a wrong term or operation order in the dynamics gives.
OBS_TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}


def _policy(env_id: str, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Actions ``[N]`` that end episodes both ways: random for CartPole; for Acrobot and
    MountainCar a 20 %-random energy-pumping rule, so that they reach their goals."""
    n = obs.shape[0]
    if env_id == "CartPole-v1":
        return rng.integers(0, 2, n)
    if env_id == "Acrobot-v1":
        greedy = np.where(obs[:, 4] > 0, 0, 2)  # torque against the first link's swing
    else:
        greedy = np.where(obs[:, 1] >= 0, 2, 0)  # push the way the car moves
    return np.where(rng.random(n) < 0.2, rng.integers(0, 3, n), greedy)


def _gym_obs(env: gym.Env) -> np.ndarray:
    """The observation of a gymnasium env's current ``unwrapped.state``."""
    if env.spec.id == "Acrobot-v1":
        return env.unwrapped._get_ob()
    return np.array(env.unwrapped.state, dtype=np.float32)


def _sync(gym_env: gym.Env, tensor_env: TensorEnvBase, row: int) -> None:
    gym_env.unwrapped.state = tensor_env.state[row].numpy().copy()


def _run_against_gymnasium(
    env_id: str,
    num_envs: int,
    steps: int,
    max_episode_steps: int | None = None,
    resync_every_step: bool = False,
) -> tuple[int, int]:
    """Step a tensor env and ``num_envs`` gymnasium envs with the same actions from the same
    states, asserting equal outputs on every step (observations within OBS_TOLERANCE). After an
    episode ends, gymnasium's fresh state is overwritten with the tensor env's (the reset draws
    use different generators).

    Returns the numbers of terminated and truncated episodes seen.
    """
    tensor_env = make_tensor_env(env_id, num_envs, seed=1, max_episode_steps=max_episode_steps)
    gym_envs = [gym.make(env_id, max_episode_steps=max_episode_steps) for _ in range(num_envs)]
    for row, gym_env in enumerate(gym_envs):
        gym_env.reset(seed=row)
        _sync(gym_env, tensor_env, row)
    rng = np.random.default_rng(0)
    obs = tensor_env.observe().numpy()
    n_terminated = n_truncated = 0
    for t in range(steps):
        actions = _policy(env_id, obs, rng)
        out = tensor_env.step(torch.from_numpy(actions))
        results = [gym_env.step(int(a)) for gym_env, a in zip(gym_envs, actions, strict=True)]
        gym_obs = np.stack([r[0] for r in results])
        gym_reward = np.array([r[1] for r in results], dtype=np.float32)
        gym_terminated = np.array([r[2] for r in results])
        # seedq's convention: a terminal step is never also a truncation.
        gym_truncated = np.array([r[3] for r in results]) & ~gym_terminated
        where = f"{env_id} step {t}"
        np.testing.assert_allclose(out.final_obs.numpy(), gym_obs, **OBS_TOLERANCE, err_msg=where)
        # Rewards are constants (1, -1, 0) and the flags booleans: exact.
        np.testing.assert_array_equal(out.reward.numpy(), gym_reward, err_msg=where)
        np.testing.assert_array_equal(out.terminated.numpy(), gym_terminated, err_msg=where)
        np.testing.assert_array_equal(out.truncated.numpy(), gym_truncated, err_msg=where)
        done = gym_terminated | gym_truncated
        obs = out.obs.numpy()
        # The same tensor env's rows: exact.
        np.testing.assert_array_equal(obs[~done], out.final_obs.numpy()[~done], err_msg=where)
        for row in np.flatnonzero(done):
            gym_envs[row].reset()
        for row in range(num_envs) if resync_every_step else np.flatnonzero(done):
            _sync(gym_envs[row], tensor_env, row)
        for row in np.flatnonzero(done):
            # The auto-reset observation is the one of the new episode's first state (Acrobot's
            # goes through cos/sin on both sides).
            np.testing.assert_allclose(
                obs[row], _gym_obs(gym_envs[row]), **OBS_TOLERANCE, err_msg=where
            )
        n_terminated += int(gym_terminated.sum())
        n_truncated += int(gym_truncated.sum())
    return n_terminated, n_truncated


@pytest.mark.parametrize(
    ("env_id", "steps", "resync_every_step"),
    [
        # float64 state and gymnasium's operation order: whole episodes stay within a float32
        # rounding of gymnasium's.
        ("CartPole-v1", 600, False),
        ("MountainCar-v0", 600, False),
        # Acrobot is chaotic: a last-bit difference between libm's and torch's cos/sin would grow
        # without bound over an episode, so every transition starts from the tensor env's state.
        ("Acrobot-v1", 400, True),
    ],
)
def test_matches_gymnasium_step_by_step(env_id, steps, resync_every_step):
    n_terminated, n_truncated = _run_against_gymnasium(
        env_id, num_envs=6, steps=steps, resync_every_step=resync_every_step
    )
    assert n_terminated > 10


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_short_time_limit_truncates_like_gymnasium(env_id):
    resync = env_id == "Acrobot-v1"
    n_terminated, n_truncated = _run_against_gymnasium(
        env_id, num_envs=4, steps=60, max_episode_steps=12, resync_every_step=resync
    )
    assert n_truncated >= 12


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_batch_of_one_matches_gymnasium(env_id):
    _run_against_gymnasium(
        env_id, num_envs=1, steps=150, max_episode_steps=40, resync_every_step=True
    )


# Gymnasium's documented reset ranges of the state (low, high) per variable.
RESET_RANGES = {
    "CartPole-v1": [(-0.05, 0.05)] * 4,
    "Acrobot-v1": [(-0.1, 0.1)] * 4,
    "MountainCar-v0": [(-0.6, -0.4), (0.0, 0.0)],
}


def _check_uniform(states: np.ndarray, env_id: str) -> None:
    for column, (low, high) in zip(states.T, RESET_RANGES[env_id], strict=True):
        assert low <= column.min() and column.max() <= high
        if low == high:
            continue
        width = high - low
        n = len(column)
        # Mean and standard deviation of a uniform draw, each within 5 standard errors (the
        # sample std of U(0, w) has standard error w / sqrt(60 n)); both ends are reached.
        assert abs(column.mean() - (low + high) / 2) < 5 * width / math.sqrt(12 * n)
        assert abs(column.std() - width / math.sqrt(12)) < 5 * width / math.sqrt(60 * n)
        assert column.min() < low + 0.02 * width and column.max() > high - 0.02 * width


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_distribution_matches_gymnasium_ranges(env_id):
    env = make_tensor_env(env_id, 50_000, seed=3)
    _check_uniform(env.state.numpy(), env_id)
    gym_env = gym.make(env_id)
    gym_states = []
    for seed in range(500):
        gym_env.reset(seed=seed)
        gym_states.append(np.asarray(gym_env.unwrapped.state, dtype=np.float64))
    _check_uniform(np.stack(gym_states), env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_auto_reset_draws_from_the_reset_distribution(env_id):
    env = make_tensor_env(env_id, 10_000, seed=4, max_episode_steps=1)
    out = env.step(torch.zeros(env.num_envs, dtype=torch.int64))
    assert (out.terminated | out.truncated).all()
    _check_uniform(env.state.numpy(), env_id)
    assert not torch.equal(out.obs, out.final_obs)


def test_large_batch_rows_step_like_a_small_batch():
    big = make_tensor_env("CartPole-v1", 50_000, seed=5)
    rows = torch.tensor([0, 31_337, 49_999])
    small = make_tensor_env("CartPole-v1", len(rows), seed=6)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        small.state = big.state[rows].clone()
        actions = torch.randint(0, 2, (big.num_envs,), generator=generator)
        big_out = big.step(actions)
        small_out = small.step(actions[rows])
        # Exact: the step is elementwise, and torch's elementwise kernels give a row the same
        # result whatever the batch size or the row's place in a vector.
        assert torch.equal(small_out.final_obs, big_out.final_obs[rows])
        assert torch.equal(small_out.terminated, big_out.terminated[rows])
        assert torch.equal(small_out.truncated, big_out.truncated[rows])


def test_outputs_have_the_documented_shapes_and_dtypes():
    for env_id in tensor_env_ids():
        env = make_tensor_env(env_id, 7, seed=0)
        assert isinstance(env, TensorEnv)
        out = env.step(torch.zeros(7, dtype=torch.int32))
        assert out.obs.shape == out.final_obs.shape == (7, *env.obs_shape)
        assert out.obs.dtype == env.obs_dtype == torch.float32
        assert out.reward.shape == (7,) and out.reward.dtype == torch.float32
        assert out.terminated.dtype == out.truncated.dtype == torch.bool
        assert out.obs.device == env.device == torch.device("cpu")


def test_episode_stats_accumulate_on_device_and_drain_once():
    env = make_tensor_env("CartPole-v1", 64, seed=7, max_episode_steps=30)
    generator = torch.Generator().manual_seed(1)
    returns, lengths = [], []
    for _ in range(200):
        before_return, before_length = env.episode_return.clone(), env.episode_length.clone()
        out = env.step(torch.randint(0, 2, (64,), generator=generator))
        done = out.terminated | out.truncated
        returns += (before_return + out.reward)[done].tolist()
        lengths += (before_length + 1)[done].tolist()
    stats = env.drain_episode_stats()
    assert stats == EpisodeStats(
        count=len(returns),
        return_mean=pytest.approx(np.mean(returns)),
        return_min=min(returns),
        return_max=max(returns),
        length_mean=pytest.approx(np.mean(lengths)),
    )
    assert stats.return_max == 30  # the time limit was hit
    assert env.drain_episode_stats().count == 0


def test_same_seed_reproduces_and_reset_reseeds():
    def trajectory(env):
        generator = torch.Generator().manual_seed(2)
        return torch.stack(
            [env.step(torch.randint(0, 3, (16,), generator=generator)).obs for _ in range(100)]
        )

    first = make_tensor_env("MountainCar-v0", 16, seed=11, max_episode_steps=50)
    reference = trajectory(first)
    # Exact: the same seed runs the same operations on the same machine.
    assert torch.equal(
        trajectory(make_tensor_env("MountainCar-v0", 16, seed=11, max_episode_steps=50)), reference
    )
    first.reset(seed=11)
    assert torch.equal(trajectory(first), reference)
    other = make_tensor_env("MountainCar-v0", 16, seed=12, max_episode_steps=50)
    assert not torch.equal(trajectory(other), reference)


def test_float32_state_stays_close_to_float64():
    exact = make_tensor_env("CartPole-v1", 256, seed=8, max_episode_steps=1000)
    fast = make_tensor_env("CartPole-v1", 256, seed=8, dtype=torch.float32)
    generator = torch.Generator().manual_seed(3)
    for _ in range(10):
        fast.state = exact.state.to(torch.float32)  # reset draws differ between the dtypes
        actions = torch.randint(0, 2, (256,), generator=generator)
        error = fast.step(actions).final_obs - exact.step(actions).final_obs
        assert error.abs().max() < 1e-5


def test_unknown_env_id_names_the_tensor_envs():
    with pytest.raises(ValueError, match="CartPole-v1") as info:
        make_tensor_env("CartPole-v0", 4)
    assert all(env_id in str(info.value) for env_id in ENV_IDS)
    assert tensor_env_ids() == sorted(ENV_IDS)


@pytest.mark.parametrize(
    ("kwargs", "actions", "match"),
    [
        ({"num_envs": 0}, None, "num_envs"),
        ({"num_envs": 4, "max_episode_steps": 0}, None, "max_episode_steps"),
        ({"num_envs": 4, "dtype": torch.int32}, None, "dtype"),
        ({"num_envs": 4}, torch.zeros(5, dtype=torch.int64), r"shape \[num_envs\] = \[4\]"),
        ({"num_envs": 4}, torch.zeros(4), "integer"),
    ],
)
def test_bad_arguments_are_rejected_with_the_reason(kwargs, actions, match):
    with pytest.raises(ValueError, match=match):
        make_tensor_env("Acrobot-v1", **kwargs).step(actions)


class Corridor(TensorEnvBase):
    """The module docstring's example: a user-defined simulator on the protocol."""

    env_id = "Corridor"
    obs_shape = (1,)
    num_actions = 2
    state_size = 1
    default_max_episode_steps = 50

    def _initial_state(self, n: int) -> torch.Tensor:
        return torch.zeros(n, 1, dtype=self.dtype, device=self.device)

    def _transition(self, state, actions):
        position = (state[:, 0] + 2 * actions.to(self.dtype) - 1).clamp(min=0)
        at_end = position >= 9
        return position[:, None], at_end.to(torch.float32), at_end

    def _observation(self, state):
        return (state / 9).to(torch.float32)


def test_a_user_simulator_gets_auto_reset_and_time_limit():
    env = Corridor(num_envs=2, max_episode_steps=12)
    outs = [env.step(torch.tensor([1, 0])) for _ in range(12)]
    assert outs[8].terminated.tolist() == [True, False]
    assert outs[8].final_obs[0, 0] == 1.0 and outs[8].obs[0, 0] == 0.0  # 9 / 9 and 0 / 9: exact
    assert outs[11].truncated.tolist() == [False, True]
    assert isinstance(env, TensorEnv)
