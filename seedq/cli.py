"""Command-line entry points. ``seedq-train`` is a Hydra app over ``seedq/conf``."""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from seedq.config import ConfigError, SeedqConfig, register_configs, schema_for, validate
from seedq.launch.sharing import fit_to_share
from seedq.learner.checkpoint import (
    CheckpointError,
    check_compatible,
    find_checkpoint,
    load_checkpoint,
)

log = logging.getLogger("seedq")

register_configs()


def to_config(cfg: DictConfig) -> SeedqConfig:
    """Validate a composed DictConfig and turn it into the typed dataclass tree."""
    validate(cfg)
    return OmegaConf.to_object(cfg)


RESUME_GROUPS = ("algorithm", "env", "launcher")
# Exit status of a run stopped by a fault it could not survive (2: refused before starting).
EXIT_RUN_FAILED = 3


def resumed_config(composed: DictConfig, overrides: list[str]) -> tuple[SeedqConfig, dict]:
    """The config of the run ``composed.resume`` points at, with this command line on top.

    ``seedq-train resume=RUN`` alone continues RUN as it was; ``key=value`` overrides change
    what may change (``max_minutes=30``, ``total_env_steps=...``, ``hardware=gpu``). Choosing
    ``algorithm``, ``env`` or ``launcher`` groups is allowed only if they match the checkpoint.
    """
    path = find_checkpoint(str(composed.resume))
    state = load_checkpoint(path)
    saved = OmegaConf.create(state["config"])
    current = OmegaConf.to_container(composed, resolve=True)
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key == "resume" or key.startswith("hydra"):
            continue
        if key in RESUME_GROUPS:
            check_compatible(path, state["config"], current)
        elif key in ("hardware", "arch", "logger"):
            saved[key] = composed[key]
        else:
            OmegaConf.update(saved, key, override.value(), merge=False)
    saved.resume = str(path)
    typed = OmegaConf.merge(OmegaConf.structured(schema_for(saved.algorithm.name)), saved)
    return to_config(typed), state


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def _train(cfg: DictConfig) -> float | None:
    from seedq.arch import ArchUnavailable, run_class
    from seedq.core.stats import NonFiniteTraining
    from seedq.envs import EnvError
    from seedq.launch.actors import ActorFailure

    try:
        if cfg.resume:
            config, state = resumed_config(cfg, list(HydraConfig.get().overrides.task))
            log.info("resuming %s in %s", config.resume, config.run_dir)
            run = run_class(config.arch.name)(config, config.run_dir, resume=state)
        else:
            hydra_cfg = HydraConfig.get()
            fit_to_share(cfg, hydra_cfg.overrides.task, hydra_cfg.launcher)
            config = to_config(cfg)
            run = run_class(config.arch.name)(config, config.run_dir)
    except (ConfigError, EnvError, CheckpointError, ArchUnavailable) as exc:
        log.error("%s", exc)
        sys.exit(2)
    try:
        summary = run.run()
    except (ActorFailure, NonFiniteTraining) as exc:
        # The run already saved its last good weights; the user needs the reason, not a trace.
        log.error("run failed: %s (the newest checkpoint is in %s)", exc, config.run_dir)
        sys.exit(EXIT_RUN_FAILED)
    # Returned to Hydra so sweeps (and optimisation sweepers) see the final return.
    return summary.return_mean


def print_keys(argv: list[str]) -> None:
    """``seedq-train --keys [algorithm] [prefix]``: every config key, its default and help."""
    from seedq.agents.registry import agent_names
    from seedq.schema import describe

    algorithm = next((a for a in argv if a in agent_names()), "vtrace")
    prefixes = [a for a in argv if a not in agent_names()]
    print(f"seedq-train keys (defaults of the dataclasses, algorithm={algorithm}; the env,")
    print("hardware and tuning YAML groups may set others: seedq-train --cfg job shows a run's)")
    for doc in describe(schema_for(algorithm)):
        if prefixes and not any(doc.key.startswith(p) for p in prefixes):
            continue
        print(f"  {doc.key} = {doc.default!r}\n      {doc.help}")


def train_main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--keys":
        print_keys(sys.argv[2:])
        return
    _train()


if __name__ == "__main__":
    train_main()
