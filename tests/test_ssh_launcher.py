"""The ssh launcher against real OpenSSH servers on 127.0.0.1 standing in for actor hosts.

Each test starts its own sshd instances (own host key, config and user key in a temp dir) and
runs ``seedq-train launcher=ssh`` as a user would; "remote" processes are found by a marker
variable the run sets through ``launcher.env``, so the tests can count what is left on the
hosts after each way of stopping.
"""

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fault_helpers import alive, children, wait_for
from ssh_hosts import (
    SshdHost,
    client_config,
    missing_tools,
    pids_with_env,
    processes_with_env,
    user_key,
)

from seedq.envs import EnvConfig
from seedq.envs.gym import GymConfig
from seedq.keys import create_keys
from seedq.launch import ssh
from seedq.launch.actors import ActorPool
from seedq.launch.config import LauncherConfig
from seedq.launch.remote_actor import remote_script, start_fed
from seedq.launch.ssh import (
    HostCheckError,
    SshHost,
    SshLauncher,
    advertise_host,
    resolve_host,
)
from seedq.schema import ConfigError

TREE = str(Path(__file__).resolve().parents[1])
needs_sshd = pytest.mark.skipif(bool(missing_tools()), reason=missing_tools() or "ready")


@pytest.fixture
def hosts(tmp_path):
    """Two sshd "hosts" and the ssh config that reaches them: an alias and an ssh:// URI."""
    key = user_key(tmp_path)
    a, b = SshdHost(tmp_path / "host-a", key), SshdHost(tmp_path / "host-b", key)
    config = client_config(tmp_path, key, {"seedq-a": a})
    yield {
        "config": config,
        "entries": ["seedq-a", f"ssh://127.0.0.1:{b.port}"],
        "sshd": [a, b],
    }
    for host in (a, b):
        host.kill()


