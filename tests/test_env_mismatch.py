"""An actor started by hand with other envs than the learner's (same observation and action
shapes) is refused at its Hello and exits saying which env keys differ; the run goes on."""

import subprocess

import pytest
from fault_helpers import actor_argv, fake_learner, wait_for
from ssh_hosts import free_ports


@pytest.mark.parametrize("shards", [1, 2])  # with shards, each shard process checks the Hello
def test_an_actor_of_other_envs_is_refused_and_the_run_goes_on(tmp_path, shards):
    port = free_ports(shards)  # shards take port, port + 1
    learner = fake_learner(
        f"broker.shards={shards}", f"broker.port={port}", "max_minutes=2", f"run_dir={tmp_path}"
    )
    try:
        wait_for(lambda: "actor 0 joined" in logs(tmp_path), 120, "actor 0")
        # Episodes of 7 steps, not the learner's 10: the same shapes, so it was accepted and
        # its steps trained a model of other envs.
        actor = subprocess.run(
            actor_argv(port, '{"kind": "fake", "episode_length": 7}', "--learner-lost-s=20"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert learner.poll() is None  # the run goes on
    finally:
        learner.terminate()
        learner.wait(timeout=60)
    assert actor.returncode == 1, actor.stderr
    assert "env_mismatch" in actor.stderr
    assert "env.episode_length=7 (the learner's: 10)" in actor.stderr
    assert "actor 50 joined" not in logs(tmp_path)


def logs(run_dir) -> str:
    """The learner's log and its broker shards' (where their actors' joins are logged)."""
    paths = [run_dir / "cli.log", *sorted(run_dir.glob("broker-shard-*.log"))]
    return "".join(path.read_text() for path in paths if path.exists())
