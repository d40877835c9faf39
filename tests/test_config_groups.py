"""What seedq-train --help offers, the logger group, and the final progress line."""

import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import run_cli
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

import seedq
from seedq.arch.monitor import Monitor
from seedq.config import register_configs
from seedq.core.stats import RunStats, TrainStats
from seedq.parallel.agreement import NullWriter
from seedq.progress import PROGRESS_LOGGER

CONF_DIR = str(Path(seedq.__file__).parent / "conf")

register_configs()


def compose_config(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=["run_dir=/tmp/seedq-test", *overrides])


def test_help_offers_the_groups_a_user_picks_and_no_schema():
    result = run_cli("--help")
    groups = result.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    assert "_schema" not in groups, groups
    assert "logger: mlflow, tensorboard, wandb" in groups, groups


@pytest.mark.parametrize(
    "override", ["env.frame_skip=abc", "hardware.num_threads=two", "logger.wandb.enabled=maybe"]
)
def test_a_wrong_type_still_fails_at_composition(override):
    with pytest.raises(ConfigCompositionException):
        compose_config("env=atari", "hardware=gpu", override)


@pytest.mark.parametrize(
    ("overrides", "enabled"),
    [
        ((), ["tensorboard"]),
        (("logger=wandb",), ["wandb"]),
        (("logger=[tensorboard,mlflow]",), ["tensorboard", "mlflow"]),
        (("+logger=mlflow",), ["tensorboard", "mlflow"]),
        (("logger=[]",), []),
    ],
)
def test_the_logger_group_turns_on_exactly_the_trackers_it_names(overrides, enabled):
    logger = compose_config(*overrides).logger
    assert [b for b in ("tensorboard", "wandb", "mlflow") if logger[b].enabled] == enabled


class QuietAgent:
    metric_columns: list[str] = []

    def __init__(self) -> None:
        self.stats = TrainStats()

    def metrics(self) -> dict:
        return {}

    def judged_returns(self, returns: list[float]) -> list[float]:
        return returns

    def progress(self, row: dict) -> str:
        return ""


def test_the_final_progress_line_reports_the_run_average(caplog):
    """A run of 100 s and 1,000 steps whose last interval was a millisecond: 10 steps/s."""
    cfg = SimpleNamespace(
        total_env_steps=10**6,
        stop_at_return=None,
        max_minutes=0,
        broker=SimpleNamespace(max_batch=1),
    )
    stats = RunStats()
    monitor = Monitor(cfg, QuietAgent(), stats, NullWriter(), start=time.monotonic() - 100.0)
    stats.env_steps = 1000
    monitor.last_steps, monitor.last_time = 990, time.monotonic() - 0.001
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        monitor.tick(final=True)
    assert "| 10 steps/s on average |" in caplog.records[-1].getMessage()
