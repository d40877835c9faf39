"""Disk faults: a checkpoint write that fails keeps the previous checkpoint intact, leaves no temp
file a resume could pick, and does not stop the run."""

import errno
import json
import shutil
import subprocess
import uuid

import pytest
import torch
from fault_helpers import FAKE, make_run

from seedq.learner import checkpoint
from seedq.learner.checkpoint import (
    CheckpointWriteError,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def state(env_steps: int, numbers: int = 10) -> dict:
    return {"env_steps": env_steps, "updates": 0, "w": torch.arange(numbers, dtype=torch.float32)}


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
