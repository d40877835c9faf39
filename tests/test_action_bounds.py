"""Continuous actions relative to the env's bounds: the Gaussian's ``u`` acts as
``centre + half_range * u`` (``tanh(u)`` when squashed) in each finite-bounded dimension, its
log-probabilities against NumPy references, zero-width dimensions held at their bound, SAC's
refusal of them, and PPO learning a Box whose range excludes 0 through the real path.

Before 2026-12-07 an unsquashed PPO policy was centred at 0 in env units: on ``[10, 20]`` every
sample clipped to 10 and PPO stayed at return -1 for 200 k env steps; a zero-width dimension
made squashed log-probabilities inf or NaN, so every update was skipped.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from test_training import train

from seedq.agents.common.distributions import Gaussian, distribution_for, unit_to_bounds
from seedq.agents.ppo.agent import PPOAgent
from seedq.agents.ppo.config import PPOConfig
from seedq.agents.sac.config import SACConfig
from seedq.agents.sac.network import build_network as build_sac
from seedq.messages import EnvSpec
from seedq.schema import ConfigError

TESTS = str(Path(__file__).parent)
RNG = np.random.default_rng(0)
INF = math.inf


def np_normal_log_pdf(x, mean, std):
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)


def continuous_spec(low, high) -> EnvSpec:
    return EnvSpec((2,), "float32", len(low), "continuous", tuple(low), tuple(high))


def test_unit_to_bounds_maps_finite_dimensions_and_leaves_infinite_ones():
    low = torch.tensor([10.0, -1.0, -INF, 0.0, -3.0e38, 0.0])
    high = torch.tensor([20.0, 1.0, 5.0, 0.0, 3.0e38, 1e9])
    centre, half_range = unit_to_bounds(low, high)
    # float32-max bounds stand for none, as infinite ones do; 1e9 is still a bound.
    torch.testing.assert_close(centre, torch.tensor([15.0, 0.0, 0.0, 0.0, 0.0, 5e8]))
    torch.testing.assert_close(half_range, torch.tensor([5.0, 1.0, 1.0, 0.0, 1.0, 5e8]))


F32_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize("bound", [F32_MAX, float(2**63 - 1), 1e10])
def test_ppo_acts_on_a_box_whose_bounds_stand_for_none_in_env_units(bound):
    # Mapped into [-3.4e38, 3.4e38], u ~ N(0, 1) became +-inf: the actors refused every reply.
    spec = continuous_spec([-bound, -1.0], [bound, 1.0])
    for squash in (False, True):
        model = PPOAgent.build_model(spec, PPOConfig(squash=squash), channels_last=False)
        out, _ = model(torch.zeros(1, 256, 2), torch.zeros(1, 256, dtype=torch.bool), ())
        actions = PPOAgent.make_selector(PPOConfig())(out, None, torch.Generator()).actions
        assert actions.isfinite().all() and actions[:, 0].abs().max() < 10


def test_sac_refuses_a_box_whose_bounds_stand_for_none_at_start():
    spec = continuous_spec([-F32_MAX, -1.0], [F32_MAX, 1.0])
    with pytest.raises(ConfigError, match=r"stand for none .*: use algorithm=ppo"):
        build_sac(spec, SACConfig())


def test_unsquashed_gaussian_acts_and_scores_in_units_of_the_bounds():
    low, high = np.array([10.0, -1.0, -np.inf]), np.array([20.0, 1.0, np.inf])
    dist = Gaussian(3, low=torch.tensor(low), high=torch.tensor(high))
    params = torch.tensor(RNG.normal(size=(6, 6)) * 0.5)
    mean, std = params[:, :3].numpy(), np.exp(params[:, 3:].numpy())
    actions = dist.sample(params, torch.Generator().manual_seed(2))

    centre, half = np.array([15.0, 0.0, 0.0]), np.array([5.0, 1.0, 1.0])
    u = (actions.numpy() - centre) / half
    expected = (np_normal_log_pdf(u, mean, std) - np.log(half)).sum(-1)
    np.testing.assert_allclose(dist.log_prob(params, actions).numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(dist.mode(params).numpy(), centre + half * mean, rtol=1e-12)


def test_unit_bounds_leave_the_gaussian_as_it_was():
    # MuJoCo's [-1, 1]: the map is the identity, so actions and log-probs are those of u.
    ones = torch.ones(2, dtype=torch.float64)
    params = torch.tensor(RNG.normal(size=(5, 4)))
    bounded, plain = Gaussian(2, low=-ones, high=ones), Gaussian(2)
    actions = bounded.sample(params, torch.Generator().manual_seed(3))
    torch.testing.assert_close(actions, plain.sample(params, torch.Generator().manual_seed(3)))
    torch.testing.assert_close(bounded.log_prob(params, actions), plain.log_prob(params, actions))
    torch.testing.assert_close(bounded.entropy(params), plain.entropy(params))


@pytest.mark.parametrize("squash", [False, True])
def test_a_zero_width_dimension_is_its_bound_and_adds_nothing_to_log_probs(squash):
    low, high = torch.tensor([0.5, -1.0]), torch.tensor([0.5, 1.0])
    dist = Gaussian(2, squash=squash, low=low, high=high)
    alone = Gaussian(1, squash=squash, low=low[1:], high=high[1:])
    params = torch.tensor(RNG.normal(size=(5, 4)), dtype=torch.float32, requires_grad=True)
    actions = dist.sample(params, torch.Generator().manual_seed(4))
    log_prob = dist.log_prob(params, actions)
    log_prob.sum().backward()

    assert (actions[:, 0] == 0.5).all()
    one_dim = params.detach()[:, [1, 3]]
    torch.testing.assert_close(log_prob, alone.log_prob(one_dim, actions[:, 1:]))
    torch.testing.assert_close(dist.entropy(params), alone.entropy(one_dim))
    assert params.grad is not None and params.grad.isfinite().all()


def test_ppo_acts_at_the_centre_of_its_bounds_from_the_start_greedy_and_sampled():
    # The selectors seedq-eval's Policy uses (greedy) and central inference uses (sample).
    spec = continuous_spec([10.0], [20.0])
    model = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    out, _ = model(torch.zeros(1, 256, 2), torch.zeros(1, 256, dtype=torch.bool), ())
    generator = torch.Generator().manual_seed(5)
    greedy = PPOAgent.make_selector(PPOConfig(), greedy=True)(out, None, generator).actions
    sampled = PPOAgent.make_selector(PPOConfig())(out, None, generator)

    torch.testing.assert_close(greedy, torch.full((256, 1), 15.0), atol=0.1, rtol=0)
    # log-std 0: u ~ N(0, 1), so a ~ N(15, 5) and most samples land inside [10, 20].
    inside = ((sampled.actions >= 10) & (sampled.actions <= 20)).float().mean()
    assert 0.6 < float(inside) < 0.75
    # The learner scores the stored action under the stored parameters: N(u; 0, 1) / 5.
    u = (sampled.actions[:, 0] - 15.0) / 5.0
    expected = -0.5 * u**2 - 0.5 * math.log(2 * math.pi) - math.log(5.0)
    log_prob = out.distribution.log_prob(sampled.behaviour, sampled.actions)
    torch.testing.assert_close(log_prob, expected, atol=0.01, rtol=0)


def test_a_squashed_ppo_head_on_a_zero_width_dimension_has_finite_log_probs():
    spec = continuous_spec([0.0, -1.0], [0.0, 1.0])
    model = PPOAgent.build_model(spec, PPOConfig(squash=True), channels_last=False)
    out, _ = model(torch.zeros(1, 8, 2), torch.zeros(1, 8, dtype=torch.bool), ())
    selection = PPOAgent.make_selector(PPOConfig())(out, None, torch.Generator().manual_seed(6))
    assert out.distribution.log_prob(selection.behaviour, selection.actions).isfinite().all()


def test_sac_refuses_a_zero_width_action_dimension_at_start():
    spec = continuous_spec([0.0, -1.0], [0.0, 1.0])
    # A ConfigError: seedq-train stops at start-up with the message and exit 2.
    with pytest.raises(ConfigError, match=r"zero width .* dimension\(s\) \[0\]: use algorithm=ppo"):
        build_sac(spec, SACConfig())


def test_sac_refuses_frames_naming_the_algorithm_that_reads_them():
    spec = EnvSpec((3, 16, 16), "uint8", 2, "continuous", (-1.0, -1.0), (1.0, 1.0))
    with pytest.raises(ConfigError, match=r"frames of shape \(3, 16, 16\): use algorithm=ppo"):
        build_sac(spec, SACConfig())


def test_distribution_for_maps_an_unsquashed_box_to_its_bounds():
    dist = distribution_for(continuous_spec([10.0, -2.0], [20.0, 2.0]))
    assert isinstance(dist, Gaussian)
    torch.testing.assert_close(dist.mode(torch.zeros(1, 4)), torch.tensor([[15.0, 0.0]]))


def test_ppo_learns_a_box_whose_range_excludes_zero(tmp_path, monkeypatch):
    # The actor processes import bounded_envs too: this folder on their path.
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", TESTS if not path else f"{TESTS}{os.pathsep}{path}")
    # A policy centred at 15 with log-std 0 starts near -0.63; -0.2 needs its std cut to a
    # third, which Adam's step bounds at the default lr (0.2 nats per 100 k steps here): a
    # constant 0.01 reaches it in ~20 k env steps, ~10 s on a loaded 2-core box (2026-12-07).
    summary = train(
        tmp_path,
        "algorithm=ppo",
        "algorithm.lr=0.01",
        "algorithm.lr_schedule=constant",
        "env=gym",
        "env.id=bounded_envs:Target-v0",
        "stop_at_return=-0.2",
        "total_env_steps=80000",
        "max_minutes=3",
        "log_interval_s=1",
        "actor.num_actors=1",
    )
    # A policy centred at 0 gets -1 on every step, whatever it learns.
    assert summary.stop_reason == "target_return", summary


def test_a_policy_trained_before_the_bounds_map_goes_on_acting_in_env_units(caplog):
    """A checkpoint written before 2026-12-07 has no ``acts_in_bound_units`` buffer: its policy
    learned its mean in the env's units, so it keeps acting so (training on, ``seedq-eval``,
    ``load_policy``), where the bounds map would move every action; a new one maps."""
    spec = continuous_spec([10.0, -2.0], [20.0, 2.0])
    trained = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    old = {k: v for k, v in trained.state_dict().items() if not k.endswith("acts_in_bound_units")}
    assert len(old) == len(trained.state_dict()) - 1
    params = torch.tensor([[12.5, 0.5, -1.0, -1.0]])
    actions = torch.tensor([[12.0, 0.25]])

    resumed = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    with caplog.at_level("WARNING"):
        resumed.load_state_dict(old)
    dist = resumed.distribution
    assert "trained before 2026-12-07" in caplog.text
    torch.testing.assert_close(dist.mode(params), torch.tensor([[12.5, 0.5]]))
    reference = np_normal_log_pdf(actions.numpy(), params[:, :2].numpy(), np.exp(-1.0)).sum(-1)
    np.testing.assert_allclose(dist.log_prob(params, actions).numpy(), reference, rtol=1e-5)
    # Saved again, it says so, and reads back the same way.
    again = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    again.load_state_dict(resumed.state_dict())
    torch.testing.assert_close(again.distribution.mode(params), torch.tensor([[12.5, 0.5]]))

    fresh = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    fresh.load_state_dict(trained.state_dict())
    torch.testing.assert_close(
        fresh.distribution.mode(params), torch.tensor([[15 + 5 * 12.5, 1.0]])
    )


def test_a_head_acts_as_the_last_checkpoint_it_loaded_was_trained():
    # The units lived in the buffer and in the Gaussian: one that loaded an env-units
    # checkpoint and then a bound-units one went on acting in env units.
    spec = continuous_spec([10.0, -2.0], [20.0, 2.0])
    trained = PPOAgent.build_model(spec, PPOConfig(), channels_last=False).state_dict()
    old = {k: v for k, v in trained.items() if not k.endswith("acts_in_bound_units")}
    params = torch.tensor([[12.5, 0.5, -1.0, -1.0]])
    model = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    model.load_state_dict(old)
    torch.testing.assert_close(model.distribution.mode(params), torch.tensor([[12.5, 0.5]]))
    model.load_state_dict(trained)
    torch.testing.assert_close(
        model.distribution.mode(params), torch.tensor([[15 + 5 * 12.5, 1.0]])
    )
