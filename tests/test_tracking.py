"""Experiment tracking (logger=...): W&B offline and MLflow's file store, end to end through
seedq-train and seedq-eval, read back from what each backend wrote to disk."""

import csv
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import run_cli

from seedq import metrics
from seedq.arch.resume import continue_metrics
from seedq.core.stats import RunStats
from seedq.metrics import MetricsWriter
from seedq.schema import ConfigError
from seedq.tracking import Evaluation, LoggerConfig, attach_evaluation, loggable, validate_logger

wandb = pytest.importorskip("wandb", reason="pip install 'seedq[wandb]'")
mlflow = pytest.importorskip("mlflow", reason="pip install 'seedq[mlflow]'")

# ------------------------------------------------------------------ reading what was logged

WANDB_BLOCK = 32768  # the offline .wandb file: LevelDB-style log blocks of protobuf records


def wandb_records(run_dir: Path) -> list:
    """Every record of the W&B offline runs under ``run_dir``, in order."""
    from wandb.proto import wandb_internal_pb2

    records = []
    for path in sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))):
        data = Path(path).read_bytes()
        assert data[:4] == b":W&B", path
        pos, pending = 7, b""
        while pos + 7 <= len(data):
            if WANDB_BLOCK - pos % WANDB_BLOCK < 7:  # a block's tail too short for a header
                pos += WANDB_BLOCK - pos % WANDB_BLOCK
                continue
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
            if kind == 0:
                break
            pending = chunk if kind in (1, 2) else pending + chunk
            if kind in (1, 4):  # full, or last of several
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pending)
                records.append(record)
    return records


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)  # W&B files a key with "/" as nested_key


def wandb_run(run_dir: Path) -> tuple[dict, list[dict], dict]:
    """``(run record fields, history rows, summary)`` of the W&B run in ``run_dir``."""
    run, history, summary = {}, [], {}
    for record in wandb_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config = {_key(i): json.loads(i.value_json) for i in record.run.config.update}
            run = {"group": record.run.run_group, "name": record.run.display_name, **config}
        elif kind == "history":
            row = {_key(i): json.loads(i.value_json) for i in record.history.item}
            history.append({k: v for k, v in row.items() if not k.startswith("_")})
        elif kind == "summary":
            summary.update({_key(i): json.loads(i.value_json) for i in record.summary.update})
    return run, history, summary


def csv_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return [loggable(row) for row in csv.DictReader(f)]


def mlflow_client(store: Path):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return mlflow.tracking.MlflowClient(tracking_uri=f"file:{store}")


