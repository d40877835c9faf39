"""PopArt value normalisation (``algorithm.value_norm``): the moving moments against a NumPy
reference, the head's outputs preserved across every update, the loss's standardised value
error, and the V-trace and PPO learners moving the moments with each batch's targets."""

import dataclasses
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_learner_glue import GAMMA, log_softmax, take, vtrace_batch, vtrace_config
from test_ppo import np_gae
from test_vtrace import _loss, _loss_inputs, _recursive_reference

from seedq.agents.common.update import Placement
from seedq.agents.common.value_norm import ValueNorm, value_norm_of
from seedq.agents.ppo.config import PPOConfig
from seedq.agents.ppo.learner import PPOLearner
from seedq.agents.ppo.loss import ppo_loss
from seedq.agents.ppo.network import build_network as build_ppo
from seedq.agents.vtrace.agent import VTraceAgent
from seedq.agents.vtrace.learner import VTraceLearner
from seedq.messages import EnvSpec

CPU = torch.device("cpu")
SPEC = EnvSpec((3,), "float32", 3)


def _moments_reference(batches, step):
    """PopArt's moving first and second moments, the first batches averaged plainly."""
    mean, mean_sq = 0.0, 1.0
    for n, batch in enumerate(batches, start=1):
        x = np.asarray(batch, np.float64).ravel()
        x = x[np.isfinite(x)]
        beta = max(step, 1.0 / n)
        mean = (1 - beta) * mean + beta * x.mean()
        mean_sq = (1 - beta) * mean_sq + beta * (x * x).mean()
    return mean, np.sqrt(mean_sq - mean * mean)


def test_update_tracks_the_moving_moments_and_preserves_every_output():
    torch.manual_seed(0)
    head, norm = torch.nn.Linear(5, 1), ValueNorm(step=0.1)
    features = torch.randn(9, 5)
    rng = np.random.default_rng(1)
    batches = [rng.normal(2.0 + 0.3 * i, 1.0 + 0.2 * i, size=64) for i in range(25)]
    norm.update(torch.as_tensor(batches[0]), head)
    before = norm(head(features)[:, 0]).detach()

    for i, batch in enumerate(batches[1:], start=1):
        norm.update(torch.as_tensor(batch), head)

        torch.testing.assert_close(norm(head(features)[:, 0]).detach(), before, atol=2e-5, rtol=0)
        mean, std = _moments_reference(batches[: i + 1], 0.1)
        assert float(norm.mean) == pytest.approx(mean, rel=1e-12)
        assert float(norm.std()) == pytest.approx(std, rel=1e-6)
    assert float(norm.count) == 25


def test_the_first_batch_sets_the_moments_and_leaves_the_untrained_head_alone():
    """Nearly equal first targets (std 0.02): preserved, the head's outputs would sit
    (0 - 5) / 0.02 = -250 deviations off; left alone they stand near the targets' mean."""
    torch.manual_seed(2)
    head, norm = torch.nn.Linear(4, 1), ValueNorm()
    weights = [p.detach().clone() for p in head.parameters()]
    targets = 5.0 + 0.02 * torch.randn(256, dtype=torch.float64)

    norm.update(targets, head)

    assert all(torch.equal(p, w) for p, w in zip(head.parameters(), weights, strict=True))
    values = norm(head(torch.randn(16, 4))[:, 0]).detach()
    assert (values - 5.0).abs().max() < 0.1


def test_update_leaves_out_non_finite_targets_and_ignores_a_batch_of_none():
    head, norm = torch.nn.Linear(2, 1), ValueNorm(step=0.5)
    weights = [p.detach().clone() for p in head.parameters()]

    norm.update(torch.tensor([float("nan"), float("inf")]), head)

    assert float(norm.count) == 0 and float(norm.mean) == 0 and float(norm.std()) == 1
    assert all(torch.equal(p, w) for p, w in zip(head.parameters(), weights, strict=True))
    norm.update(torch.tensor([1.0, float("nan"), 3.0]), head)
    mean, std = _moments_reference([[1.0, 3.0]], 0.5)
    assert float(norm.mean) == pytest.approx(mean) and float(norm.std()) == pytest.approx(std)


