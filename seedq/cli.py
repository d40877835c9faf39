"""Command-line entry points. ``seedq-train`` is a Hydra app over ``seedq/conf``."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from seedq.config import ConfigError, SeedqConfig, register_configs, validate

log = logging.getLogger("seedq")

register_configs()


def to_config(cfg: DictConfig) -> SeedqConfig:
    """Validate a composed DictConfig and turn it into the typed dataclass tree."""
    validate(cfg)
    return OmegaConf.to_object(cfg)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def _train(cfg: DictConfig) -> float | None:
    from seedq.actor.envs import EnvError
    from seedq.launch.local import LocalRun

    try:
        config = to_config(cfg)
        run = LocalRun(config, config.run_dir)
    except (ConfigError, EnvError) as exc:
        log.error("%s", exc)
        sys.exit(2)
    summary = run.run()
    # Returned to Hydra so sweeps (and optimisation sweepers) see the final return.
    return summary.return_mean


def train_main() -> None:
    _train()


if __name__ == "__main__":
    train_main()
