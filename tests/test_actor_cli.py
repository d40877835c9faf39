"""seedq-actor's own command line: addresses and arguments it cannot use are refused at once,
and a ZeroMQ error while it runs ends it with one line instead of a hang."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import zmq

from seedq.actor.arguments import check_endpoints, unresolved_hosts
from seedq.messages import Actions, Error, encode
from seedq.messages.control import decode_header

TREE = str(Path(__file__).resolve().parents[1])
TESTS = str(Path(__file__).resolve().parent)
CARTPOLE = '{"kind": "cartpole"}'


@pytest.mark.parametrize(
    "endpoint",
    ["tcp://127.0.0.1:5555", "tcp://learner.example:1", "ipc:///tmp/x"]
    + ["inproc://seedq", "tcp://a:1,tcp://b:2"],
)
def test_addresses_to_dial_pass(endpoint):
    assert check_endpoints(endpoint) == endpoint.split(",")


@pytest.mark.parametrize(
    "endpoint",
    ["nonsense", "tcp://127.0.0.1", "tcp://:80", "tcp://h:99999", "tcp://h:0", "udp://h:1"]
    + ["tcp://a:1,", "ipc://", "tcp://*:5555", "tcp:// 127.0.0.1:5555"],
)
def test_addresses_that_cannot_be_dialled_are_named(endpoint):
    with pytest.raises(ValueError, match="is not an address to dial"):
        check_endpoints(endpoint)


def test_a_host_name_that_does_not_resolve_is_named():
    # Was said only as "no connection", every minute until --reply-timeout-s.
    found = unresolved_hosts(["tcp://learner.invalid:5555", "tcp://127.0.0.1:1", "ipc:///tmp/x"])
    assert [f.split(" (")[0] for f in found] == ["learner.invalid"]


def test_an_ipv6_address_no_learner_listens_on_is_named():
    # Was taken: the actor then waited --reply-timeout-s saying "no connection".
    with pytest.raises(ValueError, match="is an IPv6 address; seedq's learner and actors speak"):
        check_endpoints("tcp://10.0.0.1:5555,tcp://[::1]:5555")


# Port 9 (discard) has no learner: an actor that got past its arguments would wait there.
TO_NOWHERE = ["--endpoint", "tcp://127.0.0.1:9", "--envs-per-batch", "2", "--reply-timeout-s", "2"]


def actor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seedq.actor.main", "--actor-ids", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TREE,
        # flaky_envs (an env whose reset raises) is importable from this folder.
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])),
        },
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # Was a ZeroMQ traceback, and then a hang: the context waited on the open socket.
        (["--endpoint", "nonsense", "--envs-per-batch", "2"], "'nonsense' is not an address"),
        (["--endpoint", "tcp://127.0.0.1:9", "--envs-per-batch", "0"], "must be in [1, 65536]"),
        # Was refused by the learner at its Hello, once 70000 envs had been built.
        ([*TO_NOWHERE, "--envs-per-batch", "70000"], "--envs-per-batch 70000 is out of range"),
        # Both env batches would join as actor 7 and take the id from each other.
        ([*TO_NOWHERE, "--actor-ids", "7,7"], "names actor 7 more than once"),
        ([*TO_NOWHERE, "--actor-ids", "1,x"], "is not a comma-separated list of whole numbers"),
        # Were tracebacks: AttributeError from the env section, gymnasium's seed check.
        ([*TO_NOWHERE, "--env-config", "[1]"], "is not the env section as a JSON object"),
        ([*TO_NOWHERE, "--env-config", "null"], "is not the env section as a JSON object"),
        ([*TO_NOWHERE, "--actor-ids", "-5"], "actor id -5 is out of range"),
        ([*TO_NOWHERE, "--actor-ids", "1,2147483648"], "is out of range"),
        # Its first env id, 2**30 x 2, is past the protocol's bound.
        ([*TO_NOWHERE, "--actor-ids", str(2**30)], "is out of range"),
        ([*TO_NOWHERE, "--seed", "-5000"], "--seed -5000 is out of range; it must be in [0, "),
        # Was taken: ale_py then refused every reset's seed, past 2^31.
        ([*TO_NOWHERE, "--seed", str(2**31)], f"--seed {2**31} is out of range"),
        # Was the traceback of logging's open.
        ([*TO_NOWHERE, "--log-file", TREE], f"cannot write --log-file {TREE} (Is a directory)"),
        # Were "no reply from the learner for -1 s" at once, and a wait for ever for nan.
        ([*TO_NOWHERE, "--reply-timeout-s", "-1"], "--reply-timeout-s=-1.0 is out of range"),
        ([*TO_NOWHERE, "--reply-timeout-s", "nan"], "--reply-timeout-s=nan is out of range"),
        ([*TO_NOWHERE, "--learner-lost-s", "0"], "--learner-lost-s=0.0 is out of range"),
        ([*TO_NOWHERE, "--max-rejoins", "-1"], "--max-rejoins=-1 is out of range"),
        ([*TO_NOWHERE, "--env-timeout-s", "inf"], "--env-timeout-s=inf is out of range"),
    ],
)
def test_arguments_it_cannot_use_exit_2_naming_them(args, says):
    # argparse takes the last --env-config (and --actor-ids): the case's own, where it has one.
    result = actor("--env-config", CARTPOLE, *args)
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


@pytest.fixture()
def learner():
    """A stand-in learner on 127.0.0.1: it takes every message and answers each Step as
    ``answer["step"]`` says: ``"actions"`` (all zeros), an Error code such as ``"busy"``, or
    nothing (None). Yields its ``(endpoint, answer)``."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    answer: dict[str, str | None] = {"step": None}
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            if not router.poll(50):
                continue
            frames = router.recv_multipart()
            header = decode_header(frames[1])
            how = answer["step"]
            if header["kind"] != "step" or how is None:
                continue
            actor_id, seq = header["actor_id"], header["seq"]
            reply = (
                Actions(actor_id, seq, np.zeros(header["n_envs"], np.int32))
                if how == "actions"
                else Error(how, "refused by the test", actor_id, seq)
            )
            router.send_multipart([frames[0], *encode(reply)])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{port}", answer
    stop.set()
    thread.join()
    router.close(linger=0)
    ctx.term()


