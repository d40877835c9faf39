"""Cheap checkpoints and automatic resume: state copied under the lock and written in the
background, the newest checkpoint that reads, metrics cut back to the checkpoint, and
``seedq-train resume=auto`` / stop signals as a user meets them."""

import csv
import json
import os
import signal
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
import torch
from cli_helpers import run_cli
from fault_helpers import FAKE, FULL_DISK_TRAIN, train_on_a_full_disk, wait_for
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seedq.arch.base import TrainingRun
from seedq.arch.resume import continue_metrics, read_steps, recent_episodes, start_over
from seedq.core.stats import RunStats
from seedq.learner.checkpoint import (
    CheckpointError,
    CheckpointWriteError,
    NonFiniteState,
    copy_tensors,
    load_newest,
    read_checkpoint,
    save_checkpoint,
)
from seedq.learner.checkpoint_files import list_checkpoints
from seedq.learner.checkpoint_writer import CheckpointWriter
from seedq.learner.run_lock import LOCK_NAME
from seedq.metrics import MetricsWriter
from seedq.schema import ConfigError


def state(env_steps: int) -> dict:
    """The least a run's checkpoint holds: counters, a config and weights."""
    return {
        "env_steps": env_steps,
        "updates": 0,
        "config": {"algorithm": {"name": "vtrace"}, "env": {"id": "CartPole-v1"}},
        "model": {"w": torch.full((3,), float(env_steps))},
    }


def test_a_snapshot_does_not_change_when_training_goes_on():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    copied = copy_tensors({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    before = copied["model"]["weight"].clone(), copied["optimizer"]["state"][0]["exp_avg"].clone()
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    after = copied["model"]["weight"], copied["optimizer"]["state"][0]["exp_avg"]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))  # a copy: exact


def test_the_writer_writes_in_the_background_and_keeps_the_newest(tmp_path):
    writer = CheckpointWriter(str(tmp_path), keep=2)
    for steps in (100, 200, 300):
        writer.submit(state(steps))
        writer.flush()
    writer.close()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt-000000000200.pt", "ckpt-000000000300.pt"]


def test_a_snapshot_waiting_for_the_disk_is_replaced_by_a_newer_one(tmp_path):
    started, release = threading.Event(), threading.Event()

    def slow_save(run_dir, snapshot, *, keep):
        started.set()
        release.wait(10)
        return save_checkpoint(run_dir, snapshot, keep=keep)

    writer = CheckpointWriter(str(tmp_path), keep=5, write=slow_save)
    writer.submit(state(100))
    started.wait(10)
    writer.submit(state(200))  # waits: 100 is being written
    writer.submit(state(300))  # replaces 200, which holds nothing 300 does not
    release.set()
    writer.close()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert (names, writer.replaced) == (["ckpt-000000000100.pt", "ckpt-000000000300.pt"], 1)


def test_a_failed_background_write_is_counted_and_the_writer_goes_on(tmp_path):
    calls = []

    def full_disk_once(run_dir, snapshot, *, keep):
        calls.append(snapshot["env_steps"])
        if len(calls) == 1:
            raise CheckpointWriteError("could not write: No space left on device")
        return save_checkpoint(run_dir, snapshot, keep=keep)

    writer = CheckpointWriter(str(tmp_path), keep=3, write=full_disk_once)
    writer.submit(state(100))
    writer.flush()
    writer.submit(state(200))
    writer.close()
    names = [p.name for p in (tmp_path / "checkpoints").iterdir()]
    assert (writer.failures, writer.written, names) == (1, 1, ["ckpt-000000000200.pt"])


def test_a_run_knows_its_last_checkpoint_was_refused_for_nan_not_for_the_disk(tmp_path):
    # seedq-train's last line blamed the disk ("Free space or fix the folder's permissions")
    # for a checkpoint refused because the training had diverged to NaN weights.
    def save(run_dir, snapshot, *, keep):
        if snapshot["env_steps"] == 200:
            raise NonFiniteState("not writing: model.w holds NaN or inf")
        if snapshot["env_steps"] == 300:
            raise CheckpointWriteError("could not write: No space left on device")
        return save_checkpoint(run_dir, snapshot, keep=keep)

    run = SimpleNamespace(_writer=CheckpointWriter(str(tmp_path), keep=3, write=save))
    seen = []
    for steps in (100, 200, 300, 400):
        run._writer.submit(state(steps))
        run._writer.flush()
        seen.append(
            (
                TrainingRun.last_checkpoint_written.fget(run),
                TrainingRun.weights_not_finite.fget(run),
            )
        )
    run._writer.close()
    assert seen == [(True, False), (False, True), (False, False), (True, False)]


def test_a_bug_in_the_writer_is_raised_in_the_run_s_thread(tmp_path):
    writer = CheckpointWriter(str(tmp_path), keep=3)
    writer.submit({**state(100), "bad": lambda: None})  # cannot be pickled
    with pytest.raises(AttributeError):
        writer.flush()
    writer.close()


def damage(path):
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\x00" * 256)


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    for steps in (100, 200):
        save_checkpoint(str(tmp_path), state(steps), keep=3)
    damage(tmp_path / "checkpoints" / "ckpt-000000000200.pt")
    path, loaded = load_newest(str(tmp_path))
    assert (path.name, loaded["env_steps"]) == ("ckpt-000000000100.pt", 100)
    assert "skipping a checkpoint that does not read: " in caplog.text
    assert "ckpt-000000000200.pt cannot be read" in caplog.text


