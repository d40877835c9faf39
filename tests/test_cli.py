"""seedq-train as a user runs it: start-up failures are clear and happen before any process."""

import fcntl
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

from seedq.command_keys import key_refusal, unknown_choice, whole_numbers
from seedq.config import ConfigError
from seedq.launch.sweep_jobs import Command
from seedq.learner.device import resolve_device
from seedq.learner.run_lock import LOCK_NAME
from seedq.run_dirs import RunDirRecord


def train(*overrides: str, tmp_path) -> tuple[int, str]:
    """Exit code and everything printed."""
    result = run_cli(*overrides, f"hydra.run.dir={tmp_path}")
    return result.returncode, result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_device_without_cuda_is_a_config_error():
    with pytest.raises(ConfigError, match="no usable CUDA device"):
        resolve_device("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_hardware_gpu_without_cuda_fails_at_start_up(tmp_path):
    code, output = train("hardware=gpu", tmp_path=tmp_path)
    assert (code, "no usable CUDA device" in output) == (2, True)


def test_unknown_env_id_fails_before_any_actor_starts(tmp_path):
    code, output = train("env=gym", "env.id=NoSuchEnv-v0", tmp_path=tmp_path)
    assert (code, "NoSuchEnv-v0" in output, list(tmp_path.glob("actor_*.log"))) == (2, True, [])


def test_negative_batch_size_names_the_key(tmp_path):
    code, output = train("algorithm.batch_size=-1", tmp_path=tmp_path)
    assert (code, "algorithm.batch_size=-1" in output) == (2, True)


def test_r2d2_replay_larger_than_memory_fails_at_start_up_with_the_figures(tmp_path):
    code, output = train("algorithm=r2d2", "algorithm.replay_capacity=100000000", tmp_path=tmp_path)
    assert (code, "GiB" in output, "use algorithm.replay_capacity=" in output) == (2, True, True)


def test_r2d2_burn_in_longer_than_the_sequence_names_both_keys(tmp_path):
    code, output = train("algorithm=r2d2", "algorithm.burn_in=30", tmp_path=tmp_path)
    assert (code, "algorithm.burn_in=30" in output, "sequence_length" in output) == (2, True, True)


def processes_mentioning(text: str) -> list[str]:
    """Command lines of running processes that contain ``text`` (Linux /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in line:
            found.append(line)
    return found


def test_sigterm_stops_actors_and_writes_a_checkpoint(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", "max_minutes=2", f"hydra.run.dir={tmp_path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Stop it once it has trained a while: header and a first row of metrics.
    wait_for_a_metrics_row(tmp_path / "metrics.csv", 60)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    summary = json.loads((tmp_path / "summary.json").read_text())
    actors_left = processes_mentioning(str(tmp_path))
    assert (
        process.returncode,
        summary["stop_reason"],
        len(list((tmp_path / "checkpoints").glob("ckpt-*.pt"))) == 1,
        actors_left,
    ) == (75, "interrupted", True, []), output  # 75: stopped, to be resumed
    line = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ [A-Z]+ \[(learner|actor) \d+\] [\w.]+: ")
    for log in (tmp_path / "cli.log", tmp_path / "actor_0.log"):
        first = log.read_text().splitlines()[0]
        assert line.match(first), f"{log.name}: {first}"


def test_joblib_sweep_runs_each_job_in_its_own_directory(tmp_path):
    result = run_cli(
        "-m",
        "hydra/launcher=joblib",
        "seed=0,1",
        "total_env_steps=5000",
        "actor.num_actors=1",
        "log_interval_s=1",
        f"hydra.sweep.dir={tmp_path}",
        timeout=300,
    )
    summaries = [json.loads((tmp_path / job / "summary.json").read_text()) for job in "01"]
    assert result.returncode == 0, result.stdout
    assert [s["stop_reason"] for s in summaries] == ["total_env_steps"] * 2
    assert all((tmp_path / job / "metrics.csv").exists() for job in "01")


def test_a_joblib_sweep_with_a_refused_job_ends_with_its_status(tmp_path):
    # The job ran in a joblib worker, whose note of its status never reached seedq-train's
    # process: the sweep exited 0.
    result = run_cli(
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "algorithm=sac,vtrace",
        "env=fake",
        "actor.envs_per_batch=8",
        "total_env_steps=2000",
        f"hydra.sweep.dir={tmp_path}",
        timeout=300,
    )
    assert result.returncode == 2, result.stdout
    assert f"job 0 of the sweep ended with exit status 2 (its log: {tmp_path}/0/cli.log)" in (
        result.stdout
    )
    assert "1 job of the sweep failed (see above); the sweep ends with the worst status, 2" in (
        result.stdout
    )
    assert json.loads((tmp_path / "1" / "summary.json").read_text())["env_steps"] >= 2000


def test_ctrl_c_in_a_joblib_sweep_lets_each_job_stop_with_its_checkpoint(tmp_path):
    # joblib took the command's KeyboardInterrupt and killed its workers, the jobs in the
    # middle of their stop checkpoints (a worker without a job died of the Ctrl-C and did the
    # same), and the command said "interrupted while starting; no run started", exit 130.
    sweep = subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", "-m", "hydra/launcher=joblib"]
        + ["hydra.launcher.n_jobs=3", "seed=0,1", "env=fake", "actor.envs_per_batch=8"]
        + ["log_interval_s=0.5", "max_minutes=2", f"hydra.sweep.dir={tmp_path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.monotonic() + 180
    metrics = [tmp_path / job / "metrics.csv" for job in "01"]
    while time.monotonic() < deadline and not all(
        m.exists() and len(m.read_text().splitlines()) >= 2 for m in metrics
    ):
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGINT)  # Ctrl-C: every process of the group
    output, _ = sweep.communicate(timeout=120)
    summaries = [json.loads((tmp_path / job / "summary.json").read_text()) for job in "01"]
    assert sweep.returncode == 75, output
    assert [s["stop_reason"] for s in summaries] == ["interrupted"] * 2
    assert all(list((tmp_path / job / "checkpoints").glob("ckpt-*.pt")) for job in "01")
    assert "2 jobs of the sweep stopped or not started" in output
    assert "no run started" not in output


def test_a_joblib_sweep_whose_job_is_killed_runs_its_other_jobs_and_ends_with_3(tmp_path):
    # A job killed (the OOM killer, kill -9) killed its joblib worker, and joblib then killed
    # every other job mid-run: its traceback, then exit 2, read as a refused command line.
    sweep = run_cli_in_background(
        "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "max_minutes=2,0.1",
        "env=fake", "actor.envs_per_batch=8", "log_interval_s=0.5", f"hydra.sweep.dir={tmp_path}",
    )  # fmt: skip
    wait_for_a_metrics_row(tmp_path / "0" / "metrics.csv", 180)
    os.kill(int((tmp_path / "0" / LOCK_NAME).read_text().split()[0]), signal.SIGKILL)
    output, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 3, output
    assert "job 0 of the sweep: its process was killed by SIGKILL" in output
    assert json.loads((tmp_path / "1" / "summary.json").read_text())["stop_reason"] == (
        "max_minutes"
    )


def test_a_joblib_worker_killed_ends_the_sweep_with_3_its_job_stopped_with_a_checkpoint(
    tmp_path,
):
    # joblib ends every job when a worker dies: Hydra printed its traceback and the sweep
    # exited 2, read as a refused command line; the worker's job trained on, orphaned.
    sweep = run_cli_in_background(
        "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1", "max_minutes=2",
        "env=fake", "actor.envs_per_batch=8", "log_interval_s=0.5", f"hydra.sweep.dir={tmp_path}",
    )  # fmt: skip
    wait_for_a_metrics_row(tmp_path / "0" / "metrics.csv", 180)
    job = int((tmp_path / "0" / LOCK_NAME).read_text().split()[0])
    worker = int(Path(f"/proc/{job}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(worker, signal.SIGKILL)
    output, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 3, output
    assert "seedq-train: a process of the sweep's jobs died" in output
    summary = json.loads((tmp_path / "0" / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"  # SIGTERM when its worker died


def wait_for_a_metrics_row(metrics: Path, seconds: float) -> None:
    """Until ``metrics`` holds its header and a first row (the run has trained a while), at
    most ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (
        not metrics.exists() or len(metrics.read_text().splitlines()) < 2
    ):
        time.sleep(0.2)


def run_cli_in_background(*args: str) -> subprocess.Popen:
    """``python -m seedq.cli ARGS`` started, its output (stdout and stderr) piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_joblib_sweep_job_starts_its_broker_shards(tmp_path):
    # The shard processes (multiprocessing's spawn) took joblib's start method "loky" from
    # the worker, died at start ("cannot find context for 'loky'") and the run failed.
    result = run_cli(
        "-m", "hydra/launcher=joblib", "seed=0", "broker.shards=2", "env=fake",
        "actor.envs_per_batch=8", "total_env_steps=2000", f"hydra.sweep.dir={tmp_path}",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert json.loads((tmp_path / "0" / "summary.json").read_text())["env_steps"] >= 2000


def run_on_a_terminal(args: list[str]) -> str:
    """Everything a command writes to a 120-column pseudo-terminal."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(args, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            output += data
        elif process.poll() is not None:
            break
    process.wait(timeout=60)
    os.close(master)
    return output.decode(errors="replace")


def test_a_terminal_gets_a_progress_bar_and_the_log_file_keeps_the_lines(tmp_path):
    console = run_on_a_terminal(
        [
            sys.executable,
            "-m",
            "seedq.cli",
            "total_env_steps=30000",
            "log_interval_s=1",
            f"hydra.run.dir={tmp_path}",
        ]
    )
    log_file = (tmp_path / "cli.log").read_text()
    assert "env steps: 100%|" in console and "steps/s, return" in console, console[-2000:]
    assert ("seedq.progress" in console, "seedq.progress" in log_file) == (False, True)


def test_a_run_dir_that_cannot_hold_a_run_is_refused_in_one_line(tmp_path):
    from seedq.run_dirs import unusable_run_dir

    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    assert "is a file, not a folder" in unusable_run_dir([f"run_dir={afile}"])
    assert f"{afile} is a file, so no folder" in unusable_run_dir([f"run_dir={afile}/sub/run"])
    assert "is a file" in unusable_run_dir([f"hydra.run.dir={afile}"])
    assert unusable_run_dir([f"run_dir={tmp_path / 'new' / 'run'}", "seed=1"]) is None
    assert unusable_run_dir(["run_dir=${hydra:runtime.output_dir}"]) is None
    # Hydra made the folder and its log first, and failed there with a traceback (exit 1).
    result = run_cli(f"run_dir={afile}/sub", "total_env_steps=100")
    assert result.returncode == 2 and "Traceback" not in result.stdout, result.stdout
    assert f"seedq-train: run_dir={afile}/sub: {afile} is a file" in result.stdout


def test_a_run_stops_at_its_target_between_rows(tmp_path):
    # The target was checked only when a row was due: every CartPole time to 475 read as the
    # first row's 5 s. With rows a minute apart the run stops and times it well before one.
    result = run_cli(
        f"hydra.run.dir={tmp_path}",
        "stop_at_return=60",
        "log_interval_s=60",
        "max_minutes=3",
        timeout=240,
    )
    assert result.returncode == 0, result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stop_reason"] == "target_return", summary
    assert summary["return_at_target"] >= 60 and summary["time_to_target_s"] < 50, summary


def test_keys_with_a_prefix_no_key_has_says_so():
    result = run_cli("--keys", "algorithm.nope")
    assert result.returncode == 2, result.stdout  # it printed only the header, with exit 0
    assert "no key of algorithm=vtrace, env=cartpole starts with algorithm.nope" in result.stdout
    assert run_cli("--keys", "ppo", "algorithm.clip").returncode == 0


def test_a_refused_command_leaves_the_run_dirs_record_as_it_was(tmp_path):
    # .hydra/ is what seedq-plot labels a run by; Hydra rewrites it before seedq judges the
    # command, so a refused one (here: another algorithm for a V-trace run) relabelled the run.
    fake = ("env=fake", "actor.envs_per_batch=8", f"run_dir={tmp_path}")
    first = run_cli(*fake, "resume=auto", "total_env_steps=2000")
    assert first.returncode == 0, first.stdout
    record = {p.name: p.read_bytes() for p in (tmp_path / ".hydra").glob("*.yaml")}
    refused = run_cli(*fake, "resume=auto", "total_env_steps=50000", "algorithm=ppo")
    assert refused.returncode == 2, refused.stdout
    assert {p.name: p.read_bytes() for p in (tmp_path / ".hydra").glob("*.yaml")} == record
    # One that finds its run finished trains nothing: the record stays too.
    assert run_cli(*fake, "resume=auto", "total_env_steps=1000").returncode == 0
    assert {p.name: p.read_bytes() for p in (tmp_path / ".hydra").glob("*.yaml")} == record
    # An accepted one that trains is the run's newest command line.
    resumed = run_cli(*fake, "resume=auto", "total_env_steps=50000")
    assert resumed.returncode == 0, resumed.stdout
    assert "total_env_steps=50000" in (tmp_path / ".hydra" / "overrides.yaml").read_text()


@pytest.mark.parametrize("existed", [False, True])
def test_a_command_refused_for_a_live_run_leaves_that_runs_folder_alone(tmp_path, existed):
    # Two starts into a new folder at once: the loser found no folder, was refused at its
    # claim, and removed the folder that held only Hydra's files and the lock, the winner's:
    # a third start then took a lock nobody held and trained beside it.
    folder = tmp_path / "run"
    if existed:
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "config.yaml").write_text("theirs: 0\n")
    record = RunDirRecord([f"hydra.run.dir={folder}"])
    (folder / ".hydra").mkdir(parents=True, exist_ok=True)
    (folder / ".hydra" / "config.yaml").write_text("winner: 1\n")
    (folder / "cli.log").write_text("")
    holder = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT)  # another run's claim
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(holder, b"4242\n")
        record.settle(Command(output_dir=str(folder)))
        left = sorted(p.name for p in folder.iterdir())
        config = (folder / ".hydra" / "config.yaml").read_text()
    finally:
        os.close(holder)
    assert (left, config) == ([".hydra", LOCK_NAME, "cli.log"], "winner: 1\n")
    # Once nobody holds it, a refused command tidies up as before.
    record.settle(Command(output_dir=str(folder)))
    assert folder.exists() == existed


