"""V-trace checked against slow NumPy transcriptions of IMPALA (Espeholt et al. 2018) eq. 1."""

import math

import numpy as np
import pytest
import torch

from seedq.agents.vtrace.loss import (
    VTraceLoss,
    VTraceReturns,
    _backward_recursion_torch,
    action_log_probs,
    actor_critic_loss,
    backward_recursion,
    policy_entropy,
    vtrace_loss,
    vtrace_returns,
)

# --- slow references, written straight from the paper -------------------------------------------


def _clip(x: float, threshold: float | None) -> float:
    return x if threshold is None else min(threshold, x)


def _pg_advantages_reference(vs, log_rhos, discounts, rewards, values, bootstrap, clip_pg_rho):
    """pg_adv_s = min(pg_rho_bar, rho_s) (r_s + gamma_s v_{s+1} - V(x_s)), v_T = V(x_T)."""
    num_steps, batch = values.shape
    pg = np.zeros_like(values)
    for b in range(batch):
        for s in range(num_steps):
            vs_next = vs[s + 1, b] if s + 1 < num_steps else bootstrap[b]
            rho = _clip(math.exp(log_rhos[s, b]), clip_pg_rho)
            pg[s, b] = rho * (rewards[s, b] + discounts[s, b] * vs_next - values[s, b])
    return pg


def _recursive_reference(
    log_rhos, discounts, rewards, values, bootstrap, clip_rho, clip_pg_rho, lambda_
):
    """Backward recursion v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1}))."""
    num_steps, batch = values.shape
    vs = np.zeros_like(values)
    for b in range(batch):
        vs_minus_v_next = 0.0
        for s in reversed(range(num_steps)):
            rho = math.exp(log_rhos[s, b])
            value_next = values[s + 1, b] if s + 1 < num_steps else bootstrap[b]
            delta = _clip(rho, clip_rho) * (
                rewards[s, b] + discounts[s, b] * value_next - values[s, b]
            )
            c = lambda_ * min(1.0, rho)
            vs_minus_v_next = delta + discounts[s, b] * c * vs_minus_v_next
            vs[s, b] = values[s, b] + vs_minus_v_next
    pg = _pg_advantages_reference(vs, log_rhos, discounts, rewards, values, bootstrap, clip_pg_rho)
    return vs, pg


def _explicit_sum_reference(
    log_rhos, discounts, rewards, values, bootstrap, clip_rho, clip_pg_rho, lambda_
):
    """Eq. 1 literally: v_s = V(x_s) + sum_{t>=s} (prod_{i<t} gamma_i)(prod_{i<t} c_i) delta_t.

    gamma^{t-s} becomes a product of per-step discounts so that episode ends (gamma_i = 0) cut
    the sum.
    """
    num_steps, batch = values.shape
    rhos = np.exp(log_rhos)
    values_next = np.concatenate([values[1:], bootstrap[None]], axis=0)
    vs = np.zeros_like(values)
    for b in range(batch):
        for s in range(num_steps):
            total = 0.0
            for t in range(s, num_steps):
                discount_product = np.prod(discounts[s:t, b])
                trace_product = np.prod([lambda_ * min(1.0, rhos[i, b]) for i in range(s, t)])
                delta = _clip(rhos[t, b], clip_rho) * (
                    rewards[t, b] + discounts[t, b] * values_next[t, b] - values[t, b]
                )
                total += discount_product * trace_product * delta
            vs[s, b] = values[s, b] + total
    pg = _pg_advantages_reference(vs, log_rhos, discounts, rewards, values, bootstrap, clip_pg_rho)
    return vs, pg


# --- inputs ---------------------------------------------------------------------------------------


def _random_inputs(seed, num_steps, batch, *, log_rho_scale=0.5, episode_end_prob=0.0):
    """Float64 NumPy inputs: log_rhos, discounts, rewards, values [T, B] and bootstrap [B]."""
    rng = np.random.default_rng(seed)
    log_rhos = rng.normal(0.0, log_rho_scale, size=(num_steps, batch))
    terminated = rng.random((num_steps, batch)) < episode_end_prob
    discounts = 0.99 * (1.0 - terminated)
    rewards = rng.normal(size=(num_steps, batch))
    values = rng.normal(size=(num_steps, batch))
    bootstrap = rng.normal(size=batch)
    return log_rhos, discounts, rewards, values, bootstrap


