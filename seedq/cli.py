"""Command-line entry points. ``seedq-train`` is a Hydra app over ``seedq/conf``."""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from seedq.config import (
    ConfigError,
    R2D2Config,
    SeedqConfig,
    VTraceConfig,
    register_configs,
    validate,
)
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
        elif key == "hardware":
            saved.hardware = composed.hardware
        else:
            OmegaConf.update(saved, key, override.value(), merge=False)
    saved.resume = str(path)
    schema = R2D2Config() if saved.algorithm.name == "r2d2" else VTraceConfig()
    typed = OmegaConf.merge(OmegaConf.structured(SeedqConfig(algorithm=schema)), saved)
    return to_config(typed), state


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def _train(cfg: DictConfig) -> float | None:
    from seedq.envs import EnvError
    from seedq.launch.local import LocalRun

    try:
        if cfg.resume:
            config, state = resumed_config(cfg, list(HydraConfig.get().overrides.task))
            log.info("resuming %s in %s", config.resume, config.run_dir)
            run = LocalRun(config, config.run_dir, resume=state)
        else:
            config = to_config(cfg)
            run = LocalRun(config, config.run_dir)
    except (ConfigError, EnvError, CheckpointError) as exc:
        log.error("%s", exc)
        sys.exit(2)
    summary = run.run()
    # Returned to Hydra so sweeps (and optimisation sweepers) see the final return.
    return summary.return_mean


def train_main() -> None:
    _train()


if __name__ == "__main__":
    train_main()