def keys_named(text: str) -> list[str]:
    """The ``actor.*`` config keys ``text`` names (not loggers such as seedq.actor.main)."""
    return re.findall(r"(?<![.\w])actor\.[a-z_]+", text)


def flaky(**kwargs: object) -> str:
    """The env section of ``flaky_envs``' env: one that raises or hangs (``kwargs``)."""
    return json.dumps({"kind": "gym", "id": "flaky_envs:Flaky-v0", "kwargs": kwargs})


@pytest.mark.parametrize(
    ("step", "env_config", "flags", "says"),
    [
        # A learner that refuses every step: rejoins until --max-rejoins.
        ("busy", CARTPOLE, ["--max-rejoins", "1"], "more than --max-rejoins=1"),
        # A learner that stops answering.
        (None, CARTPOLE, ["--reply-timeout-s", "2"], "(--reply-timeout-s=2)"),
        # Envs whose reset raises, rebuilt until --max-rejoins.
        (None, flaky(fail_reset=True), ["--max-rejoins", "1"], "more than --max-rejoins=1"),
        # An env that hangs at its third step: no launcher restarts this actor.
        (
            "actions",
            flaky(hang_every=3),
            ["--env-timeout-s", "1"],
            "more than --env-timeout-s=1: the env hangs; exiting",
        ),
    ],
)
def test_an_actor_started_by_hand_names_its_own_flags_not_the_launchers_keys(
    learner, step, env_config, flags, says
):
    # It named actor.max_rejoins, actor.reply_timeout_s and actor.env_timeout_s, keys of a
    # seedq-train run that a seedq-actor started by hand has not got, and a launcher to
    # restart it.
    endpoint, answer = learner
    answer["step"] = step
    result = actor(
        "--endpoint", endpoint, "--envs-per-batch", "2", "--env-config", env_config, *flags
    )
    assert (
        result.returncode,
        says in result.stderr,
        keys_named(result.stderr),
        "launcher" in result.stderr,
    ) == (1, True, [], False), result.stderr


def test_a_launched_actor_names_the_runs_keys(learner):
    endpoint, answer = learner
    answer["step"] = "busy"
    result = actor(
        "--endpoint", endpoint, "--envs-per-batch", "2", "--env-config", CARTPOLE,
        "--max-rejoins", "1", "--launched",
    )  # fmt: skip
    assert (result.returncode, "more than actor.max_rejoins=1" in result.stderr) == (1, True), (
        result.stderr
    )
    assert "--max-rejoins" not in result.stderr
