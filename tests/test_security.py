"""CURVE on real sockets: the actor key joins; no key, a wrong key or a wrong server key get
nothing and are counted. Also seedq-keys and the ``security`` config checks."""

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zmq
import zmq.auth
from curve_helpers import curve_router

from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.keys import KeysExistError, create_keys
from seedq.keys import main as keys_main
from seedq.launch.remote_keys import actor_script, keys_check_script
from seedq.messages import EnvSpec, Hello, encode
from seedq.schema import ConfigError
from seedq.security import (
    SecurityConfig,
    client_options,
    curve_enabled,
    is_loopback,
    secure_client,
    validate_security,
)

NOTHING_MS = 300  # how long "gets nothing" is watched for
DEADLINE_S = 5.0
CARTPOLE = EnvSpec(obs_shape=(4,), obs_dtype="float32", num_actions=2)


class NoPolicy:
    """Answers action 0 for every env."""

    def act(self, batch):
        return np.zeros(batch.num_envs, np.int32)

    def record(self, batch): ...
    def actor_started(self, slot): ...
    def actor_left(self, slot): ...


@pytest.fixture()
def broker(server):
    """A Broker serving the CURVE ROUTER of ``server`` on a thread."""
    broker = Broker(server[1], CARTPOLE, Batcher(8, 0.01), NoPolicy())
    stop = threading.Event()
    thread = threading.Thread(target=broker.serve, args=(stop,))
    thread.start()
    yield broker
    stop.set()
    thread.join()


@pytest.fixture()
def server(keys_dir):
    """A CURVE ROUTER on tcp://127.0.0.1:<random port> with its guard; torn down in order."""
    with curve_router(keys_dir) as parts:
        yield parts


def dealer(ctx, endpoint, options=None):
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    for option, value in (options or {}).items():
        sock.setsockopt(option, value)
    sock.connect(endpoint)
    return sock


