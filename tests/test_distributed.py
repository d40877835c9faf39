"""One run on several learner ranks (``hardware.learners``), for real: 2 gloo ranks on the CPU.

Each run is ``seedq-train hardware.learners=2 ...`` as a user types it: seedq starts the ranks
through torch's elastic launcher. At an agreed end every rank logs its weights digest, its
update count and its own env step counter (``learners/rank-K.log``); the tests compare
those across ranks themselves. The runs are tiny (fake envs or CartPole, env threads or
in-process actors) so each takes seconds of compute; most of a test's time is starting two
Python processes with torch.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_arch_agents import ALGORITHM, ARCH

from seedq.agents.registry import AGENTS

TREE = str(Path(__file__).resolve().parents[1])
# Small runs that still take well over 50 updates on every algorithm.
COMMON = [
    "hardware.num_threads=1",
    "max_minutes=2",
    "log_interval_s=0.5",
    "checkpoint.every_minutes=0",
]
STEPS = {"vtrace": 3000, "ppo": 3000, "r2d2": 3000, "sac": 1500}
# SAC's updates trail its inserts by up to the replay's slack (32 batches by default), plus an
# unroll and a block: with ~750 steps a rank at 0.125 updates a step that left as few as 48
# updates. A slack of 8 batches puts the floor near 70, whatever the timing.
RANK_EXTRA = {"sac": ["algorithm.replay_slack_batches=8"]}
# The on-policy algorithms run with PopArt's value head: each rank's batch has its own targets;
# every rank merges all ranks' into the moments and rewrites the head alike, so the buffers and
# the head must stay the same everywhere (their Atari presets use it). R2D2 normalises its
# observations: every rank merges all ranks' sampled rows after each update, so the
# normaliser's buffers must stay the same everywhere too (frames are normalised by default).
POPART = {
    "vtrace": ["algorithm.value_norm=true"],
    "ppo": ["algorithm.value_norm=true"],
    "r2d2": ["algorithm.model.obs_norm=true"],
}
DIGEST = re.compile(
    r"learner rank (\d+) of (\d+): (\d+) updates, (\d+) env steps counted here, "
    r"weights digest (\w+)"
)


def command(run_dir: Path, *overrides: str) -> list[str]:
    """``seedq-train`` on two ranks (unless ``overrides`` set hardware.learners)."""
    learners = [] if any("hardware.learners=" in o for o in overrides) else ["hardware.learners=2"]
    return [
        sys.executable,
        "-m",
        "seedq.cli",
        *learners,
        *COMMON,
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


def train(
    run_dir: Path, *overrides: str, timeout: float = 240, tmp: Path | None = None
) -> subprocess.CompletedProcess:
    """``tmp``: the run's TMPDIR, to see what it leaves there."""
    env = {**os.environ, "PYTHONPATH": TREE, "PYTHONUNBUFFERED": "1"}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return subprocess.run(
        command(run_dir, *overrides),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=env,
        cwd=TREE,
    )


def rank_reports(run_dir: Path) -> dict[int, dict]:
    """What each rank logged at the end: updates, its own env steps, its weights digest."""
    reports = {}
    for log in sorted((run_dir / "learners").glob("rank-*.log")):
        for match in DIGEST.finditer(log.read_text()):
            rank, _, updates, steps, digest = match.groups()
            reports[int(rank)] = {"updates": int(updates), "steps": int(steps), "digest": digest}
    return reports


def metrics_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def algorithm_case(algorithm: str) -> list[str]:
    # SAC's sizes use a fake continuous env; the others run CartPole. Env threads: no actor
    # processes to start on a loaded box.
    arch = "sebulba" if algorithm != "vtrace" else "seed"
    return [
        f"algorithm={algorithm}",
        f"arch={arch}",
        *ARCH[arch],
        *ALGORITHM[algorithm],
        f"total_env_steps={STEPS[algorithm]}",
        *RANK_EXTRA.get(algorithm, []),
    ]


def test_every_algorithm_has_a_two_rank_case():
    assert set(STEPS) == set(AGENTS), "give a new algorithm its step budget in STEPS"


