"""R2D2 target maths against slow NumPy references written from the papers' equations."""

import numpy as np
import pytest
import torch

from seedq.agents.r2d2.loss import (
    inverse_value_rescale,
    n_step_double_q_targets,
    sequence_priorities,
    value_rescale,
)


def h_ref(x, eps):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + eps * x


def h_inv_ref(x, eps):
    # Pohlen et al. 2018, proposition A.2, evaluated in float64 element by element.
    return np.sign(x) * (((np.sqrt(1 + 4 * eps * (np.abs(x) + 1 + eps)) - 1) / (2 * eps)) ** 2 - 1)


def targets_ref(q_online, q_target, rewards, dones, gamma, n, eps):
    """y_t from the definition, one (t, b) at a time."""
    steps, batch = rewards.shape
    y = np.zeros((steps, batch))
    for b in range(batch):
        for t in range(steps):
            m = min(n, steps - t)
            total, alive = 0.0, 1.0
            for k in range(m):
                total += gamma**k * alive * rewards[t + k, b]
                alive *= 1 - dones[t + k, b]
            a_star = int(np.argmax(q_online[t + m, b]))
            total += gamma**m * alive * h_inv_ref(q_target[t + m, b, a_star], eps)
            y[t, b] = h_ref(total, eps)
    return y


def random_sequence(seed, steps=9, batch=4, actions=3, done_rate=0.2):
    rng = np.random.default_rng(seed)
    q_online = rng.normal(size=(steps + 1, batch, actions)) * 3
    q_target = rng.normal(size=(steps + 1, batch, actions)) * 3
    rewards = rng.normal(size=(steps, batch))
    dones = (rng.random((steps, batch)) < done_rate).astype(np.float64)
    return q_online, q_target, rewards, dones