def wait_for(predicate, timeout_s=DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def wrong_actor_options(tmp_path, keys_dir):
    """A fresh key pair the learner never listed, but the right server key."""
    _, secret_file = zmq.auth.create_certificates(tmp_path, "stranger")
    public, secret = zmq.auth.load_certificate(secret_file)
    return {**client_options(keys_dir), zmq.CURVE_PUBLICKEY: public, zmq.CURVE_SECRETKEY: secret}


def wrong_server_options(tmp_path, keys_dir):
    """The actor's own key pair, encrypting to a server key that is not the learner's."""
    other_server, _ = zmq.curve_keypair()
    return {**client_options(keys_dir), zmq.CURVE_SERVERKEY: other_server}


def test_seedq_keys_writes_owner_only_secrets_and_refuses_to_overwrite(tmp_path, capsys):
    directory = tmp_path / "keys"
    assert keys_main([str(directory)]) == 0
    names = sorted(os.listdir(directory))
    assert names == ["actor.key", "actor.key_secret", "learner.key", "learner.key_secret"]
    for name in ("actor.key_secret", "learner.key_secret"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    before = (directory / "learner.key_secret").read_bytes()

    assert keys_main([str(directory)]) == 1
    assert "--force" in capsys.readouterr().err
    assert (directory / "learner.key_secret").read_bytes() == before
    with pytest.raises(KeysExistError):
        create_keys(directory)
    create_keys(directory, force=True)
    assert (directory / "learner.key_secret").read_bytes() != before
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    assert keys_main([str(afile)]) == 1
    assert f"seedq-keys: {afile} is a file; give a folder" in capsys.readouterr().err
    assert keys_main([str(afile / "keys")]) == 1  # a folder that cannot be made
    assert capsys.readouterr().err == (
        f"seedq-keys: cannot write the keys into {afile / 'keys'} (Not a directory); give a "
        "folder this user can create or write\n"
    )


def test_seedq_keys_refuses_an_empty_folder_name_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        keys_main([""])
    assert (exited.value.code, os.listdir(tmp_path)) == (2, [])
    assert "dir is empty; give the folder for the keys" in capsys.readouterr().err


def test_the_actor_key_exchanges_messages(server, keys_dir):
    ctx, router, guard, endpoint = server
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    secure_client(sock, keys_dir)
    sock.connect(endpoint)
    try:
        sock.send(b"ping")
        assert router.poll(int(DEADLINE_S * 1000))
        identity, payload = router.recv_multipart()
        router.send_multipart([identity, b"pong:" + payload])
        assert sock.poll(int(DEADLINE_S * 1000))
        assert sock.recv() == b"pong:ping"
        assert guard.refused == 0
    finally:
        sock.close()


@pytest.mark.parametrize(
    "peer, reason",
    [
        ("plain", "protocol"),  # NULL mechanism: refused by the handshake, ZAP never asked
        ("wrong_key", "unknown_key"),  # an unlisted key pair: refused by the ZAP handler
        ("wrong_server_key", "protocol"),  # its HELLO does not decrypt with our secret key
    ],
)
def test_a_peer_without_the_actor_key_gets_nothing_and_is_counted(
    server, keys_dir, tmp_path, peer, reason
):
    ctx, router, guard, endpoint = server
    options = {
        "plain": lambda: None,
        "wrong_key": lambda: wrong_actor_options(tmp_path, keys_dir),
        "wrong_server_key": lambda: wrong_server_options(tmp_path, keys_dir),
    }[peer]()
    sock = dealer(ctx, endpoint, options)
    try:
        try:
            sock.send(b"ping", zmq.NOBLOCK)
        except zmq.Again:
            pass  # no usable connection to queue on: nothing is sent either
        wait_for(lambda: guard.refused_by_reason[reason] > 0)
        assert not router.poll(NOTHING_MS)
        assert not sock.poll(NOTHING_MS)
        assert guard.accepted == 0
    finally:
        sock.close()


@pytest.mark.parametrize(
    "peer, says",
    [
        ("plain", "refused a CURVE handshake from a peer without CURVE"),
        ("wrong_server_key", "does not decrypt with this learner's key"),
    ],
)
def test_the_learner_logs_a_refusal_its_zap_handler_never_sees(
    server, keys_dir, tmp_path, caplog, peer, says
):
    # The ZAP handler logged the unknown actor key only: these were counted, never said.
    ctx, router, guard, endpoint = server
    options = {"plain": None, "wrong_server_key": wrong_server_options(tmp_path, keys_dir)}[peer]
    sock = dealer(ctx, endpoint, options)
    try:
        wait_for(lambda: says in caplog.text)
    finally:
        sock.close()


def test_a_wrongly_keyed_actor_gets_no_row(server, broker, keys_dir, tmp_path):
    ctx, router, guard, endpoint = server
    stranger = dealer(ctx, endpoint, wrong_actor_options(tmp_path, keys_dir))
    actor = dealer(ctx, endpoint, client_options(keys_dir))
    try:
        stranger.send_multipart(encode(Hello(0, "stranger", 1, CARTPOLE)))
        actor.send_multipart(encode(Hello(1, "actor", 1, CARTPOLE)))
        wait_for(lambda: 1 in broker.actors and guard.refused > 0)
        time.sleep(NOTHING_MS / 1000)
        assert list(broker.actors) == [1]
    finally:
        stranger.close()
        actor.close()


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("*", False),
        ("::", False),
        ("10.1.2.3", False),
        ("eth0", False),
        ("no-such-host.invalid", False),
    ],
)
def test_loopback_detection(host, loopback):
    assert is_loopback(host) is loopback


def test_curve_is_on_by_default_off_loopback():
    assert curve_enabled(SecurityConfig(), "0.0.0.0")
    assert not curve_enabled(SecurityConfig(), "127.0.0.1")
    assert not curve_enabled(SecurityConfig(allow_insecure=True), "0.0.0.0")
    assert curve_enabled(SecurityConfig(curve=True), "127.0.0.1")
    assert not curve_enabled(SecurityConfig(curve=False), "0.0.0.0")