SHAPES = [(1, 1), (5, 3), (20, 4), (80, 2)]

# (clip_rho_threshold, clip_pg_rho_threshold, lambda_)
SETTINGS = [
    pytest.param(1.0, 1.0, 1.0, id="default-clips"),
    pytest.param(None, None, 1.0, id="no-clips"),
    pytest.param(2.0, 0.5, 1.0, id="different-clips"),
    pytest.param(1.0, 1.0, 0.8, id="lambda-0.8"),
    pytest.param(None, 1.0, 0.5, id="no-rho-clip-lambda-0.5"),
]

# keyword arguments of _random_inputs
REGIMES = [
    pytest.param({}, id="mild-off-policy"),
    pytest.param({"episode_end_prob": 0.2}, id="episode-ends"),
    pytest.param({"log_rho_scale": 3.0}, id="large-log-rhos"),
]


def _torch_returns(inputs, clip_rho, clip_pg_rho, lambda_) -> VTraceReturns:
    return vtrace_returns(
        *(torch.as_tensor(x) for x in inputs),
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
        lambda_=lambda_,
    )


# --- vtrace_returns against the references -------------------------------------------------------


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("clip_rho, clip_pg_rho, lambda_", SETTINGS)
@pytest.mark.parametrize("num_steps, batch", SHAPES)
def test_vs_matches_recursive_reference(num_steps, batch, clip_rho, clip_pg_rho, lambda_, regime):
    inputs = _random_inputs(num_steps * 100 + batch, num_steps, batch, **regime)

    returns = _torch_returns(inputs, clip_rho, clip_pg_rho, lambda_)

    expected_vs, _ = _recursive_reference(*inputs, clip_rho, clip_pg_rho, lambda_)
    np.testing.assert_allclose(returns.vs.numpy(), expected_vs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("clip_rho, clip_pg_rho, lambda_", SETTINGS)
@pytest.mark.parametrize("num_steps, batch", SHAPES)
def test_pg_advantages_match_recursive_reference(
    num_steps, batch, clip_rho, clip_pg_rho, lambda_, regime
):
    inputs = _random_inputs(num_steps * 100 + batch, num_steps, batch, **regime)

    returns = _torch_returns(inputs, clip_rho, clip_pg_rho, lambda_)

    _, expected_pg = _recursive_reference(*inputs, clip_rho, clip_pg_rho, lambda_)
    np.testing.assert_allclose(returns.pg_advantages.numpy(), expected_pg, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("clip_rho, clip_pg_rho, lambda_", SETTINGS)
@pytest.mark.parametrize("num_steps, batch", [(1, 1), (5, 3), (12, 2)])
def test_vs_matches_explicit_sum_of_eq_1(num_steps, batch, clip_rho, clip_pg_rho, lambda_, regime):
    inputs = _random_inputs(num_steps * 100 + batch + 7, num_steps, batch, **regime)

    returns = _torch_returns(inputs, clip_rho, clip_pg_rho, lambda_)

    expected_vs, _ = _explicit_sum_reference(*inputs, clip_rho, clip_pg_rho, lambda_)
    np.testing.assert_allclose(returns.vs.numpy(), expected_vs, rtol=1e-10, atol=1e-10)


def test_large_log_rhos_case_actually_exercises_rho_clipping():
    inputs = _random_inputs(0, 10, 4, log_rho_scale=3.0)

    clipped = _torch_returns(inputs, 1.0, 1.0, 1.0)
    unclipped = _torch_returns(inputs, None, None, 1.0)

    assert not torch.allclose(clipped.vs, unclipped.vs)


# --- documented behaviour on small hand-made examples --------------------------------------------


def test_on_policy_vs_equals_bootstrapped_n_step_return():
    num_steps, batch, gamma = 6, 3, 0.9
    _, _, rewards, values, bootstrap = _random_inputs(1, num_steps, batch)
    log_rhos = np.zeros((num_steps, batch))
    discounts = np.full((num_steps, batch), gamma)

    returns = _torch_returns((log_rhos, discounts, rewards, values, bootstrap), 1.0, 1.0, 1.0)

    # sum_{t>=s} gamma^{t-s} r_t + gamma^{T-s} V(x_T): the values themselves cancel out.
    expected = np.zeros((num_steps, batch))
    for s in range(num_steps):
        powers = gamma ** np.arange(num_steps - s)
        expected[s] = powers @ rewards[s:] + gamma ** (num_steps - s) * bootstrap
    np.testing.assert_allclose(returns.vs.numpy(), expected, rtol=1e-10)


def test_pg_advantage_uses_next_target_and_bootstrap_at_last_step():
    # On-policy, T = 2, B = 1:
    #   v_1 = V1 + (r1 + g V(x_2) - V1) = 1 + 0.5 * 10 = 6
    #   pg_0 = r0 + g v_1 - V0 = 0 + 0.5 * 6 - 1 = 2   (with V(x_1) instead of v_1 it would be 0)
    #   pg_1 = r1 + g V(x_2) - V1 = 1 + 0.5 * 10 - 2 = 4
    log_rhos = torch.zeros(2, 1, dtype=torch.float64)
    discounts = torch.full((2, 1), 0.5, dtype=torch.float64)
    rewards = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    values = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    bootstrap = torch.tensor([10.0], dtype=torch.float64)

    returns = vtrace_returns(log_rhos, discounts, rewards, values, bootstrap)

    torch.testing.assert_close(
        returns.pg_advantages, torch.tensor([[2.0], [4.0]], dtype=torch.float64)
    )


def test_vs_before_episode_end_ignores_rewards_after_it():
    inputs = list(_random_inputs(2, 8, 3))
    inputs[1][3] = 0.0  # every episode terminates at step 3
    later_rewards_changed = [x.copy() for x in inputs]
    later_rewards_changed[2][4:] += 100.0

    original = _torch_returns(inputs, 1.0, 1.0, 1.0)
    changed = _torch_returns(later_rewards_changed, 1.0, 1.0, 1.0)

    torch.testing.assert_close(original.vs[:4], changed.vs[:4])


# --- types, gradients and argument checking ------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_dtype_follows_input_dtype(dtype):
    inputs = [torch.as_tensor(x, dtype=dtype) for x in _random_inputs(3, 4, 2)]

    returns = vtrace_returns(*inputs)

    assert (returns.vs.dtype, returns.pg_advantages.dtype) == (dtype, dtype)


def test_outputs_carry_no_gradient_even_when_inputs_require_it():
    inputs = [torch.tensor(x, requires_grad=True) for x in _random_inputs(4, 4, 2)]

    returns = vtrace_returns(*inputs)

    assert not returns.vs.requires_grad and not returns.pg_advantages.requires_grad


def test_numpy_arrays_give_the_same_result_as_tensors():
    inputs = _random_inputs(5, 7, 3, episode_end_prob=0.2)

    from_numpy = vtrace_returns(*inputs)

    torch.testing.assert_close(from_numpy, _torch_returns(inputs, 1.0, 1.0, 1.0))


@pytest.mark.parametrize(
    "position, name",
    list(enumerate(["log_rhos", "discounts", "rewards", "values", "bootstrap_value"])),
)
def test_shape_mismatch_names_the_offending_argument(position, name):
    inputs = [torch.as_tensor(x) for x in _random_inputs(6, 5, 3)]
    inputs[position] = inputs[position][..., :2]  # one batch column short

    with pytest.raises(ValueError, match=f"^{name} has shape"):
        vtrace_returns(*inputs)


def test_per_step_arguments_must_be_time_major_matrices():
    flat = [torch.zeros(6, dtype=torch.float64) for _ in range(4)]

    with pytest.raises(ValueError, match=r"time-major \[T, B\]"):
        vtrace_returns(*flat, torch.zeros(1, dtype=torch.float64))


# --- pg_bootstrap="lambda": rlax's policy-gradient advantage -------------------------------------


def _lambda_pg_reference(vs, log_rhos, discounts, rewards, values, bootstrap, clip_pg_rho, lambda_):
    """pg_s = min(pg_rho_bar, rho_s) (r_s + gamma_s (lambda v_{s+1} + (1 - lambda) V(x_{s+1}))
    - V(x_s)), v_T = V(x_T)."""
    num_steps, batch = values.shape
    pg = np.zeros_like(values)
    for b in range(batch):
        for s in range(num_steps):
            if s + 1 < num_steps:
                q_next = lambda_ * vs[s + 1, b] + (1.0 - lambda_) * values[s + 1, b]
            else:
                q_next = bootstrap[b]
            rho = _clip(math.exp(log_rhos[s, b]), clip_pg_rho)
            pg[s, b] = rho * (rewards[s, b] + discounts[s, b] * q_next - values[s, b])
    return pg


def _gae_reference(discounts, rewards, values, bootstrap, lambda_):
    """GAE (Schulman et al. 2016) written as its sum: A_s = sum_k (prod_{i<k} gamma_{s+i}
    lambda) delta_{s+k}, the products cut by episode ends."""
    num_steps, batch = values.shape
    values_next = np.concatenate([values[1:], bootstrap[None]], axis=0)
    deltas = rewards + discounts * values_next - values
    gae = np.zeros_like(values)
    for b in range(batch):
        for s in range(num_steps):
            weight, total = 1.0, 0.0
            for t in range(s, num_steps):
                total += weight * deltas[t, b]
                weight *= discounts[t, b] * lambda_
            gae[s, b] = total
    return gae


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("clip_rho, clip_pg_rho, lambda_", SETTINGS)
@pytest.mark.parametrize("num_steps, batch", [(1, 1), (20, 4)])
def test_lambda_pg_bootstrap_matches_its_reference(
    num_steps, batch, clip_rho, clip_pg_rho, lambda_, regime
):
    inputs = _random_inputs(num_steps * 100 + batch, num_steps, batch, **regime)

    returns = vtrace_returns(
        *(torch.as_tensor(x) for x in inputs),
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
        lambda_=lambda_,
        pg_bootstrap="lambda",
    )

    expected_vs, _ = _recursive_reference(*inputs, clip_rho, clip_pg_rho, lambda_)
    np.testing.assert_allclose(returns.vs.numpy(), expected_vs, rtol=1e-10, atol=1e-10)
    expected_pg = _lambda_pg_reference(expected_vs, *inputs, clip_pg_rho, lambda_)
    np.testing.assert_allclose(returns.pg_advantages.numpy(), expected_pg, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("episode_end_prob", [0.0, 0.2])
def test_on_policy_lambda_pg_advantage_is_gae_and_the_papers_is_not(episode_end_prob):
    # On-policy (rho = 1) the lambda bootstrap weighs the TD error k steps ahead by
    # (gamma lambda)^k, GAE's weights; the paper's r_s + gamma v_{s+1} weighs it by
    # gamma^k lambda^(k-1), so the two differ from the second step on.
    log_rhos, discounts, rewards, values, bootstrap = _random_inputs(
        11, 30, 3, episode_end_prob=episode_end_prob
    )
    log_rhos = np.zeros_like(log_rhos)
    inputs = (log_rhos, discounts, rewards, values, bootstrap)
    gae = _gae_reference(discounts, rewards, values, bootstrap, 0.95)

    rlax_style = vtrace_returns(*inputs, lambda_=0.95, pg_bootstrap="lambda")
    papers = vtrace_returns(*inputs, lambda_=0.95)

    np.testing.assert_allclose(rlax_style.pg_advantages.numpy(), gae, rtol=1e-10, atol=1e-10)
    assert np.abs(papers.pg_advantages.numpy() - gae).max() > 0.1


def test_the_two_pg_bootstraps_agree_at_lambda_one():
    inputs = _random_inputs(5, 12, 3, episode_end_prob=0.1)

    papers = vtrace_returns(*inputs)
    rlax_style = vtrace_returns(*inputs, pg_bootstrap="lambda")

    torch.testing.assert_close(rlax_style.pg_advantages, papers.pg_advantages)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"lambda_": 1.5}, "lambda_"),
        ({"clip_rho_threshold": 0.0}, "clip_rho_threshold"),
        ({"clip_pg_rho_threshold": -1.0}, "clip_pg_rho_threshold"),
        ({"pg_bootstrap": "gae"}, "pg_bootstrap"),
    ],
)
def test_out_of_range_hyperparameter_is_rejected(kwargs, name):
    inputs = _random_inputs(7, 3, 2)

    with pytest.raises(ValueError, match=name):
        vtrace_returns(*inputs, **kwargs)