@pytest.mark.parametrize("algorithm", sorted(AGENTS))
def test_two_ranks_end_with_bit_identical_weights_and_write_one_run(
    tmp_path, tmp_path_factory, algorithm
):
    scratch = tmp_path_factory.mktemp("tmpdir")
    result = train(tmp_path, *algorithm_case(algorithm), *POPART.get(algorithm, []), tmp=scratch)
    assert result.returncode == 0, result.stdout[-3000:]
    # The elastic launcher's folders are in the run dir, not left in the temp dir.
    assert list(scratch.glob("torchelastic_*")) == []
    reports = rank_reports(tmp_path)
    assert sorted(reports) == [0, 1], result.stdout[-3000:]
    assert reports[0]["digest"] == reports[1]["digest"]
    assert reports[0]["updates"] == reports[1]["updates"] >= 50
    # One run: one metrics file, one header, counters summed over both ranks' own steps.
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_steps"] == reports[0]["steps"] + reports[1]["steps"]
    assert reports[0]["steps"] > 0 and reports[1]["steps"] > 0
    assert (tmp_path / "metrics.csv").read_text().count("wall_time,") == 1
    rows = metrics_rows(tmp_path)
    assert int(rows[-1]["env_steps"]) == summary["env_steps"]
    assert len(list((tmp_path / "checkpoints").glob("ckpt-*.pt"))) == 1
    # Rank 1 wrote nothing of the run's own beside its log (and its actors' logs).
    assert sorted(p.name for p in (tmp_path / "learners").glob("*.log")) == [
        "rank-0.log",
        "rank-1.log",
    ]
    assert [p.name for p in (tmp_path / "learners").rglob("*") if p.suffix != ".log"] in (
        [],
        ["rank-1"],
    )


def test_two_anakin_ranks_end_with_bit_identical_weights(tmp_path):
    result = train(tmp_path, "arch=anakin", *ARCH["anakin"], "total_env_steps=16000")
    assert result.returncode == 0, result.stdout[-3000:]
    reports = rank_reports(tmp_path)
    assert reports[0]["digest"] == reports[1]["digest"]
    assert reports[0]["updates"] == reports[1]["updates"] >= 50
    # Two ranks step blocks of 32 envs x 8 steps each: rounds of 512 env steps. The run stops
    # after the round that reaches the budget (16,384), says so at the start, and both ranks
    # stepped alike; before, each rank checked the budget against the other's count of the
    # round before and both stepped one round more (16,896).
    assert reports[0]["steps"] == reports[1]["steps"] == 8192
    assert json.loads((tmp_path / "summary.json").read_text())["env_steps"] == 16384
    assert (
        "acts in whole blocks of 512 env steps (32 envs x unroll 8 x 2 learner ranks): the run "
        "ends at 16384 env steps, past total_env_steps=16000" in result.stdout
    )


def quick_cartpole(*overrides: str) -> list[str]:
    return [*algorithm_case("vtrace"), *overrides]


def test_a_checkpoint_of_two_ranks_resumes_on_one_and_back_on_two(tmp_path):
    first = train(tmp_path, *quick_cartpole())
    assert first.returncode == 0, first.stdout[-3000:]
    saved = json.loads((tmp_path / "summary.json").read_text())

    one = train(
        tmp_path / "again",
        f"resume={tmp_path}",
        "hardware.learners=1",
        f"total_env_steps={saved['env_steps'] + 2000}",
    )
    assert one.returncode == 0, one.stdout[-3000:]
    assert f"resumed at {saved['env_steps']} env steps, {saved['updates']} updates" in one.stdout
    after_one = json.loads((tmp_path / "summary.json").read_text())
    assert after_one["updates"] > saved["updates"]

    two = train(
        tmp_path / "twice",
        f"resume={tmp_path}",
        "hardware.learners=2",
        f"total_env_steps={after_one['env_steps'] + 2000}",
    )
    assert two.returncode == 0, two.stdout[-3000:]
    reports = rank_reports(tmp_path)
    assert reports[0]["digest"] == reports[1]["digest"]
    after_two = json.loads((tmp_path / "summary.json").read_text())
    # The counters go on from the checkpoint: rank 0 restored them, rank 1 counted from 0.
    assert reports[0]["steps"] > after_one["env_steps"]
    assert after_two["env_steps"] == reports[0]["steps"] + reports[1]["steps"]
    assert after_two["updates"] == reports[0]["updates"] > after_one["updates"]
    assert (
        f"resumed at {after_one['env_steps']} env steps"
        in (tmp_path / "learners" / "rank-0.log").read_text()
    )


