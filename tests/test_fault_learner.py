"""Learner death: its actor processes exit within seconds (parent-death signal for its own
children, a dropped connection for actors started elsewhere), and ``seedq-train resume=`` goes on
from the last checkpoint."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import run_cli
from fault_helpers import actor_argv, alive, children, fake_learner, wait_for
from ssh_hosts import free_port

from seedq.processes import PARENT_DEATH_SIGNAL, PARENT_EXIT_WAIT_S

# An actor of a fake env whose learner is nowhere: it waits (and retries) until it is stopped.
ACTOR_ARGV = [
    sys.executable,
    "-m",
    "seedq.actor.main",
    "--endpoint=tcp://127.0.0.1:9",
    "--actor-ids=0",
    "--envs-per-batch=2",
    '--env-config={"kind": "fake"}',
    "--learner-lost-s=120",
]


def test_actors_exit_when_the_learner_is_killed_and_resume_goes_on(tmp_path):
    port = free_port()
    learner = fake_learner(
        f"broker.port={port}",
        "checkpoint.every_minutes=0.02",
        "max_minutes=3",
        f"hydra.run.dir={tmp_path}",
    )
    # An actor started as another launcher would (not our child): it has only the connection.
    remote_log = tmp_path / "remote_actor.log"
    remote = subprocess.Popen(
        actor_argv(port, '{"kind": "fake"}', f"--log-file={remote_log}", "--learner-lost-s=2"),
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
        # pid 1 is not our parent: as if the learner died before prctl ran
        [*ACTOR_ARGV, f"--log-file={log}", "--parent-pid=1"],
        capture_output=True,
        timeout=60,
    )
    assert (result.returncode, "is gone; exiting" in log.read_text()) == (1, True)


# A learner stand-in: a thread starts the actor, waits until the actor has set its parent-death
# signal up (its handler shows in /proc), and exits, which sends that signal while this process
# lives on for ``hold`` seconds: the window in which a SIGKILLed learner's other threads are still
# exiting and getppid() still names it.
THREAD_STARTED_PARENT = """
import os, subprocess, sys, threading, time
from seedq.actor.main import PARENT_DEATH_SIGNAL

def catches(pid, sig):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16) >> (sig - 1) & 1
    return 0

def start():
    proc = subprocess.Popen(sys.argv[3:] + [f"--parent-pid={os.getpid()}"])
    print(proc.pid, flush=True)
    while not catches(proc.pid, PARENT_DEATH_SIGNAL):
        time.sleep(0.02)

