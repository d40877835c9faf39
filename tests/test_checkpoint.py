"""Checkpoints: atomic writes, keeping the newest K, clear refusals, and resuming a run."""

import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

from seedq.learner.checkpoint import (
    CheckpointError,
    NonFiniteState,
    check_compatible,
    find_checkpoint,
    load_checkpoint,
    load_newest,
    save_checkpoint,
)


def state(env_steps, config=None):
    return {
        "model": {"w": torch.full((2,), float(env_steps))},
        "config": config or {"algorithm": {"name": "vtrace", "model": {}}, "env": {"id": "a"}},
        "env_steps": env_steps,
        "updates": env_steps // 10,
    }


def test_newest_checkpoints_are_kept_and_found(tmp_path):
    for steps in (100, 200, 300, 400):
        save_checkpoint(str(tmp_path), state(steps), keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    latest = find_checkpoint(str(tmp_path))
    assert names == ["ckpt-000000000300.pt", "ckpt-000000000400.pt"]
    assert load_checkpoint(latest)["model"]["w"].tolist() == [400.0, 400.0]


def test_a_failed_write_leaves_the_previous_checkpoint_alone(tmp_path):
    first = save_checkpoint(str(tmp_path), state(100), keep=3)
    with pytest.raises(AttributeError):  # an unpicklable value fails mid-write
        save_checkpoint(str(tmp_path), {**state(200), "bad": lambda: None}, keep=3)
    files = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert (files, load_checkpoint(find_checkpoint(str(tmp_path)))["env_steps"]) == (
        ["ckpt-000000000100.pt"],
        100,
    )
    assert first.endswith("ckpt-000000000100.pt")


def test_a_corrupt_checkpoint_is_refused_naming_the_file(tmp_path):
    path = save_checkpoint(str(tmp_path), state(100), keep=3)
    with open(path, "r+b") as f:
        f.seek(200)
        f.write(b"\x00" * 64)
    with pytest.raises(CheckpointError, match=r"ckpt-000000000100.pt cannot be read"):
        load_checkpoint(find_checkpoint(str(tmp_path)))


def flip_tensor_bytes(path, member="archive/data/0"):
    """Overwrite the middle of one tensor's bytes inside the zip with 0xff (float NaNs): the
    archive's structure is intact and torch.load reads it without a word."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = (int.from_bytes(f.read(2), "little") for _ in range(2))
        f.seek(info.header_offset + 30 + name_len + extra_len + info.file_size // 2)
        f.write(b"\xff" * 8)


def big_state(env_steps):
    return {**state(env_steps), "model": {"w": torch.full((256,), float(env_steps))}}


def test_a_checkpoint_whose_bytes_fail_their_checksum_is_refused(tmp_path):
    save_checkpoint(str(tmp_path), big_state(100), keep=3)
    newest = save_checkpoint(str(tmp_path), big_state(200), keep=3)
    flip_tensor_bytes(newest)
    assert torch.load(newest, weights_only=True)["model"]["w"].isnan().any()  # torch: no word
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(find_checkpoint(str(tmp_path)))
    assert "ckpt-000000000200.pt cannot be read (its part archive/data/0 fails its checksum)" in (
        str(refused.value)
    )
    assert str(refused.value).endswith("newest ckpt-000000000100.pt: resume from it")


def test_a_checkpoint_holding_nan_is_refused_and_resume_takes_the_older_one(tmp_path):
    save_checkpoint(str(tmp_path), big_state(100), keep=3)
    poisoned = big_state(200)
    poisoned["optimizer"] = {"state": {0: {"exp_avg": torch.tensor([1.0, float("inf")])}}}
    # Written by hand: save_checkpoint itself refuses such a state (below).
    torch.save({"format": 2, **poisoned}, tmp_path / "checkpoints" / "ckpt-000000000200.pt")
    with pytest.raises(CheckpointError, match=r"optimizer.state.0.exp_avg holds NaN or inf"):
        load_checkpoint(tmp_path / "checkpoints" / "ckpt-000000000200.pt")
    path, resumed = load_newest(str(tmp_path))
    assert (path.name, resumed["env_steps"]) == ("ckpt-000000000100.pt", 100)
    assert (tmp_path / "checkpoints" / "damaged" / "ckpt-000000000200.pt").exists()


def test_a_state_holding_nan_is_not_written_and_rotates_nothing_out(tmp_path):
    for steps in (100, 200):
        save_checkpoint(str(tmp_path), big_state(steps), keep=2)
    poisoned = big_state(300)
    poisoned["model"]["w"][7] = float("nan")
    with pytest.raises(NonFiniteState, match=r"model.w holds NaN or inf"):
        save_checkpoint(str(tmp_path), poisoned, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt-000000000100.pt", "ckpt-000000000200.pt"]


def test_files_that_are_not_checkpoints_say_what_they_hold_and_which_older_one_to_take(
    tmp_path,
):
    folder = tmp_path / "checkpoints"
    older = save_checkpoint(str(tmp_path), state(100), keep=3)
    torch.save([1, 2], folder / "ckpt-000000000200.pt")
    torch.save({"a": 1}, folder / "ckpt-000000000300.pt")
    (folder / "ckpt-000000000400.pt").write_bytes(b"garbage")
    with pytest.raises(
        CheckpointError, match=r"not a seedq checkpoint \(a torch file holding a list\)"
    ):
        load_checkpoint(folder / "ckpt-000000000200.pt")
    with pytest.raises(CheckpointError, match=r"holding a dict without a format"):
        load_checkpoint(folder / "ckpt-000000000300.pt")
    with pytest.raises(CheckpointError) as garbage:
        load_checkpoint(folder / "ckpt-000000000400.pt")
    message = str(garbage.value)
    assert "\n" not in message  # torch's page of advice is cut to its first line
    assert message.endswith(
        "Its folder has 3 older one(s), newest ckpt-000000000300.pt: resume from it"
    )
    # The only checkpoint of its folder: no older one to point at.
    with open(older, "r+b") as f:
        f.seek(200)
        f.write(b"\x00" * 64)
    with pytest.raises(CheckpointError) as only:
        load_checkpoint(older)
    assert "older" not in str(only.value)


def test_a_checkpoint_of_another_config_is_refused_naming_the_difference(tmp_path):
    saved = {"algorithm": {"name": "vtrace", "model": {"lstm_size": 256}}, "env": {"id": "Pong"}}
    here = {"algorithm": {"name": "vtrace", "model": {"lstm_size": 256}}, "env": {"id": "Cart"}}
    with pytest.raises(CheckpointError, match=r"env.id='Pong' there, 'Cart' here"):
        check_compatible(tmp_path / "x.pt", saved, here)


def test_resume_without_checkpoints_says_where_it_looked(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint there"):
        find_checkpoint(str(tmp_path))


def test_a_folder_of_runs_is_named_as_such_with_its_runs(tmp_path):
    # seedq-eval runs/sweep said only "no checkpoint there" of a folder holding runs.
    for run in ("sweep/0", "sweep/1", "2026-12-07/12-00", "deeper/a/b/c"):
        (tmp_path / run / "checkpoints").mkdir(parents=True)
        (tmp_path / run / "checkpoints" / "ckpt-000000001000.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError) as refused:
        find_checkpoint(str(tmp_path))
    assert str(refused.value).endswith(
        "it is a folder of runs (2026-12-07/12-00, sweep/0, sweep/1): name one of them"
    )


UPDATES_PER_BATCH_AT_MOST = 16  # the presets' epochs x minibatches


def test_killed_run_resumes_with_its_counters_optimizer_and_curve(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seedq.cli",
            "max_minutes=2",
            "log_interval_s=1",
            f"hydra.run.dir={run_dir}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        rows = (
            (run_dir / "metrics.csv").read_text().splitlines()
            if (run_dir / "metrics.csv").exists()
            else []
        )
        if len(rows) >= 4:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    first = load_checkpoint(find_checkpoint(str(run_dir)))
    first_rows = len((run_dir / "metrics.csv").read_text().splitlines())

    result = run_cli(
        f"resume={run_dir}",
        "total_env_steps=" + str(first["env_steps"] + 100_000),
        f"hydra.run.dir={tmp_path / 'resume'}",
    )
    second = load_checkpoint(find_checkpoint(str(run_dir)))
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    steps = [int(r.split(",")[1]) for r in rows[1:]]
    summary = json.loads((run_dir / "summary.json").read_text())
    optimizer_steps = [s["step"] for s in second["optimizer"]["state"].values()]
    assert result.returncode == 0, result.stdout
    assert second["env_steps"] >= first["env_steps"] + 100_000
    assert second["updates"] > first["updates"]
    # Adam kept counting across the resume. A stop checkpoint is copied at once, possibly in
    # the middle of a batch: its optimizer has taken steps whose updates are counted when the
    # batch ends (the batch's norms are read once), so it may be ahead by part of one batch.
    adam_steps = min(float(s) for s in optimizer_steps)
    assert second["updates"] <= adam_steps <= second["updates"] + UPDATES_PER_BATCH_AT_MOST
    assert len(rows) > first_rows and steps == sorted(steps)  # one curve, continued
    assert summary["stop_reason"] == "total_env_steps"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One short CartPole run with a checkpoint, shared by the refused resumes below."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    first = run_cli("total_env_steps=5000", f"hydra.run.dir={run_dir}")
    assert first.returncode == 0, first.stdout
    return run_dir


def test_a_resume_with_another_optimizer_keeps_the_weights_and_starts_it_afresh(
    tmp_path, finished_run
):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    before = load_checkpoint(find_checkpoint(str(run_dir)))
    result = run_cli(
        f"resume={run_dir}",
        "algorithm.optimizer=rmsprop",
        f"total_env_steps={before['env_steps'] + 30_000}",
        f"hydra.run.dir={tmp_path / 'again'}",
    )
    after = load_checkpoint(find_checkpoint(str(run_dir)))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "trained with Adam and this run uses RMSprop" in result.stdout
    assert after["updates"] > before["updates"]
    # RMSprop's own state, none of Adam's moments.
    moments = next(iter(after["optimizer"]["state"].values()))
    assert "square_avg" in moments and "exp_avg" not in moments


def test_resume_with_another_env_is_refused(tmp_path, finished_run):
    run_dir = finished_run
    result = run_cli(
        f"resume={run_dir}", "env=gym", "env.id=Acrobot-v1", f"hydra.run.dir={tmp_path / 'again'}"
    )
    assert (
        result.returncode,
        "env.id='CartPole-v1' there, 'Acrobot-v1' here" in result.stdout,
    ) == (
        2,
        True,
    ), result.stdout


def test_a_resume_that_would_reshape_the_network_is_refused_naming_what_differs(
    tmp_path, finished_run
):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)  # its checkpoint is damaged below
    # A key override (not a group) that changes the network: named before any weight loads.
    popart = run_cli(
        f"resume={run_dir}", "algorithm.value_norm=true", f"hydra.run.dir={tmp_path / 'a'}"
    )
    # Weights that fit no network of the saved settings: refused by the load, not a traceback.
    path = find_checkpoint(str(run_dir))
    saved = load_checkpoint(path)
    saved["model"] = {k: v for k, v in saved["model"].items() if "policy" not in k}
    torch.save(saved, path)
    # A larger budget: a finished run is not loaded again, so its weights would not be read.
    more = f"total_env_steps={saved['env_steps'] + 20000}"
    damaged = run_cli(f"resume={run_dir}", more, f"hydra.run.dir={tmp_path / 'b'}")
    assert (
        popart.returncode,
        "algorithm.value_norm=False there, True here" in popart.stdout,
        damaged.returncode,
        "its weights do not fit this run's network (Error(s) in loading state_dict"
        in damaged.stdout,
        "Traceback" in popart.stdout + damaged.stdout,
    ) == (2, True, 2, True, False), popart.stdout + damaged.stdout


def test_a_run_may_resume_on_another_machine_with_other_env_threads(tmp_path):
    saved = {"algorithm": {"name": "vtrace"}, "env": {"id": "Pong", "num_threads": 2}}
    here = {"algorithm": {"name": "vtrace"}, "env": {"id": "Pong", "num_threads": 16}}
    check_compatible(tmp_path / "x.pt", saved, here)
    here["env"]["frame_skip"] = 3
    with pytest.raises(CheckpointError, match=r"env.frame_skip=None there, 3 here"):
        check_compatible(tmp_path / "x.pt", saved, here)


def test_a_checkpoint_of_a_gpu_run_resumes_on_the_cpu(tmp_path):
    first = run_cli("total_env_steps=3000", "log_interval_s=1", f"hydra.run.dir={tmp_path}")
    assert first.returncode == 0, first.stdout[-2000:]
    path = find_checkpoint(str(tmp_path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    # What a CUDA generator's get_state() gives: 16 bytes (seed, offset), where a CPU
    # generator's is 5,056. set_state raised a RuntimeError, and the resume ended in a trace.
    state["rng"]["inference"] = torch.zeros(16, dtype=torch.uint8)
    Path(path).unlink()
    save_checkpoint(str(tmp_path), {k: v for k, v in state.items() if k != "format"}, keep=3)
    again = run_cli(
        f"resume={tmp_path}", f"total_env_steps={state['env_steps'] + 3000}", "log_interval_s=1"
    )
    assert again.returncode == 0, again.stdout[-2000:]
    assert "the checkpoint's acting RNG is another device's" in again.stdout


def network_keys(algorithm: str) -> tuple[str, ...]:
    from seedq.agents.registry import config_class
    from seedq.schema import network_keys as declared

    return declared(config_class(algorithm))


def test_a_checkpoint_from_before_value_norm_resumes_without_it(tmp_path):
    saved = {"algorithm": {"name": "vtrace", "model": {}}, "env": {"id": "Cart"}}
    here = {
        "algorithm": {"name": "vtrace", "model": {}, "value_norm": False},
        "env": {"id": "Cart"},
    }
    check_compatible(tmp_path / "x.pt", saved, here, network_keys("vtrace"))
    here["algorithm"]["value_norm"] = True
    with pytest.raises(CheckpointError, match=r"value_norm=False there, True here"):
        check_compatible(tmp_path / "x.pt", saved, here, network_keys("vtrace"))


def test_r2d2_resumes_with_its_target_network_counters_and_replay(tmp_path):
    run_dir = tmp_path / "run"
    tiny = [
        "algorithm.replay_min_size=64",
        "algorithm.batch_size=16",
        "log_interval_s=1",
        "checkpoint.replay=true",
    ]
    first = run_cli("algorithm=r2d2", "total_env_steps=10000", *tiny, f"hydra.run.dir={run_dir}")
    assert first.returncode == 0, first.stdout
    before = load_checkpoint(find_checkpoint(str(run_dir)))
    again = run_cli(
        f"resume={run_dir}",
        f"total_env_steps={before['env_steps'] + 10000}",
        f"hydra.run.dir={tmp_path / 'again'}",
    )
    after = load_checkpoint(find_checkpoint(str(run_dir)))
    assert again.returncode == 0, again.stdout
    assert after["config"]["algorithm"]["name"] == "r2d2" and "target" in after
    assert "replay restored: " in again.stdout
    assert (after["env_steps"] > before["env_steps"], after["updates"] > before["updates"]) == (
        True,
        True,
    )
    # The run is judged by its eval episodes: the resumed one goes on from the checkpoint's
    # window and count (they started again from none, and eval/episodes went back).
    with open(run_dir / "metrics.csv", newline="") as f:
        counts = [int(row["eval/episodes"]) for row in csv.DictReader(f)]
    assert counts == sorted(counts), counts
    assert before["eval"]["episodes"] > 0 and before["eval"]["returns"]


def test_a_checkpoint_from_before_a_new_model_key_resumes_with_its_legacy_value(tmp_path):
    # Checkpoints written before algorithm.model.activation existed were ReLU networks.
    saved = {"algorithm": {"name": "ppo", "model": {"lstm_size": 256}}, "env": {"id": "Cart"}}
    relu = {"algorithm": {"name": "ppo", "model": {"lstm_size": 256, "activation": "relu"}}}
    tanh = {"algorithm": {"name": "ppo", "model": {"lstm_size": 256, "activation": "tanh"}}}
    check_compatible(tmp_path / "x.pt", saved, {**relu, "env": {"id": "Cart"}})
    with pytest.raises(CheckpointError, match=r"activation='relu' there, 'tanh' here"):
        check_compatible(tmp_path / "x.pt", saved, {**tanh, "env": {"id": "Cart"}})


def test_another_algorithm_is_refused_naming_the_one_to_put_on_the_command_line(tmp_path):
    saved = {"algorithm": {"name": "vtrace"}, "env": {"id": "ALE/Pong-v5"}}
    here = {"algorithm": {"name": "ppo"}, "env": {"id": "ALE/Pong-v5"}}
    with pytest.raises(
        CheckpointError,
        match=r"algorithm.name='vtrace' there, 'ppo' here \(name it: algorithm=vtrace\)",
    ):
        check_compatible(tmp_path / "x.pt", saved, here)
