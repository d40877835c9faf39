"""SAC's settings (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications").

The defaults are the paper's (table 1: Adam 3e-4, batch 256, gamma 0.99, tau 0.005, two hidden
layers of 256, one gradient step per env step, target entropy -|A|) with a replay of 1e5
transitions, which suits the short classic-control tasks; ``tuning/sac_mujoco.yaml`` applies the
paper's 1e6 replay and starts updates after 10k steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from seedq.agents.config import AlgorithmConfig, ModelConfig, validate_common
from seedq.schema import ConfigError, check_positive, finite, setting

# Env kinds whose actions are always discrete: SAC refuses them before anything starts (a gym
# id with a discrete action space is refused once its spec is known, by the network).
DISCRETE_ENV_KINDS = ("cartpole", "atari", "football", "minatar", "procgen")


@dataclass
class SACModelConfig(ModelConfig):
    hidden_sizes: list[int] = setting(
        help="widths of the MLP layers of the actor and of each critic", factory=lambda: [256, 256]
    )


@dataclass
class SACConfig(AlgorithmConfig):
    keeps_replay: ClassVar[bool] = True
    cannot: ClassVar[dict[str, str]] = {
        "learn": (
            "it learns from a replay of past transitions sampled at a bounded replay ratio, "
            "not from each unroll once"
        )
    }
    name: str = setting("sac", "the algorithm")
    batch_size: int = setting(256, "transitions per update")
    lr: float = setting(3e-4, "learning rate of the actor, the critics and the temperature")
    grad_clip: float = setting(
        1e6, "global gradient-norm clip of each network (the paper does not clip; never binds)"
    )
    tau: float = setting(
        0.005, "Polyak rate of the target critics: target += tau (online - target)"
    )
    unroll_length: int = setting(
        8, "transitions each env adds to the replay at once (one unroll of the request stream)"
    )
    replay_capacity: int = setting(100_000, "transitions the replay holds (1e6 in the paper)")
    learning_starts: int = setting(
        5_000, "transitions stored before the first update (the initial policy acts until then)"
    )
    updates_per_step: float = setting(
        1.0,
        "gradient updates per env step, held from both sides by the replay's rate limiter "
        "(the learner waits for data, the actors wait for the learner)",
    )
    replay_slack_batches: int = setting(
        32, "how far inserts may run ahead of updates_per_step, in training batches"
    )
    block_updates: int = setting(
        8,
        "updates taken on one sampled block of block_updates x batch_size transitions (one "
        "replay draw and upload, as SB3's gradient_steps per train_freq); updates_per_step "
        "still holds over the run",
    )
    init_temperature: float = setting(1.0, "the temperature alpha at the start")
    learn_temperature: bool = setting(
        True, "tune alpha towards target_entropy (false: alpha stays init_temperature)"
    )
    target_entropy: float | None = setting(
        None, "entropy target of the policy in its [-1, 1] action space (null: -|A|)"
    )
    model: SACModelConfig = setting(
        help="the actor and the twin critics (MLPs)", factory=SACModelConfig
    )


def validate(alg: SACConfig, cfg: object) -> None:
    validate_common(alg)
    check_positive(
        alg,
        "algorithm",
        [
            "tau",
            "unroll_length",
            "replay_capacity",
            "updates_per_step",
            "replay_slack_batches",
            "block_updates",
            "init_temperature",
        ],
    )
    if alg.block_updates > alg.replay_slack_batches:
        raise ConfigError(
            f"algorithm.block_updates={alg.block_updates} must be at most "
            f"algorithm.replay_slack_batches={alg.replay_slack_batches}: a block needs that many "
            "batches of credit, and inserts stop at the slack"
        )
    if alg.target_entropy is not None:
        finite("algorithm.target_entropy", alg.target_entropy)
    if alg.tau > 1:
        raise ConfigError(f"algorithm.tau={alg.tau} must be in (0, 1]")
    if not alg.batch_size <= alg.learning_starts <= alg.replay_capacity:
        raise ConfigError(
            f"algorithm.learning_starts={alg.learning_starts} must be between "
            f"algorithm.batch_size={alg.batch_size} and algorithm.replay_capacity="
            f"{alg.replay_capacity}"
        )
    learners = getattr(getattr(cfg, "hardware", None), "learners", 1)
    if alg.model.obs_norm and learners > 1:
        raise ConfigError(
            "algorithm=sac merges observation statistics as transitions arrive, on each learner "
            f"rank apart: algorithm.model.obs_norm=true would let hardware.learners={learners} "
            "ranks drift apart; turn it off, or use one learner"
        )
    if alg.model.use_lstm:
        raise ConfigError(
            "algorithm=sac trains on single transitions: algorithm.model.use_lstm=true is not "
            "supported (use algorithm=ppo or algorithm=r2d2 for a recurrent policy)"
        )
    if alg.model.torso not in ("auto", "mlp"):
        raise ConfigError(
            f"algorithm=sac builds MLP actors and critics over vector observations: "
            f"algorithm.model.torso={alg.model.torso} is not supported (use auto or mlp)"
        )
    env = cfg.env  # type: ignore[attr-defined]
    if env.kind in DISCRETE_ENV_KINDS:
        raise ConfigError(
            f"algorithm=sac needs continuous (Box) actions; env.kind={env.kind} has discrete "
            "ones. Use env=mujoco or env=gym with a continuous env.id (e.g. Pendulum-v1), or "
            "algorithm=ppo, vtrace or r2d2 for discrete actions"
        )