# --- policy helpers ------------------------------------------------------------------------------


def test_action_log_probs_picks_the_taken_action():
    logits = torch.tensor([[[1.0, 2.0, 3.0]], [[0.0, 0.0, 5.0]]], dtype=torch.float64)
    actions = torch.tensor([[2], [0]])

    log_probs = action_log_probs(logits, actions)

    expected = np.array([[3.0 - np.log(np.exp([1, 2, 3]).sum())], [0.0 - np.log(2 + np.exp(5))]])
    np.testing.assert_allclose(log_probs.numpy(), expected, rtol=1e-12)


def test_entropy_of_uniform_policy_is_log_num_actions():
    logits = torch.zeros(3, 2, 5, dtype=torch.float64)

    entropy = policy_entropy(logits)

    torch.testing.assert_close(entropy, torch.full((3, 2), math.log(5), dtype=torch.float64))


def test_entropy_and_its_gradient_stay_finite_with_masked_actions():
    logits = torch.tensor([[[0.0, 0.0, -math.inf]]], requires_grad=True)

    entropy = policy_entropy(logits)
    entropy.sum().backward()

    assert torch.isfinite(entropy).all() and torch.isfinite(logits.grad).all()


# --- vtrace_loss ---------------------------------------------------------------------------------


def _loss_inputs(seed=8, num_steps=4, batch=3, num_actions=5):
    """Float64 leaf tensors for vtrace_loss, every float one requiring grad."""
    rng = np.random.default_rng(seed)

    def leaf(*shape):
        return torch.tensor(rng.normal(size=shape), requires_grad=True)

    return {
        "target_logits": leaf(num_steps, batch, num_actions),
        "behaviour_logits": leaf(num_steps, batch, num_actions),
        "actions": torch.as_tensor(rng.integers(0, num_actions, size=(num_steps, batch))),
        "values": leaf(num_steps, batch),
        "bootstrap_value": leaf(batch),
        "rewards": leaf(num_steps, batch),
        "discounts": torch.as_tensor(0.99 * (rng.random((num_steps, batch)) > 0.2)),
    }


