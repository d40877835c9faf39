"""CURVE key files with bad contents (a secret file without its secret, a key that is not 40
Z85 characters, an ``authorized/`` file without a public key) are refused naming the file and
what to do, on the learner's side and the actor's: not a TypeError or "Invalid argument" from
inside libzmq, nor an error that blames the endpoint."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import zmq
from cli_helpers import run_cli

from seedq.broker.security import secure_server
from seedq.keys import create_keys
from seedq.schema import ConfigError
from seedq.security import SecurityConfig, client_options, validate_security

SHORT_KEY = "rq:rM>}U?@Lns47E1%kR"  # 20 Z85 characters: half a key


def keys(tmp_path):
    directory = tmp_path / "keys"
    create_keys(directory)
    return directory


def drop_line(path, prefix):
    """The certificate at ``path`` without its ``prefix`` (public-key / secret-key) line."""
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if not line.strip().startswith(prefix)))


def set_key(path, prefix, value):
    lines = path.read_text().splitlines(keepends=True)
    fixed = [f'    {prefix} = "{value}"\n' if ln.strip().startswith(prefix) else ln for ln in lines]
    path.write_text("".join(fixed))


def learner_damages():
    """(what the damage does to a key dir, the refusal's words)."""
    return [
        (
            lambda d: drop_line(d / "learner.key_secret", "secret-key"),
            "learner.key_secret has no secret-key",
        ),
        (
            lambda d: set_key(d / "learner.key_secret", "secret-key", SHORT_KEY),
            "learner.key_secret has a malformed secret-key",
        ),
        (
            lambda d: set_key(d / "learner.key", "public-key", "~" * 40),
            "learner.key has a malformed public-key",
        ),
        (
            lambda d: (d / "authorized").mkdir() or (d / "authorized" / "x.key").write_text("\n"),
            "authorized/x.key has no public-key",
        ),
    ]


@pytest.mark.parametrize(("damage", "words"), learner_damages())
def test_the_learner_refuses_a_key_file_without_the_keys_it_must_hold(tmp_path, damage, words):
    directory = keys(tmp_path)
    damage(directory)
    with pytest.raises(ConfigError, match=rf"security.keys_dir='{directory}': {words} "):
        validate_security(SecurityConfig(keys_dir=str(directory)), "0.0.0.0")


@pytest.mark.parametrize(("damage", "words"), learner_damages())
def test_the_curve_server_refuses_them_before_touching_the_socket(tmp_path, damage, words):
    directory = keys(tmp_path)
    damage(directory)
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    try:
        with pytest.raises(ConfigError, match=words):
            secure_server(router, ctx, str(directory))
    finally:
        ctx.destroy(linger=0)  # today's code left the ZAP handler's thread running on ctx


def test_the_remedy_for_the_learners_keys_is_seedq_keys_and_for_an_extra_key_its_file(tmp_path):
    directory = keys(tmp_path)
    drop_line(directory / "learner.key_secret", "secret-key")
    with pytest.raises(ConfigError, match=rf"`seedq-keys --force {directory}`$"):
        validate_security(SecurityConfig(keys_dir=str(directory)), "0.0.0.0")
    directory = keys(tmp_path / "other")
    (directory / "authorized").mkdir()
    (directory / "authorized" / "x.key").write_text("\n")
    with pytest.raises(ConfigError, match=r"authorized/x.key .*or remove it$"):
        validate_security(SecurityConfig(keys_dir=str(directory)), "0.0.0.0")


def test_seedq_train_refuses_an_authorized_file_without_a_key_in_one_line(tmp_path):
    directory = keys(tmp_path)
    (directory / "authorized").mkdir()
    (directory / "authorized" / "x.key").write_text("# not a certificate\n")
    result = run_cli(
        "broker.host=0.0.0.0",
        "security.curve=true",
        f"security.keys_dir={directory}",
        "total_env_steps=1000",
        f"run_dir={tmp_path / 'run'}",
    )
    assert (result.returncode, "Traceback" in result.stdout) == (2, False), result.stdout
    assert "authorized/x.key has no public-key" in result.stdout


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (
            lambda d: drop_line(d / "actor.key_secret", "secret-key"),
            "actor.key_secret has no secret-key",
        ),
        (
            lambda d: set_key(d / "learner.key", "public-key", SHORT_KEY),
            "learner.key has a malformed public-key",
        ),
    ],
)
def test_an_actor_refuses_its_key_files_naming_the_file_not_the_endpoint(tmp_path, damage, words):
    directory = keys(tmp_path)
    damage(directory)
    with pytest.raises(ConfigError, match=rf"--keys-dir='{directory}': {words} .*copy"):
        client_options(str(directory))
    command = [sys.executable, "-m", "seedq.actor.main", "--endpoint", "tcp://127.0.0.1:9"]
    command += ["--actor-ids", "0", "--envs-per-batch", "2", "--keys-dir", str(directory)]
    command += ["--env-config", json.dumps({"kind": "cartpole"})]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert (result.returncode, words in result.stderr) == (2, True), result.stderr
    assert "--endpoint" not in result.stderr and "Traceback" not in result.stderr


def another_set(tmp_path, name):
    """``name`` from another key set: a file of another key pair."""
    create_keys(tmp_path / "another")
    return (tmp_path / "another" / name).read_bytes()


@pytest.mark.parametrize(
    ("damage", "launcher", "words"),
    [
        # Actors started here would fail the handshake until the run ends (exit 3, ~40 s).
        (
            lambda d, t: (d / "learner.key").write_bytes(another_set(t, "learner.key")),
            [],
            "learner.key is not the public half of learner.key_secret",
        ),
        # Six restarts of the local actors, then exit 3; over ssh a traceback (exit 1).
        (lambda d, t: (d / "actor.key_secret").unlink(), [], "lacks actor.key_secret"),
        (
            lambda d, t: (d / "actor.key_secret").unlink(),
            ["launcher=ssh", "launcher.hosts=[seedq-nowhere.invalid]"],
            "lacks actor.key_secret",
        ),
    ],
)
def test_seedq_train_refuses_keys_its_actors_cannot_use_in_one_line(
    tmp_path, damage, launcher, words
):
    directory = keys(tmp_path)
    damage(directory, tmp_path)
    result = run_cli(
        *launcher,
        "env=fake",
        "broker.host=0.0.0.0",
        f"security.keys_dir={directory}",
        "total_env_steps=1000",
        f"run_dir={tmp_path / 'run'}",
    )
    assert (result.returncode, "Traceback" in result.stdout) == (2, False), result.stdout
    assert words in result.stdout
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_a_relative_keys_dir_is_kept_absolute_for_resumes_and_actors_elsewhere(
    tmp_path, monkeypatch
):
    # It was saved in the checkpoints as given: a resume from another directory was refused
    # with "lacks learner.key, ...; create the keys with `seedq-keys keys`" (a new key set
    # would lock out the actors holding the old one).
    from hydra import compose, initialize_config_dir

    from seedq.cli import to_config

    keys(tmp_path)
    monkeypatch.chdir(tmp_path)
    conf = str(Path(__file__).resolve().parents[1] / "seedq" / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=["run_dir=/tmp/seedq-test", "security.curve=true", "security.keys_dir=keys"],
        )
    assert to_config(cfg).security.keys_dir == str(tmp_path / "keys")