# ------------------------------------------------------------------------- one small sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, Path]:
    """A two-job sweep logged to W&B (offline) and MLflow (file store): its dir and the store."""
    root = tmp_path_factory.mktemp("tracked")
    store = root / "mlruns"
    result = run_cli(
        "-m",
        "logger=[wandb,mlflow]",
        f"logger.mlflow.tracking_uri=file:{store}",
        "seed=0,1",
        "total_env_steps=8000",
        "actor.num_actors=1",
        "log_interval_s=0.5",
        f"hydra.sweep.dir={root / 'sweep'}",
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    return root / "sweep", store


def test_wandb_history_equals_metrics_csv_and_records_the_config(sweep):
    sweep_dir, _ = sweep
    for job, seed in (("0", 0), ("1", 1)):
        run, history, summary = wandb_run(sweep_dir / job)
        rows = csv_rows(sweep_dir / job)
        assert (history, run["seed"], run["algorithm"]["name"]) == (rows, seed, "vtrace")
        assert summary["seedq/checkpoint_dir"] == str(sweep_dir / job / "checkpoints")


def test_mlflow_metrics_equal_metrics_csv_and_record_the_config(sweep):
    sweep_dir, store = sweep
    client = mlflow_client(store)
    for job in ("0", "1"):
        session = json.loads((sweep_dir / job / "tracking.json").read_text())["mlflow"]
        run = client.get_run(session["run_id"])
        rows = csv_rows(sweep_dir / job)
        keys = {key for row in rows for key in row}
        logged = {
            key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
            for key in keys
        }
        expected = {
            key: [(r["env_steps"], float(r[key])) for r in rows if key in r] for key in keys
        }
        assert (len(rows) >= 2, logged) == (True, expected)
        assert (run.data.params["seed"], run.data.tags["seedq.run_dir"]) == (
            job,
            str(sweep_dir / job),
        )


def test_a_sweep_is_one_wandb_group_and_one_mlflow_experiment(sweep):
    sweep_dir, store = sweep
    groups = {wandb_run(sweep_dir / job)[0]["group"] for job in "01"}
    client = mlflow_client(store)
    experiment = client.get_experiment_by_name(str(sweep_dir))
    runs = client.search_runs([experiment.experiment_id])
    names = sorted(r.info.run_name for r in runs)
    assert (groups, len(names)) == ({str(sweep_dir)}, 2)
    assert ("seed=0" in names[0], "seed=1" in names[1]) == (True, True)


def test_seedq_eval_adds_its_returns_and_video_to_the_tracked_run(sweep):
    pytest.importorskip("imageio", reason="pip install 'seedq[video]'")
    sweep_dir, store = sweep
    job = sweep_dir / "0"
    result = subprocess.run(
        [sys.executable, "-m", "seedq.evaluate", f"checkpoint={job}", "episodes=1", "video=true"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    client = mlflow_client(store)
    run_id = json.loads((job / "tracking.json").read_text())["mlflow"]["run_id"]
    artifacts = [a.path for a in client.list_artifacts(run_id, "videos")]
    _, _, summary = wandb_run(job)
    uploaded = glob.glob(str(job / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "**"))
    assert (len(artifacts), summary["evaluation/episodes"], bool(uploaded)) == (1, 1, True)


# ------------------------------------------------------------------------ start-up refusals


@pytest.mark.parametrize("backend", ["wandb", "mlflow"])
def test_a_missing_tracker_package_exits_2_with_the_install_command(tmp_path, backend):
    script = (
        f"import sys; sys.modules[{backend!r}] = None; "  # as if it were not installed
        "from seedq.cli import train_main; "
        f"sys.argv = ['seedq-train', 'logger={backend}', 'hydra.run.dir={tmp_path}']; "
        "train_main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    output = result.stdout + result.stderr
    assert (result.returncode, f"pip install 'seedq[{backend}]'" in output) == (2, True), output
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.parametrize(
    "key, value, says",
    [
        # Each started the run and cost its tracker, logged mid-start (W&B's in seven lines).
        ("wandb.project", "", "logger.wandb.project is empty"),
        ("wandb.tags", ["t" * 300], "is 300 characters; W&B takes tags of 1 to 64"),
        ("mlflow.experiment", " ", "logger.mlflow.experiment is empty"),
        ("mlflow.tracking_uri", "file:/etc/hostname", "is a file; MLflow's file store is a folder"),
        ("mlflow.tracking_uri", "sqlite:////tmp", "is a folder; a SQLite store is a file"),
    ],
)
def test_a_tracker_value_its_service_refuses_is_refused_at_start(key, value, says):
    logger = LoggerConfig()
    logger.wandb.enabled = logger.mlflow.enabled = True
    section, name = key.split(".")
    setattr(getattr(logger, section), name, value)
    with pytest.raises(ConfigError, match=says):
        validate_logger(logger)


# ------------------------------------------------------------------------- the writer itself


class Broken:
    def log_row(self, values):
        raise ConnectionError("server gone")

    def close(self):
        pass


def test_a_failing_tracker_is_dropped_and_metrics_csv_goes_on(tmp_path):
    writer = MetricsWriter(str(tmp_path), ["loss/pg"])
    writer.trackers.append(Broken())
    for step in (10, 20):
        writer.write({"wall_time": 1.0, "env_steps": step, "return_mean": None, "loss/pg": 0.5})
    writer.close()
    assert [r["env_steps"] for r in csv_rows(tmp_path)] == [10, 20]
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 1


class BrokenUntilTheEnd(Broken):
    closed = 0

    def close(self):
        self.closed += 1


def test_a_tracker_dropped_mid_run_is_still_closed_at_the_end(tmp_path):
    # It was never closed: its MLflow run showed as running for good.
    writer, tracker = MetricsWriter(str(tmp_path), []), BrokenUntilTheEnd()
    writer.trackers.append(tracker)
    writer.write({"wall_time": 1.0, "env_steps": 10, "return_mean": None})
    assert tracker not in writer.trackers
    writer.close()
    assert tracker.closed == 1


class Hanging(Broken):
    def close(self):
        threading.Event().wait()  # a dead server's retries


def test_a_dropped_tracker_whose_close_hangs_costs_the_end_of_the_run_a_bounded_wait(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(metrics, "DROPPED_CLOSE_S", 0.05)
    writer = MetricsWriter(str(tmp_path), [])
    writer.trackers.append(Hanging())
    writer.write({"wall_time": 1.0, "env_steps": 10, "return_mean": None})
    writer.close()  # returns
    assert "Hanging (dropped mid-run) did not close within 0.05 s" in caplog.text


def test_a_tensorboard_dir_that_cannot_be_opened_costs_tensorboard_not_the_run(tmp_path, caplog):
    (tmp_path / "tb").write_text("")  # a file where the events folder goes
    writer = MetricsWriter(str(tmp_path), [])
    writer.write({"wall_time": 1.0, "env_steps": 8, "return_mean": 4.0})
    writer.close()
    assert "logger=tensorboard could not start" in caplog.text
    assert [r["env_steps"] for r in csv_rows(tmp_path)] == [8]


def test_a_damaged_tracking_json_costs_the_tracked_runs_not_the_evaluation(tmp_path, caplog):
    (tmp_path / "tracking.json").write_text('{"wandb": {"id": "ab')  # cut short by a kill
    assert attach_evaluation(Evaluation("ckpt.pt", [1.0]), tmp_path) == []
    assert "tracking.json could not be read" in caplog.text


@pytest.mark.parametrize(
    "text", ['{"wandb": {"id": "ab', '{"wandb": 3}', "[]"], ids=["cut", "no-run", "list"]
)
def test_a_resume_sets_a_damaged_tracking_json_aside_and_reports_it_once(tmp_path, caplog, text):
    # It was reported by the resume's hold-back and again by the trackers' start; a tracked
    # run that is no object ({"wandb": 3}) ended the resume in a TypeError.
    (tmp_path / "tracking.json").write_text(text)
    (tmp_path / "metrics.csv").write_text("wall_time,env_steps\n1.0,10\n2.0,20\n")
    continue_metrics(str(tmp_path), 10)
    continue_metrics(str(tmp_path), 10)
    assert caplog.text.count("could not be read") == 1
    assert "it is kept as tracking.damaged.json" in caplog.text
    assert (tmp_path / "tracking.damaged.json").read_text() == text
    assert not (tmp_path / "tracking.json").exists()


def test_a_damaged_tracking_json_is_left_in_place_by_a_reader_that_does_not_hold_the_run(
    tmp_path,
):
    (tmp_path / "tracking.json").write_text("{")
    attach_evaluation(Evaluation("ckpt.pt", [1.0]), tmp_path)  # seedq-eval beside a live run
    assert (tmp_path / "tracking.json").read_text() == "{"


def Finished(**episodes):  # noqa: N802 - what the stats read of a Step
    return SimpleNamespace(**episodes)


def test_the_episode_log_keeps_every_return_and_a_resumed_run_appends(tmp_path):
    stats = RunStats()
    stats.record_batch(4, [Finished(episode_returns=(-21.0,), episode_lengths=(812,))])
    stats.record_batch(4, [Finished(episode_returns=(3.5, -20.0), episode_lengths=(900, 760))])
    stats.record_episodes(1, [7.25], [1000])
    writer = MetricsWriter(str(tmp_path), [])
    writer.write_episodes(stats.drain_episodes())
    writer.write_episodes(stats.drain_episodes())  # nothing new: nothing written
    writer.close()
    resumed = MetricsWriter(str(tmp_path), [])  # the same run dir after a restart
    stats.env_steps = 20
    stats.record_episodes(1, [21.0], [1500])
    resumed.write_episodes(stats.drain_episodes())
    resumed.close()

    lines = (tmp_path / "episodes.csv").read_text().splitlines()
    assert lines == [
        "env_steps,return,length",
        "4,-21,812",
        "8,3.5,900",
        "8,-20,760",
        "8,7.25,1000",
        "20,21,1500",
    ]


def test_an_episode_log_that_cannot_be_written_costs_its_rows_not_the_run(tmp_path, caplog):
    writer = MetricsWriter(str(tmp_path), [])
    (tmp_path / "episodes.csv").mkdir()  # stands in for a full disk: open() raises OSError
    writer.write_episodes([(8, -21.0, 812)])
    writer.write({"wall_time": 1.0, "env_steps": 8, "return_mean": -21.0})
    writer.close()
    assert "1 episodes not written to" in caplog.text
    assert [r["env_steps"] for r in csv_rows(tmp_path)] == [8]


def test_a_disk_full_for_many_rows_logs_once_and_says_when_writes_go_through(
    tmp_path, caplog, monkeypatch
):
    """One error for an outage, not one per row (a full disk under a 5-s log interval
    flooded the log with two lines a row), and a line when the disk has room again."""
    writer = MetricsWriter(str(tmp_path), [])
    disk_full_for = [3]
    monkeypatch.setattr(metrics.os, "write", half_then_full(disk_full_for))
    for steps in range(8, 48, 8):
        writer.write({"wall_time": 1.0, "env_steps": steps, "return_mean": -21.0})
    writer.close()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["ERROR", "WARNING"], lines
    assert "env_steps 8 could not be written" in lines[0][1] and "after 3 failed" in lines[1][1]
    # A row the disk took half of is cut back whole: the file holds whole rows (and its header,
    # written with the first row that went through), never half of one glued to the next.
    assert [r["env_steps"] for r in csv_rows(tmp_path)] == [32, 40]


def half_then_full(failures: list[int]):
    """``os.write`` on a disk that fills: the first ``failures[0]`` rows are written half,
    then the rest of each fails with ENOSPC; later writes go through."""
    real_write, failing = os.write, [False]

    def write(fd: int, data) -> int:
        if failing[0]:
            failing[0] = False
            raise OSError(28, "No space left on device")
        if failures[0] > 0 and len(data) > 1:
            failures[0] -= 1
            failing[0] = True
            return real_write(fd, bytes(data[: len(data) // 2]))
        return real_write(fd, data)

    return write


def test_episodes_half_written_on_a_full_disk_leave_no_merged_row(tmp_path, monkeypatch):
    # A return of 267,392 read back from one row glued onto half of another (the resumed
    # run's 100-episode mean, and stop_at_return, trusted it).
    writer = MetricsWriter(str(tmp_path), [])
    writer.write_episodes([(100, -21.0, 812)])
    monkeypatch.setattr(metrics.os, "write", half_then_full([1]))
    writer.write_episodes([(98176, 3.0, 1200), (98176, 5.0, 1300)])
    writer.write_episodes([(99000, 7.0, 1500)])
    writer.close()
    assert (tmp_path / "episodes.csv").read_text() == (
        "env_steps,return,length\n100,-21,812\n99000,7,1500\n"
    )


def test_a_row_cut_short_by_a_kill_is_dropped_before_the_next_is_appended(tmp_path):
    (tmp_path / "episodes.csv").write_text("env_steps,return,length\n100,-21,812\n981")
    (tmp_path / "metrics.csv").write_text("wall_time,env_steps,return_mean,steps_per_s\n1,8,")
    writer = MetricsWriter(str(tmp_path), [])
    writer.write_episodes([(200, 4.0, 900)])
    writer.write({"wall_time": 2.0, "env_steps": 16, "return_mean": 4.0})
    writer.close()
    assert (tmp_path / "episodes.csv").read_text().splitlines() == [
        "env_steps,return,length", "100,-21,812", "200,4,900"
    ]  # fmt: skip
    assert [r["env_steps"] for r in csv_rows(tmp_path)] == [16]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_metrics_log_on_a_full_disk_costs_its_rows_not_the_run(tmp_path, caplog):
    # metrics.csv links to /dev/full, where every write fails with ENOSPC, as on a full disk.
    os.symlink("/dev/full", tmp_path / "metrics.csv")
    writer = MetricsWriter(str(tmp_path), ["loss/pg"])
    seen = []
    writer.trackers.append(SimpleNamespace(log_row=seen.append, close=lambda: None))
    for steps in (8, 16):
        writer.write({"wall_time": 1.0, "env_steps": steps, "return_mean": -21.0})
    writer.close()
    assert "the metrics row at env_steps 8 could not be written to" in caplog.text
    assert "No space left on device" in caplog.text
    assert [row["env_steps"] for row in seen] == [8, 16]  # the trackers still get every row


@dataclass
class TrackedConfig:
    logger: LoggerConfig


def write_steps(run_dir: Path, steps: list[int], cfg) -> None:
    writer = MetricsWriter(str(run_dir), [], cfg)
    for step in steps:
        writer.write({"wall_time": 1.0, "env_steps": step, "return_mean": 1.0})
    writer.close()


def test_a_resume_sends_the_trackers_no_step_they_hold_already(tmp_path):
    # A run killed after its checkpoint at 250 had sent rows up to 400 to MLflow; the resumed
    # run's rows from 250 on would put a second value at 300 and draw the curve back.
    logger = LoggerConfig()
    logger.tensorboard.enabled, logger.mlflow.enabled = False, True
    logger.mlflow.tracking_uri = f"file:{tmp_path / 'mlruns'}"
    cfg = TrackedConfig(logger)
    write_steps(tmp_path, [100, 200, 300, 400], cfg)  # the killed run
    continue_metrics(str(tmp_path), 250)
    write_steps(tmp_path, [300, 500], cfg)  # the resumed one
    run_id = json.loads((tmp_path / "tracking.json").read_text())["mlflow"]["run_id"]
    history = mlflow_client(tmp_path / "mlruns").get_metric_history(run_id, "env_steps")
    assert sorted(m.step for m in history) == [100, 200, 300, 400, 500]


def test_a_wandb_folder_removed_mid_run_is_reported_and_the_run_goes_on(tmp_path, caplog):
    logger = LoggerConfig()
    logger.tensorboard.enabled, logger.wandb.enabled = False, True
    writer = MetricsWriter(str(tmp_path), [], TrackedConfig(logger))
    writer.write({"wall_time": 1.0, "env_steps": 100, "return_mean": 1.0})
    shutil.rmtree(tmp_path / "wandb")  # W&B wrote on into the removed file, without a word
    writer.write({"wall_time": 2.0, "env_steps": 200, "return_mean": 1.0})
    writer.close()
    assert (writer.trackers, "was removed" in caplog.text) == ([], True)
    assert [r["env_steps"] for r in csv_rows(tmp_path)] == [100, 200]


def test_trackers_get_the_values_as_the_csv_has_them():
    row = {"env_steps": "64768", "loss/pg": "0.348227", "return_mean": "", "x": "inf"}
    assert loggable(row) == {"env_steps": 64768, "loss/pg": 0.348227}


def test_tensorboards_writer_thread_is_quiet_on_a_full_disk_and_other_threads_are_not(
    monkeypatch,
):
    """TensorBoard's event writer thread re-raises a failed write to the thread hook (a
    traceback on stderr); the metrics writer logs the same error in one line at the next row."""
    import threading

    from seedq.tracking.tensorboard_log import _quiet_writer_thread_errors

    reported = []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(args.thread.name))
    _quiet_writer_thread_errors()
    _quiet_writer_thread_errors()  # once, however many trackers

    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    class _AsyncWriterThread(threading.Thread):  # TensorBoard's class name
        pass

    for thread in (
        _AsyncWriterThread(target=full_disk, name="tensorboard"),
        threading.Thread(target=full_disk, name="another"),
    ):
        thread.start()
        thread.join()
    assert reported == ["another"]


def test_an_mlflow_server_is_given_bounded_retries_unless_the_user_set_them(monkeypatch):
    # MLflow's own retries (7, backoff factor 2, 120 s a request) held a run's start for
    # minutes on a server that did not answer, before the tracker was reported and dropped.
    from seedq.tracking.config import MlflowConfig
    from seedq.tracking.mlflow_log import HTTP_DEFAULTS, tracking_uri

    for key in HTTP_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")  # the user's own
    assert tracking_uri(MlflowConfig(tracking_uri="http://mlflow.example:5000"))[0].startswith(
        "http://"
    )
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    tracking_uri(MlflowConfig(tracking_uri=None))  # the local SQLite store: no HTTP settings
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