@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.0])
def test_value_rescale_matches_the_definition(eps):
    x = np.concatenate([np.linspace(-1e4, 1e4, 2001), np.linspace(-2, 2, 401)])
    np.testing.assert_allclose(value_rescale(x, eps), h_ref(x, eps), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eps", [1e-3, 1e-2])
def test_inverse_matches_the_closed_form(eps):
    x = np.linspace(-300, 300, 3001)
    np.testing.assert_allclose(inverse_value_rescale(x, eps), h_inv_ref(x, eps), rtol=1e-9)


def test_inverse_without_eps_is_the_plain_inverse():
    x = np.linspace(-50, 50, 101)
    np.testing.assert_allclose(
        inverse_value_rescale(x, 0.0), np.sign(x) * ((np.abs(x) + 1) ** 2 - 1)
    )


@pytest.mark.parametrize("eps", [1e-3, 1e-2])
def test_float32_round_trip_stays_accurate_up_to_1e4(eps):
    x = np.concatenate(
        [
            np.linspace(-1e4, 1e4, 20001),
            np.geomspace(1e-6, 1e4, 2000),
            -np.geomspace(1e-6, 1e4, 2000),
        ]
    ).astype(np.float32)
    back = inverse_value_rescale(value_rescale(torch.from_numpy(x), eps), eps).numpy()
    error = np.abs(back.astype(np.float64) - x) / np.maximum(np.abs(x), 1.0)
    assert back.dtype == np.float32 and error.max() < 1e-4


def test_float64_in_gives_float64_out_for_numpy_and_torch():
    x = np.linspace(-5, 5, 11)
    assert value_rescale(x).dtype == np.float64
    assert inverse_value_rescale(torch.from_numpy(x)).dtype == torch.float64
    assert value_rescale(torch.ones(3, dtype=torch.float32)).dtype == torch.float32


@pytest.mark.parametrize("n", [1, 3, 5, 20])
@pytest.mark.parametrize("seed", range(4))
def test_n_step_double_q_targets_match_the_reference(n, seed):
    q_online, q_target, rewards, dones = random_sequence(seed)
    got = n_step_double_q_targets(q_online, q_target, rewards, dones, gamma=0.97, n=n, eps=1e-3)
    want = targets_ref(q_online, q_target, rewards, dones, 0.97, n, 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_targets_accept_torch_and_keep_float32():
    q_online, q_target, rewards, dones = (torch.from_numpy(a).float() for a in random_sequence(0))
    got = n_step_double_q_targets(q_online, q_target, rewards, dones, gamma=0.99, n=5)
    want = targets_ref(
        *(a.double().numpy() for a in (q_online, q_target, rewards, dones)), 0.99, 5, 1e-3
    )
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def test_the_online_network_selects_and_the_target_network_evaluates():
    # One step, no reward: y_0 = gamma * Q_target(s_1, argmax Q_online(s_1)) in plain space.
    q_online = np.zeros((2, 1, 2))
    q_online[1, 0] = [0.0, 1.0]
    q_target = np.zeros((2, 1, 2))
    q_target[1, 0] = value_rescale(np.array([5.0, -2.0]), 0.0)  # Q-values are rescaled
    y = n_step_double_q_targets(
        q_online, q_target, np.zeros((1, 1)), np.zeros((1, 1)), gamma=0.5, n=1, eps=0.0
    )
    assert inverse_value_rescale(y, 0.0)[0, 0] == pytest.approx(-1.0)


def test_an_episode_end_stops_rewards_and_bootstrap():
    q = np.full((4, 1, 1), value_rescale(100.0, 0.0))
    rewards = np.array([[1.0], [2.0], [4.0]])
    dones = np.array([[0.0], [1.0], [0.0]])
    y = n_step_double_q_targets(q, q, rewards, dones, gamma=1.0, n=3, eps=0.0)
    # t=0: 1 + 2 then the episode ends; t=1: 2; t=2: 4 + bootstrap 100 from s_3.
    # q is float32 (value_rescale of a Python float): 100 goes through h, h^-1, h and h^-1 again,
    # a few float32 roundings each, whose last bits differ between CPUs (2e-7 seen on Intel).
    np.testing.assert_allclose(inverse_value_rescale(y, 0.0)[:, 0], [3.0, 2.0, 104.0], rtol=1e-5)


def test_bad_shapes_are_refused_naming_the_convention():
    q_online, q_target, rewards, dones = random_sequence(0)
    with pytest.raises(ValueError, match=r"\[T, B\]"):
        n_step_double_q_targets(q_online, q_target, rewards[1:], dones, gamma=0.9, n=2)
    with pytest.raises(ValueError, match="n must be"):
        n_step_double_q_targets(q_online, q_target, rewards, dones, gamma=0.9, n=0)


def test_sequence_priorities_mix_max_and_mean():
    rng = np.random.default_rng(0)
    td = rng.normal(size=(7, 5))
    want = 0.9 * np.abs(td).max(0) + 0.1 * np.abs(td).mean(0)
    np.testing.assert_allclose(sequence_priorities(td, eta=0.9), want, rtol=1e-12)
    np.testing.assert_allclose(
        sequence_priorities(torch.from_numpy(td), eta=0.5).numpy(),
        0.5 * np.abs(td).max(0) + 0.5 * np.abs(td).mean(0),
        rtol=1e-12,
    )


def test_transitions_bootstrap_truncated_ends_from_the_final_value_and_stop_at_terminal():
    from seedq.agents.r2d2.config import R2D2Config
    from seedq.agents.r2d2.sequences import trained_transitions

    # Rows 0..4, burn-in 1: trained transitions 1->2, 2->3, 3->4.
    reward = torch.tensor([[0.0], [1.0], [2.0], [3.0], [4.0]])
    done = torch.tensor([[True], [False], [True], [False], [True]])
    truncated = torch.tensor([[False], [False], [True], [False], [False]])
    final_value = torch.tensor([[0.0], [0.0], [10.0], [0.0], [0.0]])
    cfg = R2D2Config(burn_in=1, gamma=0.5, reward_clip="none")
    rewards, dones = trained_transitions(reward, done, truncated, final_value, cfg)
    # Row 2 was truncated: 2 + 0.5 * V(final obs); row 4 terminated: no bootstrap, reward only.
    # Exact on any CPU: every operand and result is exactly representable, and IEEE arithmetic
    # (fused or not) returns an exact result unrounded.
    assert rewards[:, 0].tolist() == [7.0, 3.0, 4.0]
    assert dones[:, 0].tolist() == [1.0, 0.0, 1.0]


def test_epsilon_greedy_values_map_q_back_through_the_rescaling():
    from seedq.agents.r2d2.acting import EpsilonGreedy
    from seedq.agents.r2d2.network import QOutput

    q = value_rescale(torch.tensor([[[1.0, 7.0], [-3.0, -5.0]]]), 1e-3)
    generator = torch.Generator().manual_seed(0)
    chosen = EpsilonGreedy(1e-3)(QOutput(q), torch.zeros(2), generator)
    assert chosen.actions.tolist() == [1, 0]
    np.testing.assert_allclose(chosen.values.numpy(), [7.0, -3.0], rtol=1e-5)
    explore = EpsilonGreedy(1e-3)(QOutput(q[:, :1].expand(1, 4000, 2)), torch.ones(4000), generator)
    assert 0.4 < explore.actions.float().mean() < 0.6  # epsilon 1: uniform actions
