"""What seedq-train --help offers, and the logger group."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

import seedq
from seedq.config import register_configs

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
    # It opened "cli is powered by Hydra.", the module's name.
    assert result.stdout.startswith("seedq-train is powered by Hydra."), result.stdout[:80]


@pytest.mark.parametrize("option", ["--help", "--hydra-help", "--cfg=job"])
def test_help_into_a_closed_pipe_ends_quietly(option):
    # `seedq-train --help | head -2` ended in a BrokenPipeError traceback.
    read, write = os.pipe()
    os.close(read)  # the reader left before the first byte
    try:
        done = subprocess.run(
            [sys.executable, "-m", "seedq.cli", *option.split("=")],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")


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
