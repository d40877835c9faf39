"""The whole config: composes the sections, each of which lives with its owner.

Hydra composes the YAML groups (``algorithm``, ``env``, ``hardware``, ``launcher``) on top of
these dataclasses, registered in a ConfigStore so that a wrong type fails at composition time.
:func:`validate` runs before any process starts: each section's own checks, then the checks
that span sections. Every field has one default (its dataclass) and a help text
(``seedq-train --keys`` lists them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from seedq.actor.config import ActorConfig, validate_actor
from seedq.agents.config import AlgorithmConfig
from seedq.agents.registry import AGENTS, agent_names, config_class
from seedq.broker.config import BrokerConfig, validate_broker
from seedq.launch.config import LauncherConfig, validate_launcher
from seedq.learner.config import (
    CheckpointConfig,
    HardwareConfig,
    validate_checkpoint,
    validate_hardware,
)
from seedq.schema import (
    ConfigError,
    check_positive,
    choice,
    in_unit_interval,
    positive,
    setting,
)

__all__ = ["ConfigError", "SeedqConfig", "register_configs", "validate", "schema_for"]


@dataclass
class EnvConfig:
    # cartpole: gymnasium's native CartPole vector env; gym: any gymnasium id (vectorised in
    # Python); atari: ale_py's C++ AtariVectorEnv; football: gfootball engines stepped in the
    # actor process; fake: observations encode (env id, step).
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
    # football (Google Research Football, gfootball 2.10.2). representation: simple115v2 |
    # simple115 (float32 [115] -> MLP) or extracted (the 72x96 super mini-map, uint8
    # [4 * frame_stack, 72, 96] -> CNN); frame_stack 1 or 4 (gfootball stacks 4 or none).
    # rewards: scoring | scoring,checkpoints. controlled_players: left players the agent controls
    # in each game (1-11, at most the scenario's), each one env of its own: a game fills that many
    # rows of an actor batch, so actor.envs_per_batch must be a multiple of it.
    scenario: str = "academy_empty_goal_close"
    representation: str = "simple115v2"
    rewards: str = "scoring"
    controlled_players: int = 1
    # fake env (tests and benchmarks)
    obs_shape: list[int] = field(default_factory=lambda: [4])
    obs_dtype: str = "float32"
    num_actions: int = 2
    episode_length: int = 10
    truncate_episodes: bool = False


@dataclass
class SeedqConfig:
    algorithm: AlgorithmConfig = setting(MISSING, "the algorithm group: algorithm=vtrace|r2d2")
    env: EnvConfig = setting(help="the environment", factory=EnvConfig)
    hardware: HardwareConfig = setting(help="where the learner computes", factory=HardwareConfig)
    launcher: LauncherConfig = setting(help="how the roles are started", factory=LauncherConfig)
    actor: ActorConfig = setting(help="the actor processes", factory=ActorConfig)
    broker: BrokerConfig = setting(help="the learner's front end", factory=BrokerConfig)
    seed: int = setting(0, "seed of the learner, the env batches and exploration")
    total_env_steps: int = setting(5_000_000, "stop after this many env steps")
    max_minutes: float = setting(10.0, "stop after this many minutes of training (0: no limit)")
    stop_at_return: float | None = setting(
        None, "stop when the 100-episode mean return reaches this (null: never)"
    )
    log_interval_s: float = setting(5.0, "seconds between metrics rows and progress lines")
    run_dir: str = setting(MISSING, "where metrics, logs and checkpoints go (Hydra's run dir)")
    checkpoint: CheckpointConfig = setting(help="checkpoints", factory=CheckpointConfig)
    resume: str | None = setting(None, "a run directory or checkpoint file to continue")


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="seedq_schema", node=SeedqConfig)
    for name in agent_names():
        cs.store(group="algorithm", name=f"{name}_schema", node=config_class(name))
    cs.store(group="env", name="env_schema", node=EnvConfig)
    cs.store(group="hardware", name="hardware_schema", node=HardwareConfig)
    cs.store(group="launcher", name="launcher_schema", node=LauncherConfig)


def schema_for(algorithm: str) -> SeedqConfig:
    """The typed default config of one algorithm (tests and ``seedq-train --keys`` use it)."""
    return SeedqConfig(algorithm=config_class(algorithm)())


def validate(cfg: Any) -> None:
    """Check ranges and choices of a composed config (a SeedqConfig or DictConfig of one)."""
    choice("algorithm.name", cfg.algorithm.name, list(AGENTS))
    validate_env(cfg.env, cfg.actor)
    validate_hardware(cfg.hardware)
    validate_actor(cfg.actor)
    validate_broker(cfg.broker)
    validate_launcher(cfg.launcher)
    validate_checkpoint(cfg.checkpoint)
    positive("log_interval_s", cfg.log_interval_s)
    positive("total_env_steps", cfg.total_env_steps)
    positive("max_minutes", cfg.max_minutes, zero_ok=True)
    _algorithm_module(cfg.algorithm.name).validate(cfg.algorithm, cfg)


def _algorithm_module(name: str) -> Any:
    import importlib

    return importlib.import_module(config_class(name).__module__)


def validate_env(env: Any, actor: Any) -> None:
    choice("env.kind", env.kind, ["cartpole", "gym", "atari", "football", "fake"])
    choice("env.vectorization", env.vectorization, ["sync", "async"])
    for key in ("frame_skip", "frame_stack", "screen_size", "num_actions", "episode_length"):
        check_positive(env, "env", [key])
    check_positive(env, "env", ["noop_max"], zero_ok=True)
    in_unit_interval("env.repeat_action_probability", env.repeat_action_probability)
    if env.max_episode_steps is not None:
        check_positive(env, "env", ["max_episode_steps"])
    if env.kind == "football":
        _validate_football(env, actor)


def _validate_football(env: Any, actor: Any) -> None:
    """The football keys: the backend's own checks (seedq.actor.football), then the actor batch.

    The scenario, and how many of its players the agent may control, are checked against
    gfootball when the env is built.
    """
    from seedq.actor.envs import EnvError
    from seedq.actor.football import check_football_config

    try:
        check_football_config(env)
    except EnvError as exc:
        raise ConfigError(str(exc)) from None
    if actor.envs_per_batch % env.controlled_players:
        raise ConfigError(
            f"actor.envs_per_batch={actor.envs_per_batch} is not a multiple of "
            f"env.controlled_players={env.controlled_players}: each game fills one env row per "
            "controlled player; make actor.envs_per_batch a multiple of env.controlled_players"
        )
    if not env.scenario:
        raise ConfigError("env.scenario is empty; name a gfootball scenario, e.g. academy_corner")