def test_the_scale_has_a_floor_so_constant_targets_do_not_blow_the_head_up():
    head, norm = torch.nn.Linear(2, 1), ValueNorm(min_std=0.01)
    norm.update(torch.full((32,), 4.0), head)
    assert float(norm.std()) == pytest.approx(0.01)
    assert torch.isfinite(head.weight).all() and torch.isfinite(head.bias).all()


def test_outputs_follow_the_moments_however_they_last_changed():
    # The float32 std and mean are cached between changes: each change below comes after a
    # forward has filled that cache.
    norm, head = ValueNorm(step=0.5), torch.nn.Linear(2, 1)
    x = torch.tensor([[-1.0], [0.5], [2.0]])

    def expected():
        std = np.sqrt(max(norm.mean_sq.item() - norm.mean.item() ** 2, norm.min_std**2))
        return x.double().numpy() * std + norm.mean.item()

    def close():
        return np.allclose(norm(x).numpy(), expected(), rtol=1e-6)

    norm(x)
    norm.update(torch.tensor([3.0, 7.0]), head)
    assert close()
    other = ValueNorm()
    other.update(torch.tensor([-20.0, 5.0, 40.0]), torch.nn.Linear(2, 1))
    norm.load_state_dict(other.state_dict())
    assert close() and norm.std().item() == pytest.approx(other.std().item())
    with torch.no_grad():  # what a broadcast from rank 0 does to the buffers
        norm.mean.fill_(1.5)
        norm.mean_sq.fill_(6.25)
    assert close() and norm.std().item() == pytest.approx(2.0)
    norm.mean = torch.tensor(-3.0, dtype=torch.float64)  # what module.to() does
    assert close()


def test_a_step_outside_the_unit_interval_is_refused():
    with pytest.raises(ValueError, match="step"):
        ValueNorm(step=0.0)


def test_the_loss_regresses_the_head_on_standardised_targets():
    """With a value scale s, the value term is c/2 mean(((vs - V) / s)^2): with V = s v + mu
    the head's output v regresses on (vs - mu) / s with unit weight."""
    inputs = _loss_inputs()
    scale = torch.tensor(2.5, dtype=torch.float64)

    plain, scaled = _loss(inputs), _loss(inputs, value_scale=scale)

    assert scaled.baseline.item() == pytest.approx(plain.baseline.item() / 6.25, rel=1e-12)
    assert scaled.pg.item() == plain.pg.item() and scaled.entropy.item() == plain.entropy.item()
    (grad_plain,) = torch.autograd.grad(plain.baseline, inputs["values"])
    (grad_scaled,) = torch.autograd.grad(scaled.baseline, inputs["values"])
    torch.testing.assert_close(grad_scaled, grad_plain / 6.25)


def _popart_model(value_norm: bool = True) -> torch.nn.Module:
    torch.manual_seed(3)
    alg = SimpleNamespace(**dataclasses.asdict(vtrace_config()))
    alg.model = SimpleNamespace(**alg.model)
    alg.value_norm = value_norm
    return VTraceAgent.build_model(SPEC, alg, channels_last=False)


def _reference_vs(model: torch.nn.Module, batch) -> np.ndarray:
    """The batch's V-trace targets under ``model``, by the NumPy reference (rows sliced as in
    test_learner_glue: rewards and discounts of rows 1.., no clipping, lambda 0.9)."""
    with torch.no_grad():
        out, _ = model(torch.as_tensor(batch.obs), torch.as_tensor(batch.done), ())
    logits, values = out.logits.double().numpy(), out.baseline.double().numpy()
    actions = batch.action[:-1].astype(np.int64)
    rewards = batch.reward[1:] + GAMMA * batch.truncation_value[1:] * batch.truncated[1:]
    log_rhos = take(log_softmax(logits[:-1]), actions) - take(
        log_softmax(batch.behaviour[:-1].astype(np.float64)), actions
    )
    vs, _ = _recursive_reference(
        log_rhos, GAMMA * (~batch.done[1:]), rewards, values[:-1], values[-1], None, None, 0.9
    )
    return vs


