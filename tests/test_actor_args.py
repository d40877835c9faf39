"""seedq-actor refuses arguments it cannot use with one line and exit status 2, before it starts
any env or connection: was a traceback from deep inside the env, or a stall at the learner."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TREE = str(Path(__file__).resolve().parents[1])
CARTPOLE = '{"kind": "cartpole"}'


def actor(*args: str) -> subprocess.CompletedProcess:
    # Port 9 (discard) has no learner: an actor that got past its arguments would wait there.
    return subprocess.run(
        [sys.executable, "-m", "seedq.actor.main", "--endpoint", "tcp://127.0.0.1:9",
         "--envs-per-batch", "2", "--reply-timeout-s", "2", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TREE,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # Both env batches would join as actor 7 and take the id from each other.
        (["--actor-ids", "7,7"], "names actor 7 more than once"),
        (["--actor-ids", "1,x"], "is not a comma-separated list of whole numbers"),
    ],
)
def test_actor_ids_it_cannot_use_exit_2_naming_them(args, says):
    result = actor(*args, "--env-config", CARTPOLE)
    assert (result.returncode, says in result.stderr, "Traceback" in result.stderr) == (
        2,
        True,
        False,
    ), result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # Were tracebacks: AttributeError from the env section, gymnasium's seed check.
        (["--actor-ids", "0", "--env-config", "[1]"], "is not the env section as a JSON object"),
        (["--actor-ids", "0", "--env-config", "null"], "is not the env section as a JSON object"),
        (["--actor-ids", "-5", "--env-config", CARTPOLE], "actor id -5 is out of range"),
        (["--actor-ids", "1,2147483648", "--env-config", CARTPOLE], "is out of range"),
        # Its first env id, 2**30 x 2, is past the protocol's bound.
        (["--actor-ids", str(2**30), "--env-config", CARTPOLE], "is out of range"),
        (["--actor-ids", "0", "--seed", "-5000", "--env-config", CARTPOLE], "must be >= 0"),
    ],
)
def test_env_configs_ids_and_seeds_it_cannot_use_exit_2_naming_them(args, says):
    result = actor(*args)
    assert (result.returncode, says in result.stderr, "Traceback" in result.stderr) == (
        2,
        True,
        False,
    ), result.stderr
