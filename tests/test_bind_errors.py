"""A broker.host the broker cannot bind is refused naming broker.host (an address that is not
this machine's, an IPv6 address the actors could not dial), and broker.port only when the port
is the problem: in the learner, in a broker shard's process and in seedq-bench's broker."""

import socket
from types import SimpleNamespace

import pytest
import zmq
from cli_helpers import run_cli

from seedq.bench.broker_setup import BrokerUnderTest
from seedq.broker.security import bind_router
from seedq.launch.shards import start_shard
from seedq.messages import EnvSpec
from seedq.schema import ConfigError

# RFC 5737's TEST-NET-1: documentation only, never an address of a real machine.
NOT_HERE = "192.0.2.1"
CARTPOLE = EnvSpec(obs_shape=(4,), obs_dtype="float32", num_actions=2)


@pytest.fixture()
def router():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.linger = 0
    yield sock
    ctx.destroy(linger=0)


def taken_port():
    """A TCP socket bound on 127.0.0.1 (kept open by the caller) and its port."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, holder.getsockname()[1]


@pytest.mark.parametrize("port", [0, 5999])
def test_an_address_of_another_machine_names_the_host_not_the_port(router, port):
    with pytest.raises(ConfigError, match=rf"^broker.host='{NOT_HERE}' is not an address") as info:
        bind_router(router, NOT_HERE, port)
    assert "broker.port" not in str(info.value)


@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_an_ipv6_host_is_refused_as_one(router, host):
    with pytest.raises(ConfigError, match=r"IPv6 address; .* IPv4 address \(127.0.0.1") as info:
        bind_router(router, host, 0)
    assert str(info.value).startswith(f"broker.host={host!r}")


def test_a_port_in_use_names_the_port(router):
    holder, port = taken_port()
    with holder, pytest.raises(ConfigError, match=rf"^broker.port={port}: .*broker.port=0"):
        bind_router(router, "127.0.0.1", port)


def test_a_free_port_is_bound_and_returned(router):
    port = bind_router(router, "127.0.0.1", 0)
    assert router.getsockopt(zmq.LAST_ENDPOINT).decode() == f"tcp://127.0.0.1:{port}"


@pytest.mark.parametrize("port", ["0", "5999"])
def test_seedq_train_refuses_a_host_not_of_this_machine_in_one_line(tmp_path, port):
    result = run_cli(
        f"broker.host={NOT_HERE}",
        "security.allow_insecure=true",
        f"broker.port={port}",
        f"run_dir={tmp_path}",
    )
    assert (result.returncode, "Traceback" in result.stdout) == (2, False), result.stdout
    assert f"broker.host='{NOT_HERE}' is not an address (or interface) of this machine" in (
        result.stdout
    )
    assert "choose another port" not in result.stdout


def test_a_broker_shard_logs_the_refusal_and_exits_2(tmp_path):
    settings = {
        "max_batch": 8,
        "deadline_ms": 10.0,
        "silent_timeout_s": 30.0,
        "max_message_bytes": 1 << 20,
        "io_threads": 1,
        "log_dir": str(tmp_path),
    }
    link = f"ipc://{tmp_path / 'link'}"
    proc = start_shard(0, f"tcp://{NOT_HERE}:0", link, CARTPOLE.to_dict(), settings, "")
    proc.join(120)
    log = (tmp_path / "broker-shard-0.log").read_text()
    assert (proc.exitcode, f"broker.host='{NOT_HERE}' is not an address" in log) == (2, True)
    assert "Traceback" not in log


def test_seedq_train_with_shards_that_cannot_bind_is_refused_in_lines_not_a_trace(tmp_path):
    # The shards refused in their own lines, then the hub's BrokerShardLost was a traceback;
    # then a run that failed (exit 3), which supervise=true restarted ten times over minutes,
    # failing alike, where one broker's refusal (exit 2) ends a supervisor at once.
    result = run_cli(
        f"broker.host={NOT_HERE}",
        "security.allow_insecure=true",
        "broker.shards=2",
        f"run_dir={tmp_path}",
    )
    assert (result.returncode, "Traceback" in result.stdout) == (2, False), result.stdout
    assert f"seedq: broker.host='{NOT_HERE}' is not an address" in result.stdout


def test_seedq_train_with_a_shard_port_taken_is_refused(tmp_path):
    holder, port = taken_port()
    with holder:
        result = run_cli(f"broker.port={port - 1}", "broker.shards=2", f"run_dir={tmp_path}")
    assert (result.returncode, "Traceback" in result.stdout) == (2, False), result.stdout
    assert "seedq: broker.port=" in result.stdout and "choose another port" in result.stdout


def test_the_bench_broker_refuses_a_host_not_of_this_machine():
    broker = SimpleNamespace(
        host=NOT_HERE,
        io_threads=1,
        max_batch=8,
        deadline_ms=10.0,
        silent_timeout_s=30.0,
        max_message_bytes=1 << 20,
    )
    with pytest.raises(ConfigError, match=rf"broker.host='{NOT_HERE}'"):
        BrokerUnderTest(SimpleNamespace(broker=broker), CARTPOLE, shards=1)