thread = threading.Thread(target=start)
thread.start()
thread.join()
time.sleep(float(sys.argv[1]))
open(sys.argv[2], "w").close()
"""


@pytest.mark.parametrize(
    ("hold_s", "says"),
    [(1.0, "the learner (pid"), (PARENT_EXIT_WAIT_S + 2, "the learner thread that started")],
    ids=["the-learner-exits-after-the-signal", "the-learner-lives-on"],
)
def test_the_parent_death_signal_is_told_from_a_live_learner(tmp_path, hold_s, says):
    script = tmp_path / "learner.py"
    script.write_text(THREAD_STARTED_PARENT)
    log, done = tmp_path / "actor.log", tmp_path / "learner-done"
    parent = subprocess.Popen(
        [sys.executable, str(script), str(hold_s), str(done), *ACTOR_ARGV, f"--log-file={log}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        actor = int(parent.stdout.readline())
        wait_for(lambda: not alive(actor), 60, "the actor to exit")
        after_the_learner = done.exists()
        parent.wait(timeout=30)
    finally:
        parent.kill()
    text = log.read_text()
    assert ("stopping" in text, says in text, "stopped after" in text) == (True, True, True), text
    # It waited for the learner's exit, and gave up on one that did not come.
    assert after_the_learner == (hold_s < PARENT_EXIT_WAIT_S)


def actor_under_a_learner(tmp_path, then: str, *flags: str) -> tuple[str, str]:
    """A learner stand-in that starts an actor process (with ``flags``) as its child, waits a
    second past its log's start, runs the Python lines ``then`` (the actor is ``proc``) and
    prints what they print; its stdout and the actor's log."""
    log = tmp_path / "actor.log"
    script = tmp_path / "learner.py"
    script.write_text(
        "import os, signal, subprocess, sys, time\n"
        f"proc = subprocess.Popen(sys.argv[1:] + [f'--parent-pid={{os.getpid()}}', *{flags!r}])\n"
        f"while not os.path.exists({str(log)!r}): time.sleep(0.02)\n"
        "time.sleep(1.0)\n" + then
    )
    result = subprocess.run(
        [sys.executable, str(script), *ACTOR_ARGV, f"--log-file={log}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.stdout + result.stderr, log.read_text()


def test_a_deliberate_stop_with_the_learner_alive_is_clean_and_quick(tmp_path):
    then = (
        "began = time.monotonic()\nproc.terminate()\nprint(proc.wait(), time.monotonic() - began)\n"
    )
    out, log = actor_under_a_learner(tmp_path, then)
    code, took_s = out.split()[:2]
    assert (int(code), float(took_s) < PARENT_EXIT_WAIT_S) == (0, True), log + out


def test_a_launched_actor_leaves_a_schedulers_notices_to_the_learner(tmp_path):
    # Slurm's --signal without B: and submitit's USR2 before a time limit reach every process
    # of the job: SIGUSR2, then the parent-death signal, read as the learner's death (a false
    # error, a restart); SIGUSR1 killed the actor. The learner stops its actors itself.
    then = (
        "proc.send_signal(signal.SIGUSR2)\n"
        "proc.send_signal(signal.SIGUSR1)\n"
        "time.sleep(2.0)\n"
        "alive = proc.poll() is None\n"
        "proc.terminate()\n"
        "print(alive, proc.wait())\n"
    )
    out, log = actor_under_a_learner(tmp_path, then, "--launched")
    assert out.split()[:2] == ["True", "0"], log + out
    assert "ERROR" not in log


def test_an_ignored_parent_death_signal_inherited_from_the_shell_is_reset():
    # nohup-like: the signal ignored before exec, so without the reset a broker shard (no
    # handler of its own) would outlive the learner.
    code = (
        "import os, signal\n"
        "from seedq.actor.main import PARENT_DEATH_SIGNAL, exit_with_parent\n"
        "assert signal.getsignal(PARENT_DEATH_SIGNAL) == signal.SIG_IGN\n"
        "assert exit_with_parent(os.getppid())\n"
        "print(signal.getsignal(PARENT_DEATH_SIGNAL) == signal.SIG_DFL)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(PARENT_DEATH_SIGNAL, signal.SIG_IGN),
    )
    assert result.stdout.strip() == "True", result.stderr


def test_a_process_without_a_handler_dies_with_its_parent_even_under_nohup(tmp_path):
    # A broker shard's case: no handler for the parent-death signal, which its shell ignored
    # (nohup-like, inherited by the learner and its children). Its parent is SIGKILLed.
    child = (
        "import os, time\n"
        "from seedq.actor.main import exit_with_parent\n"
        "assert exit_with_parent(os.getppid())\n"
        "print(os.getpid(), flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = (
        "import subprocess, sys, time\n"
        f"proc = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE)\n"
        "print(proc.stdout.readline().decode().strip(), flush=True)\n"
        "time.sleep(120)\n"
    )
    learner = subprocess.Popen(
        [sys.executable, "-c", parent],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(PARENT_DEATH_SIGNAL, signal.SIG_IGN),
    )
    shard = None
    try:
        shard = int(learner.stdout.readline())
        learner.kill()
        learner.wait(timeout=30)
        wait_for(lambda: not alive(shard), 20, "the parentless process to die")
    finally:
        learner.kill()
        if shard is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(shard, signal.SIGKILL)  # a failed run leaves no orphan sleeping
