"""Typed configuration schema for seedq.

Hydra composes YAML groups (``algorithm``, ``env``, ``hardware``, ``launcher``) on top of these
dataclasses, registered in a ConfigStore so that a wrong type fails at composition time.
Range and cross-field checks live in :func:`validate`, which runs before any process starts and
names the bad key and its allowed values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from seedq.envs.config import EnvConfig, validate_env
from seedq.schema import ConfigError


@dataclass
class ActorConfig:
    num_actors: int = 2  # actor processes started by the local launcher
    envs_per_batch: int = 16  # envs stepped together and sent in one Step message
    batches_per_actor: int = 2  # env batches per process, stepped while others await actions
    transport: str = "tcp"  # tcp: subprocesses; inproc: threads in the learner process (tests)


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    max_batch: int = 64  # envs per inference batch
    deadline_ms: float = 2.0  # after the first waiting request
    max_message_bytes: int = 64 * 1024 * 1024


@dataclass
class ModelConfig:
    torso: str = "auto"  # auto: mlp for vectors, nature for frames; mlp | nature | impala
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    use_lstm: bool = False
    lstm_size: int = 256


@dataclass
class QModelConfig(ModelConfig):
    use_lstm: bool = True
    lstm_size: int = 512
    dueling: bool = True
    head_size: int = 512  # hidden layer of each dueling head


@dataclass
class AlgorithmConfig:
    """What every algorithm has; ``algorithm=vtrace|r2d2`` picks a subclass."""

    name: str = MISSING
    batch_size: int = 32
    gamma: float = 0.99
    lr: float = 1e-3
    adam_eps: float = 1e-8
    grad_clip: float = 40.0  # global gradient norm
    reward_clip: str = "none"  # none | abs_one | tanh


@dataclass
class VTraceConfig(AlgorithmConfig):
    name: str = "vtrace"
    unroll_length: int = 20
    batch_size: int = 32  # unrolls (env columns) per training batch
    train_queue_batches: int = 2  # bounded queue of ready batches: keeps data fresh
    lambda_: float = 1.0
    clip_rho_threshold: float | None = 1.0
    clip_pg_rho_threshold: float | None = 1.0
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    optimizer: str = "adam"  # adam | rmsprop
    lr_schedule: str = "constant"  # constant | linear (to 0 at total_env_steps)
    rmsprop_alpha: float = 0.99
    rmsprop_eps: float = 1e-5
    rmsprop_momentum: float = 0.0
    model: ModelConfig = field(default_factory=ModelConfig)


@dataclass
class R2D2Config(AlgorithmConfig):
    """Recurrent replay DQN (Kapturowski et al. 2019); the defaults are tuned for CartPole."""

    name: str = "r2d2"
    sequence_length: int = 20  # transitions trained on per sequence (80 in the paper)
    burn_in: int = 10  # steps replayed without gradient to warm the stored state (40)
    n_step: int = 5
    gamma: float = 0.99  # 0.997 in the paper
    lr: float = 1e-3
    adam_eps: float = 1e-3
    grad_clip: float = 80.0
    batch_size: int = 32  # sequences per update (64 in the paper)
    target_update_period: int = 200  # learner updates between target-network copies (2500)
    value_rescale_eps: float = 1e-3
    priority_exponent: float = 0.9
    importance_exponent: float = 0.6
    priority_eta: float = 0.9  # eta max|td| + (1 - eta) mean|td|
    replay_capacity: int = 4000  # sequences
    replay_min_size: int = 200  # sequences stored before training starts
    replay_ratio: float = 2.0  # samples per inserted sequence: bounded from both sides
    replay_slack_batches: int = 8  # how far inserts may run ahead of the ratio, in batches
    replay_memory_fraction: float = 0.8  # of the machine's available RAM
    epsilon_base: float = 0.4  # env i of N explores with base^(1 + alpha i / (N - 1))
    epsilon_alpha: float = 7.0
    eval_epsilon: float = 0.001
    eval_batches: int = 1  # env batches (the last ones) that act with eval_epsilon
    model: QModelConfig = field(
        default_factory=lambda: QModelConfig(hidden_sizes=[64], lstm_size=64, head_size=64)
    )


@dataclass
class HardwareConfig:
    device: str = "cpu"  # cpu | cuda | cuda:N
    num_threads: int = 0  # torch intra-op threads; 0: torch default
    pin_memory: bool = False
    channels_last: bool = True
    amp: str = "none"  # none | bf16 | fp16
    # torch.compile of the inference forward: none | default | reduce-overhead (CUDA graphs) |
    # max-autotune. Batches are padded to power-of-two sizes so few graphs get compiled.
    compile: str = "none"
    gil_switch_interval_s: float = 0.0002


@dataclass
class LauncherConfig:
    name: str = "local"
    python: str = ""  # interpreter for actor subprocesses; "" = the current one


@dataclass
class CheckpointConfig:
    every_minutes: float = 10.0  # 0: only at the end (and on Ctrl-C / SIGTERM)
    keep: int = 3  # newest checkpoints kept in <run dir>/checkpoints
    replay: bool = False  # R2D2: also save the replay (checkpoints/replay.npz, can be GBs)


@dataclass
class SeedqConfig:
    algorithm: AlgorithmConfig = MISSING
    env: EnvConfig = field(default_factory=EnvConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    seed: int = 0
    total_env_steps: int = 2_000_000
    max_minutes: float = 10.0  # wall-clock budget; 0 = unlimited
    stop_at_return: float | None = None  # stop when the 100-episode mean reaches this
    log_interval_s: float = 5.0
    run_dir: str = MISSING
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume: str | None = None  # a run directory or checkpoint file to continue


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="seedq_schema", node=SeedqConfig)
    cs.store(group="algorithm", name="vtrace_schema", node=VTraceConfig)
    cs.store(group="algorithm", name="r2d2_schema", node=R2D2Config)
    cs.store(group="env", name="env_schema", node=EnvConfig)
    cs.store(group="hardware", name="hardware_schema", node=HardwareConfig)
    cs.store(group="launcher", name="launcher_schema", node=LauncherConfig)


COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")


def _choice(key: str, value: Any, allowed: list[Any]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of {allowed}")


def _positive(key: str, value: float, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ConfigError(f"{key}={value!r} is out of range; it must be {bound}")


def _in_unit_interval(key: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}={value!r} is out of range; it must be in [0, 1]")


def validate(cfg: Any) -> None:
    """Check ranges and choices of a composed config (a SeedqConfig or DictConfig of one)."""
    alg, hw, actor, broker = cfg.algorithm, cfg.hardware, cfg.actor, cfg.broker
    _choice("algorithm.name", alg.name, ["vtrace", "r2d2"])
    _choice("algorithm.reward_clip", alg.reward_clip, ["none", "abs_one", "tanh"])
    _choice("algorithm.model.torso", alg.model.torso, ["auto", "mlp", "nature", "impala"])
    _choice("hardware.amp", hw.amp, ["none", "bf16", "fp16"])
    _choice("hardware.compile", hw.compile, list(COMPILE_MODES))
    _choice("actor.transport", actor.transport, ["tcp", "inproc"])
    _choice("launcher.name", cfg.launcher.name, ["local"])
    if not (hw.device == "cpu" or hw.device == "cuda" or str(hw.device).startswith("cuda:")):
        raise ConfigError(f"hardware.device={hw.device!r} is not allowed; use cpu, cuda or cuda:N")
    for key, value in [
        ("algorithm.batch_size", alg.batch_size),
        ("algorithm.lr", alg.lr),
        ("algorithm.adam_eps", alg.adam_eps),
        ("algorithm.grad_clip", alg.grad_clip),
        ("actor.num_actors", actor.num_actors),
        ("actor.envs_per_batch", actor.envs_per_batch),
        ("actor.batches_per_actor", actor.batches_per_actor),
        ("broker.max_batch", broker.max_batch),
        ("broker.deadline_ms", broker.deadline_ms),
        ("broker.max_message_bytes", broker.max_message_bytes),
        ("log_interval_s", cfg.log_interval_s),
        ("checkpoint.keep", cfg.checkpoint.keep),
        ("total_env_steps", cfg.total_env_steps),
    ]:
        _positive(key, value)
    for key, value in [
        ("max_minutes", cfg.max_minutes),
        ("checkpoint.every_minutes", cfg.checkpoint.every_minutes),
        ("hardware.num_threads", hw.num_threads),
        ("algorithm.model.lstm_size", alg.model.lstm_size),
    ]:
        _positive(key, value, zero_ok=True)
    _in_unit_interval("algorithm.gamma", alg.gamma)
    if not 0 <= broker.port <= 65535:
        raise ConfigError(f"broker.port={broker.port!r} is out of range; it must be in [0, 65535]")
    if any(h <= 0 for h in alg.model.hidden_sizes):
        raise ConfigError(
            f"algorithm.model.hidden_sizes={list(alg.model.hidden_sizes)} must all be > 0"
        )
    if alg.model.use_lstm and alg.model.lstm_size <= 0:
        raise ConfigError("algorithm.model.lstm_size must be > 0 when algorithm.model.use_lstm")
    validate_env(cfg.env, actor)
    if alg.name == "vtrace":
        _validate_vtrace(alg)
    else:
        _validate_r2d2(alg, actor)


def _validate_vtrace(alg: Any) -> None:
    _choice("algorithm.optimizer", alg.optimizer, ["adam", "rmsprop"])
    _choice("algorithm.lr_schedule", alg.lr_schedule, ["constant", "linear"])
    for key, value in [
        ("algorithm.unroll_length", alg.unroll_length),
        ("algorithm.train_queue_batches", alg.train_queue_batches),
    ]:
        _positive(key, value)
    for key, value in [
        ("algorithm.baseline_cost", alg.baseline_cost),
        ("algorithm.entropy_cost", alg.entropy_cost),
    ]:
        _positive(key, value, zero_ok=True)
    _in_unit_interval("algorithm.lambda_", alg.lambda_)


def _validate_r2d2(alg: Any, actor: Any) -> None:
    for key, value in [
        ("algorithm.sequence_length", alg.sequence_length),
        ("algorithm.n_step", alg.n_step),
        ("algorithm.target_update_period", alg.target_update_period),
        ("algorithm.replay_capacity", alg.replay_capacity),
        ("algorithm.replay_ratio", alg.replay_ratio),
        ("algorithm.replay_slack_batches", alg.replay_slack_batches),
        ("algorithm.model.head_size", alg.model.head_size),
    ]:
        _positive(key, value)
    for key, value in [
        ("algorithm.burn_in", alg.burn_in),
        ("algorithm.value_rescale_eps", alg.value_rescale_eps),
        ("algorithm.epsilon_alpha", alg.epsilon_alpha),
        ("algorithm.eval_batches", alg.eval_batches),
    ]:
        _positive(key, value, zero_ok=True)
    for key in (
        "priority_exponent",
        "importance_exponent",
        "priority_eta",
        "epsilon_base",
        "eval_epsilon",
        "replay_memory_fraction",
    ):
        _in_unit_interval(f"algorithm.{key}", getattr(alg, key))
    if alg.burn_in >= alg.sequence_length:
        raise ConfigError(
            f"algorithm.burn_in={alg.burn_in} must be smaller than algorithm.sequence_length="
            f"{alg.sequence_length} (consecutive sequences overlap by burn_in + 1 steps)"
        )
    if not alg.batch_size <= alg.replay_min_size <= alg.replay_capacity:
        raise ConfigError(
            f"algorithm.replay_min_size={alg.replay_min_size} must be between "
            f"algorithm.batch_size={alg.batch_size} and algorithm.replay_capacity="
            f"{alg.replay_capacity}"
        )
    batches = actor.num_actors * actor.batches_per_actor
    if alg.eval_batches >= batches:
        raise ConfigError(
            f"algorithm.eval_batches={alg.eval_batches} leaves no env batch to explore with: "
            f"there are {batches} (actor.num_actors x actor.batches_per_actor); use at most "
            f"{batches - 1}"
        )