@pytest.mark.parametrize(
    "override, says",
    [("algorithm.batch_size=-1", "algorithm.batch_size=-1"), ("resume=/gone", "no checkpoint")],
)
def test_a_refused_command_without_a_run_dir_leaves_no_dated_folder(tmp_path, override, says):
    def refused():
        result = subprocess.run(
            [sys.executable, "-m", "seedq.cli", override],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2 and says in result.stdout, result.stdout

    refused()
    # Nor the folders above it that it made (runs/<day>/ was left behind, empty).
    assert not (tmp_path / "runs").exists()
    (tmp_path / "runs" / "mine").mkdir(parents=True)  # one that was there stays
    refused()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["mine"]


@pytest.mark.parametrize(
    "override, says",
    [
        ("+totl_env_steps=10", "did you mean total_env_steps?"),
        ("+actor.num_actor=3", "did you mean actor.num_actors?"),
        ("+algorithm.lr_typo=1", "algorithm.lr_typo is not a key of the algorithm section"),
    ],
)
def test_a_key_added_with_plus_that_nothing_reads_is_refused(tmp_path, override, says):
    # Hydra refuses a misspelt key and suggests the +, which then adds it to any section.
    code, output = train(override, tmp_path=tmp_path)
    assert (code, says in output, "run finished" in output) == (2, True, False), output


@pytest.mark.parametrize(
    "override", ["algorithm.lr=abc", "bogus_key=1", "algorithm=dqn", "total_env_steps=2.5"]
)
def test_a_command_line_hydra_refuses_exits_2_as_seedqs_refusals_do(tmp_path, override):
    code, output = train(override, tmp_path=tmp_path)
    assert code == 2, output


@pytest.mark.parametrize(
    "argv, says",
    [
        # Was "algorithm is not a key": the algorithm group has no folder of YAML files.
        (["algorithm=foo"], "algorithm=foo is not an option of algorithm (choose one of ppo, r2d2"),
        # Was "total_env_steps is not a key": an unknown env family left no keys to check.
        (["env=foo", "total_env_steps=5000"], "env=foo is not an option of env (choose one of"),
        (["algorithm=vtrce"], "did you mean algorithm=vtrace?"),
        (["arch=sebulb"], "did you mean arch=sebulba?"),
        (["hardware=foo"], "hardware=foo is not an option of hardware (choose one of cpu, gpu)"),
        (["launcher=slurn"], "did you mean launcher=slurm?"),
        (["-m", "env=cartpole,atary"], "env=atary is not an option of env"),
    ],
)
def test_an_option_no_group_has_is_refused_by_name_with_the_groups_options(argv, says):
    refusal = key_refusal(argv)
    assert refusal is not None and says in refusal, refusal


@pytest.mark.parametrize(
    "argv, says",
    [
        # OmegaConf read any int as a bool: these ran with the switch on.
        (["env=atari", "env.full_action_space=2"], "env.full_action_space=2: it takes true or"),
        (["algorithm.normalize_advantages=-1"], "algorithm.normalize_advantages=-1: it takes"),
        (["-m", "hardware.pin_memory=true,5"], "hardware.pin_memory=5: it takes true or false"),
        (["+algorithm.value_norm=1.0"], "algorithm.value_norm=1.0: it takes true or false"),
    ],
)
def test_a_switch_given_a_number_other_than_0_or_1_is_refused(argv, says):
    refusal = key_refusal(argv)
    assert refusal is not None and says in refusal, refusal


@pytest.mark.parametrize(
    "argv",
    [
        ["algorithm.normalize_advantages=1"],
        ["env=atari", "env.full_action_space=0"],
        ["hardware.pin_memory=false"],
        ["total_env_steps=2"],
    ],
)
def test_a_switch_given_true_false_0_or_1_passes(argv):
    assert key_refusal(argv) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["algorithm=ppo", "env=atari", "arch=sebulba", "hardware=cpu", "launcher=ssh"],
        ["-m", "algorithm=vtrace,ppo", "env=gym,minatar"],
        ["logger=[tensorboard,wandb]"],
        ["env.id=ALE/Pong-v5", "env=atari"],
        # Options from a config directory the command line adds are Hydra's to find.
        ["--config-dir", "my_conf", "env=my_env"],
        ["hydra.searchpath=[file://my_conf]", "env=my_env"],
    ],
)
def test_every_option_the_groups_have_passes_the_choice_check(argv):
    assert unknown_choice(argv) is None