def _loss(inputs, **overrides) -> VTraceLoss:
    kwargs = {"baseline_cost": 0.5, "entropy_cost": 0.01} | overrides
    return vtrace_loss(**inputs, **kwargs)


@pytest.mark.parametrize("name", ["target_logits", "values"])
def test_loss_gradient_reaches(name):
    inputs = _loss_inputs()

    _loss(inputs).total.backward()

    assert inputs[name].grad is not None and inputs[name].grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["behaviour_logits", "bootstrap_value", "rewards"])
def test_loss_gradient_does_not_reach(name):
    inputs = _loss_inputs()

    _loss(inputs).total.backward()

    assert inputs[name].grad is None


def test_policy_gradient_term_treats_values_as_constant():
    inputs = _loss_inputs()

    (grad,) = torch.autograd.grad(_loss(inputs).pg, inputs["values"], allow_unused=True)

    assert grad is None


def test_baseline_gradient_regresses_values_towards_fixed_vtrace_targets():
    inputs = _loss_inputs()
    baseline_cost = 0.5
    vs = vtrace_returns(
        action_log_probs(inputs["target_logits"], inputs["actions"])
        - action_log_probs(inputs["behaviour_logits"], inputs["actions"]),
        inputs["discounts"],
        inputs["rewards"],
        inputs["values"],
        inputs["bootstrap_value"],
    ).vs

    (grad,) = torch.autograd.grad(_loss(inputs).baseline, inputs["values"])

    # d/dV of c * 0.5 * mean((vs - V)^2) with vs held fixed.
    torch.testing.assert_close(grad, baseline_cost * (inputs["values"] - vs) / vs.numel())