def test_a_damaged_newer_checkpoint_is_set_aside_and_never_outranks_the_resumed_runs(tmp_path):
    # A damaged file ahead of the run (cut short by a full disk, a crash of the machine): the
    # run resumes from 100, and its next checkpoints (150, 175) must be the run's newest with
    # keep=1, not deleted in favour of the damaged 900, as they were.
    folder = tmp_path / "checkpoints"
    save_checkpoint(str(tmp_path), state(100), keep=3)
    (folder / "ckpt-000000000900.pt").write_bytes(b"garbage")
    path, _ = load_newest(str(tmp_path))
    assert path.name == "ckpt-000000000100.pt"
    assert (folder / "damaged" / "ckpt-000000000900.pt").read_bytes() == b"garbage"
    for steps in (150, 175):
        save_checkpoint(str(tmp_path), state(steps), keep=1)
    assert [p.name for p in list_checkpoints(folder)] == ["ckpt-000000000175.pt"]
    assert load_newest(str(tmp_path))[0].name == "ckpt-000000000175.pt"


def test_a_checkpoint_written_is_never_removed_for_a_newer_named_file(tmp_path):
    folder = tmp_path / "checkpoints"
    save_checkpoint(str(tmp_path), state(100), keep=3)
    save_checkpoint(str(tmp_path), state(900), keep=3)  # e.g. copied in from another run
    save_checkpoint(str(tmp_path), state(200), keep=1)
    assert [p.name for p in list_checkpoints(folder)] == [
        "ckpt-000000000200.pt",
        "ckpt-000000000900.pt",
    ]


def test_a_run_dirs_newest_readable_checkpoint_is_what_eval_and_resume_dir_read(tmp_path):
    for steps in (100, 200):
        save_checkpoint(str(tmp_path), state(steps), keep=3)
    damage(tmp_path / "checkpoints" / "ckpt-000000000200.pt")
    for where in (tmp_path, tmp_path / "checkpoints"):
        path, loaded = read_checkpoint(str(where))
        assert (path.name, loaded["env_steps"]) == ("ckpt-000000000100.pt", 100)
    # Nothing moved: reading is not resuming.
    assert len(list_checkpoints(tmp_path / "checkpoints")) == 2
    with pytest.raises(CheckpointError, match="cannot be read"):
        read_checkpoint(str(tmp_path / "checkpoints" / "ckpt-000000000200.pt"))


def test_no_checkpoint_means_a_fresh_start_and_only_damaged_ones_are_refused(tmp_path):
    assert load_newest(str(tmp_path)) is None
    save_checkpoint(str(tmp_path), state(100), keep=3)
    damage(tmp_path / "checkpoints" / "ckpt-000000000100.pt")
    with pytest.raises(CheckpointError, match="none of its 1 checkpoints reads"):
        load_newest(str(tmp_path))


def write_rows(run_dir, steps: list[int]) -> None:
    writer = MetricsWriter(str(run_dir), [])
    for n, step in enumerate(steps):
        writer.write({"wall_time": float(n), "env_steps": step, "return_mean": 1.0})
    writer.close()


def test_metrics_past_the_checkpoint_are_dropped_in_the_csv_and_in_tensorboard(tmp_path):
    write_rows(tmp_path, [0, 100, 200, 300, 400])
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("5.0,500,1")  # a row cut short by kill -9
    dropped = continue_metrics(str(tmp_path), 250)
    write_rows(tmp_path, [260, 360])  # the resumed run's rows
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tb_steps = [e.step for e in events.Scalars("return_mean")]
    assert (dropped, read_steps(tmp_path / "metrics.csv"), tb_steps) == (
        2,  # 300 and 400 (the cut row goes too)
        [0, 100, 200, 260, 360],
        [0, 100, 200, 260, 360],
    )


def test_a_tensorboard_dir_that_cannot_be_written_costs_its_purge_not_the_resume(
    tmp_path, monkeypatch, caplog
):
    write_rows(tmp_path, [0, 100, 200, 300])

    def read_only(**kwargs):
        raise PermissionError(13, "Permission denied", kwargs["log_dir"])

    monkeypatch.setattr("seedq.arch.resume.SummaryWriter", read_only)
    continue_metrics(str(tmp_path), 250)
    assert "events after env step 250 not hidden" in caplog.text
    assert read_steps(tmp_path / "metrics.csv") == [0, 100, 200]


def test_episodes_past_the_checkpoint_are_dropped_too(tmp_path):
    writer = MetricsWriter(str(tmp_path), [])
    writer.write_episodes([(120, -21.0, 800), (250, 3.0, 900), (260, 5.0, 950)])
    writer.close()
    with open(tmp_path / "episodes.csv", "a") as f:
        f.write("270,-2")  # a row cut short by kill -9

    continue_metrics(str(tmp_path), 250)

    assert (tmp_path / "episodes.csv").read_text().splitlines() == [
        "env_steps,return,length",
        "120,-21,800",
        "250,3,900",
    ]


