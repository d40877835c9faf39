"""Disk faults: a checkpoint write that fails keeps the previous checkpoint intact, leaves no temp
file a resume could pick, and does not stop the run."""

import errno
import json
import shutil
import subprocess
import uuid

import pytest
import torch
from fault_helpers import FAKE, make_run, train_on_a_full_disk

from seedq.learner import checkpoint
from seedq.learner.checkpoint import (
    CheckpointWriteError,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def state(env_steps: int, numbers: int = 10) -> dict:
    """The least a run's checkpoint holds: counters, a config and weights."""
    return {
        "env_steps": env_steps,
        "updates": 0,
        "config": {"algorithm": {"name": "vtrace"}, "env": {"id": "CartPole-v1"}},
        "model": {"w": torch.arange(numbers, dtype=torch.float32)},
    }


def failing_save(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_keeps_the_previous_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    good = save_checkpoint(str(tmp_path), state(100), keep=3)
    monkeypatch.setattr(checkpoint.torch, "save", failing_save)
    with pytest.raises(CheckpointWriteError, match="No space left on device.*previous checkpoint"):
        save_checkpoint(str(tmp_path), state(200), keep=3)
    files = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert (files, str(find_checkpoint(str(tmp_path)))) == (["ckpt-000000000100.pt"], good)


def test_resume_never_picks_a_temp_file_a_killed_writer_left(tmp_path):
    save_checkpoint(str(tmp_path), state(100), keep=3)
    (tmp_path / "checkpoints" / ".writing-abc.tmp").write_bytes(b"half a checkpoint")
    found = find_checkpoint(str(tmp_path))
    save_checkpoint(str(tmp_path), state(200), keep=3)
    leftovers = list((tmp_path / "checkpoints").glob(".writing-*"))
    assert (found.name, load_checkpoint(found)["env_steps"], leftovers) == (
        "ckpt-000000000100.pt",
        100,
        [],
    )


def test_a_full_disk_keeps_the_previous_checkpoint(tmp_path):
    mount = tmp_path / f"tiny-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    tried = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if tried.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({tried.stderr.decode().strip()})")
    try:
        save_checkpoint(str(mount), state(100), keep=3)
        with pytest.raises(CheckpointWriteError, match="No space left on device"):
            save_checkpoint(str(mount), state(200, numbers=1 << 20), keep=3)  # 4 MiB
        names = sorted(p.name for p in (mount / "checkpoints").iterdir())
        kept = load_checkpoint(find_checkpoint(str(mount)))
        assert (names, kept["env_steps"]) == (["ckpt-000000000100.pt"], 100)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        shutil.rmtree(mount, ignore_errors=True)


def test_a_run_whose_checkpoints_fail_logs_it_and_goes_on(tmp_path, monkeypatch):
    run = make_run(
        tmp_path,
        *FAKE,
        "actor.transport=inproc",
        # A time budget, not a step budget: a fast run must still reach several periodic saves
        # (every 0.6 s, checked at each 0.5 s metrics row) before it stops.
        "max_minutes=0.05",
        "checkpoint.every_minutes=0.01",
    )
    monkeypatch.setattr(checkpoint.torch, "save", failing_save)
    summary = run.run()
    faults = json.loads((tmp_path / "faults.json").read_text())
    assert summary.stop_reason == "max_minutes"
    assert faults["checkpoint_failures"] >= 2  # the periodic ones and the final one
    assert list((tmp_path / "checkpoints").glob("*")) == []


def test_a_run_that_never_saved_a_checkpoint_does_not_point_at_one(tmp_path, monkeypatch):
    # "the previous checkpoint is kept ... resume=auto continues from the newest checkpoint",
    # where there was none: that resume started from step 0.
    with pytest.raises(CheckpointWriteError, match="no checkpoint of this run is on disk yet"):
        monkeypatch.setattr(checkpoint.torch, "save", failing_save)
        save_checkpoint(str(tmp_path), state(100), keep=3)
    monkeypatch.undo()
    (tmp_path / "checkpoints").rmdir()
    result = train_on_a_full_disk(*FAKE, f"run_dir={tmp_path}", "total_env_steps=3000")
    assert result.returncode == 3, result.stdout
    assert "(there is none: nothing of the run is)" in result.stdout
    assert "then starts the run again (exit status 3)" in result.stdout


def test_replace_text_keeps_the_old_file_whole_on_a_full_disk(tmp_path, monkeypatch):
    from seedq import metrics

    path = tmp_path / "faults.json"
    path.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(metrics.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        metrics.replace_text(str(path), "new")
    assert (path.read_text(), sorted(p.name for p in tmp_path.iterdir())) == (
        "old",
        ["faults.json"],
    )


def test_a_full_disk_at_the_end_costs_the_summary_file_not_the_run(tmp_path, monkeypatch, caplog):
    from seedq.arch import base

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(base, "replace_text", full, raising=False)
    run = make_run(tmp_path, *FAKE, "actor.transport=inproc", "max_minutes=0.02")
    summary = run.run()  # was: OSError out of run() at summary.json, a traceback and exit 1
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert summary.stop_reason == "max_minutes"
    assert any("could not write faults.json" in e for e in errors), errors
    assert any("summary.json" in e and "free disk space" in e for e in errors), errors
    assert not (tmp_path / "summary.json").exists()


def test_a_log_file_that_cannot_be_written_says_so_once(tmp_path, capsys):
    import logging

    from seedq.logging_setup import quiet_file_errors

    class FullDisk:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

    logger = logging.Logger("full-disk-test")
    handler = logging.FileHandler(tmp_path / "cli.log")
    logger.addHandler(handler)
    quiet_file_errors(logger)
    handler.stream = FullDisk()
    for i in range(3):
        logger.error("line %d", i)
    err = capsys.readouterr().err
    assert (err.count("cannot write the log file"), "Traceback" in err) == (1, False), err
    assert "No space left on device" in err