def train_command(run_dir: Path, hosts: dict, *overrides: str) -> list[str]:
    entries = ",".join(hosts["entries"])
    return [
        sys.executable,
        "-m",
        "seedq.cli",
        "launcher=ssh",
        f"launcher.hosts=[{entries}]",
        "launcher.actors_per_host=1",
        f"launcher.ssh_args=[-F,{hosts['config']}]",
        # The "remote" interpreter must import this tree; the marker finds what it started.
        f"+launcher.env={{PYTHONPATH:'{TREE}',SEEDQ_TEST_RUN:'{run_dir}'}}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


def start(run_dir: Path, hosts: dict, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": TREE}
    return subprocess.Popen(
        train_command(run_dir, hosts, *overrides),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def wait_for_metrics(run_dir: Path, rows: int = 1, timeout: float = 120) -> None:
    metrics = run_dir / "metrics.csv"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) > rows:
            return
        time.sleep(0.2)
    raise AssertionError(f"no metrics in {timeout} s")


def left_behind(run_dir: Path, timeout: float = 20) -> list[str]:
    """Processes the run started on the hosts that are still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (found := processes_with_env(f"SEEDQ_TEST_RUN={run_dir}")) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    return found


@pytest.mark.slow
@needs_sshd
def test_cartpole_trains_with_actors_on_two_ssh_hosts_and_leaves_nothing_behind(tmp_path, hosts):
    run_dir = tmp_path / "run"
    process = start(run_dir, hosts, "max_minutes=4", "stop_at_return=150", "log_interval_s=2")
    output, _ = process.communicate(timeout=360)
    summary = json.loads((run_dir / "summary.json").read_text())
    logs = sorted(p.name for p in (run_dir / "actors").glob("*.log"))
    assert (process.returncode, summary["stop_reason"], logs, left_behind(run_dir)) == (
        0,
        "target_return",
        [f"127.0.0.1_{hosts['sshd'][1].port}-0.log", "seedq-a-0.log"],
        [],
    ), output
    assert "[actor " in (run_dir / "actors" / "seedq-a-0.log").read_text()


@needs_sshd
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_the_remote_actors(tmp_path, hosts, sig):
    run_dir = tmp_path / "run"
    process = start(run_dir, hosts, "max_minutes=3", "log_interval_s=1")
    wait_for_metrics(run_dir)
    # Each host runs a guard and its actor (an ssh session may still be starting: wait).
    deadline = time.monotonic() + 60
    while len(running := processes_with_env(f"SEEDQ_TEST_RUN={run_dir}")) != 4:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    process.send_signal(sig)
    output, _ = process.communicate(timeout=90)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (len(running), process.returncode, summary["stop_reason"], left_behind(run_dir)) == (
        4,
        75,  # stopped, to be resumed
        "interrupted",
        [],
    ), output


@needs_sshd
def test_a_crashed_learner_leaves_no_actor_on_the_hosts(tmp_path, hosts):
    run_dir = tmp_path / "run"
    process = start(run_dir, hosts, "max_minutes=3", "log_interval_s=1")
    wait_for_metrics(run_dir)
    process.kill()  # no cleanup at all: the ssh clients see their stdin close
    process.communicate(timeout=30)
    assert left_behind(run_dir, timeout=30) == []


@needs_sshd
def test_a_killed_host_takes_its_actor_with_it_and_the_run_leaves_nothing_behind(tmp_path, hosts):
    """The dead host's actor is restarted until the host is dropped; the run goes on with the
    other host, and stopping it then leaves no process on either.

    The drop is awaited in the output, not left to a time budget: the run is stopped once its
    env steps have grown past where they were at the drop."""
    run_dir = tmp_path / "run"
    process = start(
        run_dir,
        hosts,
        "max_minutes=5",  # a backstop: the test stops the run
        "total_env_steps=1000000000000",
        "log_interval_s=1",
        "launcher.max_host_failures=2",
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    dead = hosts["sshd"][1]
    try:
        wait_for_metrics(run_dir)
        dead.kill()
        wait_for(lambda: any("dropping it" in line for line in lines), 120, "the host's drop")
        at_drop = env_steps(run_dir)
        wait_for(lambda: env_steps(run_dir) > at_drop, 60, "env steps after the drop")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    reader.join(timeout=10)
    output = "".join(lines)
    dropped = [line for line in lines if "dropping it" in line]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (
        process.returncode,
        summary["stop_reason"],
        [str(dead.port) in line for line in dropped],
        left_behind(run_dir),
    ) == (75, "interrupted", [True], []), output


def env_steps(run_dir: Path) -> int:
    """The env steps of the last row of the run's metrics.csv."""
    header, *rows = [line.split(",") for line in (run_dir / "metrics.csv").read_text().splitlines()]
    whole = [row for row in rows if len(row) == len(header)]  # the last may be half written
    return int(float(whole[-1][header.index("env_steps")])) if whole else 0


@needs_sshd
def test_a_supervised_learner_killed_mid_run_comes_back_with_new_remote_actors(tmp_path, hosts):
    """kill -9 of the learner under supervise=true: the dead learner's remote actors exit, the
    restarted learner starts its own on the same hosts, resumes from the newest checkpoint and
    finishes; nothing is left on the hosts."""
    run_dir = tmp_path / "run"
    process = start(
        run_dir,
        hosts,
        "supervise=true",
        "env=fake",
        "actor.envs_per_batch=8",
        "log_interval_s=0.5",
        "total_env_steps=100000",
        "checkpoint.every_minutes=0.02",
        "supervisor.backoff_s=2",
    )
    try:
        wait_for(lambda: list(run_dir.glob("checkpoints/ckpt-*.pt")), 180, "a checkpoint")
        marker = f"SEEDQ_TEST_RUN={run_dir}"
        wait_for(lambda: len(pids_with_env(marker)) == 4, 60, "a guard and an actor per host")
        first_actors = pids_with_env(marker)
        os.kill(children(process.pid)[0], signal.SIGKILL)
        wait_for(lambda: not any(alive(p) for p in first_actors), 60, "the old actors to exit")
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (process.returncode, summary["stop_reason"], left_behind(run_dir)) == (
        0,
        "total_env_steps",
        [],
    ), output
    assert "resumed at " in output and "the learner was killed by SIGKILL" in output


@needs_sshd
def test_a_failing_host_is_named_with_its_stderr_and_nothing_starts(tmp_path, hosts):
    run_dir = tmp_path / "run"
    hosts = {**hosts, "entries": [hosts["entries"][0], "seedq-nowhere.invalid"]}
    process = start(run_dir, hosts, "launcher.python=/no/such/python", "max_minutes=1")
    output, _ = process.communicate(timeout=120)
    assert (
        process.returncode,
        "seedq-a: python '/no/such/python' not found there" in output,
        "seedq-nowhere.invalid: unreachable" in output,
        (run_dir / "metrics.csv").exists(),
    ) == (2, True, True, False), output


@needs_sshd
def test_host_check_reports_a_missing_seedq(tmp_path, hosts):
    cfg = LauncherConfig(
        name="ssh",
        hosts=hosts["entries"][:1],
        ssh_args=["-F", str(hosts["config"])],
        workdir="/",
        env={"PYTHONPATH": ""},
    )
    launcher = SshLauncher(cfg, str(tmp_path), 1)
    # An interpreter that runs but has no site-packages, so no seedq.
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    with pytest.raises(HostCheckError, match=r"seedq-a: check failed .*\n.*No module named"):
        launcher.check_hosts(EnvConfig(), str(bare))


@needs_sshd
def test_host_check_names_an_env_module_a_host_cannot_import(tmp_path, hosts):
    """``env.id=module:EnvName-v0``: the module must be importable on every actor host;
    ``launcher.env`` gives the hosts its folder (here only seedq's tree, not ``tests/``)."""
    cfg = LauncherConfig(
        name="ssh",
        hosts=hosts["entries"][:1],
        ssh_args=["-F", str(hosts["config"])],
        workdir="/",
        env={"PYTHONPATH": TREE},
    )
    launcher = SshLauncher(cfg, str(tmp_path), 1)
    env = GymConfig(id="flaky_envs:Flaky-v0")
    with pytest.raises(
        HostCheckError,
        match=r"cannot build the env on this host: env.id='flaky_envs:Flaky-v0' names the module "
        r"'flaky_envs' to import first",
    ):
        launcher.check_hosts(env, sys.executable)
    # With the module's folder on the host's path the same check passes.
    cfg.env = {"PYTHONPATH": f"{TREE}:{Path(__file__).parent}"}
    SshLauncher(cfg, str(tmp_path), 1).check_hosts(env, sys.executable)


@needs_sshd
def test_the_host_check_refuses_a_remote_keys_dir_holding_other_keys(tmp_path, hosts):
    """launcher.remote_keys_dir (by default ~/.seedq/keys, where a learner host keeps its own
    keys) holds another key set: the run stops before anything starts and leaves it as it was;
    a folder the host cannot create is named with mkdir's reason."""
    ours, theirs = tmp_path / "k1", tmp_path / "k2"
    create_keys(ours)
    create_keys(theirs)
    before = {p.name: p.read_bytes() for p in theirs.iterdir()}
    run_dir = tmp_path / "run"
    hosts = {**hosts, "entries": hosts["entries"][:1]}
    process = start(
        run_dir,
        hosts,
        "env=fake",
        "broker.host=0.0.0.0",
        f"security.keys_dir={ours}",
        f"launcher.remote_keys_dir={theirs}",
    )
    output, _ = process.communicate(timeout=120)
    assert (
        process.returncode,
        {p.name: p.read_bytes() for p in theirs.iterdir()} == before,
        (run_dir / "metrics.csv").exists(),
    ) == (2, True, False), output
    assert f"seedq-a: launcher.remote_keys_dir={theirs} holds actor.key_secret learner.key" in (
        output
    )

    afile = tmp_path / "afile"
    afile.write_text("")
    cfg = LauncherConfig(
        name="ssh",
        hosts=hosts["entries"],
        ssh_args=["-F", str(hosts["config"])],
        env={"PYTHONPATH": TREE},
        remote_keys_dir=str(afile / "keys"),
    )
    with pytest.raises(
        HostCheckError,
        match=rf"seedq-a: launcher.remote_keys_dir={afile / 'keys'}: cannot create it on this "
        r"host \(mkdir: ",
    ):
        SshLauncher(cfg, str(tmp_path), 1).check_hosts(EnvConfig(), sys.executable, str(ours))
    # A folder holding the same keys, or none yet (made owner-only, nothing written), passes.
    for folder in (ours, tmp_path / "new" / "keys"):
        cfg.remote_keys_dir = str(folder)
        SshLauncher(cfg, str(tmp_path), 1).check_hosts(EnvConfig(), sys.executable, str(ours))
    assert (os.listdir(folder), oct(stat.S_IMODE(folder.stat().st_mode))) == ([], "0o700")


def test_ssh_uri_entries_resolve_to_user_host_and_port():
    host = resolve_host("ssh://alice@cpu3:2222", [])
    assert (host.user, host.hostname, host.port, host.label) == (
        "alice",
        "cpu3",
        2222,
        "alice@cpu3_2222",
    )


def test_a_loopback_broker_cannot_serve_remote_hosts():
    remote = [SshHost("cpu1", "10.1.2.3", 22, "me")]
    with pytest.raises(ConfigError, match="broker.host='127.0.0.1' is loopback"):
        advertise_host("127.0.0.1", "", remote)
    assert advertise_host("0.0.0.0", "", [SshHost("x", "127.0.0.1", 22, "me")]) == "127.0.0.1"
    assert advertise_host("0.0.0.0", "learner.example", remote) == "learner.example"


def test_a_wildcard_broker_is_dialled_at_the_route_to_a_host_that_is_not_this_machine(
    monkeypatch,
):
    monkeypatch.setattr(ssh, "route_address", lambda host, port: f"route-to-{host}")
    here, away = SshHost("localhost", "127.0.0.1", 22, "me"), SshHost("cpu2", "10.1.2.3", 22, "me")
    # Was the route to the first host, 127.0.0.1 here: cpu2's actors dialled their own loopback.
    assert advertise_host("0.0.0.0", "", [here, away]) == "route-to-10.1.2.3"
    assert advertise_host("0.0.0.0", "", [here]) == "route-to-127.0.0.1"


@pytest.mark.parametrize(
    ("broker_host", "says"),
    [
        # Was socket.gaierror's traceback, after every host had passed its check.
        ("0.0.0.0", "set broker.advertise_host to the name or address the hosts reach"),
        # Was refused only once the learner had been built and its broker bound.
        ("127.0.0.1", "broker.host='127.0.0.1' is loopback"),
    ],
)
def test_an_address_actors_cannot_dial_is_refused_by_the_launcher_after_the_host_checks(
    tmp_path, monkeypatch, broker_host, says
):
    # A host behind a jump host: its name resolves there, not here, yet ssh reaches it.
    config = tmp_path / "ssh_config"
    config.write_text("Host behind-jump\n  HostName node7.cluster.invalid\n")
    checked = []
    monkeypatch.setattr(SshLauncher, "check_hosts", lambda *args: checked.append(args))
    cfg = SimpleNamespace(
        actor=SimpleNamespace(transport="tcp", num_actors=1),
        launcher=LauncherConfig(name="ssh", hosts=["behind-jump"], ssh_args=["-F", str(config)]),
        broker=SimpleNamespace(host=broker_host, advertise_host=""),
        env=EnvConfig(),
        security=SimpleNamespace(curve=False, keys_dir=""),
    )
    with pytest.raises(ConfigError, match=re.escape(says)):
        SshLauncher.for_run(cfg, str(tmp_path))
    # After the checks, which name an unreachable host as such.
    assert len(checked) == 1


def test_remote_script_quotes_the_environment_and_execs_the_actor():
    script = remote_script(["python", "-m", "x", "a b"], workdir="/w d", env={"PYTHONPATH": "/s p"})
    assert script.splitlines() == [
        "set -e",
        "cd '/w d'",
        "export PYTHONPATH='/s p'",
        "exec python -m x 'a b'",
    ]
    with pytest.raises(ConfigError, match="not an environment variable name"):
        remote_script(["x"], env={"A;rm": "1"})


def test_stopping_a_remote_actor_ends_its_stdin_and_keeps_its_last_log_lines(tmp_path):
    # The pool terminated the ssh (or srun) client: the guard still stopped the actor, but its
    # last lines ("SIGTERM: stopping", "stopped after N env steps") never reached its log.
    log_path = tmp_path / "remote.log"

    def spawn(index, cmd, log_file):
        with open(log_path, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-c", "import sys; sys.stdin.read(); print('stopped after')"],
                stdin=subprocess.PIPE,
                stdout=out,
            )

    pool = ActorPool("tcp://127.0.0.1:9", EnvConfig(), 1, 1, 1, 0, str(tmp_path), spawn=spawn)
    pool.start()
    pool.stop()
    assert log_path.read_text() == "stopped after\n"


def test_a_host_failing_too_often_is_dropped():
    cfg = LauncherConfig(name="ssh", hosts=["a"], max_host_failures=3)
    host = SshHost("a", "a", 22, "me")
    launcher = SshLauncher(cfg, "/tmp", 1, hosts=[host])
    # Two failures, then ten quiet minutes forget them; three close together drop the host.
    assert [launcher.record_failure(host, t) for t in (0, 1, 700, 701, 702)] == [
        False,
        False,
        False,
        False,
        True,
    ]


def _netns_unavailable() -> str:
    if missing_tools():
        return missing_tools()
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    probe = f"seedq-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns is not permitted here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=True)
    return ""


@pytest.fixture
def two_namespaces():
    """Two network namespaces joined by a veth pair: the learner's (10.199.0.1) and an actor
    host's (10.199.0.2). Only traffic between them; both vanish afterwards."""
    tag = str(os.getpid())
    learner, actor = f"seedq-l-{tag}", f"seedq-a-{tag}"
    commands = [
        ["ip", "netns", "add", learner],
        ["ip", "netns", "add", actor],
        ["ip", "link", "add", f"sql{tag}", "type", "veth", "peer", "name", f"sqa{tag}"],
        ["ip", "link", "set", f"sql{tag}", "netns", learner],
        ["ip", "link", "set", f"sqa{tag}", "netns", actor],
        ["ip", "-n", learner, "addr", "add", "10.199.0.1/24", "dev", f"sql{tag}"],
        ["ip", "-n", actor, "addr", "add", "10.199.0.2/24", "dev", f"sqa{tag}"],
    ]
    for ns, dev in ((learner, f"sql{tag}"), (actor, f"sqa{tag}")):
        commands += [["ip", "-n", ns, "link", "set", "lo", "up"]]
        commands += [["ip", "-n", ns, "link", "set", dev, "up"]]
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True)
        yield learner, actor
    finally:
        for ns in (learner, actor):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.skipif(bool(_netns_unavailable()), reason=_netns_unavailable() or "ready")
def test_learner_and_actors_in_two_network_namespaces_over_curve(tmp_path, two_namespaces):
    learner_ns, actor_ns = two_namespaces
    key = user_key(tmp_path)
    sshd = SshdHost(tmp_path / "host", key, address="10.199.0.2", netns=actor_ns)
    config = client_config(tmp_path, key, {"actorhost": sshd})
    keys = tmp_path / "curve"
    subprocess.run([sys.executable, "-m", "seedq.keys", str(keys)], check=True)
    run_dir = tmp_path / "run"
    try:
        # broker.host is not loopback, so CURVE is on and the keys travel over ssh.
        process = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                learner_ns,
                sys.executable,
                "-m",
                "seedq.cli",
                "launcher=ssh",
                "launcher.hosts=[actorhost]",
                f"launcher.ssh_args=[-F,{config}]",
                f"+launcher.env={{PYTHONPATH:'{TREE}',SEEDQ_TEST_RUN:'{run_dir}'}}",
                f"launcher.remote_keys_dir={tmp_path / 'remote-keys'}",
                "broker.host=10.199.0.1",
                f"security.keys_dir={keys}",
                "total_env_steps=20000",
                "max_minutes=3",
                f"hydra.run.dir={run_dir}",
            ],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "PYTHONPATH": TREE},
        )
        summary = json.loads((run_dir / "summary.json").read_text())
        remote_keys = sorted(p.name for p in (tmp_path / "remote-keys").iterdir())
        assert (
            summary["stop_reason"],
            "tcp://10.199.0.1:" in process.stdout,
            remote_keys,
            left_behind(run_dir),
        ) == ("total_env_steps", True, ["actor.key_secret", "learner.key"], []), process.stdout
    finally:
        sshd.kill()


def test_a_command_that_ends_before_it_reads_its_script_is_a_failed_start(tmp_path):
    # ssh to a host that just died refuses at once: the script's write met a closed pipe and
    # its BrokenPipeError, raised out of the actor pool's restart, ended the whole run (seen
    # once under the full suite's load as a killed host never dropped). More than a pipe's
    # buffer, so the write is still blocked when the command closes its stdin.
    command = ["sh", "-c", "exec 0<&-; echo refused; exit 255"]
    proc = start_fed(command, "#" * (1 << 20), str(tmp_path / "actor.log"))
    assert proc.wait(timeout=30) == 255
    assert (tmp_path / "actor.log").read_text() == "refused\n"