def test_a_resumed_run_takes_its_recent_episodes_from_the_log(tmp_path):
    assert recent_episodes(str(tmp_path)) == ([], [])  # a run from before the log
    writer = MetricsWriter(str(tmp_path), [])
    writer.write_episodes([(10 * i, float(i), 100 + i) for i in range(150)])
    writer.close()
    with open(tmp_path / "episodes.csv", "a") as f:
        f.write("1500,oops,1\n")  # a damaged row is skipped

    returns, lengths = recent_episodes(str(tmp_path))

    assert returns == [float(i) for i in range(50, 150)]
    assert lengths == [100 + i for i in range(50, 150)]


def test_rows_glued_together_are_neither_a_recent_episode_nor_kept_on_resume(tmp_path):
    # A seedq before whole-row appends left half a row on a full disk, and the next one was
    # glued on: "98176,267392,78,12" read as a return of 267,392 (stop_at_return trusted it).
    (tmp_path / "episodes.csv").write_text(
        "env_steps,return,length\n100,-21,812\n98176,267392,78,12\n98200,-20,900\n"
    )
    (tmp_path / "metrics.csv").write_text(
        "wall_time,env_steps,return_mean,steps_per_s\n1,8,-21,5\n2,16,-2,1,16,-20,5\n3,24,-20,5\n"
    )

    returns, _ = recent_episodes(str(tmp_path))
    continue_metrics(str(tmp_path), env_steps=100_000)

    assert returns == [-21.0, -20.0]
    assert "267392" not in (tmp_path / "episodes.csv").read_text()
    assert read_steps(tmp_path / "metrics.csv") == [8, 24]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_resume_on_a_full_disk_is_one_line_and_leaves_the_run_as_it_was(tmp_path):
    # It ended in an OSError traceback, exit 1 (which supervise=true takes for a crash),
    # from trimming metrics.csv back to the checkpoint.
    run = [*FAKE, "resume=auto", f"run_dir={tmp_path}"]
    assert run_cli(*run, "total_env_steps=2000").returncode == 0
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("9,999999999,0,0\n")  # a row past the checkpoint: the resume trims it
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*.csv")}
    # The trimmed file goes through a temporary file beside it, here a disk that is full.
    os.symlink("/dev/full", tmp_path / ".metrics.csv.tmp")

    resumed = run_cli(*run, "total_env_steps=50000")

    assert resumed.returncode == 3, resumed.stdout
    assert "run failed while starting: [Errno 28] No space left on device" in resumed.stdout
    assert "Traceback" not in resumed.stdout
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*.csv")} == before


def test_resume_auto_needs_a_fixed_run_dir(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "seedq.cli", "resume=auto"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,  # Hydra's dated folder goes here
        timeout=120,
    )
    assert (result.returncode, "resume=auto needs the same run directory" in result.stdout) == (
        2,
        True,
    ), result.stdout[-2000:]