def test_validation_demands_keys_or_an_explicit_insecure_choice(tmp_path, keys_dir):
    validate_security(SecurityConfig(), "127.0.0.1")
    validate_security(SecurityConfig(allow_insecure=True), "0.0.0.0")
    validate_security(SecurityConfig(keys_dir=keys_dir), "0.0.0.0")
    with pytest.raises(ConfigError, match="security.allow_insecure=true"):
        validate_security(SecurityConfig(curve=False), "0.0.0.0")
    with pytest.raises(ConfigError, match="seedq-keys DIR"):
        validate_security(SecurityConfig(), "0.0.0.0")
    with pytest.raises(ConfigError, match=r"lacks learner.key_secret.*seedq-keys"):
        (tmp_path / "learner.key").write_text("")
        (tmp_path / "actor.key").write_text("")
        validate_security(SecurityConfig(keys_dir=str(tmp_path)), "0.0.0.0")


def test_validation_refuses_a_secret_others_can_read(tmp_path):
    create_keys(tmp_path / "keys")
    (tmp_path / "keys" / "learner.key_secret").chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        validate_security(SecurityConfig(keys_dir=str(tmp_path / "keys")), "0.0.0.0")


def actor_process(endpoint, actor_id, keys_dir):
    command = [sys.executable, "-m", "seedq.actor.main", "--endpoint", endpoint]
    command += ["--actor-ids", str(actor_id), "--envs-per-batch", "2"]
    command += ["--env-config", json.dumps({"kind": "cartpole"}), "--keys-dir", keys_dir]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_seedq_actor_with_keys_dir_steps_and_another_learners_keys_do_not(
    server, broker, keys_dir, tmp_path
):
    _, _, guard, endpoint = server
    create_keys(tmp_path / "other_learner")
    actors = [
        actor_process(endpoint, 0, keys_dir),
        actor_process(endpoint, 1, str(tmp_path / "other_learner")),
    ]
    try:
        # A cold actor process imports numpy and gymnasium first: seconds on a loaded box.
        wait_for(lambda: broker.stats.env_steps > 0 and guard.refused > 0, timeout_s=60)
        assert list(broker.actors) == [0]
    finally:
        for proc in actors:
            proc.send_signal(signal.SIGTERM)
        for proc in actors:
            proc.wait(timeout=DEADLINE_S)


def test_the_ssh_script_installs_owner_only_actor_keys_and_runs_the_actor(tmp_path, keys_dir):
    remote = tmp_path / "remote keys"
    marker = tmp_path / "ran"
    script = actor_script(keys_dir, str(remote), ["touch", str(marker)])
    subprocess.run(["sh", "-s"], input=script.encode(), check=True, timeout=DEADLINE_S)
    assert marker.exists()
    assert sorted(os.listdir(remote)) == ["actor.key_secret", "learner.key"]
    assert stat.S_IMODE((remote / "actor.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE(remote.stat().st_mode) == 0o700
    assert client_options(str(remote)) == client_options(keys_dir)
    _, learner_secret = zmq.auth.load_certificate(os.path.join(keys_dir, "learner.key_secret"))
    assert learner_secret.decode() not in script


def test_seedq_keys_leaves_an_existing_folders_mode_and_warns_when_others_can_open_it(
    tmp_path, capsys
):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: `seedq-keys /tmp` must not lock other users out of it
    assert keys_main([str(shared)]) == 0
    assert (
        stat.S_IMODE(shared.stat().st_mode),
        stat.S_IMODE((shared / "actor.key_secret").stat().st_mode),
        "is open to other users (mode 1777), left as it was" in capsys.readouterr().err,
    ) == (0o1777, 0o600, True)


def test_the_ssh_script_keeps_another_key_set_in_its_folder_and_does_not_start(tmp_path, keys_dir):
    """The remote folder (by default ~/.seedq/keys, where `seedq-keys` is run on a learner)
    holds another key set: the script refuses in one line and leaves every file as it was."""
    remote = tmp_path / "host keys"
    create_keys(remote)
    remote.chmod(0o755)
    before = {p.name: p.read_bytes() for p in remote.iterdir()}
    marker = tmp_path / "ran"
    script = actor_script(keys_dir, str(remote), ["touch", str(marker)])
    result = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True)
    assert (
        result.returncode,
        marker.exists(),
        {p.name: p.read_bytes() for p in remote.iterdir()} == before,
        stat.S_IMODE(remote.stat().st_mode),
    ) == (3, False, True, 0o755), result.stderr
    assert result.stderr == (
        f"launcher.remote_keys_dir={remote} holds actor.key_secret learner.key; they are not "
        f"security.keys_dir={keys_dir}'s (another key set lives there: this host's own "
        "seedq-keys, or another run's) and would be overwritten: set launcher.remote_keys_dir "
        "to another folder, or remove those files there\n"
    )


def test_the_ssh_script_takes_a_folder_holding_the_same_keys(tmp_path, keys_dir):
    marker = tmp_path / "ran"
    script = actor_script(keys_dir, keys_dir, ["touch", str(marker)])
    subprocess.run(["sh", "-s"], input=script.encode(), check=True, timeout=DEADLINE_S)
    assert marker.exists()


def test_the_host_checks_keys_part_names_a_folder_it_cannot_create(tmp_path, keys_dir):
    afile = tmp_path / "afile"
    afile.write_text("")
    script = keys_check_script(keys_dir, str(afile / "keys"))
    result = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True)
    assert (result.returncode, result.stderr.count("\n")) == (3, 1), result.stderr
    assert result.stderr.startswith(
        f"launcher.remote_keys_dir={afile / 'keys'}: cannot create it on this host (mkdir: "
    )


