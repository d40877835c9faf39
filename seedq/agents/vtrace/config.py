"""V-trace's settings (IMPALA, Espeholt et al. 2018); defaults tuned for small CPU runs.

Observation normalisation and reward scaling are on by default: with raw rewards an env paying
-1 a step (Acrobot, MountainCar) gives advantages of tens, next to which an entropy bonus of
0.01 is nothing, and the policy collapsed to one action within ~100 k steps
(benchmarks/RESULTS.md, "V-trace defaults on envs nobody tuned for"). The MLP torso is tanh,
as PPO's: with a ReLU one on normalised (clipped at +-10) observations the policy drifted
away from Acrobot-v1's rare swing-ups and never found one (return -500 for 1.75 M env steps;
tanh: -116 at 0.2 M).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from seedq.agents.config import (
    AlgorithmConfig,
    ModelConfig,
    splits_by_transition,
    validate_clip_eps,
    validate_common,
    validate_lr_schedule,
    validate_minibatches,
)
from seedq.schema import ConfigError, check_positive, choice, in_unit_interval, setting

OPTIMIZERS = ("adam", "rmsprop")
# What the policy-gradient advantage bootstraps from (`vtrace_returns`'s pg_bootstrap).
PG_BOOTSTRAPS = ("vs", "lambda")
# What algorithm.clip_eps's ratio is taken against (`proximal_policy`).
PROXIMAL_POLICIES = ("behaviour", "batch_start")


@dataclass
class VTraceConfig(AlgorithmConfig):
    batch_of_envs: ClassVar[bool] = True
    graphed_updates: ClassVar[bool] = True

    name: str = setting("vtrace", "the algorithm")
    unroll_length: int = setting(20, "transitions per unroll (an unroll has one more row)")
    batch_size: int = setting(
        32,
        "unrolls (env columns) per training batch; 0: one of each env of the run (sized at "
        "start), so no batch waits behind another's data (the envs still act while it trains, "
        "unless pause_acting)",
    )
    epochs: int = setting(
        1,
        "passes over each batch (1: IMPALA); later passes correct for the changed policy by "
        "V-trace's importance weights",
    )
    minibatches: int = setting(
        1,
        "updates per pass, each on a share of the batch (<= batch_size): of its transitions "
        "for a feed-forward model with shuffle_transitions, else of its env columns; 0: sized "
        "at start to shares of minibatch_size transitions",
    )
    minibatch_size: int = setting(
        0,
        "minibatches=0: transitions per minibatch, so a machine that runs more envs (larger "
        "batches) takes more updates per batch and as many per frame; ignored otherwise",
    )
    shuffle_transitions: bool = setting(
        True,
        "minibatches > 1 with a feed-forward model: V-trace targets computed on the whole "
        "batch once per pass, then each minibatch a random share of its transitions (as "
        "PPO's); false: each minibatch a share of the env columns, targets computed inside it",
    )
    clip_eps: float | None = setting(
        None,
        "null: IMPALA's policy gradient; else PPO's clipped surrogate on the V-trace "
        "advantages with this clip (in (0, 1)) of pi/mu (Sample Factory's APPO), for epochs > 1",
    )
    fixed_targets: bool = setting(
        False,
        "V-trace targets and advantages computed once per batch, under the weights that "
        "start its updates, and kept for every pass (as PPO's GAE); needs a feed-forward "
        "model and shuffle_transitions; false: recomputed under the current weights at each "
        "pass",
    )
    proximal_policy: str = setting(
        "behaviour",
        "what clip_eps's ratio is taken against: behaviour (pi/mu, the actors' policy: Sample "
        "Factory's APPO) or batch_start (pi over the learner's policy before the batch's first "
        "update, IMPACT's target network: the clip bounds how far one batch moves the policy "
        "however old its data; the advantages keep V-trace's weights for the lag); batch_start "
        "needs clip_eps, a feed-forward model and shuffle_transitions",
    )
    normalize_advantages: bool = setting(False, "standardise the advantages per minibatch")
    train_queue_batches: int = setting(
        2, "bounded queue of ready training batches: small keeps the data fresh"
    )
    pause_acting: bool = setting(
        False,
        "inference waits while a batch trains, so the next batch is acted by the weights its "
        "training starts from (Sample Factory's synchronous regime); false: envs act on "
        "during training and each batch starts a batch's updates behind its data",
    )
    lambda_: float = setting(1.0, "V-trace lambda (1.0: the paper's targets)")
    pg_bootstrap: str = setting(
        "vs",
        "what the policy-gradient advantage bootstraps from after its step: vs (the next "
        "V-trace target, IMPALA's and seed_rl's) or lambda (lambda * that + (1 - lambda) * "
        "the next value, rlax's: GAE's weights on-policy); the same at lambda_ 1",
    )
    clip_rho_threshold: float | None = setting(
        1.0, "rho-bar of the value targets (null: no clipping)"
    )
    clip_pg_rho_threshold: float | None = setting(
        1.0, "rho-bar of the policy-gradient advantages (null: no clipping)"
    )
    value_norm: bool = setting(
        False,
        "PopArt: the value head learns its V-trace targets standardised by moving moments "
        "of them (saved in the weights), its outputs rescaled so values keep their meaning",
        network=True,
    )
    baseline_cost: float = setting(0.5, "weight of the value loss")
    entropy_cost: float = setting(0.01, "weight of the entropy bonus")
    reward_scaling: bool = setting(
        True,
        "divide rewards, after reward_clip, by the running std of their discounted return "
        "(saved in checkpoints)",
    )
    indicator_lr_scale: float = setting(
        20.0,
        "learning-rate multiplier of the first layer's weights over bool (one-hot) "
        "observations: a state's row learns only from the samples that visit it",
    )
    optimizer: str = setting("adam", f"optimizer: {', '.join(OPTIMIZERS)}")
    lr_schedule: str = setting("constant", "constant, or linear (decays to 0 at total_env_steps)")
    lr_decay_start: float = setting(
        0.0,
        "lr_schedule=linear: the share of total_env_steps the rate holds before it decays "
        "linearly to 0 at total_env_steps (0: from the first step; in [0, 1))",
    )
    rmsprop_alpha: float = setting(0.99, "RMSprop smoothing constant")
    rmsprop_eps: float = setting(1e-5, "RMSprop epsilon")
    rmsprop_momentum: float = setting(0.0, "RMSprop momentum")
    model: ModelConfig = setting(
        help="the actor-critic network",
        factory=lambda: ModelConfig(obs_norm=True, activation="tanh"),
    )


def validate(alg: VTraceConfig, cfg: object) -> None:
    validate_common(alg)
    choice("algorithm.optimizer", alg.optimizer, OPTIMIZERS)
    validate_rmsprop(alg)
    validate_lr_schedule(alg)
    check_positive(
        alg,
        "algorithm",
        ["unroll_length", "epochs", "train_queue_batches", "indicator_lr_scale"],
    )
    validate_minibatches(alg)
    validate_clip_eps(alg)
    choice("algorithm.proximal_policy", alg.proximal_policy, PROXIMAL_POLICIES)
    if alg.proximal_policy == "batch_start" and alg.clip_eps is None:
        raise ConfigError(
            "algorithm.proximal_policy=batch_start bounds the clipped surrogate's ratio; "
            "set algorithm.clip_eps (e.g. 0.1), or proximal_policy=behaviour"
        )
    validate_whole_batch_keys(alg)
    check_positive(alg, "algorithm", ["baseline_cost", "entropy_cost"], zero_ok=True)
    in_unit_interval("algorithm.lambda_", alg.lambda_)
    choice("algorithm.pg_bootstrap", alg.pg_bootstrap, PG_BOOTSTRAPS)
    for key in ("clip_rho_threshold", "clip_pg_rho_threshold"):
        threshold = getattr(alg, key)
        if threshold is not None and not 0 < threshold < math.inf:
            raise ConfigError(
                f"algorithm.{key}={threshold!r} is out of range; it must be a finite number "
                "> 0 (rho-bar, where the importance weights are clipped), or null for no clipping"
            )


def validate_rmsprop(alg: VTraceConfig) -> None:
    """RMSprop's keys, checked whichever optimizer is chosen: torch refuses a negative one at
    the first update, and a smoothing constant of 1 or more never forgets the first squared
    gradients (above 1 it weighs them negatively: NaN steps)."""
    check_positive(alg, "algorithm", ["rmsprop_eps"])
    for key in ("rmsprop_alpha", "rmsprop_momentum"):
        value = getattr(alg, key)
        if not 0 <= value < 1:
            raise ConfigError(f"algorithm.{key}={value!r} is out of range; it must be in [0, 1)")


def validate_whole_batch_keys(alg: VTraceConfig) -> None:
    """``fixed_targets`` and ``proximal_policy=batch_start`` take something over the whole
    batch before its first update, which needs minibatches of shuffled transitions of a
    feed-forward model. One error names every such key the run set, with the values that
    lift it, so a user who adds an LSTM to a preset setting both fixes it in one go."""
    if splits_by_transition(alg):
        return
    needs = []
    if alg.fixed_targets:
        needs.append(
            (
                "fixed_targets=true",
                "targets over the whole batch, kept across passes",
                "fixed_targets=false",
            )
        )
    if alg.proximal_policy == "batch_start":
        needs.append(
            (
                "proximal_policy=batch_start",
                "the batch's policy taken over all its transitions before the first update",
                "proximal_policy=behaviour",
            )
        )
    if not needs:
        return
    cause = (
        "algorithm.model.use_lstm=true"
        if alg.model.use_lstm
        else "algorithm.shuffle_transitions=false"
    )
    raise ConfigError(
        " and ".join(f"algorithm.{key}" for key, _, _ in needs)
        + f" need{'s' if len(needs) == 1 else ''} a feed-forward model and "
        "algorithm.shuffle_transitions=true ("
        + "; ".join(why for _, why, _ in needs)
        + f"); with {cause} each minibatch computes its own, so set "
        + " ".join(f"algorithm.{fix}" for _, _, fix in needs)
    )
