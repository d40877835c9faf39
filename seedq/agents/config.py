"""What every algorithm's config has: the shared hyper-parameters and the network's torso."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import MISSING, DictConfig, OmegaConf

from seedq.agents.torsos import ACTIVATIONS, TORSO_CHOICES
from seedq.schema import ConfigError, check_positive, choice, in_unit_interval, setting

# What a model config written before ``activation`` existed was trained with.
LEGACY_ACTIVATION = "relu"


def model_activation(model_cfg: Any) -> str:
    """``model_cfg.activation``; :data:`LEGACY_ACTIVATION` for a saved config that predates it."""
    return str(getattr(model_cfg, "activation", LEGACY_ACTIVATION))


# The policy head's initial orthogonal gain (algorithm.model.policy_init_gain) by default, and
# of every saved config that predates the key.
POLICY_INIT_GAIN = 0.01


def model_policy_init_gain(model_cfg: Any) -> float:
    """``model_cfg.policy_init_gain``; :data:`POLICY_INIT_GAIN` for a saved config without it
    (only the initial weights depend on it, so a loaded checkpoint is the same either way)."""
    return float(getattr(model_cfg, "policy_init_gain", POLICY_INIT_GAIN))


# The clip of the observation normalisers, in running standard deviations (norm_clip).
NORM_CLIP = 10.0


def model_norm_clip(model_cfg: Any) -> float:
    """``model_cfg.norm_clip``; :data:`NORM_CLIP` for a saved config without it (checkpoints
    from before the key clipped at 10)."""
    return float(getattr(model_cfg, "norm_clip", NORM_CLIP))


REWARD_CLIPS = ("none", "abs_one", "tanh")
# How a Gaussian policy head gets its log-std (seedq.agents.common.policy_head).
LOG_STD_KINDS = ("state_independent", "learned")


@dataclass
class ModelConfig:
    torso: str = setting(
        "auto",
        f"network torso: {', '.join(TORSO_CHOICES)} (auto: mlp for vectors, nature for frames, "
        "minatar for frames smaller than 36x36)",
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
        "learner between updates, saved in checkpoints, applied by seedq-eval); frames: see "
        "frame_norm",
    )
    frame_norm: bool = setting(
        True,
        "normalise frames per pixel by running mean/std kept in the model, as obs_norm does "
        "vectors: static pixels (walls, scores, backgrounds) go to 0 and the few that change "
        "stand out (Pong learnt ~10x faster per frame with it); false: pixels / 255",
    )
    norm_clip: float = setting(
        NORM_CLIP,
        "obs_norm's and frame_norm's clip, in running standard deviations: a normalised input "
        "is clipped to [-norm_clip, norm_clip] (Sample Factory's is 5)",
    )
    policy_init_gain: float = setting(
        POLICY_INIT_GAIN,
        "orthogonal gain of the policy head's weights at start (V-trace and PPO; R2D2 and SAC "
        "have their own heads): 0.01 (CleanRL's) or 1.0 (Sample Factory's); either starts near "
        "uniform, and the larger gain passes the policy gradient on to the torso from the "
        "first update",
    )


@dataclass
class AlgorithmConfig:
    """What every algorithm has; ``algorithm=<name>`` picks a subclass from the registry."""

    # What this algorithm's agent cannot do, each with the reason a refusal gives: an
    # architecture that needs it (seedq.arch.config.ARCH_NEEDS) is refused at validation.
    # "learn": a synchronous Agent.learn(unroll) on device-resident unrolls (arch=anakin).
    cannot: ClassVar[dict[str, str]] = {}
    # On-policy algorithms train on batches of whole env columns: for them batch_size 0 means
    # "one unroll of every env of the run", sized at start (seedq.launch.sizing.size_batch).
    batch_of_envs: ClassVar[bool] = False
    # Its learner can replay its minibatch updates from CUDA graphs (hardware.cuda_graphs;
    # seedq.agents.common.graphs); hardware.cuda_graphs=true is refused for one that cannot.
    graphed_updates: ClassVar[bool] = False
    # It learns from a replay, which checkpoint.replay=true saves beside the checkpoints; the
    # key is refused for one that keeps none.
    keeps_replay: ClassVar[bool] = False

    name: str = setting(MISSING, "the algorithm (set by the algorithm group)")
    batch_size: int = setting(32, "training batch: unrolls or sequences per update")
    gamma: float = setting(0.99, "discount factor")
    lr: float = setting(1e-3, "learning rate")
    adam_eps: float = setting(1e-8, "Adam's epsilon")
    grad_clip: float = setting(40.0, "global gradient-norm clip")
    reward_clip: str = setting(
        "none", f"reward transform before training: {', '.join(REWARD_CLIPS)}"
    )


def batch_of_envs(alg: Any) -> bool:
    """Whether ``alg`` (an algorithm config, or its structured DictConfig) takes batch_size 0
    as one unroll of every env of the run (:attr:`AlgorithmConfig.batch_of_envs`)."""
    kind = OmegaConf.get_type(alg) if isinstance(alg, DictConfig) else type(alg)
    return bool(getattr(kind, "batch_of_envs", False))


def splits_by_transition(alg: Any) -> bool:
    """Whether ``alg``'s minibatches share out a batch's transitions (a feed-forward model,
    and for V-trace ``shuffle_transitions``) rather than its env columns (a recurrent model)."""
    return bool(getattr(alg, "shuffle_transitions", True)) and not alg.model.use_lstm


def sized_minibatches(alg: Any, columns: int, length: int) -> int:
    """The minibatches per pass that ``algorithm.minibatches`` 0 stands for: a batch of
    ``columns`` unrolls of ``length`` transitions in shares of about
    ``algorithm.minibatch_size`` transitions each, at least one. A model that splits by env
    column gets shares of whole columns. Set so, the updates per frame stay the same when a
    larger machine runs more envs and so larger batches."""
    if splits_by_transition(alg):
        return max(1, columns * length // int(alg.minibatch_size))
    return max(1, columns // max(1, int(alg.minibatch_size) // length))


def validate_minibatches(alg: Any) -> None:
    """``algorithm.minibatches`` and ``algorithm.minibatch_size`` of an on-policy algorithm:
    0 minibatches (sized at start) needs a minibatch size; a number of them must fit the
    batch (when its size is known)."""
    check_positive(alg, "algorithm", ["minibatches", "minibatch_size"], zero_ok=True)
    if alg.minibatches == 0:
        if alg.minibatch_size <= 0:
            raise ConfigError(
                "algorithm.minibatches=0 sizes the minibatches at start from "
                "algorithm.minibatch_size, which is 0: set algorithm.minibatch_size "
                "(transitions per minibatch) or a number of minibatches"
            )
        return
    by_transition = splits_by_transition(alg)
    shares = alg.batch_size * alg.unroll_length if by_transition else alg.batch_size
    if alg.batch_size and alg.minibatches > shares:
        raise ConfigError(
            f"algorithm.minibatches={alg.minibatches} exceeds the batch's {shares} "
            f"{'transitions' if by_transition else 'env columns (algorithm.batch_size)'}; each "
            "minibatch needs at least one"
        )


# The on-policy learners' rate schedules (algorithm.lr_schedule).
LR_SCHEDULES = ("constant", "linear")


def validate_lr_schedule(alg: AlgorithmConfig) -> None:
    """``algorithm.lr_schedule`` and ``algorithm.lr_decay_start``, for the algorithms with both."""
    choice("algorithm.lr_schedule", alg.lr_schedule, LR_SCHEDULES)
    start = alg.lr_decay_start
    if not 0.0 <= start < 1.0:
        raise ConfigError(
            f"algorithm.lr_decay_start={start!r} is out of range; it must be in [0, 1): the "
            "share of total_env_steps the rate holds before it decays to 0 at total_env_steps"
        )


def validate_clip_eps(alg: AlgorithmConfig) -> None:
    """``algorithm.clip_eps``, the clipped surrogate's clip (null: none, where allowed)."""
    clip = alg.clip_eps
    if clip is not None and not 0.0 < clip < 1.0:
        raise ConfigError(
            f"algorithm.clip_eps={clip!r} is out of range; it must be in (0, 1): the ratio is "
            "clipped to [1 - clip_eps, 1 + clip_eps], whose lower bound never binds from 1 on "
            "(0.1 and 0.2 are the usual values)"
        )