def _numpy_loss_reference(inputs, baseline_cost, entropy_cost, clip_rho, clip_pg_rho, lambda_):
    """The IMPALA loss, computed by hand in NumPy."""
    arrays = {k: v.detach().numpy() for k, v in inputs.items()}
    actions = arrays["actions"]

    def log_softmax(logits):
        shifted = logits - logits.max(axis=-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))

    target_log_pi = log_softmax(arrays["target_logits"])
    behaviour_log_pi = log_softmax(arrays["behaviour_logits"])
    taken_target = np.take_along_axis(target_log_pi, actions[..., None], axis=-1)[..., 0]
    taken_behaviour = np.take_along_axis(behaviour_log_pi, actions[..., None], axis=-1)[..., 0]
    vs, pg_adv = _recursive_reference(
        taken_target - taken_behaviour,
        arrays["discounts"],
        arrays["rewards"],
        arrays["values"],
        arrays["bootstrap_value"],
        clip_rho,
        clip_pg_rho,
        lambda_,
    )
    pg = -np.mean(taken_target * pg_adv)
    baseline = baseline_cost * 0.5 * np.mean((vs - arrays["values"]) ** 2)
    entropy = -entropy_cost * np.mean(-(np.exp(target_log_pi) * target_log_pi).sum(axis=-1))
    log_ratio = taken_target - taken_behaviour
    return {
        "total": pg + baseline + entropy,
        "pg": pg,
        "baseline": baseline,
        "entropy": entropy,
        "approx_kl": np.mean(np.exp(log_ratio) - 1 - log_ratio),
        "clip_fraction": 0.0,  # no clip_eps
    }