def test_an_unknown_algorithm_is_refused_in_one_line_exit_2(tmp_path):
    code, output = train("algorithm=foo", "total_env_steps=5000", tmp_path=tmp_path)
    assert code == 2 and "algorithm=foo is not an option of algorithm" in output, output
    assert "Traceback" not in output


def test_a_torso_that_does_not_fit_the_envs_observations_is_refused_in_one_line(tmp_path):
    # A traceback (exit 1) before: the network's ValueError was not one of the refusals.
    code, output = train("algorithm.model.torso=nature", "total_env_steps=100", tmp_path=tmp_path)
    assert code == 2 and "algorithm.model.torso=nature needs 3-D" in output, output
    assert "Traceback" not in output


def test_an_int_key_takes_a_whole_number_written_as_a_float(tmp_path):
    # OmegaConf refused total_env_steps=2e3 ("could not be converted to Integer"), exit 2.
    code, output = train("total_env_steps=2e3", "actor.num_actors=1", tmp_path=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (code, summary["stop_reason"], summary["env_steps"] >= 2000) == (
        0,
        "total_env_steps",
        True,
    ), output


@pytest.mark.parametrize(
    "given, read",
    [
        ("total_env_steps=1e7", "total_env_steps=10000000"),
        ("total_env_steps=2.5E6", "total_env_steps=2500000"),
        ("env.max_episode_steps=1e3", "env.max_episode_steps=1000"),  # int | None: by its type
        ("algorithm.batch_size=64.0", "algorithm.batch_size=64"),
        ("+actor.num_actors=1e1", "+actor.num_actors=10"),
        ("total_env_steps=1e6,2e6", "total_env_steps=1000000,2000000"),
        # Left for Hydra: not whole, not an int key, not a plain number, a mixed sweep.
        ("total_env_steps=2.5", "total_env_steps=2.5"),
        ("algorithm.lr=1e3", "algorithm.lr=1e3"),
        ("env.id=1e7", "env.id=1e7"),
        ("total_env_steps=range(1,3)", "total_env_steps=range(1,3)"),
        ("total_env_steps=1e6,2.5", "total_env_steps=1e6,2.5"),
    ],
)
def test_whole_numbers_in_a_floats_notation_become_ints_for_int_keys_only(given, read):
    assert whole_numbers(["-m", given, "seed=1"]) == ["-m", read, "seed=1"]


def test_ctrl_c_while_starting_is_one_line_and_exit_130(monkeypatch, capsys):
    # Before the run takes over SIGINT (imports, config), Python's KeyboardInterrupt came out
    # of wherever it landed, with a page of import traceback.
    import seedq.cli as cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_train", interrupted)
    monkeypatch.setattr(sys, "argv", ["seedq-train", "seed=1"])
    with pytest.raises(SystemExit) as exit_:
        cli.train_main()
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "seedq-train: interrupted while starting; no run started\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_stop_signal_while_starting_is_one_line_and_exit_75(monkeypatch, capsys, sig):
    # Before the run took the signals over, SIGTERM or SIGUSR1 (a scheduler's, Slurm's
    # --signal=B:USR1) killed the command with 143 or 138 and no word, so a requeue script
    # that requeues on 75 dropped the job.
    import seedq.cli as cli

    def starting() -> None:
        os.kill(os.getpid(), sig)
        time.sleep(10)  # the handler raises in here
        raise AssertionError("the signal did not stop the start")

    monkeypatch.setattr(cli, "_train", starting)
    monkeypatch.setattr(sys, "argv", ["seedq-train", "seed=1"])
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.train_main()
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    assert exit_.value.code == 75
    assert capsys.readouterr().err == (
        f"seedq-train: stopped by {sig.name} while starting; no run started (exit status 75: "
        "the same command starts it again)\n"
    )


def fake_sweep(tmp_path, values: str) -> subprocess.CompletedProcess:
    """A two-job sweep over ``values`` of fake-env runs, job N in ``tmp_path/N``."""
    return run_cli(
        "-m",
        values,
        "env=fake",
        "actor.envs_per_batch=8",
        "total_env_steps=2000",
        f"run_dir={tmp_path}/" + "${hydra:job.num}",
        timeout=300,
    )


def test_a_sweep_runs_every_job_when_one_is_refused_and_ends_with_its_status(tmp_path):
    # A job's sys.exit ended the whole sweep: the jobs after it never ran.
    result = fake_sweep(tmp_path, "algorithm=sac,vtrace")
    assert result.returncode == 2, result.stdout
    assert "job 0 of the sweep ended with exit status 2" in result.stdout
    assert json.loads((tmp_path / "1" / "summary.json").read_text())["env_steps"] >= 2000
    # Its end: one line, not Hydra's "Error executing job" with a traceback.
    assert "1 job of the sweep failed (see above); the sweep ends with the worst status, 2" in (
        result.stdout
    )
    assert "Traceback" not in result.stdout and "Error executing job" not in result.stdout


def test_a_sweep_by_hydra_mode_ends_with_its_refused_jobs_status(tmp_path):
    # hydra.mode=MULTIRUN runs a sweep without -m, unseen by seedq: the refused job's status
    # was noted and never used, and the sweep exited 0.
    result = run_cli(
        "hydra.mode=MULTIRUN",
        "algorithm=sac,vtrace",
        "env=fake",
        "actor.envs_per_batch=8",
        "total_env_steps=1000",
        f"hydra.sweep.dir={tmp_path}",
        timeout=300,
    )
    assert result.returncode == 2, result.stdout
    assert "1 job of the sweep failed (see above); the sweep ends with the worst status, 2" in (
        result.stdout
    )


def test_a_sweep_value_hydra_cannot_read_is_a_refusal_exit_2(tmp_path):
    # It exited 1 (Hydra's status for any error), where the same value in a single run is 2.
    result = fake_sweep(tmp_path, "algorithm.lr=0.001,abc")
    assert result.returncode == 2, result.stdout
    assert "Value 'abc' of type 'str' could not be converted to Float" in result.stdout


def test_a_sweep_run_again_into_its_folder_is_told_how_to_continue_the_sweep(tmp_path):
    # The refusal said "continue it with resume=auto run_dir=DIR/0": one run_dir for a sweep
    # is refused, and the user wanted the sweep continued, not one of its jobs.
    sweep = ("-m", "seed=0", "env=fake", "actor.envs_per_batch=8", "total_env_steps=1000")
    first = run_cli(*sweep, f"hydra.sweep.dir={tmp_path}", timeout=300)
    again = run_cli(*sweep, f"hydra.sweep.dir={tmp_path}", timeout=300)
    assert (first.returncode, again.returncode) == (0, 2), first.stdout + again.stdout
    assert f"{tmp_path}/0 holds another run (checkpoints/ckpt-" in again.stdout
    assert (
        "continue the sweep with resume=auto added to its command line, or give the sweep "
        "another folder (hydra.sweep.dir=DIR)"
    ) in again.stdout
    resumed = run_cli(*sweep, f"hydra.sweep.dir={tmp_path}", "resume=auto", timeout=300)
    assert resumed.returncode == 0 and "already finished" in resumed.stdout, resumed.stdout


def test_cfg_with_a_sweep_is_one_line_exit_2():
    # Hydra's answer was a ValueError traceback, exit 1.
    result = run_cli("-m", "seed=0,1", "--cfg", "job")
    assert (result.returncode, result.stdout) == (
        2,
        "seedq-train: --cfg prints one run's config and cannot go with -m: drop -m and give "
        "each swept key one of its values (seed=0,1 -> seed=0) to see that job's\n",
    )


def test_supervise_with_a_sweep_is_refused_before_any_job(tmp_path):
    # Each job refused it alone, and the sweep left a dated folder of refused jobs behind.
    result = run_cli("-m", "seed=0,1", "supervise=true", cwd=tmp_path, apart=True)
    assert (result.returncode, result.stderr, list(tmp_path.iterdir())) == (
        2,
        "seedq-train: supervise=true supervises one run, not a sweep (-m): drop -m, or drop "
        "supervise and continue a stopped sweep with resume=auto\n",
        [],
    )


def test_a_sweep_whose_every_job_is_refused_leaves_nothing_behind(tmp_path):
    # A refused run leaves no trace beside its error; a refused sweep left a dated
    # runs/multirun/<day>/<time>/ of job folders holding Hydra's files, one per try.
    result = run_cli("-m", "seed=0,1", "resume=auto", "env=fake", cwd=tmp_path, apart=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "resume=auto needs the same run directory at every start" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_an_interval_sweep_without_its_sweeper_is_one_line_exit_2():
    # Hydra's basic sweeper answered with a HydraException traceback.
    result = run_cli("-m", "algorithm.lr=interval(1e-4,1e-3)", "seed=0,1")
    assert (result.returncode, result.stdout) == (
        2,
        "seedq-train: algorithm.lr=interval(1e-4,1e-3): interval() is a range for an optimising "
        "sweeper to sample (hydra/sweeper=optuna, its Hydra plugin installed); Hydra's basic "
        "sweeper runs the values given: a list (0.001,0.003), range() or choice()\n",
    )


def start_fake_sweep(tmp_path, *overrides: str) -> subprocess.Popen:
    """A two-job sweep (seed=0,1) of fake-env runs, job N in ``tmp_path/N``, output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", "-m", "seed=0,1", "env=fake"]
        + ["actor.envs_per_batch=8", "log_interval_s=0.5", *overrides]
        + [f"run_dir={tmp_path}/" + "${hydra:job.num}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_ctrl_c_in_a_sweep_stops_the_sweep_not_only_its_job(tmp_path):
    # The job checkpointed and exited 75, then the next job started: stopping a sweep of N
    # jobs took N Ctrl-Cs, and a scheduler's one SIGTERM stopped one job of it.
    sweep = start_fake_sweep(tmp_path, "max_minutes=2")
    wait_for_a_metrics_row(tmp_path / "0" / "metrics.csv", 120)
    sweep.send_signal(signal.SIGINT)
    output, _ = sweep.communicate(timeout=120)
    assert (sweep.returncode, (tmp_path / "1").exists()) == (75, False), output
    assert "job 0 of the sweep was stopped: the sweep stops with it" in output
    assert "the same command with resume=auto continues the sweep" in output


def test_a_stop_signal_between_a_sweeps_jobs_stops_the_sweep(tmp_path):
    # After a job's run ended, a signal was "noted" ("SIGTERM after the run ended: it exits
    # as it is") and the next job trained to its end: the sweep exited 0.
    sweep = start_fake_sweep(tmp_path, "total_env_steps=2000")
    output = ""
    for line in sweep.stdout:
        output += line
        if "#1 : " in line:
            break
    sweep.send_signal(signal.SIGTERM)
    rest, _ = sweep.communicate(timeout=120)
    output += rest
    assert sweep.returncode == 75, output
    assert "after the run ended" not in output and "Traceback" not in output
    summary = tmp_path / "1" / "summary.json"
    assert not summary.exists() or json.loads(summary.read_text())["env_steps"] < 2000


@pytest.mark.parametrize("given", ["run_dir=", "hydra.run.dir= "])
def test_an_empty_run_dir_is_refused_and_nothing_is_written(tmp_path, given):
    # Hydra took it for the working directory (.hydra/, cli.log, the lock written there),
    # then the metrics writer failed on '' with a traceback, exit 1.
    result = run_cli(given, "total_env_steps=1000", cwd=tmp_path, apart=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "is empty: give a folder for the run" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("hydra.sweep.dir=", "hydra.sweep.dir= is empty: give a folder"),
        ("hydra.sweep.dir=afile", "hydra.sweep.dir=afile: that is a file, not a folder"),
        ("run_dir=afile/${hydra:job.num}", "that is a file, not a folder"),
    ],
)
def test_a_sweep_folder_that_cannot_hold_the_sweep_is_refused(tmp_path, given, said):
    # Empty, the sweep trained its jobs into the working directory (0/, 1/, multirun.yaml);
    # a file ended in a FileExistsError traceback from Hydra.
    (tmp_path / "afile").write_text("")
    result = run_cli("-m", "seed=0,1", given, "total_env_steps=1000", cwd=tmp_path, apart=True)
    assert (result.returncode, said in result.stderr) == (2, True), result.stdout + result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]


def test_a_sweep_with_a_run_dir_per_job_keeps_each_jobs_hydra_files_there(tmp_path):
    # They went to runs/multirun/..., so seedq-plot labelled the jobs by folder number.
    result = fake_sweep(tmp_path, "seed=0,1")
    assert result.returncode == 0, result.stdout
    for job in ("0", "1"):
        assert f"seed={job}" in (tmp_path / job / ".hydra" / "overrides.yaml").read_text()
        assert (tmp_path / job / "summary.json").is_file()


def test_a_stop_signal_after_the_run_ended_is_noted_not_a_kill(caplog):
    # A scheduler's SIGTERM as the run finished killed the exiting process (status 143).
    from seedq.cli import ended_quietly_on_stop_signals

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1)
    try:
        with caplog.at_level(logging.INFO, logger="seedq"):
            ended_quietly_on_stop_signals()
            os.kill(os.getpid(), signal.SIGTERM)
        assert "SIGTERM after the run ended: it exits as it is" in caplog.text
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # a second one ends it
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGUSR1, before[1])
        signal.signal(signal.SIGINT, signal.default_int_handler)
