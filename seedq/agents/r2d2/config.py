"""R2D2's settings (Kapturowski et al. 2019); the defaults are tuned for CartPole on a CPU.

``tuning/r2d2_atari.yaml`` applies the paper's Atari settings (noted beside each field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from seedq.agents.config import AlgorithmConfig, ModelConfig, validate_common
from seedq.schema import ConfigError, check_positive, in_unit_interval, setting


@dataclass
class QModelConfig(ModelConfig):
    hidden_sizes: list[int] = setting(
        help="widths of the MLP torso's layers (ignored by the conv torsos)", factory=lambda: [64]
    )
    use_lstm: bool = setting(True, "add an LSTM core between torso and heads (R2D2's)")
    lstm_size: int = setting(64, "LSTM hidden and cell size (512 in the paper)")
    dueling: bool = setting(True, "dueling heads: Q = V + A - mean(A) (Wang et al. 2016)")
    head_size: int = setting(64, "hidden layer of each head (512 in the paper)")


@dataclass
class R2D2Config(AlgorithmConfig):
    keeps_replay: ClassVar[bool] = True
    cannot: ClassVar[dict[str, str]] = {
        "learn": (
            "it learns from a prioritised replay of sequences sampled at a bounded replay "
            "ratio, and explores with per-env epsilons that Anakin's loop does not keep"
        )
    }
    name: str = setting("r2d2", "the algorithm")
    sequence_length: int = setting(20, "transitions trained on per sequence (80 in the paper)")
    burn_in: int = setting(10, "steps replayed without gradient to warm the stored state (40)")
    n_step: int = setting(5, "n of the n-step double-Q targets")
    adam_eps: float = setting(1e-3, "Adam's epsilon")
    grad_clip: float = setting(80.0, "global gradient-norm clip")
    batch_size: int = setting(32, "sequences per update (64 in the paper)")
    target_update_period: int = setting(
        200, "learner updates between target-network copies (2500 in the paper)"
    )
    value_rescale_eps: float = setting(1e-3, "epsilon of the value rescaling h(x)")
    priority_exponent: float = setting(0.9, "alpha: priorities are raised to this power")
    importance_exponent: float = setting(0.6, "beta of the importance-sampling weights")
    priority_eta: float = setting(0.9, "priority = eta max|td| + (1 - eta) mean|td|")
    replay_capacity: int = setting(4000, "sequences the replay holds")
    replay_min_size: int = setting(200, "sequences stored before training starts")
    replay_ratio: float = setting(
        2.0, "sequences sampled per sequence inserted, held from both sides by a rate limiter"
    )
    replay_slack_batches: int = setting(
        8, "how far inserts may run ahead of the ratio, in training batches"
    )
    replay_memory_fraction: float = setting(
        0.8, "the replay may take at most this share of the machine's available memory"
    )
    epsilon_base: float = setting(
        0.4, "exploring env i of N acts with epsilon base^(1 + alpha i / (N - 1)) (Ape-X)"
    )
    epsilon_alpha: float = setting(7.0, "alpha of the epsilon ladder")
    eval_epsilon: float = setting(0.001, "epsilon of the evaluation envs and of seedq-eval")
    eval_batches: int = setting(
        1, "env batches (the last ones) that act with eval_epsilon; the run is judged by them"
    )
    model: QModelConfig = setting(help="the recurrent Q network", factory=QModelConfig)


def validate(alg: R2D2Config, cfg: object) -> None:
    validate_common(alg)
    check_positive(
        alg,
        "algorithm",
        [
            "sequence_length",
            "n_step",
            "target_update_period",
            "replay_capacity",
            "replay_ratio",
            "replay_slack_batches",
        ],
    )
    check_positive(alg.model, "algorithm.model", ["head_size"])
    check_positive(
        alg,
        "algorithm",
        ["burn_in", "value_rescale_eps", "epsilon_alpha", "eval_batches"],
        zero_ok=True,
    )
    for key in (
        "priority_exponent",
        "importance_exponent",
        "priority_eta",
        "epsilon_base",
        "eval_epsilon",
        "replay_memory_fraction",
    ):
        in_unit_interval(f"algorithm.{key}", getattr(alg, key))
    if alg.burn_in >= alg.sequence_length:
        raise ConfigError(
            f"algorithm.burn_in={alg.burn_in} must be smaller than algorithm.sequence_length="
            f"{alg.sequence_length} (consecutive sequences overlap by burn_in + 1 steps)"
        )
    if alg.n_step > alg.sequence_length:
        # A target looks min(n, L - t) steps ahead within its sequence's L trained transitions
        # (loss.n_step_double_q_targets): past L, every target would be cut short.
        raise ConfigError(
            f"algorithm.n_step={alg.n_step} is more than algorithm.sequence_length="
            f"{alg.sequence_length}: a target looks ahead only within its sequence's trained "
            "transitions, so every one would be cut to fewer steps; use n_step <= "
            "sequence_length"
        )
    if not alg.batch_size <= alg.replay_min_size <= alg.replay_capacity:
        raise ConfigError(
            f"algorithm.replay_min_size={alg.replay_min_size} must be between "
            f"algorithm.batch_size={alg.batch_size} and algorithm.replay_capacity="
            f"{alg.replay_capacity}"
        )
    actor = cfg.actor  # type: ignore[attr-defined]
    batches = actor.num_actors * actor.batches_per_actor
    if alg.eval_batches >= batches:
        raise ConfigError(
            f"algorithm.eval_batches={alg.eval_batches} leaves no env batch to explore with: "
            f"there are {batches} (actor.num_actors x actor.batches_per_actor); use at most "
            f"{batches - 1}"
        )