@pytest.mark.parametrize("minibatches", [1, 2], ids=["by-column", "by-transition"])
def test_the_learner_moves_the_moments_with_each_batch_targets_before_its_updates(minibatches):
    model = _popart_model()
    cfg = dataclasses.replace(vtrace_config(), value_norm=True, minibatches=minibatches)
    learner = VTraceLearner(model, cfg, Placement(CPU, threading.Lock()), total_env_steps=1000)
    batch = vtrace_batch()
    norm = value_norm_of(model)
    seen = []

    for _ in range(3):
        seen.append(_reference_vs(model, batch))
        stats = learner.train_batch(batch)
        assert np.isfinite(stats["loss/total"])

    mean, std = _moments_reference(seen, norm.step)
    assert float(norm.count) == 3
    assert float(norm.mean) == pytest.approx(mean, rel=1e-5)
    assert float(norm.std()) == pytest.approx(std, rel=1e-5)


def test_the_normaliser_is_part_of_the_weights_and_only_when_asked_for():
    model = _popart_model()
    value_norm_of(model).update(torch.tensor([3.0, 5.0]), model.baseline)
    restored = _popart_model()

    restored.load_state_dict(model.state_dict())

    assert {"value_norm.mean", "value_norm.mean_sq", "value_norm.count"} <= set(model.state_dict())
    assert float(value_norm_of(restored).mean) == 4.0
    x = torch.randn(1, 2, 3)
    done = torch.zeros(1, 2, dtype=torch.bool)
    torch.testing.assert_close(restored(x, done, ())[0].baseline, model(x, done, ())[0].baseline)
    assert value_norm_of(_popart_model(value_norm=False)) is None


def test_the_learners_value_term_is_the_error_in_standard_deviations():
    model = _popart_model()
    norm = value_norm_of(model)
    norm.update(torch.tensor([-4.0, 2.0, 8.0]), model.baseline)  # std ~4.9
    cfg = dataclasses.replace(vtrace_config(), value_norm=True)
    learner = VTraceLearner(model, cfg, Placement(CPU, threading.Lock()), total_env_steps=1000)
    batch = vtrace_batch()
    with torch.no_grad():
        values = model(torch.as_tensor(batch.obs), torch.as_tensor(batch.done), ())[0].baseline

    loss = learner.loss(batch)

    error = (_reference_vs(model, batch) - values[:-1].double().numpy()) / float(norm.std())
    expected = cfg.baseline_cost * 0.5 * np.mean(error**2)
    assert float(loss.baseline.detach()) == pytest.approx(expected, rel=1e-5)


def test_the_first_batch_trains_on_targets_of_the_values_its_moments_left():
    """The first targets move an untrained head's values (to near their mean), so the first
    update's targets are computed again after the moments, not kept from before them."""
    model = _popart_model()
    cfg = dataclasses.replace(
        vtrace_config(), value_norm=True, fixed_targets=True, minibatches=1, epochs=1
    )
    learner = VTraceLearner(model, cfg, Placement(CPU, threading.Lock()), total_env_steps=1000)
    batch = vtrace_batch()
    reference = _popart_model()
    value_norm_of(reference).update(
        torch.as_tensor(_reference_vs(reference, batch)), reference.baseline
    )
    with torch.no_grad():
        values = reference(torch.as_tensor(batch.obs), torch.as_tensor(batch.done), ())[0].baseline

    stats = learner.train_batch(batch)

    error = (_reference_vs(reference, batch) - values[:-1].double().numpy()) / float(
        value_norm_of(reference).std()
    )
    assert stats["loss/baseline"] == pytest.approx(
        cfg.baseline_cost * 0.5 * np.mean(error**2), rel=1e-5
    )


