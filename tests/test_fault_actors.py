"""Actor faults on real processes and sockets: kill -9 (restart with a new run id), crashing too
often (one clear error, exit status 3), SIGSTOP (eviction, rejoin on SIGCONT)."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import run_cli
from fault_helpers import FAKE, children, in_background, make_run, wait_for


def test_an_actor_killed_mid_run_is_restarted_and_the_run_reaches_its_target(tmp_path):
    run = make_run(
        tmp_path, *FAKE, "total_env_steps=20000", "max_minutes=3", "actor.restart_backoff_s=0.2"
    )

    def kill_one_actor() -> None:
        wait_for(lambda: run.broker.stats.env_steps > 2000, what="2000 env steps")
        os.kill(run.actors.pids[0], signal.SIGKILL)

    thread, errors = in_background(kill_one_actor)
    summary = run.run()
    thread.join()
    faults = json.loads((tmp_path / "faults.json").read_text())
    log = (tmp_path / "actor_0.log").read_text() + (tmp_path / "actor_1.log").read_text()
    assert (errors, summary.stop_reason, faults["actor_restarts"], log.count("stopped")) == (
        [],
        "total_env_steps",
        1,
        2,  # two orderly stops at the end: the killed actor's successor and the other one
    )


def test_an_actor_crashing_too_often_ends_the_run_with_one_clear_error(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "seedq.cli",
        *FAKE,
        "actor.num_actors=1",
        "actor.max_restarts=1",
        "actor.restart_backoff_s=0.2",
        "max_minutes=3",
        f"hydra.run.dir={tmp_path}",
    ]
    learner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed: set[int] = set()

    def kill_every_actor() -> None:
        while learner.poll() is None and len(killed) < 3:
            for pid in set(children(learner.pid)) - killed:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)

    thread, _ = in_background(kill_every_actor)
    output, _ = learner.communicate(timeout=240)
    thread.join()
    errors = [line for line in output.splitlines() if " ERROR " in line]
    assert (learner.returncode, len(killed), "Traceback" in output) == (3, 2, False), output
    assert "run failed: actor process 0 (actor ids 0..1" in errors[-1], output
    assert "actor.max_restarts=1" in output and "actor_0.log ends with" in output


def test_a_stopped_actor_is_evicted_and_rejoins_when_continued(tmp_path):
    run = make_run(
        tmp_path, *FAKE, "total_env_steps=10000000", "max_minutes=3", "broker.silent_timeout_s=1.5"
    )
    steps_while_stopped: list[int] = []

    def stop_and_continue() -> None:
        # Both processes' batches joined first: on a loaded box one actor process can still be
        # importing when the other has stepped thousands of times, and a process stopped
        # before it joined has nothing to be evicted.
        wait_for(lambda: len(run.broker.actors) == 4, what="all four batches connected")
        wait_for(lambda: run.broker.stats.env_steps > 2000, what="2000 env steps")
        victim = run.actors.pids[0]
        os.kill(victim, signal.SIGSTOP)
        try:
            wait_for(lambda: run.broker.stats.evicted >= 2, what="both batches evicted")
            before = run.broker.stats.env_steps
            wait_for(lambda: run.broker.stats.env_steps > before + 1000, what="steps go on")
            steps_while_stopped.append(run.broker.stats.env_steps - before)
        finally:
            os.kill(victim, signal.SIGCONT)
        wait_for(
            lambda: "refused (unknown_actor" in (tmp_path / "actor_0.log").read_text(),
            what="the continued actor to rejoin",
        )
        wait_for(lambda: len(run.broker.actors) == 4, what="all four batches connected")
        run.cfg.total_env_steps = run.broker.stats.env_steps + 1000

    thread, errors = in_background(stop_and_continue)
    summary = run.run()
    thread.join()
    faults = json.loads((tmp_path / "faults.json").read_text())
    assert (errors, summary.stop_reason, faults["actor_restarts"]) == ([], "total_env_steps", 0)
    assert steps_while_stopped[0] > 1000


def test_a_batch_too_large_for_a_message_is_refused_before_start(tmp_path):
    result = run_cli(
        "env=fake",
        "env.obs_shape=[256,256]",
        "actor.envs_per_batch=64",
        "broker.max_message_bytes=1000000",
        f"hydra.run.dir={tmp_path}",
    )
    assert result.returncode == 2, result.stdout
    assert (
        "actor.envs_per_batch=64 envs x 262144 bytes per observation (shape [256, 256], float32)"
        in result.stdout
    )
    assert "broker.max_message_bytes=1000000" in result.stdout
    assert "lower actor.envs_per_batch to at most 1 or raise" in result.stdout
    # A limit no single env fits: the remedy is a larger limit, not "at most 0" envs.
    none_fit = run_cli(
        "env=fake",
        "env.obs_shape=[256,256]",
        "broker.max_message_bytes=100000",
        f"hydra.run.dir={tmp_path / 'none'}",
    )
    assert none_fit.returncode == 2, none_fit.stdout
    assert "raise broker.max_message_bytes to at least 589846 (one env" in none_fit.stdout


def test_the_size_check_counts_a_step_in_which_every_env_truncates():
    # 4,200 Pendulum envs all truncate at step 200: 193,236 bytes, where the check counted
    # 191,536 and took broker.max_message_bytes=191536; the broker then refused the step
    # (too_large) and the actor crashed at the end of every episode.
    from types import SimpleNamespace

    from seedq.arch.seed import check_message_size
    from seedq.messages import EnvSpec, Step, encode, frames_size
    from seedq.schema import ConfigError

    n, spec = 4200, EnvSpec(obs_shape=(3,), obs_dtype="float32", num_actions=1)
    obs, ones = np.zeros((n, 3), np.float32), np.ones(n, bool)
    step = Step(0, "r", 200, obs, np.zeros(n, np.float32), ~ones, ones, obs, [0.0] * n, [200] * n)
    size = frames_size(encode(step))
    cfg = SimpleNamespace(
        actor=SimpleNamespace(envs_per_batch=n), broker=SimpleNamespace(max_message_bytes=size - 1)
    )
    with pytest.raises(ConfigError, match="more than broker.max_message_bytes"):
        check_message_size(cfg, spec)


def test_more_envs_per_batch_than_a_step_carries_are_refused_before_start(tmp_path):
    # Was taken: the broker refused each actor's Hello (bad_field) and, its restarts spent,
    # the run failed with exit status 3.
    result = run_cli("actor.envs_per_batch=70000", f"hydra.run.dir={tmp_path}")
    assert (
        result.returncode,
        "actor.envs_per_batch=70000 is more than one Step carries (at most 65536 envs)"
        in result.stdout,
    ) == (2, True), result.stdout
