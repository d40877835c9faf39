"""``supervise=true``: a learner that dies is started again with ``resume=auto``; one that
finishes, is refused or is stopped is not; nothing it started outlives it. The supervisor runs
in its own process (as a user starts it), its learners first as small stand-ins, then as the
real ``seedq-train``."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fault_helpers import FAKE, alive, children, wait_for

from seedq.arch.resume import read_steps
from seedq.launch.supervise import learner_command

STAND_IN = """
import os, signal, subprocess, sys, time
from pathlib import Path
mode, folder = sys.argv[1], Path(sys.argv[2])
starts = folder / "starts"
before = len(starts.read_text().split()) if starts.exists() else 0
with open(starts, "a") as f:
    f.write(f"{os.getpid()}\\n")
if mode == "fail":
    sys.exit(1)
if mode == "refused":
    sys.exit(2)
if mode == "die-once" and before == 0:  # leaves a process in its group, then is killed
    left = subprocess.Popen(["sleep", "300"])
    (folder / "left").write_text(str(left.pid))
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "bare":  # a learner still in the interpreter's start: no handler of seedq's yet
    (folder / "ready").write_text("")
    time.sleep(300)
if mode == "wait":  # like a learner: a checkpoint on a stop signal, then exit status 75
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda *_: sys.exit(75))
    (folder / "ready").write_text("")
    time.sleep(300)
