"""What every algorithm's config has: the shared hyper-parameters and the network's torso."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from seedq.schema import ConfigError, check_positive, choice, in_unit_interval, setting

# The torsos seedq.learner.models builds (kept here so configs compose without torch; a test
# checks the two agree).
TORSOS = ("auto", "mlp", "nature", "impala", "minatar")
# The MLP torso's nonlinearities (seedq.learner.models.ACTIVATIONS; the same test keeps them equal).
ACTIVATIONS = ("relu", "tanh")
REWARD_CLIPS = ("none", "abs_one", "tanh")
# How a Gaussian policy head gets its log-std (seedq.learner.policy_head).
LOG_STD_KINDS = ("state_independent", "learned")


@dataclass
class ModelConfig:
    torso: str = setting(
        "auto",
        f"network torso: {', '.join(TORSOS)} (auto: mlp for vectors, nature for frames, minatar "
        "for frames smaller than 36x36)",
    )
    hidden_sizes: list[int] = setting(
        help="widths of the MLP torso's layers (ignored by the conv torsos)",
        factory=lambda: [64, 64],
    )
    activation: str = setting(
        "relu",
        f"nonlinearity of the MLP torso's layers: {', '.join(ACTIVATIONS)} (ignored by the conv "
        "torsos)",
    )
    use_lstm: bool = setting(False, "add an LSTM core between torso and heads")
    lstm_size: int = setting(256, "LSTM hidden and cell size")
    obs_norm: bool = setting(
        False,
        "normalise vector observations by running mean/std kept in the model (updated by the "
        "learner between updates, saved in checkpoints, applied by seedq-eval); frames: ignored",
    )


@dataclass
class AlgorithmConfig:
    """What every algorithm has; ``algorithm=<name>`` picks a subclass from the registry."""

    name: str = setting(MISSING, "the algorithm (set by the algorithm group)")
    batch_size: int = setting(32, "training batch: unrolls or sequences per update")
    gamma: float = setting(0.99, "discount factor")
    lr: float = setting(1e-3, "learning rate")
    adam_eps: float = setting(1e-8, "Adam's epsilon")
    grad_clip: float = setting(40.0, "global gradient-norm clip")
    reward_clip: str = setting(
        "none", f"reward transform before training: {', '.join(REWARD_CLIPS)}"
    )


def validate_common(alg: AlgorithmConfig) -> None:
    """The checks every algorithm shares: ranges, choices and the model section."""
    choice("algorithm.reward_clip", alg.reward_clip, REWARD_CLIPS)
    choice("algorithm.model.torso", alg.model.torso, TORSOS)
    choice("algorithm.model.activation", alg.model.activation, ACTIVATIONS)
    check_positive(alg, "algorithm", ["batch_size", "lr", "adam_eps", "grad_clip"])
    check_positive(alg.model, "algorithm.model", ["lstm_size"], zero_ok=True)
    in_unit_interval("algorithm.gamma", alg.gamma)
    if any(h <= 0 for h in alg.model.hidden_sizes):
        raise ConfigError(
            f"algorithm.model.hidden_sizes={list(alg.model.hidden_sizes)} must all be > 0"
        )
    if alg.model.use_lstm and alg.model.lstm_size <= 0:
        raise ConfigError("algorithm.model.lstm_size must be > 0 when algorithm.model.use_lstm")