def test_a_rank_killed_ends_the_run_within_30_s_naming_the_rank_and_its_host(tmp_path):
    env = {**os.environ, "PYTHONPATH": TREE, "PYTHONUNBUFFERED": "1"}
    cmd = command(
        tmp_path,
        *quick_cartpole("total_env_steps=100000000", "max_minutes=5"),
        "checkpoint.every_minutes=0.05",
    )
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=TREE
    )
    try:
        rank1 = wait_for_rank_training(tmp_path, rank=1, proc=proc)
        os.kill(rank1, signal.SIGKILL)
        killed = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        ended = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, output[-3000:]
    assert ended < 30, f"the run took {ended:.0f} s to end after rank 1 was killed"
    failures = [line for line in output.splitlines() if "run failed:" in line]
    assert len(failures) == 1, output[-3000:]
    assert (
        f"learner rank 1 (pid {rank1}) on {os.uname().nodename} was killed by SIGKILL"
        in (failures[0])
    )
    # Rank 0 stopped in order: its last checkpoint is there to resume from.
    assert list((tmp_path / "checkpoints").glob("ckpt-*.pt"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_stop_signal_to_a_two_rank_run_exits_75_with_a_checkpoint(tmp_path, sig):
    # SIGTERM ended in a launcher traceback and exit 1 after 30 s (the ranks waited for their
    # summaries to be read); SIGUSR1 (Slurm's warning before a time limit) killed the
    # launching process at once (exit 138), orphaning the ranks. Slurm's requeue wants 75.
    env = {**os.environ, "PYTHONPATH": TREE, "PYTHONUNBUFFERED": "1"}
    cmd = command(tmp_path, *quick_cartpole("total_env_steps=100000000", "max_minutes=5"))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=TREE
    )
    try:
        ranks = [wait_for_rank_training(tmp_path, rank=r, proc=proc) for r in (0, 1)]
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75, output[-3000:]
    assert f"stopped by {sig.name}: the learner ranks stopped" in output
    assert list((tmp_path / "checkpoints").glob("ckpt-*.pt"))
    for pid in ranks:  # none left behind
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_second_run_into_a_live_two_rank_run_is_refused(tmp_path):
    # The command line that started the ranks holds the run dir's lock for the run's life.
    env = {**os.environ, "PYTHONPATH": TREE, "PYTHONUNBUFFERED": "1"}
    cmd = command(tmp_path, *quick_cartpole("total_env_steps=100000000", "max_minutes=5"))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=TREE
    )
    try:
        wait_for_rank_training(tmp_path, rank=0, proc=proc)
        for learners in ("1", "2"):
            second = train(tmp_path, f"hardware.learners={learners}", "resume=auto", timeout=120)
            assert second.returncode == 2, second.stdout[-3000:]
            assert f"is in use by another seedq run (pid {proc.pid})" in second.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)


def test_a_rank_that_refuses_at_start_makes_seedq_train_refuse_with_its_reason(tmp_path):
    # One actor slot for two ranks: rank 1's share is empty, which only a rank can tell (and
    # rank 0 cannot reach the host). It ended as "run failed" (exit 3) with resume advice.
    result = train(
        tmp_path,
        "env=fake",
        "launcher=ssh",
        "launcher.hosts=[seedq-no-such-host.invalid]",
        "launcher.actors_per_host=1",
        timeout=120,
    )
    assert result.returncode == 2, result.stdout[-3000:]
    assert "refused the run:" in result.stdout and "run failed" not in result.stdout
    assert not list(tmp_path.glob("checkpoints/*"))


def wait_for_rank_training(run_dir: Path, rank: int, proc: subprocess.Popen) -> int:
    """The pid of ``rank`` once the run has written a metrics row (its ranks are training)."""
    deadline = time.monotonic() + 180
    log = run_dir / "learners" / f"rank-{rank}.log"
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        rows = metrics_rows(run_dir) if (run_dir / "metrics.csv").exists() else []
        if rows and log.exists():
            match = re.search(rf"\[learner rank {rank} (\d+)\]", log.read_text())
            if match:
                return int(match[1])
        time.sleep(0.5)
    raise AssertionError("the ranks did not start training within 180 s")


def test_two_ranks_stop_near_a_small_step_budget(tmp_path):
    # Each rank checked the budget at its loop's rows only: a fake env given 2,000 env steps
    # ran to 15-25 k (the first row's sum, ~0.5 s of 30 k steps/s). A rank now stops its own
    # stepping once its steps and the others' as last summed reach the budget.
    result = train(tmp_path, "env=fake", "total_env_steps=2000", "log_interval_s=5")
    assert result.returncode == 0, result.stdout[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert 2000 <= summary["env_steps"] <= 6000, summary
    assert summary["stop_reason"] == "total_env_steps"


def test_two_ranks_learn_cartpole_in_a_short_run(tmp_path):
    result = train(tmp_path, "stop_at_return=150", "max_minutes=3", "log_interval_s=2", timeout=400)
    assert result.returncode == 0, result.stdout[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stop_reason"] == "target_return", summary
    # Rank 0's episode log holds both ranks' episodes: as many as the summed count, give or
    # take those a rank finished between summing its counters and sending its episodes.
    with open(tmp_path / "episodes.csv") as f:
        logged = len(list(csv.DictReader(f)))
    counted = int(metrics_rows(tmp_path)[-1]["episode/count"])
    assert abs(logged - counted) <= 128 < counted // 4, (logged, counted)


@pytest.mark.slow
def test_two_ranks_reach_475_on_cartpole(tmp_path):
    result = train(tmp_path, "stop_at_return=475", "max_minutes=10", timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stop_reason"] == "target_return", summary