@pytest.mark.parametrize("term", VTraceLoss._fields)
@pytest.mark.parametrize(
    "clip_rho, clip_pg_rho, lambda_", [(1.0, 1.0, 1.0), (None, None, 1.0), (1.0, 1.0, 0.9)]
)
def test_loss_term_matches_numpy_hand_computation(term, clip_rho, clip_pg_rho, lambda_):
    inputs = _loss_inputs(seed=9, num_steps=3, batch=2, num_actions=3)
    settings = {
        "clip_rho_threshold": clip_rho,
        "clip_pg_rho_threshold": clip_pg_rho,
        "lambda_": lambda_,
    }

    loss = _loss(inputs, baseline_cost=0.5, entropy_cost=0.01, **settings)

    expected = _numpy_loss_reference(inputs, 0.5, 0.01, clip_rho, clip_pg_rho, lambda_)
    assert getattr(loss, term).item() == pytest.approx(expected[term], rel=1e-10, abs=1e-12)


def test_loss_terms_are_scalars():
    loss = _loss(_loss_inputs())

    assert all(term.dim() == 0 for term in loss)


def test_loss_rejects_mismatched_behaviour_logits():
    inputs = _loss_inputs()
    inputs["behaviour_logits"] = inputs["behaviour_logits"][..., :2]

    with pytest.raises(ValueError, match="behaviour_logits"):
        _loss(inputs)


def _numpy_clipped_pg(inputs, clip_eps, normalize):
    """APPO's policy term by hand: PPO's clipped surrogate on the V-trace advantages."""
    arrays = {k: v.detach().numpy() for k, v in inputs.items()}
    actions = arrays["actions"]

    def log_pi(logits):
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return np.take_along_axis(log_probs, actions[..., None], axis=-1)[..., 0]

    log_rhos = log_pi(arrays["target_logits"]) - log_pi(arrays["behaviour_logits"])
    _, adv = _recursive_reference(
        log_rhos,
        arrays["discounts"],
        arrays["rewards"],
        arrays["values"],
        arrays["bootstrap_value"],
        1.0,
        1.0,
        1.0,
    )
    if normalize:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    ratio = np.exp(log_rhos)
    return -np.mean(np.minimum(ratio * adv, np.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv))


