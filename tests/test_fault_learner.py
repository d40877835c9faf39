"""Learner death: its actor processes exit within seconds (parent-death signal for its own
children, a dropped connection for actors started elsewhere), and ``seedq-train resume=`` goes on
from the last checkpoint."""

import json
import socket
import subprocess
import sys
import time

from cli_helpers import run_cli
from fault_helpers import FAKE, alive, children, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_actors_exit_when_the_learner_is_killed_and_resume_goes_on(tmp_path):
    port = free_port()
    learner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seedq.cli",
            *FAKE,
            "actor.num_actors=1",
            f"broker.port={port}",
            "checkpoint.every_minutes=0.02",
            "max_minutes=3",
            f"hydra.run.dir={tmp_path}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # An actor started as another launcher would (not our child): it has only the connection.
    remote_log = tmp_path / "remote_actor.log"
    remote = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seedq.actor.main",
            f"--endpoint=tcp://127.0.0.1:{port}",
            "--actor-ids=50",
            "--envs-per-batch=8",
            '--env-config={"kind": "fake"}',
            f"--log-file={remote_log}",
            "--learner-lost-s=2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: list(tmp_path.glob("checkpoints/ckpt-*.pt")), 120, "a checkpoint")
        wait_for(lambda: "actor 50 joined" in (tmp_path / "cli.log").read_text(), 60, "actor 50")
        local_actors = children(learner.pid)
        learner.kill()
        learner.wait()
        killed_at = time.monotonic()
        wait_for(lambda: not any(alive(p) for p in local_actors), 20, "local actors to exit")
        remote.wait(timeout=30)
        remote_exit_s = time.monotonic() - killed_at
    finally:
        for proc in (learner, remote):
            if proc.poll() is None:
                proc.kill()
    actor_log = (tmp_path / "actor_0.log").read_text()
    assert (len(local_actors), "the learner (pid" in actor_log) == (1, True), actor_log
    assert remote.returncode == 1 and remote_exit_s < 20
    assert "the connection to the learner dropped" in remote_log.read_text()

    saved = max(tmp_path.glob("checkpoints/ckpt-*.pt")).name
    saved_steps = int(saved[len("ckpt-") : -len(".pt")])
    result = run_cli(f"resume={tmp_path}", f"total_env_steps={saved_steps + 3000}", timeout=180)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert result.returncode == 0, result.stdout
    assert f"resumed at {saved_steps} env steps" in result.stdout
    assert summary["stop_reason"] == "total_env_steps"


def test_an_actor_whose_parent_is_already_gone_exits_at_once(tmp_path):
    log = tmp_path / "orphan.log"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "seedq.actor.main",
            "--endpoint=tcp://127.0.0.1:9",
            "--actor-ids=0",
            "--envs-per-batch=2",
            '--env-config={"kind": "fake"}',
            f"--log-file={log}",
            "--parent-pid=1",  # not our parent: as if the learner died before prctl ran
        ],
        capture_output=True,
        timeout=60,
    )
    assert (result.returncode, "is gone; exiting" in log.read_text()) == (1, True)