def test_a_relative_run_dir_is_the_launch_directory_s_under_hydra_job_chdir(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "seedq.cli", *FAKE, "run_dir=run", "hydra.job.chdir=true"]
        + ["resume=auto", "total_env_steps=2000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    # Hydra moved the process into run/ before the run began: the run went into run/run,
    # away from Hydra's run/.hydra and from where resume=auto and seedq-eval look.
    assert result.returncode == 0, result.stdout[-2000:]
    assert (tmp_path / "run" / "summary.json").exists() and not (tmp_path / "run" / "run").exists()


def test_resume_auto_starts_continues_and_knows_a_finished_run(tmp_path):
    run = [*FAKE, "resume=auto", f"run_dir={tmp_path}"]
    first = run_cli(*run, "total_env_steps=5000")
    done = json.loads((tmp_path / "summary.json").read_text())["env_steps"]  # 5000 or past it
    again = run_cli(*run, "total_env_steps=5000")
    longer = run_cli(*run, f"total_env_steps={done + 5000}")
    summary = json.loads((tmp_path / "summary.json").read_text())
    steps = read_steps(tmp_path / "metrics.csv")
    assert (first.returncode, again.returncode, longer.returncode) == (0, 0, 0), longer.stdout
    assert "no checkpoint in" in first.stdout
    assert "already finished (total_env_steps" in again.stdout
    assert "resumed at " in longer.stdout and summary["env_steps"] >= done + 5000
    assert steps == sorted(steps) and (tmp_path / ".hydra").is_dir()  # one folder, one curve


def test_resume_auto_skips_a_damaged_newest_checkpoint(tmp_path):
    run = [*FAKE, "resume=auto", f"run_dir={tmp_path}"]
    # two runs, each ending with a checkpoint: two files however fast the box steps
    assert run_cli(*run, "total_env_steps=3000").returncode == 0
    done = json.loads((tmp_path / "summary.json").read_text())["env_steps"]
    assert run_cli(*run, f"total_env_steps={done + 3000}").returncode == 0
    saved = sorted((tmp_path / "checkpoints").glob("ckpt-*.pt"))
    damage(saved[-1])
    result = run_cli(*run, f"total_env_steps={done + 6000}")
    previous = int(saved[-2].name[5:-3])
    assert (result.returncode, f"resumed at {previous} env steps" in result.stdout) == (0, True)
    assert f"{saved[-1].name} cannot be read" in result.stdout


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_a_stop_signal_saves_a_checkpoint_and_exits_75_to_be_resumed(tmp_path, sig):
    command = [sys.executable, "-m", "seedq.cli", *FAKE, "resume=auto", f"run_dir={tmp_path}"]
    process = subprocess.Popen(
        [*command, "max_minutes=3", "checkpoint.every_minutes=0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: len(read_rows(tmp_path)) >= 3, 120, "metrics rows")
        process.send_signal(sig)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    saved = torch.load(next((tmp_path / "checkpoints").glob("ckpt-*.pt")), weights_only=True)
    log = (tmp_path / "cli.log").read_text()
    assert (code, saved["stop_reason"], f"{sig.name}: saving a checkpoint" in log) == (
        75,
        "interrupted",
        True,
    )
    resumed = run_cli(*command[3:], f"total_env_steps={saved['env_steps'] + 5000}")
    assert (resumed.returncode, f"resumed at {saved['env_steps']} env steps" in resumed.stdout) == (
        0,
        True,
    )


def test_a_stop_whose_checkpoint_cannot_be_written_does_not_claim_one(tmp_path):
    process = subprocess.Popen(
        [*FULL_DISK_TRAIN, *FAKE, f"run_dir={tmp_path}", "max_minutes=3"]
        + ["checkpoint.every_minutes=0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: len(read_rows(tmp_path)) >= 2, 120, "metrics rows")
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 75, output
    assert "but its stop checkpoint could not be written" in output, output
    assert "with a checkpoint" not in output, output


def test_a_finish_whose_final_checkpoint_cannot_be_written_exits_3(tmp_path):
    # As a stop's: the run reached its budget, but what it learned is not on disk, so a script
    # or scheduler must not read the exit as a finish.
    result = train_on_a_full_disk(*FAKE, f"run_dir={tmp_path}", "total_env_steps=3000")
    assert result.returncode == 3, result.stdout
    assert "its final checkpoint could not be written" in result.stdout
    assert "run finished (total_env_steps)" in result.stdout


def read_rows(run_dir) -> list[str]:
    metrics = run_dir / "metrics.csv"
    return metrics.read_text().splitlines()[1:] if metrics.exists() else []


def test_the_learner_is_paused_only_for_the_copy_not_the_write(tmp_path):
    model = torch.nn.Linear(4, 4)
    run = TrainingRun()
    run.cfg = OmegaConf.create({"checkpoint": {"keep": 3}})
    run.run_dir, run.spec = str(tmp_path), SimpleNamespace(to_dict=dict)
    run.stats = RunStats(env_steps=100, episodes=1)
    run.generator = torch.Generator()
    run.agent = SimpleNamespace(
        state_dict=lambda: {"model": model.state_dict()},
        stats=SimpleNamespace(updates=10, skipped_updates=0),
        save_files=lambda run_dir: None,
    )
    writing, release = threading.Event(), threading.Event()

    def held_write(run_dir, snapshot, *, keep):
        writing.set()
        release.wait(10)
        return save_checkpoint(run_dir, snapshot, keep=keep)

    run._writer = CheckpointWriter(str(tmp_path), 3, write=held_write)
    run.save(1.0)
    writing.wait(10)
    free_while_writing = run.weights_lock.acquire(blocking=False)
    run.weights_lock.release()
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on while the copy is written
    release.set()
    run.checkpoints.close()
    saved = torch.load(tmp_path / "checkpoints" / "ckpt-000000000100.pt", weights_only=True)
    assert free_while_writing and not torch.equal(saved["model"]["weight"], model.weight)


def test_a_checkpoint_never_removes_a_file_this_process_is_writing_beside_it(tmp_path):
    # The replay is written by the run loop while the writer thread saves a checkpoint: only
    # a killed process's temp files are stale.
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    ours = folder / f".writing-{os.getpid()}-replay.tmp"
    killed = folder / ".writing-1-abc.tmp"
    for path in (ours, killed):
        path.write_bytes(b"half")
    save_checkpoint(str(tmp_path), state(100), keep=3)
    assert (ours.exists(), killed.exists()) == (True, False)


def test_a_resumed_run_that_logs_more_columns_widens_the_file_instead_of_misaligning_it(
    tmp_path,
):
    # The run that started: an older seedq with one metric column fewer; killed mid-row.
    old = MetricsWriter(str(tmp_path), ["loss/pg"])
    old.write({"wall_time": 1.0, "env_steps": 100, "return_mean": -20.0, "loss/pg": 0.5})
    old.close()
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("2.0,20")  # cut short by kill -9
    # The resumed run logs a column the file lacks, and no longer one it has.
    new = MetricsWriter(str(tmp_path), ["train/approx_kl"])
    new.write({"wall_time": 3.0, "env_steps": 300, "return_mean": -19.0, "train/approx_kl": 0.01})
    new.close()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["env_steps"], r["loss/pg"], r["train/approx_kl"]) for r in rows] == [
        ("100", "0.5", ""),
        ("300", "", "0.01"),
    ]
    assert all(None not in r for r in rows)  # no row has more fields than the header


def test_a_metrics_file_whose_header_was_cut_short_gets_its_header_back(tmp_path):
    (tmp_path / "metrics.csv").write_text("wall_time,env_st")  # killed while writing the header
    writer = MetricsWriter(str(tmp_path), [])
    writer.write({"wall_time": 1.0, "env_steps": 100, "return_mean": -20.0})
    writer.close()
    assert read_steps(tmp_path / "metrics.csv") == [100]


# ---- whose run directory: resume=RUN goes on where RUN is; one learner per run directory ----


def _checkpoints(run_dir) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt"))


def test_resume_of_a_moved_run_goes_on_in_the_folder_it_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a stray Hydra folder would land here, under runs/
    first = run_cli(*FAKE, f"run_dir={tmp_path / 'orig'}", "total_env_steps=2000")
    assert first.returncode == 0, first.stdout
    (tmp_path / "orig").rename(tmp_path / "moved")
    moved = tmp_path / "moved"
    before = _checkpoints(moved)
    steps = int(before[-1][5:17])  # a fake env steps fast: past the budget by a batch or more
    again = run_cli(f"resume={moved}", f"total_env_steps={steps + 20000}")
    assert again.returncode == 0, again.stdout
    # The checkpoint's saved run_dir (orig) is where it was written, not where the run is now.
    assert not (tmp_path / "orig").exists() and not (tmp_path / "runs").exists()
    assert f"in {moved}" in again.stdout and len(_checkpoints(moved)) > len(before)
    assert "resuming" in (moved / "cli.log").read_text()  # Hydra's own files went there too


def test_resume_of_an_older_checkpoint_sets_the_newer_ones_aside(tmp_path):
    run_dir = tmp_path / "run"
    first = run_cli(*FAKE, f"run_dir={run_dir}", "total_env_steps=2000")
    assert first.returncode == 0, first.stdout
    (oldest,) = _checkpoints(run_dir)
    steps = int(oldest[5:17])  # a fake env steps fast: past the budget by a batch or more
    more = run_cli(*FAKE, f"run_dir={run_dir}", "resume=auto", f"total_env_steps={steps + 20000}")
    assert more.returncode == 0, more.stdout
    oldest, *newer = _checkpoints(run_dir)
    assert newer
    again = run_cli(f"resume={run_dir / 'checkpoints' / oldest}", f"total_env_steps={steps + 1}")
    assert again.returncode == 0, again.stdout
    aside = run_dir / "checkpoints" / f"superseded-{oldest.removeprefix('ckpt-')[:-3]}"
    assert sorted(p.name for p in aside.iterdir()) == newer  # kept, not deleted
    # resume=auto and seedq-eval now find this run's own newest checkpoint: the one it wrote
    # at its end (its steps may pass the set-aside ones', a fake env steps fast).
    summary = json.loads((run_dir / "summary.json").read_text())
    assert not set(newer) & set(_checkpoints(run_dir))
    assert int(_checkpoints(run_dir)[-1][5:17]) == summary["env_steps"]


def test_a_second_run_into_a_live_run_dir_is_refused(tmp_path):
    command = [sys.executable, "-m", "seedq.cli", *FAKE, f"run_dir={tmp_path}", "max_minutes=3"]
    live = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (tmp_path / "metrics.csv").exists(), what="the first run's metrics")
        rows = (tmp_path / "metrics.csv").read_text()
        hydra_files = {p: p.read_bytes() for p in (tmp_path / ".hydra").iterdir()}
        log = (tmp_path / "cli.log").read_text()
        for extra in (["resume=auto"], []):  # auto would have cut its metrics back to 0 rows
            second = run_cli(*FAKE, f"run_dir={tmp_path}", "max_minutes=3", *extra)
            assert second.returncode == 2, second.stdout
            assert f"{tmp_path} is in use by another seedq run (pid {live.pid})" in second.stdout
        assert (tmp_path / "metrics.csv").read_text().startswith(rows)
        # Refused before Hydra: the live run's own config and log are as it wrote them.
        assert {p: p.read_bytes() for p in (tmp_path / ".hydra").iterdir()} == hydra_files
        assert "in use by another seedq run" not in (tmp_path / "cli.log").read_text()
        assert (tmp_path / "cli.log").read_text().startswith(log)
    finally:
        live.send_signal(signal.SIGTERM)
        live.wait(timeout=60)
    # Its end let go of the lock: the run continues.
    again = run_cli(*FAKE, f"run_dir={tmp_path}", "resume=auto", "total_env_steps=1000")
    assert again.returncode == 0, again.stdout


def test_a_fresh_run_into_a_run_dir_with_checkpoints_is_refused(tmp_path):
    first = run_cli(*FAKE, f"run_dir={tmp_path}", "total_env_steps=1000")
    assert first.returncode == 0, first.stdout
    rows = (tmp_path / "metrics.csv").read_text()
    second = run_cli(*FAKE, f"run_dir={tmp_path}", "total_env_steps=1000", "seed=3")
    assert second.returncode == 2, second.stdout
    assert f"{tmp_path} holds another run (checkpoints/ckpt-" in second.stdout
    assert f"resume=auto run_dir={tmp_path}" in second.stdout
    assert (tmp_path / "metrics.csv").read_text() == rows


def test_a_sweep_into_one_run_dir_is_refused(tmp_path):
    from seedq.launch.sweeps import shared_sweep_dir

    assert shared_sweep_dir(["-m", "seed=0,1", "run_dir=runs/x"]) is not None
    assert shared_sweep_dir(["-m", "seed=0,1", "run_dir=runs/x/${hydra:job.num}"]) is None
    assert shared_sweep_dir(["-m", "seed=0,1"]) is None
    assert shared_sweep_dir(["seed=1", "run_dir=runs/x"]) is None
    result = run_cli("-m", "seed=0,1", f"run_dir={tmp_path / 'x'}", "total_env_steps=100")
    assert result.returncode == 2 and "every job of this sweep" in result.stdout, result.stdout
    assert not (tmp_path / "x").exists()


def test_held_by_names_the_live_holder_and_takes_nothing(tmp_path):
    from seedq.learner.run_lock import held_by

    assert held_by(str(tmp_path / "missing")) is None
    assert held_by(str(tmp_path)) is None  # no lock file yet
    code = (
        "import sys, time; from seedq.learner.run_lock import claim_run_dir; "
        f"claim_run_dir({str(tmp_path)!r}); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert held_by(str(tmp_path)) == str(holder.pid)
        assert held_by(str(tmp_path)) == str(holder.pid)  # asking took nothing
    finally:
        holder.kill()
        holder.wait()
    assert held_by(str(tmp_path)) is None  # the lock ended with its process


def test_a_claim_waits_out_another_command_s_probe(tmp_path):
    # held_by's shared lock lasts microseconds; a claim at that instant tries again.
    import fcntl

    from seedq.learner.run_lock import LOCK_NAME, claim_run_dir, release_run_dirs

    (tmp_path / LOCK_NAME).write_text("")
    code = (
        "import fcntl, os, sys, time; "
        f"fd = os.open({str(tmp_path / LOCK_NAME)!r}, os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_SH); print('probing', flush=True); time.sleep(0.1)"
    )
    probe = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert probe.stdout.readline().strip() == "probing"
        claim_run_dir(str(tmp_path))  # held for 0.1 s by the probe: the tries outlast it
        fd = os.open(tmp_path / LOCK_NAME, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        release_run_dirs()
        probe.wait()


def test_a_resumed_run_counts_the_faults_of_its_earlier_starts(tmp_path):
    # faults.json and the faults/* metrics started from 0 at every resume: a supervised or
    # requeued run lost its fault history.
    from fault_helpers import make_run

    from seedq.arch.seed import SeedRun

    first = make_run(tmp_path, *FAKE)  # built, never run: no actor process starts
    first.stats.evicted = 2
    first.stats.bad_messages["bad_header"] = 3
    first.stats.bad_messages["non_finite"] = 1
    first.agent.stats.skipped_updates = 4
    first.actors.restarts = 1
    state = first.checkpoint_state(1.0)
    assert state["faults"]["evicted_actors"] == 2
    second = SeedRun(first.cfg, str(tmp_path), resume=state)
    second.actors.restarts = 2  # one more in this start
    faults = second.fault_counts()
    assert (
        faults["evicted_actors"],
        faults["bad_messages"],
        faults["non_finite_messages"],
        faults["skipped_updates"],
        faults["actor_restarts"],
    ) == (2, 4, 1, 4, 3)


def test_faults_after_the_newest_checkpoint_are_still_counted_after_a_resume(tmp_path):
    # faults.json said checkpoint_failures 2 when a read-only checkpoint folder ended the run
    # (exit 3); the resume the message advises counted from the checkpoint, 0, and rewrote it.
    from fault_helpers import make_run

    from seedq.arch.seed import SeedRun

    first = make_run(tmp_path, *FAKE)
    first.stats.evicted = 1
    state = first.checkpoint_state(1.0)  # taken before the failures below
    (tmp_path / "faults.json").write_text(
        json.dumps({"evicted_actors": 1, "checkpoint_failures": 2, "skipped_updates": 0})
    )
    second = SeedRun(first.cfg, str(tmp_path), resume=state)
    second.stats.evicted += 1  # one more in this start
    faults = second.fault_counts()
    assert (faults["checkpoint_failures"], faults["evicted_actors"]) == (2, 2)


def test_a_resumed_run_seeds_its_envs_where_no_earlier_start_did(tmp_path):
    # Every start reset the envs with the first start's seeds (SEED's actors, Sebulba's
    # batches): a run pre-empted often replayed the same episode starts and sticky actions.
    from fault_helpers import make_run

    from seedq.arch.seed import SeedRun
    from seedq.envs.config import MAX_SEED, resumed_seed

    first = make_run(tmp_path, *FAKE)
    first.stats.env_steps = 12_345
    second = SeedRun(first.cfg, str(tmp_path), resume=first.checkpoint_state(1.0))
    assert (first.actors.seed, second.actors.seed) == (0, 12_345)
    assert resumed_seed(7, 3 * MAX_SEED) == (7 + 3 * MAX_SEED) % (MAX_SEED + 1) <= MAX_SEED


def test_resume_auto_with_another_seed_is_refused_as_another_run(tmp_path):
    # It continued the seed-0 run as seed 5 without a word: a sweep's seeds reordered mixed
    # two runs in one curve.
    first = run_cli(*FAKE, f"run_dir={tmp_path}", "resume=auto", "total_env_steps=2000")
    assert first.returncode == 0, first.stdout
    other = run_cli(*FAKE, f"run_dir={tmp_path}", "resume=auto", "total_env_steps=9000", "seed=5")
    assert other.returncode == 2, other.stdout
    assert f"the run in {tmp_path} is seed=0; this command line says seed=5" in other.stdout


def test_the_episode_log_holds_every_episode_a_checkpoint_counts(tmp_path):
    # Episodes went to episodes.csv only with each metrics row: a learner killed between a
    # checkpoint and the next row resumed with episodes counted that the log never got.
    process = subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", *FAKE, f"run_dir={tmp_path}"]
        + ["max_minutes=3", "log_interval_s=1", "checkpoint.every_minutes=0.01"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: len(list(tmp_path.glob("checkpoints/ckpt-*.pt"))) >= 3, 120, "checkpoints")
    finally:
        process.kill()
        process.wait()
    newest = sorted((tmp_path / "checkpoints").glob("ckpt-*.pt"))[-1]
    saved = torch.load(newest, weights_only=True)
    with open(tmp_path / "episodes.csv") as f:
        logged = [r for r in csv.DictReader(f) if int(r["env_steps"]) <= saved["env_steps"]]
    assert saved["episodes"] > 0 and len(logged) == saved["episodes"]


# ---- resume=RUN and fresh runs never mix two runs or rewrite a finished one ----


def _snapshot(run_dir) -> dict:
    """Every file of a run but Hydra's log and config, which each command appends to."""
    return {
        p.relative_to(run_dir): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
        and ".hydra" not in p.parts
        and p.name not in ("cli.log", LOCK_NAME)
        and "tb" not in p.parts
    }


def test_resume_of_a_finished_run_changes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(*FAKE, f"run_dir={run_dir}", "total_env_steps=2000").returncode == 0
    before = _snapshot(run_dir)
    # It appended two rows whose wall time went backwards and rewrote the checkpoint.
    again = run_cli(f"resume={run_dir}")
    assert (again.returncode, "already finished (total_env_steps" in again.stdout) == (0, True)
    assert _snapshot(run_dir) == before


def test_resume_of_an_older_checkpoint_under_a_spent_budget_sets_nothing_aside(tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(*FAKE, f"run_dir={run_dir}", "total_env_steps=2000").returncode == 0
    (oldest,) = _checkpoints(run_dir)
    steps = int(oldest[5:17])
    run = [*FAKE, f"run_dir={run_dir}", "resume=auto", f"total_env_steps={steps + 20000}"]
    assert run_cli(*run).returncode == 0
    before = _snapshot(run_dir)
    # It trained nothing, yet set the newer checkpoints aside and cut the metrics back.
    again = run_cli(f"resume={run_dir / 'checkpoints' / oldest}", f"total_env_steps={steps}")
    assert (again.returncode, "already finished" in again.stdout) == (0, True), again.stdout
    assert _snapshot(run_dir) == before


def test_resume_into_another_runs_folder_is_refused(tmp_path):
    source, other = tmp_path / "source", tmp_path / "other"
    for run_dir in (source, other):
        assert run_cli(*FAKE, f"run_dir={run_dir}", "total_env_steps=2000").returncode == 0
    before = _snapshot(other)
    steps = int(_checkpoints(source)[-1][5:17])
    # It cut other's metrics back to source's step and wrote its checkpoints beside other's.
    mixed = run_cli(f"resume={source}", f"run_dir={other}", f"total_env_steps={steps + 5000}")
    assert mixed.returncode == 2, mixed.stdout
    assert f"run_dir={other} holds another run (checkpoints/ckpt-" in mixed.stdout
    assert _snapshot(other) == before
    # An empty folder takes the resumed run.
    fresh = run_cli(
        f"resume={source}", f"run_dir={tmp_path / 'fresh'}", f"total_env_steps={steps + 5000}"
    )
    assert fresh.returncode == 0, fresh.stdout
    assert _checkpoints(tmp_path / "fresh")


def test_a_fresh_run_into_a_run_dir_with_metrics_but_no_checkpoint_is_refused(tmp_path):
    write_rows(tmp_path, [0, 100, 200])  # a run stopped before its first checkpoint
    rows = (tmp_path / "metrics.csv").read_text()
    # It appended its rows to the old run's: env_steps 200, then 0 again.
    second = run_cli(*FAKE, f"run_dir={tmp_path}", "total_env_steps=1000")
    assert second.returncode == 2, second.stdout
    assert f"{tmp_path} holds another run (metrics.csv, no checkpoint)" in second.stdout
    assert (tmp_path / "metrics.csv").read_text() == rows


def test_resume_auto_without_a_checkpoint_keeps_the_earlier_metrics_aside(tmp_path):
    run = [*FAKE, "resume=auto", f"run_dir={tmp_path}", "total_env_steps=2000"]
    assert run_cli(*run).returncode == 0
    rows = (tmp_path / "metrics.csv").read_text()
    episodes = (tmp_path / "episodes.csv").read_text()
    for path in (tmp_path / "checkpoints").glob("ckpt-*.pt"):
        path.unlink()  # deleted by hand, or a disk that lost them
    # It started over and cut the metrics to their header: the whole curve was gone.
    again = run_cli(*run)
    assert again.returncode == 0, again.stdout
    assert "kept in metrics.earlier.csv, episodes.earlier.csv" in again.stdout
    assert (tmp_path / "metrics.earlier.csv").read_text() == rows
    assert (tmp_path / "episodes.earlier.csv").read_text() == episodes
    # The new curve starts over in its own file (appended, its steps would fall back to 0);
    # a fast box runs the 2,000 steps within one row, so one row is a whole curve here.
    steps = read_steps(tmp_path / "metrics.csv")
    assert steps == sorted(steps) and steps[-1] >= 2000


def test_starting_over_twice_keeps_both_earlier_curves(tmp_path):
    write_rows(tmp_path, [0, 100])
    assert start_over(str(tmp_path)) == ["metrics.earlier.csv"]
    assert start_over(str(tmp_path)) == []  # nothing left to keep
    write_rows(tmp_path, [0, 300])
    assert start_over(str(tmp_path)) == ["metrics.earlier2.csv"]
    assert read_steps(tmp_path / "metrics.earlier.csv") == [0, 100]
    assert read_steps(tmp_path / "metrics.earlier2.csv") == [0, 300]


def test_starting_over_gives_the_trackers_new_runs_instead_of_rewinding_theirs(tmp_path):
    write_rows(tmp_path, [0, 100])
    (tmp_path / "tracking.json").write_text('{"wandb": {"id": "killed"}}')
    assert start_over(str(tmp_path)) == ["metrics.earlier.csv", "tracking.earlier.json"]
    assert not (tmp_path / "tracking.json").exists()


def test_undecodable_bytes_in_the_metrics_cost_their_rows_not_the_resume(tmp_path):
    write_rows(tmp_path, [0, 100, 200, 300])
    with open(tmp_path / "metrics.csv", "ab") as f:
        f.write(b"\xfa\xfb\x00garbage\n")  # UnicodeDecodeError before
    dropped = continue_metrics(str(tmp_path), 250)
    assert (dropped, read_steps(tmp_path / "metrics.csv")) == (2, [0, 100, 200])


def test_a_metrics_file_with_a_damaged_header_is_kept_beside_and_started_again(tmp_path):
    write_rows(tmp_path, [0, 100])
    text = (tmp_path / "metrics.csv").read_text()
    damaged = "w@ll_t1me,3nv_steps" + text[text.index("\n") :]
    (tmp_path / "metrics.csv").write_text(damaged)  # ValueError: 'env_steps' is not in list
    for _ in range(2):  # a second damaged file does not replace the first
        (tmp_path / "metrics.csv").write_text(damaged)
        continue_metrics(str(tmp_path), 50)
    assert not (tmp_path / "metrics.csv").exists()
    assert (tmp_path / "metrics.csv.damaged").read_text() == damaged
    assert (tmp_path / "metrics.csv.damaged2").read_text() == damaged
    write_rows(tmp_path, [60])
    assert read_steps(tmp_path / "metrics.csv") == [60]


def test_a_run_dir_no_file_can_be_made_in_is_refused_before_hydra(tmp_path, monkeypatch):
    import tempfile

    from seedq.run_dirs import unusable_run_dir

    assert unusable_run_dir([f"run_dir={tmp_path}"]) is None
    save_checkpoint(str(tmp_path), state(100), keep=3)

    def refused(*args, **kwargs):  # an immutable folder or a read-only mount, even for root
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    refusal = unusable_run_dir([f"hydra.run.dir={tmp_path}"])
    assert refusal == (
        f"hydra.run.dir={tmp_path}: {tmp_path} cannot be written (Operation not permitted); "
        "give another folder"
    )
    # resume=RUN goes on in RUN's own folder, which Hydra would log into with a traceback.
    assert unusable_run_dir([f"resume={tmp_path}"]) == (
        f"resume={tmp_path} (its run dir): {tmp_path} cannot be written (Operation not "
        "permitted); give another folder"
    )


@pytest.mark.parametrize("resume", ["auto", "null"])
def test_a_run_dir_whose_checkpoints_is_a_file_is_refused_at_start(tmp_path, resume):
    # The run trained to its end with every checkpoint failing ('Free space ...'), exit 3.
    (tmp_path / "checkpoints").write_text("x")
    done = run_cli(
        "env=fake", f"run_dir={tmp_path}", f"resume={resume}", "total_env_steps=200", timeout=120
    )
    assert done.returncode == 2, done.stdout[-2000:]
    assert f"{tmp_path / 'checkpoints'} is a file, not a folder" in done.stdout
    assert "or give this run another run_dir" in done.stdout
    assert (tmp_path / "checkpoints").read_text() == "x"


def test_a_checkpoints_folder_that_takes_no_files_is_refused_at_claim(tmp_path, monkeypatch):
    from seedq.learner import checkpoint_files
    from seedq.learner.run_lock import claim_run_dir, held_by

    (tmp_path / "checkpoints").mkdir()
    monkeypatch.setattr(checkpoint_files, "unwritable", lambda folder: "Read-only file system")
    with pytest.raises(ConfigError, match=r"checkpoints cannot be written \(Read-only file"):
        claim_run_dir(str(tmp_path))
    assert held_by(str(tmp_path)) is None  # let go of