sys.exit(0)
"""


def supervise(tmp_path: Path, mode: str) -> subprocess.Popen:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    driver = (
        "import logging, sys\n"
        "from seedq.launch.supervise import Supervisor, SupervisorConfig\n"
        "logging.basicConfig(level=logging.INFO)\n"
        f"command = [sys.executable, {str(script)!r}, {mode!r}, {str(tmp_path)!r}]\n"
        "policy = SupervisorConfig(max_restarts=2, backoff_s=0.1)\n"
        f"sys.exit(Supervisor(command, policy, {str(tmp_path)!r}).run())\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", driver],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def starts(tmp_path: Path) -> int:
    return len((tmp_path / "starts").read_text().split())


def test_the_learner_command_fixes_the_run_dir_and_resumes_automatically():
    command = learner_command(
        ["supervise=true", "env=gym", "resume=auto", "run_dir=a"], ["hydra.run.dir=a"], "/runs/a"
    )
    assert command[1:] == [
        "-m",
        "seedq.train_entry",
        "env=gym",
        "run_dir='/runs/a'",
        "hydra.run.dir='/runs/a'",
        "resume=auto",
    ]


@pytest.mark.parametrize("run_dir", ["/runs/a,b", "/runs/a b", "/runs/it's", "/runs/[1]"])
def test_the_learner_command_gives_any_run_dir_as_hydra_reads_it_back(run_dir):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    # Unquoted, a folder with a comma was a sweep to Hydra ("Ambiguous value for argument"):
    # every supervised learner was refused, and the supervisor ended with exit status 2.
    parsed = OverridesParser.create().parse_overrides(learner_command([], [], run_dir)[3:])
    assert {o.key_or_group: o.value() for o in parsed} == {
        "run_dir": run_dir,
        "hydra.run.dir": run_dir,
        "resume": "auto",
    }


def test_a_learner_that_keeps_dying_is_restarted_up_to_the_limit(tmp_path):
    process = supervise(tmp_path, "fail")
    output, _ = process.communicate(timeout=60)
    record = json.loads((tmp_path / "supervisor.json").read_text())
    assert (process.returncode, starts(tmp_path), record["learner_exits"]) == (3, 3, [1, 1, 1])
    assert "more than supervisor.max_restarts=2; giving up" in output


def test_a_refused_learner_is_not_restarted(tmp_path):
    process = supervise(tmp_path, "refused")
    process.communicate(timeout=60)
    assert (process.returncode, starts(tmp_path)) == (2, 1)


def test_a_killed_learner_is_restarted_and_what_it_left_is_ended(tmp_path):
    process = supervise(tmp_path, "die-once")
    output, _ = process.communicate(timeout=60)
    left = int((tmp_path / "left").read_text())
    assert (process.returncode, starts(tmp_path), alive(left)) == (0, 2, False), output
    assert "the learner was killed by SIGKILL; restarting it" in output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_a_signal_to_the_supervisor_stops_the_learner_and_nothing_restarts(tmp_path, sig):
    process = supervise(tmp_path, "wait")
    wait_for(lambda: (tmp_path / "ready").exists(), 60, "the learner")
    process.send_signal(sig)
    output, _ = process.communicate(timeout=60)
    assert (process.returncode, starts(tmp_path)) == (75, 1), output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_learner_that_dies_of_the_signal_passed_on_is_a_stopped_run(tmp_path, sig):
    # The signal passed on reached the learner before it could take it (Python's own start):
    # the run stopped as asked, and a requeue script that continues a 75 must see one (it got
    # 143 or 138, and Slurm's USR1 before a time limit ended the job without requeueing it).
    process = supervise(tmp_path, "bare")
    wait_for(lambda: (tmp_path / "ready").exists(), 60, "the learner")
    process.send_signal(sig)
    output, _ = process.communicate(timeout=60)
    assert (process.returncode, starts(tmp_path)) == (75, 1), output


def test_a_learner_stopped_by_a_signal_of_its_own_is_not_restarted(tmp_path):
    process = supervise(tmp_path, "wait")
    wait_for(lambda: (tmp_path / "ready").exists(), 60, "the learner")
    os.kill(int((tmp_path / "starts").read_text().split()[0]), signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert (process.returncode, starts(tmp_path)) == (75, 1), output


def test_a_killed_supervisor_takes_its_learner_with_it(tmp_path):
    process = supervise(tmp_path, "wait")
    wait_for(lambda: (tmp_path / "ready").exists(), 60, "the learner")
    learner = int((tmp_path / "starts").read_text().split()[0])
    process.kill()
    process.communicate(timeout=30)
    wait_for(lambda: not alive(learner), 30, "the learner to stop")


def test_a_learner_killed_mid_run_comes_back_from_its_checkpoint_and_finishes(tmp_path):
    """kill -9 of the learner under the supervisor: the run goes on from its newest checkpoint,
    reaches its target, and its metrics hold one curve missing only the killed interval."""
    process = subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", "supervise=true", f"run_dir={tmp_path}", *FAKE]
        + ["total_env_steps=150000", "checkpoint.every_minutes=0.02", "supervisor.backoff_s=2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: len(list(tmp_path.glob("checkpoints/ckpt-*.pt"))) >= 2, 120, "2 saves")
        learner = children(process.pid)[0]
        actors = children(learner)
        rows_before = read_steps(tmp_path / "metrics.csv")
        os.kill(learner, signal.SIGKILL)
        wait_for(lambda: not alive(learner), 30, "the learner to die")
        # No new learner has started yet (2 s backoff + its start-up): these are the dead one's.
        saved = max(int(p.name[5:-3]) for p in tmp_path.glob("checkpoints/ckpt-*.pt"))
        output, _ = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    summary = json.loads((tmp_path / "summary.json").read_text())
    steps = read_steps(tmp_path / "metrics.csv")
    kept = [s for s in rows_before if s <= saved]
    assert (process.returncode, summary["stop_reason"]) == (0, "total_env_steps"), output
    assert f"resumed at {saved} env steps" in output
    assert steps[: len(kept)] == kept and steps == sorted(steps)  # one curve, none twice
    assert min(steps[len(kept) :]) >= saved  # the resumed run takes over at the checkpoint
    assert not any(alive(a) for a in actors)
    assert json.loads((tmp_path / "supervisor.json").read_text())["learner_exits"] == [-9, 0]


@pytest.mark.slow
def test_a_run_reaches_its_target_through_two_learner_kills(tmp_path):
    """The learning version: each of the first two learners is killed right after its first
    checkpoint; the third trains Acrobot to -100 (CartPole is solved before the first kill),
    and the metrics are one curve."""
    process = subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", "supervise=true", f"run_dir={tmp_path}"]
        + ["env=gym", "env.id=Acrobot-v1", "stop_at_return=-100", "max_minutes=8"]
        + ["log_interval_s=1"]
        + ["checkpoint.every_minutes=0.05", "supervisor.backoff_s=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for kill in range(2):
            wait_for(lambda n=kill: len(resumes(tmp_path)) == n, 120, f"start {kill + 1}")
            seen = set(tmp_path.glob("checkpoints/ckpt-*.pt"))
            wait_for(lambda s=seen: set(tmp_path.glob("checkpoints/ckpt-*.pt")) - s, 120, "save")
            os.kill(children(process.pid)[0], signal.SIGKILL)
        output, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    summary = json.loads((tmp_path / "summary.json").read_text())
    steps = read_steps(tmp_path / "metrics.csv")
    exits = json.loads((tmp_path / "supervisor.json").read_text())["learner_exits"]
    assert (process.returncode, summary["stop_reason"], exits) == (
        0,
        "target_return",
        [-9, -9, 0],
    ), output[-3000:]
    assert steps == sorted(steps) and len(resumes(tmp_path)) == 2


def resumes(run_dir: Path) -> list[str]:
    log = run_dir / "cli.log"
    return re.findall(r"resumed at (\d+) env steps", log.read_text()) if log.exists() else []
