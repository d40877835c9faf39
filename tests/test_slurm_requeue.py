"""``scripts/slurm/requeue.sbatch`` on a one-node Slurm cluster: a run requeued by the operator
(``scontrol requeue``), warned of its time limit (SIGUSR1 to the batch shell, as
``--signal=B:USR1@90`` sends it) or with its learner killed inside the job goes on from its
newest checkpoint and reaches its budget, leaving no job step and no process behind.

Without a cluster these skip with the reason (``scripts/setup_slurm_local.sh`` sets one up).
A requeued job starts again after the cluster's credential lifetime (``AuthInfo=cred_expire``:
10 s on the test cluster, 120 s by default).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

from fault_helpers import alive, wait_for
from test_slurm_launcher import TREE, left_behind, needs_slurm, outside_slurm

from seedq.arch.resume import read_steps

SCRIPT = "scripts/slurm/requeue.sbatch"


def submit(tmp_path: Path, *overrides: str) -> tuple[str, Path]:
    """Submit the requeueable script for a fake-env run; the job id and the run dir."""
    run_dir, keys = tmp_path / "run", tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "seedq.keys", str(keys)], check=True)
    result = subprocess.run(
        ["sbatch", "--parsable", "-N1", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=10"]
        + [f"--output={tmp_path}/job.out", SCRIPT]
        + [f"+launcher.env={{SEEDQ_TEST_RUN:'{run_dir}'}}", "env=fake"]
        + ["actor.envs_per_batch=8", "log_interval_s=0.5", "checkpoint.every_minutes=0.02"]
        # The script binds 0.0.0.0 for a real cluster; here everything stays on loopback.
        + ["broker.host=127.0.0.1", "security.curve=true", f"security.keys_dir={keys}"]
        + [f"launcher.remote_keys_dir={tmp_path}/node-keys", "supervisor.backoff_s=1"]
        + list(overrides),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TREE,
        env={**outside_slurm(), "PYTHONPATH": TREE, "RUN_DIR": str(run_dir)},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0], run_dir


def job_state(job: str) -> str:
    shown = subprocess.run(
        ["scontrol", "show", "job", job, "-o"], capture_output=True, text=True, timeout=30
    ).stdout
    match = re.search(r"JobState=(\S+)", shown)
    return match[1] if match else "GONE"


def requeued(job: str, timeout: float = 120) -> None:
    wait_for(lambda: job_state(job) == "PENDING", timeout, f"job {job} to be requeued")


def finished(job: str, timeout: float = 400) -> None:
    try:
        wait_for(lambda: job_state(job) in ("COMPLETED", "FAILED", "GONE"), timeout, job)
    finally:
        if job_state(job) not in ("COMPLETED", "FAILED", "GONE"):
            subprocess.run(["scancel", job], check=False)


def learner_pid(run_dir: Path) -> int:
    log = (run_dir / "cli.log").read_text()
    return int(re.findall(r"supervising the learner, pid (\d+)", log)[-1])


def outcome(tmp_path: Path, run_dir: Path) -> tuple:
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = read_steps(run_dir / "metrics.csv")
    return summary["stop_reason"], steps == sorted(steps), left_behind(run_dir)


@needs_slurm
def test_a_job_requeued_by_scontrol_resumes_from_its_checkpoint(tmp_path):
    job, run_dir = submit(tmp_path, "total_env_steps=120000")
    try:
        wait_for(lambda: list(run_dir.glob("checkpoints/ckpt-*.pt")), 180, "a checkpoint")
        subprocess.run(["scontrol", "requeue", job], check=True)
        requeued(job)
    finally:
        finished(job)
    out = (tmp_path / "job.out").read_text()
    log = (run_dir / "cli.log").read_text()
    assert (f"job {job} start 1" in out, "SIGTERM: saving a checkpoint" in log) == (True, True), out
    assert "resumed at " in log
    assert outcome(tmp_path, run_dir) == ("total_env_steps", True, []), out


@needs_slurm
def test_the_time_limit_warning_checkpoints_and_requeues_the_job(tmp_path):
    job, run_dir = submit(tmp_path, "total_env_steps=120000")
    try:
        wait_for(lambda: list(run_dir.glob("checkpoints/ckpt-*.pt")), 180, "a checkpoint")
        # What --signal=B:USR1@90 does 90 s before the time limit.
        subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)
        requeued(job)
    finally:
        finished(job)
    out = (tmp_path / "job.out").read_text()
    log = (run_dir / "cli.log").read_text()
    assert (f"requeueing job {job}" in out, "SIGUSR1: saving a checkpoint" in log) == (True, True)
    assert "resumed at " in log
    assert outcome(tmp_path, run_dir) == ("total_env_steps", True, []), out


@needs_slurm
def test_a_learner_killed_inside_the_job_is_restarted_there(tmp_path):
    job, run_dir = submit(tmp_path, "total_env_steps=120000")
    try:
        wait_for(lambda: list(run_dir.glob("checkpoints/ckpt-*.pt")), 180, "a checkpoint")
        learner = learner_pid(run_dir)
        subprocess.run(["kill", "-9", str(learner)], check=True)
        wait_for(lambda: not alive(learner), 30, "the learner to die")
    finally:
        finished(job)
    out = (tmp_path / "job.out").read_text()
    log = (run_dir / "cli.log").read_text()
    assert (f"job {job} start 1" in out, "the learner was killed by SIGKILL" in log) == (
        False,
        True,
    ), out
    assert "resumed at " in log
    assert outcome(tmp_path, run_dir) == ("total_env_steps", True, []), out
