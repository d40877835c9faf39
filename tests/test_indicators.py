"""Indicator (bool, one-hot) observations: which weights read them, their learning rate in
PPO's and V-trace's optimizers, and the linear schedule keeping it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seedq.agents.common.indicators import input_weights, param_groups
from seedq.agents.common.update import Placement, linear_lr
from seedq.agents.ppo.config import PPOConfig
from seedq.agents.ppo.learner import PPOLearner
from seedq.agents.ppo.network import build_network as build_ppo
from seedq.agents.vtrace.config import VTraceConfig
from seedq.agents.vtrace.learner import VTraceLearner
from seedq.agents.vtrace.network import build_network as build_vtrace
from seedq.messages import EnvSpec

ONE_HOT = EnvSpec((500,), "bool", 6)
FLOATS = EnvSpec((500,), "float32", 6)


def ppo_learner(spec: EnvSpec) -> PPOLearner:
    cfg = PPOConfig()
    model = build_ppo(spec, cfg, channels_last=False)
    return PPOLearner(model, cfg, Placement.cpu(), total_env_steps=1000, spec=spec)


def scaled_lrs(optimizer: torch.optim.Optimizer) -> list[float]:
    return [g["lr"] for g in optimizer.param_groups]


def test_the_input_weights_are_the_first_layer_of_each_mlp_torso():
    model = build_ppo(ONE_HOT, PPOConfig(), channels_last=False)

    weights = input_weights(model)

    # PPO keeps a policy body and a value body: two embedding tables of 64 x 500.
    assert [tuple(w.shape) for w in weights] == [(64, 500), (64, 500)]


def test_ppo_gives_the_weights_reading_one_hots_the_scaled_learning_rate():
    cfg = PPOConfig()
    optimizer = ppo_learner(ONE_HOT).optimizer

    assert scaled_lrs(optimizer) == [cfg.lr, cfg.lr * cfg.indicator_lr_scale]
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(
        list(build_ppo(ONE_HOT, cfg, channels_last=False).parameters())
    )


def test_float_observations_keep_one_learning_rate():
    assert scaled_lrs(ppo_learner(FLOATS).optimizer) == [PPOConfig().lr]


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
def test_vtrace_gives_the_weights_reading_one_hots_the_scaled_learning_rate(optimizer):
    cfg = VTraceConfig(optimizer=optimizer, indicator_lr_scale=5.0)
    model = build_vtrace(ONE_HOT.obs_shape, 6, cfg.model, channels_last=False)

    learner = VTraceLearner(model, cfg, Placement.cpu(), total_env_steps=100, spec=ONE_HOT)

    assert scaled_lrs(learner.optimizer) == [cfg.lr, cfg.lr * 5.0]
    assert learner.optimizer.param_groups[1]["params"] == input_weights(model)


def test_the_linear_schedule_keeps_each_groups_scale():
    optimizer = ppo_learner(ONE_HOT).optimizer

    linear_lr(optimizer, 1e-3, env_steps=250, total=1000)

    np.testing.assert_allclose(scaled_lrs(optimizer), [7.5e-4, 7.5e-4 * 20])


@pytest.mark.parametrize(
    ("env_steps", "fraction"),
    # Held at the full rate for the first 40 % of 1,000 steps, then linear to 0 at 1,000.
    [(0, 1.0), (400, 1.0), (550, 0.75), (700, 0.5), (1000, 0.0), (1200, 0.0)],
)
def test_the_linear_schedule_holds_the_rate_until_its_start(env_steps, fraction):
    optimizer = ppo_learner(ONE_HOT).optimizer

    linear_lr(optimizer, 1e-3, env_steps=env_steps, total=1000, start=0.4)

    np.testing.assert_allclose(scaled_lrs(optimizer), [1e-3 * fraction, 1e-3 * fraction * 20])


def test_vtrace_follows_its_configured_decay_start():
    cfg = VTraceConfig(lr_schedule="linear", lr_decay_start=0.5, indicator_lr_scale=5.0)
    model = build_vtrace(ONE_HOT.obs_shape, 6, cfg.model, channels_last=False)
    learner = VTraceLearner(model, cfg, Placement.cpu(), total_env_steps=100, spec=ONE_HOT)

    learner.set_progress(40)
    held = scaled_lrs(learner.optimizer)
    learner.set_progress(75)

    np.testing.assert_allclose(held, [cfg.lr, cfg.lr * 5.0])
    np.testing.assert_allclose(scaled_lrs(learner.optimizer), [cfg.lr / 2, cfg.lr * 5.0 / 2])


def test_a_scale_of_one_is_a_single_group():
    model = build_ppo(ONE_HOT, PPOConfig(), channels_last=False)

    assert len(param_groups(model, ONE_HOT, 1e-3, 1.0)) == 1