def validate_common(alg: AlgorithmConfig) -> None:
    """The checks every algorithm shares: ranges, choices and the model section."""
    choice("algorithm.reward_clip", alg.reward_clip, REWARD_CLIPS)
    choice("algorithm.model.torso", alg.model.torso, TORSO_CHOICES)
    choice("algorithm.model.activation", alg.model.activation, tuple(ACTIVATIONS))
    check_positive(alg, "algorithm", ["lr", "adam_eps", "grad_clip"])
    # 0 is an on-policy algorithm's "one unroll of every env", set at start (launch.sizing).
    check_positive(alg, "algorithm", ["batch_size"], zero_ok=batch_of_envs(alg))
    check_positive(alg.model, "algorithm.model", ["lstm_size"], zero_ok=True)
    check_positive(alg.model, "algorithm.model", ["policy_init_gain", "norm_clip"])
    in_unit_interval("algorithm.gamma", alg.gamma)
    if any(h <= 0 for h in alg.model.hidden_sizes):
        raise ConfigError(
            f"algorithm.model.hidden_sizes={list(alg.model.hidden_sizes)} must all be > 0"
        )
    if alg.model.use_lstm and alg.model.lstm_size <= 0:
        raise ConfigError("algorithm.model.lstm_size must be > 0 when algorithm.model.use_lstm")