def another_pairs(name, tmp_path):
    """The ``name`` file of a fresh key set (another key pair than the fixture's)."""
    create_keys(tmp_path / "another")
    return (tmp_path / "another" / name).read_bytes()


@pytest.mark.parametrize(
    ("swapped", "words"),
    [
        ("learner.key", "learner.key is not the public half of learner.key_secret"),
        ("actor.key", "actor.key is not the public half of actor.key_secret"),
    ],
)
def test_validation_refuses_a_public_key_of_another_pair(tmp_path, swapped, words):
    directory = tmp_path / "keys"
    create_keys(directory)
    (directory / swapped).write_bytes(another_pairs(swapped, tmp_path))
    with pytest.raises(ConfigError, match=rf"{words} .*`seedq-keys --force {directory}`$"):
        validate_security(SecurityConfig(keys_dir=str(directory)), "0.0.0.0")


def test_validation_refuses_a_secret_file_whose_public_line_is_another_pairs(tmp_path):
    directory = tmp_path / "keys"
    create_keys(directory)
    secret_file = directory / "learner.key_secret"
    own = zmq.auth.load_certificate(secret_file)[0].decode()
    other = zmq.curve_keypair()[0].decode()
    secret_file.write_text(secret_file.read_text().replace(own, other))
    (directory / "learner.key").write_text(
        (directory / "learner.key").read_text().replace(own, other)
    )
    with pytest.raises(ConfigError, match="learner.key_secret's public-key is not the public half"):
        validate_security(SecurityConfig(keys_dir=str(directory)), "0.0.0.0")


def test_a_learner_that_starts_actors_needs_the_actor_secret_and_the_fix_it_names_works(
    tmp_path,
):
    directory = tmp_path / "keys"
    create_keys(directory)
    (directory / "actor.key_secret").unlink()
    security = SecurityConfig(keys_dir=str(directory))
    validate_security(security, "0.0.0.0")  # serving actors started elsewhere: not needed
    with pytest.raises(ConfigError, match=r"lacks actor.key_secret; .*`seedq-keys --force "):
        validate_security(security, "0.0.0.0", launches_actors=True)
    assert keys_main(["--force", str(directory)]) == 0
    validate_security(security, "0.0.0.0", launches_actors=True)


def test_validation_says_a_keys_dir_that_is_a_file_is_a_file(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match=rf"security.keys_dir='{afile}' is a file, not a folder"):
        validate_security(SecurityConfig(keys_dir=str(afile)), "0.0.0.0")
