"""PPO's settings (Schulman et al. 2017).

Defaults follow cleanrl's ``ppo.py`` where they transfer to seedq's many-envs layout (64 envs x
32 steps per update instead of 4 x 128), with observation and reward normalisation on and
cleanrl's tanh MLP. The tanh matters with observation normalisation: its inputs are clipped
only at +-10, and with a ReLU torso the policy drifted to a deterministic one on Acrobot-v1
before its first swing-up (return -500 for 1.5 M env steps; tanh: -100 within ~0.15 M).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from seedq.agents.config import (
    LOG_STD_KINDS,
    AlgorithmConfig,
    ModelConfig,
    validate_clip_eps,
    validate_common,
    validate_lr_schedule,
    validate_minibatches,
)
from seedq.schema import (
    ConfigError,
    check_positive,
    choice,
    finite,
    in_unit_interval,
    setting,
)


@dataclass
class PPOConfig(AlgorithmConfig):
    batch_of_envs: ClassVar[bool] = True

    name: str = setting("ppo", "the algorithm")
    unroll_length: int = setting(32, "transitions per unroll (an unroll has one more row)")
    batch_size: int = setting(
        64,
        "unrolls (env columns) per update; the default actors step 64 envs on a 2-core box, "
        "one unroll each; 0: one of each env of the run (sized at start)",
    )
    epochs: int = setting(4, "passes over each collected batch")
    minibatches: int = setting(
        4,
        "minibatches per epoch (split by transitions; by env column with an LSTM); 0: sized "
        "at start to shares of minibatch_size transitions",
    )
    minibatch_size: int = setting(
        0,
        "minibatches=0: transitions per minibatch, so a machine that runs more envs (larger "
        "batches) takes more updates per batch and as many per frame; ignored otherwise",
    )
    lr: float = setting(2.5e-4, "learning rate")
    lr_schedule: str = setting("linear", "constant, or linear (anneals to 0 at total_env_steps)")
    lr_decay_start: float = setting(
        0.0,
        "lr_schedule=linear: the share of total_env_steps the rate holds before it decays "
        "linearly to 0 at total_env_steps (0: from the first step; in [0, 1))",
    )
    adam_eps: float = setting(1e-5, "Adam's epsilon")
    grad_clip: float = setting(0.5, "global gradient-norm clip")
    gae_lambda: float = setting(0.95, "GAE lambda")
    clip_eps: float = setting(
        0.2, "clip of the probability ratio in the surrogate objective, in (0, 1)"
    )
    value_clip: float | None = setting(
        None, "clip of the value change around the collected values (null: plain MSE)"
    )
    value_norm: bool = setting(
        False,
        "PopArt: the value head learns its GAE returns standardised by moving moments of them "
        "(saved in the weights), its outputs rescaled so values keep their meaning; value_clip "
        "is then in standard deviations",
        network=True,
    )
    value_cost: float = setting(0.5, "weight of the value loss")
    entropy_cost: float = setting(0.01, "weight of the entropy bonus")
    indicator_lr_scale: float = setting(
        20.0,
        "learning-rate multiplier of the first layer's weights over bool (one-hot) "
        "observations: a state's row learns only from the samples that visit it",
    )
    normalize_advantages: bool = setting(True, "standardise advantages per minibatch")
    reward_scaling: bool = setting(
        True,
        "divide rewards, after reward_clip, by the running std of their discounted return "
        "(saved in checkpoints)",
    )
    pause_acting: bool = setting(
        True,
        "on-policy: inference waits while an update trains, so each batch is collected by one "
        "policy (only unrolls straddling an update mix two; their ratios start away from 1)",
    )
    shared_body: bool = setting(
        False,
        "one body for policy and value (cheaper for frames); false: two, as cleanrl",
        network=True,
    )
    squash: bool = setting(
        False,
        "continuous actions: tanh-squash into the env's bounds (false: the env clips)",
        network=True,
    )
    log_std: str = setting(
        "state_independent",
        f"continuous actions: the Gaussian's log-std, {', '.join(LOG_STD_KINDS)}",
        network=True,
    )
    init_log_std: float = setting(0.0, "continuous actions: initial log-std")
    model: ModelConfig = setting(
        help="the actor-critic network",
        factory=lambda: ModelConfig(obs_norm=True, activation="tanh"),
    )


def validate(alg: PPOConfig, cfg: object) -> None:
    validate_common(alg)
    validate_lr_schedule(alg)
    choice("algorithm.log_std", alg.log_std, LOG_STD_KINDS)
    check_positive(
        alg,
        "algorithm",
        ["unroll_length", "epochs", "indicator_lr_scale"],
    )
    validate_clip_eps(alg)
    validate_minibatches(alg)
    check_positive(alg, "algorithm", ["value_cost", "entropy_cost"], zero_ok=True)
    in_unit_interval("algorithm.gae_lambda", alg.gae_lambda)
    if alg.value_clip is not None and not 0 < alg.value_clip < math.inf:
        raise ConfigError(
            f"algorithm.value_clip={alg.value_clip} must be a finite number > 0 or null"
        )
    finite("algorithm.init_log_std", alg.init_log_std)
