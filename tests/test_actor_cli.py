"""seedq-actor's own command line: addresses and arguments it cannot use are refused at once,
and a ZeroMQ error while it runs ends it with one line instead of a hang."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from seedq.actor.main import check_endpoints

TREE = str(Path(__file__).resolve().parents[1])
CARTPOLE = '{"kind": "cartpole"}'


@pytest.mark.parametrize(
    "endpoint",
    ["tcp://127.0.0.1:5555", "tcp://learner.example:1", "tcp://[::1]:5555", "ipc:///tmp/x"]
    + ["inproc://seedq", "tcp://a:1,tcp://b:2"],
)
def test_addresses_to_dial_pass(endpoint):
    assert check_endpoints(endpoint) == endpoint.split(",")


@pytest.mark.parametrize(
    "endpoint",
    ["nonsense", "tcp://127.0.0.1", "tcp://:80", "tcp://h:99999", "tcp://h:0", "udp://h:1"]
    + ["tcp://a:1,", "ipc://"],
)
def test_addresses_that_cannot_be_dialled_are_named(endpoint):
    with pytest.raises(ValueError, match="is not an address to dial"):
        check_endpoints(endpoint)


def actor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seedq.actor.main", "--actor-ids", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TREE,
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # Was a ZeroMQ traceback, and then a hang: the context waited on the open socket.
        (["--endpoint", "nonsense", "--envs-per-batch", "2"], "'nonsense' is not an address"),
        (["--endpoint", "tcp://127.0.0.1:9", "--envs-per-batch", "0"], "must be >= 1"),
    ],
)
def test_arguments_it_cannot_use_exit_2_naming_them(args, says):
    result = actor(*args, "--env-config", CARTPOLE)
    assert (result.returncode, says in result.stderr, "Traceback" in result.stderr) == (
        2,
        True,
        False,
    ), result.stderr


def test_an_env_config_that_is_not_json_exits_2():
    result = actor("--endpoint", "tcp://127.0.0.1:9", "--envs-per-batch", "2", "--env-config", "{")
    assert (result.returncode, "--env-config is not JSON" in result.stderr) == (2, True)


def test_a_zeromq_error_while_running_ends_the_actor_with_one_line():
    too_long = "ipc:///tmp/" + "x" * 200  # a valid address ZeroMQ cannot bind a socket path to
    result = actor("--endpoint", too_long, "--envs-per-batch", "2", "--env-config", CARTPOLE)
    assert (result.returncode, "ZeroMQ failed" in result.stderr, "Traceback" in result.stderr) == (
        1,
        True,
        False,
    ), result.stderr
