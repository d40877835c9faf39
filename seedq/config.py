"""The whole config: composes the sections, each of which lives with its owner.

Hydra composes the YAML groups (``algorithm``, ``env``, ``hardware``, ``launcher``, ``arch``,
``logger``) on top of these dataclasses, registered in a ConfigStore as ``seedq_schema`` so
that a wrong type fails at composition time. The ``env`` section is typed by its family: each
``conf/env/<kind>.yaml`` starts from ``env_<kind>_schema``, the kind's config dataclass, so an
``env=atari`` run holds and accepts Atari's keys only.
:func:`validate` runs before any process starts: each section's own checks, then the checks
that span sections. Every field has one default (its dataclass) and a help text
(``seedq-train --keys`` lists them).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from seedq.actor.config import ActorConfig, validate_actor
from seedq.agents.config import AlgorithmConfig
from seedq.agents.registry import AGENTS, agent_names, config_class
from seedq.arch.config import ARCH_OPTIONS, ArchConfig, validate_arch
from seedq.broker.config import BrokerConfig, validate_broker
from seedq.envs.config import MAX_SEED, EnvConfig
from seedq.envs.registry import BACKENDS
from seedq.envs.section import config_class as env_config_class
from seedq.envs.section import validate_env
from seedq.launch.config import LauncherConfig, validate_launcher
from seedq.launch.supervise import SupervisorConfig, validate_supervisor
from seedq.learner.config import (
    CheckpointConfig,
    HardwareConfig,
    graphs_setting,
    validate_checkpoint,
    validate_hardware,
)
from seedq.schema import (
    ConfigError,
    choice,
    positive,
    section_type,
    setting,
)
from seedq.security import SecurityConfig, validate_security
from seedq.tracking.config import LoggerConfig, validate_logger

__all__ = ["ConfigError", "SeedqConfig", "register_configs", "validate", "schema_for"]


@dataclass
class SeedqConfig:
    algorithm: AlgorithmConfig = setting(
        MISSING, "the algorithm group: algorithm=vtrace|r2d2|ppo|sac"
    )
    env: EnvConfig = setting(
        help="the environment: env=<kind> picks its family's keys (seedq/envs)", factory=EnvConfig
    )
    hardware: HardwareConfig = setting(help="where the learner computes", factory=HardwareConfig)
    launcher: LauncherConfig = setting(help="how the roles are started", factory=LauncherConfig)
    arch: ArchConfig = setting(
        help="the architecture: arch=seed|sebulba|anakin (seedq/arch)", factory=ArchConfig
    )
    actor: ActorConfig = setting(help="the actor processes", factory=ActorConfig)
    broker: BrokerConfig = setting(help="the learner's front end", factory=BrokerConfig)
    security: SecurityConfig = setting(
        help="CURVE authentication of actors (seedq-keys)", factory=SecurityConfig
    )
    seed: int = setting(
        0, f"seed of the learner, the env batches and exploration, in [0, {MAX_SEED}]"
    )
    total_env_steps: int = setting(
        5_000_000, "stop after this many env steps (one learner: within an inference batch)"
    )
    max_minutes: float = setting(10.0, "stop after this many minutes of training (0: no limit)")
    stop_at_return: float | None = setting(
        None, "stop when the 100-episode mean return reaches this (null: never)"
    )
    log_interval_s: float = setting(5.0, "seconds between metrics rows and progress lines")
    run_dir: str = setting(MISSING, "where metrics, logs and checkpoints go (Hydra's run dir)")
    checkpoint: CheckpointConfig = setting(help="checkpoints", factory=CheckpointConfig)
    logger: LoggerConfig = setting(
        help="where metrics go besides metrics.csv: logger=tensorboard|wandb|mlflow, or a list",
        factory=LoggerConfig,
    )
    resume: str | None = setting(
        None,
        "a run directory or checkpoint file to continue; auto: the newest readable checkpoint of "
        "run_dir (which must then be given), or a fresh start if it has none",
    )
    supervise: bool = setting(
        False,
        "run the learner as a child process and restart it with resume=auto when it dies "
        "(seedq/launch/supervise.py)",
    )
    supervisor: SupervisorConfig = setting(
        help="restarts of a dead learner under supervise=true", factory=SupervisorConfig
    )


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="seedq_schema", node=SeedqConfig)
    # Each registered algorithm is an option of the algorithm group by itself: adding one
    # needs no YAML file (its dataclass holds every default).
    for name in agent_names():
        cs.store(group="algorithm", name=name, node=config_class(name))
    # Each env kind's config dataclass, which conf/env/<kind>.yaml names first in its defaults
    # list: merged into seedq_schema's env section (typed EnvConfig, the base of every family),
    # it makes that section the family's. Stored outside the env group, so no *_schema option
    # shows among the groups' choices in seedq-train --help.
    for kind, backend in BACKENDS.items():
        cs.store(name=f"env_{kind}_schema", node=backend.config)
    # Each arch option's class, which conf/arch/<option>.yaml names first: the section then
    # knows which option composed it, and refuses an arch.name of another (validate_arch).
    for option, node in ARCH_OPTIONS.items():
        cs.store(name=f"arch_{option}_schema", node=node)
    # The other groups' YAML files need no schema of their own: seedq_schema types every
    # section they merge into, so a wrong type still fails at composition.


def schema_for(algorithm: str, env: str = "cartpole") -> SeedqConfig:
    """The typed default config of one algorithm on one env kind (tests and ``seedq-train
    --keys`` use it)."""
    return SeedqConfig(algorithm=config_class(algorithm)(), env=env_config_class(env)())


def unknown_keys(node: Any, prefix: str = "") -> list[tuple[str, list[str]]]:
    """Keys of a composed DictConfig that its schema does not have, each with the keys its
    section does have: ``+section.key=value`` on the command line adds any key to any section
    (Hydra's own refusal of an unknown key says to add the ``+``), where a plain override of a
    misspelt key is refused. Such a key would sit in the config, read by nothing."""
    if not isinstance(node, DictConfig):
        return []
    kind = OmegaConf.get_type(node)
    fields = {f.name for f in dataclasses.fields(kind)} if dataclasses.is_dataclass(kind) else None
    found = []
    for key in node.keys():
        if fields is not None and key not in fields:
            found.append((f"{prefix}{key}", sorted(fields)))
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            found += unknown_keys(child, f"{prefix}{key}.")
    return found


def nan_keys(node: Any, prefix: str = "") -> list[str]:
    """The keys of a config (a dataclass, DictConfig, dict or list, nested) whose value is NaN:
    a range check lets NaN through (every comparison with it is false), and no key means
    anything by it."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=False)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        items: Any = ((f.name, getattr(node, f.name)) for f in dataclasses.fields(node))
    elif isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list | tuple):
        items = ((f"[{i}]", v) for i, v in enumerate(node))
    else:
        return [prefix.rstrip(".")] if isinstance(node, float) and math.isnan(node) else []
    found = []
    for key, value in items:
        at = f"{prefix.rstrip('.')}{key}" if str(key).startswith("[") else f"{prefix}{key}"
        found += nan_keys(value, f"{at}.")
    return found