# --------------------------------------------------------------- PPO


def _ppo(value_norm: bool = True, **cfg) -> tuple[torch.nn.Module, PPOConfig]:
    """PPO with a PopArt value head; rewards as they are, so the NumPy GAE sees the same."""
    torch.manual_seed(3)
    config = PPOConfig(gamma=GAMMA, gae_lambda=0.9, reward_scaling=False, reward_clip="none", **cfg)
    config = dataclasses.replace(config, value_norm=value_norm)
    return build_ppo(SPEC, config, channels_last=False), config


def _reference_returns(model: torch.nn.Module, batch) -> tuple[np.ndarray, np.ndarray]:
    """GAE returns of ``batch`` under ``model`` by the NumPy reference, and its values."""
    with torch.no_grad():
        out, _ = model(torch.as_tensor(batch.obs), torch.as_tensor(batch.done), ())
    values = out.value.double().numpy()
    rewards = batch.reward[1:] + GAMMA * batch.truncation_value[1:] * batch.truncated[1:]
    advantages = np_gae(rewards, GAMMA * ~batch.done[1:], values[:-1], values[-1], 0.9)
    return advantages + values[:-1], values[:-1]


def test_ppo_value_term_and_its_clip_are_in_standard_deviations():
    rng = np.random.default_rng(5)
    n, scale, clip = 64, 2.5, 0.3
    logp, old, adv, ent = (rng.normal(size=n) for _ in range(4))
    values, old_values, returns = (rng.normal(scale=3.0, size=n) for _ in range(3))
    loss = ppo_loss(
        *(torch.tensor(x) for x in (logp, old, adv, values, old_values, returns, ent)),
        clip_eps=0.2,
        value_cost=0.5,
        entropy_cost=0.01,
        value_clip=clip,
        value_scale=torch.tensor(scale, dtype=torch.float64),
    )
    v, v_old, r = values / scale, old_values / scale, returns / scale
    v_clipped = v_old + np.clip(v - v_old, -clip, clip)
    expected = 0.5 * 0.5 * np.maximum((v - r) ** 2, (v_clipped - r) ** 2).mean()
    assert float(loss.value) == pytest.approx(expected, rel=1e-10)


def test_the_ppo_learner_moves_the_moments_with_each_batch_returns():
    model, cfg = _ppo(minibatches=2)
    learner = PPOLearner(model, cfg, Placement(CPU, threading.Lock()), total_env_steps=1000)
    batch = vtrace_batch()
    seen = []

    for _ in range(3):
        seen.append(_reference_returns(model, batch)[0])
        assert np.isfinite(learner.train_batch(batch)["loss/total"])

    mean, std = _moments_reference(seen, value_norm_of(model).step)
    assert float(value_norm_of(model).count) == 3
    assert float(value_norm_of(model).mean) == pytest.approx(mean, rel=1e-5)
    assert float(value_norm_of(model).std()) == pytest.approx(std, rel=1e-5)
    assert value_norm_of(_ppo(value_norm=False)[0]) is None


def test_ppo_first_batch_trains_on_returns_of_the_values_its_moments_left():
    model, cfg = _ppo(minibatches=1, epochs=1, normalize_advantages=False)
    learner = PPOLearner(model, cfg, Placement(CPU, threading.Lock()), total_env_steps=1000)
    batch = vtrace_batch()
    reference, _ = _ppo()
    norm = value_norm_of(reference)
    norm.update(torch.as_tensor(_reference_returns(reference, batch)[0]), reference.value_head)
    returns, values = _reference_returns(reference, batch)

    stats = learner.train_batch(batch)

    error = (returns - values) / float(norm.std())
    assert stats["loss/value"] == pytest.approx(cfg.value_cost * 0.5 * np.mean(error**2), rel=1e-5)