@pytest.mark.parametrize("clip_eps", [None, 0.2])
def test_kl_and_clip_fraction_match_the_numpy_reference(clip_eps):
    inputs = _loss_inputs(num_steps=6, batch=4)
    loss = _loss(inputs, clip_eps=clip_eps)
    arrays = {k: v.detach().numpy() for k, v in inputs.items()}

    def log_pi(logits):
        log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        return np.take_along_axis(log_probs, arrays["actions"][..., None], axis=-1)[..., 0]

    log_ratio = log_pi(arrays["target_logits"]) - log_pi(arrays["behaviour_logits"])
    ratio = np.exp(log_ratio)
    np.testing.assert_allclose(float(loss.approx_kl), np.mean(ratio - 1 - log_ratio), rtol=1e-10)
    clipped = np.mean(np.abs(ratio - 1) > clip_eps) if clip_eps else 0.0
    assert float(loss.clip_fraction) == pytest.approx(clipped)
    assert 0.0 < clipped < 1.0 or clip_eps is None  # the inputs exercise both sides
    assert not loss.approx_kl.requires_grad and not loss.clip_fraction.requires_grad


@pytest.mark.parametrize("normalize", [False, True])
def test_clipped_surrogate_matches_the_numpy_reference(normalize):
    inputs = _loss_inputs(num_steps=6, batch=4)

    loss = _loss(inputs, clip_eps=0.2, normalize_advantages=normalize)

    # float64 throughout: a few roundings apart at most.
    np.testing.assert_allclose(
        loss.pg.item(), _numpy_clipped_pg(inputs, 0.2, normalize), rtol=1e-10
    )


def test_clipped_surrogate_gives_no_gradient_where_the_ratio_left_the_clip_in_its_favour():
    inputs = _loss_inputs(num_steps=6, batch=4)
    adv_sign = torch.sign(
        vtrace_returns(
            action_log_probs(inputs["target_logits"], inputs["actions"])
            - action_log_probs(inputs["behaviour_logits"], inputs["actions"]),
            inputs["discounts"],
            inputs["rewards"],
            inputs["values"],
            inputs["bootstrap_value"],
        ).pg_advantages
    )
    ratio = torch.exp(
        action_log_probs(inputs["target_logits"], inputs["actions"])
        - action_log_probs(inputs["behaviour_logits"], inputs["actions"])
    ).detach()
    outside = ((ratio > 1.1) & (adv_sign > 0)) | ((ratio < 0.9) & (adv_sign < 0))

    (grad,) = torch.autograd.grad(_loss(inputs, clip_eps=0.1).pg, inputs["target_logits"])

    assert outside.any() and grad[outside].abs().max() == 0


# --- the backward recursion's two paths ----------------------------------------------------------


def _recursion_as_it_was(deltas, discounts, cs):
    """The loop vtrace_returns ran before issue 34 (one torch op per factor and step)."""
    out = torch.empty_like(deltas)
    acc = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        out[t] = acc
    return out


# The NaN and inf below are the point: NumPy warns about what they do to the products.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backward_recursion_gives_the_bits_of_the_torch_loop_on_both_paths(dtype):
    gen = torch.Generator().manual_seed(3)
    deltas = torch.randn(33, 7, generator=gen, dtype=dtype)
    discounts = 0.99 * (torch.rand(33, 7, generator=gen) > 0.1).to(dtype)
    cs = torch.rand(33, 7, generator=gen, dtype=dtype)
    deltas[5, 2], cs[9, 4] = math.nan, math.inf

    expected = _recursion_as_it_was(deltas, discounts, cs)

    for path in (backward_recursion, _backward_recursion_torch):
        got = path(deltas, discounts * cs)
        assert got.dtype == dtype
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


# --- the loss's written-out gradient against autograd through torch ops ------------------------