def validate(cfg: Any) -> None:
    """Check ranges and choices of a composed config (a SeedqConfig or DictConfig of one)."""
    if nans := nan_keys(cfg):
        raise ConfigError(
            f"{nans[0]}=nan is not a number; give a value (seedq-train --keys says what each "
            "key takes)"
        )
    if unknown := unknown_keys(cfg):
        key, known = unknown[0]
        section, _, name = key.rpartition(".")
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {section + '.' if section else ''}{close[0]}?" if close else ""
        where = f"the {section} section" if section else "the config"
        raise ConfigError(
            f"{key} is not a key of {where}{hint} (+{key}=... adds it, but nothing would read "
            "it; seedq-train --keys lists every key)"
        )
    choice("algorithm.name", cfg.algorithm.name, list(AGENTS))
    chosen = next((n for n in AGENTS if config_class(n) is section_type(cfg.algorithm)), None)
    if chosen is not None and cfg.algorithm.name != chosen:
        # The section holds its group option's keys and defaults: another name would have the
        # other algorithm's checks and agent read keys this section does not have.
        name = cfg.algorithm.name
        raise ConfigError(
            f"algorithm.name={name} comes with algorithm={name}, which brings that "
            f"algorithm's keys and defaults; this run is algorithm={chosen}: write "
            f"algorithm={name}"
        )
    env = cfg.env if isinstance(cfg.env, EnvConfig) else OmegaConf.to_object(cfg.env)
    validate_env(env, cfg.actor)
    validate_hardware(cfg.hardware)
    graphed = [n for n in AGENTS if config_class(n).graphed_updates]
    if graphs_setting(cfg.hardware.cuda_graphs) == "true" and cfg.algorithm.name not in graphed:
        raise ConfigError(
            f"hardware.cuda_graphs=true records the updates of algorithm={'|'.join(graphed)} "
            f"only; algorithm={cfg.algorithm.name} runs its updates eagerly: drop the key"
        )
    with_replay = [n for n in AGENTS if config_class(n).keeps_replay]
    if cfg.checkpoint.replay and cfg.algorithm.name not in with_replay:
        raise ConfigError(
            f"checkpoint.replay=true saves the replay of algorithm={'|'.join(with_replay)}; "
            f"algorithm={cfg.algorithm.name} keeps none (it trains on each batch of fresh "
            "unrolls once): drop the key"
        )
    validate_actor(cfg.actor)
    validate_broker(cfg.broker)
    # A seed run starts its own actors (here, or over ssh/srun), which need the actor's secret.
    launches_actors = cfg.arch.name == "seed" and cfg.actor.transport == "tcp"
    validate_security(cfg.security, cfg.broker.host, launches_actors)
    validate_launcher(cfg.launcher)
    if cfg.launcher.learner_hosts and cfg.hardware.learners == 1:
        raise ConfigError(
            f"launcher.learner_hosts=[{','.join(cfg.launcher.learner_hosts)}] run learner ranks "
            "when hardware.learners > 1; with hardware.learners=1 the one learner runs here "
            "and they would be ignored: set hardware.learners, or drop the key"
        )
    check_rank_ports(cfg)
    validate_checkpoint(cfg.checkpoint)
    validate_supervisor(cfg.supervisor)
    validate_logger(cfg.logger)
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError(
            f"seed={cfg.seed} is out of range; it must be in [0, {MAX_SEED}] (env i of a run "
            "is seeded with seed + i, and ale_py takes seeds below 2^31)"
        )
    positive("log_interval_s", cfg.log_interval_s)
    positive("total_env_steps", cfg.total_env_steps)
    positive("max_minutes", cfg.max_minutes, zero_ok=True)
    # The architecture first: an agent it cannot run is refused with its reason, before any
    # check of the algorithm's that the architecture would make moot.
    validate_arch(cfg)
    _algorithm_module(cfg.algorithm.name).validate(cfg.algorithm, cfg)


def check_rank_ports(cfg: Any) -> None:
    """A fixed ``broker.port`` with several learner ranks on a machine: rank k's shards take
    broker.port + k * broker.shards + i, which must be ports too (rank 1 of
    ``hardware.learners=2 broker.port=65535`` failed to bind 65536, the run ending 15 s in)."""
    learners, shards, port = cfg.hardware.learners, cfg.broker.shards, cfg.broker.port
    hosts = len(cfg.launcher.learner_hosts)
    here = -(-learners // hosts) if hosts else learners  # the most ranks on one machine
    if port == 0 or here <= 1:
        return
    last = port + here * shards - 1
    if last > 65535:
        raise ConfigError(
            f"broker.port={port}: {here} learner ranks on a machine, each with "
            f"{shards} broker port{'s' if shards > 1 else ''} from broker.port + rank x "
            f"broker.shards, reach port {last}; give a broker.port of at most "
            f"{65536 - here * shards}, or 0 (free ports)"
        )


def _algorithm_module(name: str) -> Any:
    import importlib

    return importlib.import_module(config_class(name).__module__)
