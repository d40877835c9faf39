"""PPO: GAE and the clipped loss against NumPy references, Gaussian policies, normalisation,
and continuous actions through the real wire."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch
from torch import distributions as D

from seedq.actor.config import ActorConfig
from seedq.agents.common.distributions import Gaussian
from seedq.agents.common.normalize import RunningNorm, update_obs_norm
from seedq.agents.common.reward_scaler import RewardScaler
from seedq.agents.common.targets import transition_rewards
from seedq.agents.ppo.agent import PPOAgent
from seedq.agents.ppo.config import PPOConfig
from seedq.agents.ppo.loss import gae, ppo_loss
from seedq.arch.seed import SeedRun
from seedq.broker.config import BrokerConfig
from seedq.config import SeedqConfig
from seedq.envs import FakeConfig
from seedq.messages import EnvSpec
from seedq.schema import ConfigError

RNG = np.random.default_rng(0)


def np_gae(rewards, discounts, values, bootstrap, lam):
    T = rewards.shape[0]
    adv = np.zeros_like(values)
    last = np.zeros_like(bootstrap)
    for t in reversed(range(T)):
        nxt = bootstrap if t == T - 1 else values[t + 1]
        delta = rewards[t] + discounts[t] * nxt - values[t]
        last = delta + discounts[t] * lam * last
        adv[t] = last
    return adv


def test_gae_with_truncation_bootstrap_matches_numpy():
    T, B, gamma = 6, 3, 0.9
    reward = RNG.normal(size=(T + 1, B))
    done = np.zeros((T + 1, B), bool)
    truncated = np.zeros((T + 1, B), bool)
    tv = np.zeros((T + 1, B))
    done[3, 0] = True  # column 0: terminated into row 3
    done[4, 1] = truncated[4, 1] = True  # column 1: time limit into row 4, V(final) = 2.5
    tv[4, 1] = 2.5
    values = RNG.normal(size=(T + 1, B))
    rewards = transition_rewards(
        torch.tensor(reward),
        torch.tensor(truncated),
        torch.tensor(tv),
        first=1,
        gamma=gamma,
        reward_clip="none",
    )
    discounts = gamma * (~torch.tensor(done[1:])).double()
    adv, ret = gae(rewards, discounts, torch.tensor(values[:-1]), torch.tensor(values[-1]), 0.8)

    np_rewards = reward[1:] + gamma * tv[1:] * truncated[1:]
    expected = np_gae(np_rewards, gamma * ~done[1:], values[:-1], values[-1], 0.8)
    np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(ret.numpy(), expected + values[:-1], rtol=1e-12)
    # The truncated transition bootstraps from V(final obs), not from the next episode's obs.
    # Transition 3 -> 4 of column 1 ends the episode: its advantage is its delta alone.
    assert adv[3, 1].item() == pytest.approx(reward[4, 1] + gamma * 2.5 - values[3, 1])


def test_ppo_loss_matches_numpy_reference_with_clipping():
    n, eps, vclip = 64, 0.2, 0.3
    logp = RNG.normal(scale=0.3, size=n)
    old = RNG.normal(scale=0.3, size=n)
    adv = RNG.normal(size=n)
    values, old_values, returns = (RNG.normal(size=n) for _ in range(3))
    ent = RNG.uniform(size=n)
    loss = ppo_loss(
        *(torch.tensor(x) for x in (logp, old, adv, values, old_values, returns, ent)),
        clip_eps=eps,
        value_cost=0.5,
        entropy_cost=0.01,
        value_clip=vclip,
    )
    a = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    ratio = np.exp(logp - old)
    pg = -np.minimum(ratio * a, np.clip(ratio, 1 - eps, 1 + eps) * a).mean()
    v_clipped = old_values + np.clip(values - old_values, -vclip, vclip)
    v = 0.5 * 0.5 * np.maximum((values - returns) ** 2, (v_clipped - returns) ** 2).mean()
    assert float(loss.pg) == pytest.approx(pg, rel=1e-10)
    assert float(loss.value) == pytest.approx(v, rel=1e-10)
    assert float(loss.total) == pytest.approx(pg + v - 0.01 * ent.mean(), rel=1e-10)
    assert float(loss.clip_fraction) == pytest.approx((np.abs(ratio - 1) > eps).mean())


def test_ppo_loss_gradient_is_zero_where_the_ratio_is_clipped():
    logp = torch.tensor([math.log(2.0), 0.0], requires_grad=True)  # ratios 2 and 1
    loss = ppo_loss(
        logp,
        torch.zeros(2),
        torch.tensor([1.0, 1.0]),
        torch.zeros(2),
        torch.zeros(2),
        torch.zeros(2),
        torch.zeros(2),
        clip_eps=0.2,
        value_cost=0.0,
        entropy_cost=0.0,
        normalize_advantages=False,
    )
    loss.total.backward()
    assert logp.grad[0] == 0 and logp.grad[1] == pytest.approx(-0.5)


def test_gaussian_log_prob_and_entropy_match_torch_distributions():
    params = torch.tensor(RNG.normal(size=(5, 4)), dtype=torch.float64) * 0.5
    mean, log_std = params[:, :2], params[:, 2:]
    actions = torch.tensor(RNG.normal(size=(5, 2)))
    ref = D.Independent(D.Normal(mean, log_std.exp()), 1)
    dist = Gaussian(2)
    torch.testing.assert_close(dist.log_prob(params, actions), ref.log_prob(actions))
    torch.testing.assert_close(dist.entropy(params), ref.entropy())


def test_squashed_gaussian_log_prob_includes_tanh_and_rescale_correction():
    low, high = torch.tensor([-2.0, 0.0], dtype=torch.float64), torch.tensor([2.0, 1.0])
    params = torch.tensor(RNG.normal(size=(5, 4)), dtype=torch.float64) * 0.5
    mean, log_std = params[:, :2], params[:, 2:]
    base = D.Normal(mean, log_std.exp())
    ref = D.Independent(
        D.TransformedDistribution(
            base, [D.TanhTransform(), D.AffineTransform((high + low) / 2, (high - low) / 2)]
        ),
        1,
    )
    dist = Gaussian(2, squash=True, low=low, high=high)
    actions = dist.sample(params, torch.Generator().manual_seed(1))
    assert ((actions >= low) & (actions <= high)).all()
    torch.testing.assert_close(
        dist.log_prob(params, actions), ref.log_prob(actions), rtol=1e-6, atol=1e-6
    )


def test_obs_normaliser_merges_batches_like_one_pass_and_survives_a_checkpoint(tmp_path):
    data = RNG.normal(loc=3.0, scale=[1.0, 5.0, 0.1], size=(300, 3))
    norm = RunningNorm((3,))
    for chunk in (data[:7], data[7:100], data[100:]):
        norm.update(chunk)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-10)

    spec = EnvSpec((3,), "float32", 2)
    model = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    update_obs_norm(model, data.reshape(30, 10, 3), threading.Lock())
    torch.save(model.state_dict(), tmp_path / "m.pt")
    restored = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    restored.load_state_dict(torch.load(tmp_path / "m.pt"))
    obs = torch.tensor(data[:4], dtype=torch.float32)[None]
    out, _ = restored(obs, torch.zeros(1, 4, dtype=torch.bool), ())
    expected, _ = model(obs, torch.zeros(1, 4, dtype=torch.bool), ())
    torch.testing.assert_close(out.policy, expected.policy)
    np.testing.assert_allclose(restored.policy_body.obs_norm.mean.numpy(), data.mean(0))


def test_ppo_default_network_is_cleanrl_tanh_mlp():
    # With obs_norm on, a ReLU torso let the policy collapse on Acrobot-v1 before its first
    # swing-up (return -500 for 1.5 M env steps); cleanrl's tanh MLP learns it.
    model = PPOAgent.build_model(EnvSpec((6,), "float32", 3), PPOConfig(), channels_last=False)
    activations = {
        type(m) for m in model.modules() if isinstance(m, (torch.nn.ReLU, torch.nn.Tanh))
    }
    assert activations == {torch.nn.Tanh}


def test_reward_scaler_divides_by_the_std_of_discounted_returns():
    scaler = RewardScaler(gamma=0.5)
    reward = np.ones((4, 2), np.float32)
    done = np.zeros((4, 2), bool)
    done[2, 1] = True
    scaled = scaler.scale(reward, done, np.array([7, 8]))
    returns = np.array([[1, 1], [1.5, 1.5], [1.75, 1]])  # env 8 restarts after row 2
    assert scaler.var == pytest.approx(returns.var())
    np.testing.assert_allclose(scaled, reward / np.sqrt(returns.var() + 1e-8), rtol=1e-6)
    assert scaler._returns == {7: 1.75, 8: 1.0}  # sums of powers of 0.5: exact


def test_continuous_fake_env_through_the_real_wire(tmp_path):
    cfg = SeedqConfig(
        run_dir=str(tmp_path),
        env=FakeConfig(obs_shape=[4], num_actions=2, continuous_actions=True, episode_length=5),
        actor=ActorConfig(num_actors=1, envs_per_batch=3, batches_per_actor=2, transport="inproc"),
        broker=BrokerConfig(max_batch=6, deadline_ms=1.0),
        algorithm=PPOConfig(unroll_length=4, batch_size=6, minibatches=2, epochs=1),
        total_env_steps=600,
        log_interval_s=0.2,
        max_minutes=1,
    )
    run = SeedRun(cfg, str(tmp_path))
    assert run.spec.action_kind == "continuous" and run.spec.action_low == (-1.0, -1.0)
    batches = []
    train_batch = run.agent.learner.train_batch
    run.agent.learner.train_batch = lambda b: (batches.append(b), train_batch(b))[1]
    summary = run.run()
    assert summary.env_steps >= 600 and batches and run.agent.stats.updates > 0
    for b in batches:
        assert b.action.dtype == np.float32 and b.action.shape[2:] == (2,)
        assert b.behaviour.shape[2:] == (4,)  # mean and log-std of 2 dims
        # Obs element 3 is the first value of the action that led to it, clipped to [-1, 1]
        # by the env: each stored action is paired with its own observation.
        steps = ~b.done[1:]
        np.testing.assert_allclose(
            b.obs[1:, :, 3][steps], np.clip(b.action[:-1, :, 0], -1, 1)[steps], rtol=1e-6
        )


@pytest.mark.parametrize("name", ["vtrace", "r2d2"])
def test_discrete_only_agents_refuse_a_continuous_spec(name):
    from seedq.agents.registry import agent_class, config_class

    spec = EnvSpec((3,), "float32", 1, "continuous", (-2.0,), (2.0,))
    # A ConfigError: seedq-train stops at start-up with the message and exit 2, no traceback.
    with pytest.raises(ConfigError, match="use algorithm=ppo"):
        agent_class(name).build_model(spec, config_class(name)(), channels_last=False)


def test_obs_statistics_leave_out_rows_with_a_non_finite_value():
    data = RNG.normal(size=(4, 5, 3))
    poisoned = data.copy()
    poisoned[1, 2, 0], poisoned[3, 4, 2] = np.nan, np.inf
    spec = EnvSpec((3,), "float32", 2)
    model = PPOAgent.build_model(spec, PPOConfig(), channels_last=False)
    update_obs_norm(model, poisoned, threading.Lock())
    finite_rows = poisoned.reshape(-1, 3)[np.isfinite(poisoned.reshape(-1, 3)).all(axis=1)]
    np.testing.assert_allclose(model.policy_body.obs_norm.mean.numpy(), finite_rows.mean(0))