def _composed_loss(logits, actions, anchor, values, returns, *, costs, value_scale=None):
    """The loss terms built from torch ops, autograd deriving the gradient: what
    ``actor_critic_loss`` computed before its backward was written out (issue 34)."""
    baseline_cost, entropy_cost, clip_eps, normalize = costs
    advantages = returns.pg_advantages
    if normalize and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    taken = action_log_probs(logits, actions)
    ratio = torch.exp(taken - anchor)
    if clip_eps is None:
        pg = -(taken * advantages).mean()
    else:
        clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
        pg = -torch.min(ratio * advantages, clipped * advantages).mean()
    error = returns.vs - values
    if value_scale is not None:
        error = error / value_scale
    baseline = baseline_cost * 0.5 * error.pow(2).mean()
    entropy = -entropy_cost * policy_entropy(logits).mean()
    return {"total": pg + baseline + entropy, "pg": pg, "baseline": baseline, "entropy": entropy}


def _minibatch(shape=(6, 4), num_actions=5, seed=3, masked=False):
    gen = torch.Generator().manual_seed(seed)

    def normal(*size):
        return torch.randn(*size, generator=gen, dtype=torch.float64)

    logits = normal(*shape, num_actions)
    actions = torch.randint(0, num_actions, shape, generator=gen)
    if masked:
        # An impossible action in every row, never the one taken.
        logits[..., :] = torch.where(
            torch.arange(num_actions) == (actions.unsqueeze(-1) + 1) % num_actions,
            -math.inf,
            logits,
        )
    # Behaviour log-probs near the target's: ratios on both sides of a 0.1 clip.
    anchor = action_log_probs(logits, actions) + 0.2 * normal(*shape)
    returns = VTraceReturns(vs=normal(*shape), pg_advantages=normal(*shape))
    return logits.requires_grad_(), actions, anchor, normal(*shape).requires_grad_(), returns


@pytest.mark.parametrize("shape", [(6, 4), (24,)])
@pytest.mark.parametrize("clip_eps", [None, 0.1])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("term", ["total", "pg", "baseline", "entropy"])
def test_loss_terms_and_gradients_match_autograd_through_torch_ops(
    shape, clip_eps, normalize, scaled, masked, term
):
    logits, actions, anchor, values, returns = _minibatch(shape, masked=masked)
    costs = (0.5, 0.01, clip_eps, normalize)
    scale = torch.tensor(2.5, dtype=torch.float64) if scaled else None

    expected = _composed_loss(
        logits, actions, anchor, values, returns, costs=costs, value_scale=scale
    )
    loss = actor_critic_loss(
        logits,
        actions,
        anchor,
        values,
        returns,
        baseline_cost=0.5,
        entropy_cost=0.01,
        clip_eps=clip_eps,
        normalize_advantages=normalize,
        value_scale=scale,
    )

    torch.testing.assert_close(getattr(loss, term), expected[term], rtol=1e-12, atol=1e-14)
    want = torch.autograd.grad(expected[term], (logits, values), allow_unused=True)
    got = torch.autograd.grad(getattr(loss, term), (logits, values), allow_unused=True)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None or not g.any()
        else:
            assert torch.isfinite(g).all()
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-14)


def test_clipped_loss_gradient_passes_a_finite_difference_check():
    logits, actions, anchor, values, returns = _minibatch((5, 3), seed=11)

    def terms(logits, values):
        loss = actor_critic_loss(
            logits, actions, anchor, values, returns,
            baseline_cost=0.5, entropy_cost=0.05, clip_eps=0.1,
            normalize_advantages=True, value_scale=torch.tensor(1.7, dtype=torch.float64),
        )  # fmt: skip
        return loss.total, loss.pg, loss.baseline, loss.entropy

    assert torch.autograd.gradcheck(terms, (logits, values))


def test_loss_gradient_flows_through_total_and_a_term_together():
    logits, actions, anchor, values, returns = _minibatch()
    costs = (0.5, 0.01, 0.1, True)
    kwargs = {"baseline_cost": 0.5, "entropy_cost": 0.01, "clip_eps": 0.1}
    loss = actor_critic_loss(
        logits, actions, anchor, values, returns, **kwargs, normalize_advantages=True
    )
    expected = _composed_loss(logits, actions, anchor, values, returns, costs=costs)

    got = torch.autograd.grad(loss.total + 3.0 * loss.entropy, (logits, values))
    want = torch.autograd.grad(expected["total"] + 3.0 * expected["entropy"], (logits, values))

    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-14)
