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


@dataclass
class EnvConfig:
    # cartpole: gymnasium's native CartPole vector env; gym: any gymnasium id (vectorised in
    # Python); atari: ale_py's C++ AtariVectorEnv; fake: observations encode (env id, step).
    kind: str = "cartpole"
    id: str = "CartPole-v1"
    max_episode_steps: int | None = None
    # Atari preprocessing (DeepMind): frame skip, max-pool, 84x84 grey, frame stack, no-ops.
    frame_skip: int = 4
    frame_stack: int = 4
    screen_size: int = 84
    grayscale: bool = True
    noop_max: int = 30
    episodic_life: bool = False
    repeat_action_probability: float = 0.25
    full_action_space: bool = False
    # gym: how to vectorise a Python env ("sync" runs in the actor process, "async" in
    # subprocesses).
    vectorization: str = "sync"
    # fake env (tests and benchmarks)
    obs_shape: list[int] = field(default_factory=lambda: [4])
    obs_dtype: str = "float32"
    num_actions: int = 2
    episode_length: int = 10
    truncate_episodes: bool = False


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
class AlgorithmConfig:
    name: str = "vtrace"
    unroll_length: int = 20
    batch_size: int = 32  # unrolls (env columns) per training batch
    train_queue_batches: int = 2  # bounded queue of ready batches: keeps data fresh
    gamma: float = 0.99
    lambda_: float = 1.0
    clip_rho_threshold: float | None = 1.0
    clip_pg_rho_threshold: float | None = 1.0
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    reward_clip: str = "none"  # none | abs_one | tanh
    optimizer: str = "adam"  # adam | rmsprop
    lr: float = 1e-3
    lr_schedule: str = "constant"  # constant | linear (to 0 at total_env_steps)
    adam_eps: float = 1e-8
    rmsprop_alpha: float = 0.99
    rmsprop_eps: float = 1e-5
    rmsprop_momentum: float = 0.0
    grad_clip: float = 40.0
    model: ModelConfig = field(default_factory=ModelConfig)


@dataclass
class HardwareConfig:
    device: str = "cpu"  # cpu | cuda | cuda:N
    num_threads: int = 0  # torch intra-op threads; 0: torch default
    pin_memory: bool = False
    channels_last: bool = True
    amp: str = "none"  # none | bf16 | fp16
    compile: bool = False
    gil_switch_interval_s: float = 0.0002


@dataclass
class LauncherConfig:
    name: str = "local"
    python: str = ""  # interpreter for actor subprocesses; "" = the current one


@dataclass
class SeedqConfig:
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
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


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="seedq_schema", node=SeedqConfig)
    cs.store(group="algorithm", name="vtrace_schema", node=AlgorithmConfig)
    cs.store(group="env", name="env_schema", node=EnvConfig)
    cs.store(group="hardware", name="hardware_schema", node=HardwareConfig)
    cs.store(group="launcher", name="launcher_schema", node=LauncherConfig)


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the key and what is allowed."""


def _choice(key: str, value: Any, allowed: list[Any]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of {allowed}")


def _positive(key: str, value: float, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ConfigError(f"{key}={value!r} is out of range; it must be {bound}")


def validate(cfg: Any) -> None:
    """Check ranges and choices of a composed config (a SeedqConfig or DictConfig of one)."""
    env, alg, hw, actor, broker = cfg.env, cfg.algorithm, cfg.hardware, cfg.actor, cfg.broker
    _choice("algorithm.name", alg.name, ["vtrace"])
    _choice("env.kind", env.kind, ["cartpole", "gym", "atari", "fake"])
    _choice("env.vectorization", env.vectorization, ["sync", "async"])
    _choice("algorithm.reward_clip", alg.reward_clip, ["none", "abs_one", "tanh"])
    _choice("algorithm.optimizer", alg.optimizer, ["adam", "rmsprop"])
    _choice("algorithm.lr_schedule", alg.lr_schedule, ["constant", "linear"])
    _choice("algorithm.model.torso", alg.model.torso, ["auto", "mlp", "nature", "impala"])
    _choice("hardware.amp", hw.amp, ["none", "bf16", "fp16"])
    _choice("actor.transport", actor.transport, ["tcp", "inproc"])
    _choice("launcher.name", cfg.launcher.name, ["local"])
    if not (hw.device == "cpu" or hw.device == "cuda" or str(hw.device).startswith("cuda:")):
        raise ConfigError(f"hardware.device={hw.device!r} is not allowed; use cpu, cuda or cuda:N")
    for key, value in [
        ("algorithm.unroll_length", alg.unroll_length),
        ("algorithm.batch_size", alg.batch_size),
        ("algorithm.train_queue_batches", alg.train_queue_batches),
        ("algorithm.lr", alg.lr),
        ("algorithm.grad_clip", alg.grad_clip),
        ("actor.num_actors", actor.num_actors),
        ("actor.envs_per_batch", actor.envs_per_batch),
        ("actor.batches_per_actor", actor.batches_per_actor),
        ("broker.max_batch", broker.max_batch),
        ("broker.deadline_ms", broker.deadline_ms),
        ("broker.max_message_bytes", broker.max_message_bytes),
        ("log_interval_s", cfg.log_interval_s),
        ("total_env_steps", cfg.total_env_steps),
        ("env.frame_skip", env.frame_skip),
        ("env.frame_stack", env.frame_stack),
        ("env.screen_size", env.screen_size),
        ("env.num_actions", env.num_actions),
        ("env.episode_length", env.episode_length),
    ]:
        _positive(key, value)
    for key, value in [
        ("algorithm.baseline_cost", alg.baseline_cost),
        ("algorithm.entropy_cost", alg.entropy_cost),
        ("env.noop_max", env.noop_max),
        ("max_minutes", cfg.max_minutes),
        ("hardware.num_threads", hw.num_threads),
        ("algorithm.model.lstm_size", alg.model.lstm_size),
    ]:
        _positive(key, value, zero_ok=True)
    if not 0.0 <= alg.gamma <= 1.0:
        raise ConfigError(f"algorithm.gamma={alg.gamma!r} is out of range; it must be in [0, 1]")
    if not 0.0 <= alg.lambda_ <= 1.0:
        raise ConfigError(
            f"algorithm.lambda_={alg.lambda_!r} is out of range; it must be in [0, 1]"
        )
    if not 0.0 <= env.repeat_action_probability <= 1.0:
        raise ConfigError(
            f"env.repeat_action_probability={env.repeat_action_probability!r} is out of range; "
            "it must be in [0, 1]"
        )
    if not 0 <= broker.port <= 65535:
        raise ConfigError(f"broker.port={broker.port!r} is out of range; it must be in [0, 65535]")
    if any(h <= 0 for h in alg.model.hidden_sizes):
        raise ConfigError(
            f"algorithm.model.hidden_sizes={list(alg.model.hidden_sizes)} must all be > 0"
        )
    if env.max_episode_steps is not None:
        _positive("env.max_episode_steps", env.max_episode_steps)
    if alg.model.use_lstm and alg.model.lstm_size <= 0:
        raise ConfigError("algorithm.model.lstm_size must be > 0 when algorithm.model.use_lstm")
