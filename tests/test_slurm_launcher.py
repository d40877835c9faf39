"""The slurm launcher: its pure parts always, and real runs on a one-node Slurm cluster.

``scripts/setup_slurm_local.sh`` makes this machine a Slurm cluster (slurmctld + slurmd on
127.0.0.1); without one the real tests skip, saying why. The real runs start
``seedq-train launcher=slurm`` inside ``salloc`` or ``sbatch`` as a user would; a marker
variable set through ``launcher.env`` finds the processes the run started, and the job's steps
are listed inside the allocation right after the learner exits, while the allocation lives on.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from ssh_hosts import processes_with_env

from seedq.launch import slurm
from seedq.launch.config import LauncherConfig, validate_launcher
from seedq.launch.remote_actor import actor_host_script
from seedq.launch.slurm import (
    Allocation,
    NotInAllocation,
    SlurmLauncher,
    advertise_host,
    expand_nodelist,
    srun_command,
    tasks_per_node,
)
from seedq.schema import ConfigError

TREE = str(Path(__file__).resolve().parents[1])
SETUP = "scripts/setup_slurm_local.sh sets up a one-node cluster here"


def _slurm_unavailable() -> str:
    for tool in ("salloc", "sbatch", "srun", "squeue", "sinfo", "scontrol"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed ({SETUP})"
    try:
        states = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return f"the Slurm controller does not answer ({SETUP})"
    if states.returncode != 0 or not {"idle", "mixed"} & set(states.stdout.split()):
        return f"no idle Slurm node: {states.stderr.strip() or states.stdout.strip()} ({SETUP})"
    return ""


needs_slurm = pytest.mark.skipif(bool(_slurm_unavailable()), reason=_slurm_unavailable() or "ok")
# What the allocation runs: the learner, then, while the job still lives, its steps (after
# up to STEPS_WAIT_S seconds: a killed learner cannot wait for them, they end by themselves).
AFTER_THE_LEARNER = (
    'seedq-train "$@"; echo "learner exit $?"; i=0; '
    'while squeue -h -s -j "$SLURM_JOB_ID" -o %j | grep -q seedq- && [ $i -lt "$STEPS_WAIT_S" ]; '
    "do sleep 1; i=$((i + 1)); done; "
    'squeue -h -s -j "$SLURM_JOB_ID" -o "%i %j" | grep seedq- > "$STEPS_FILE" || true'
)


def outside_slurm() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def train_args(run_dir: Path, *overrides: str) -> list[str]:
    return [
        "launcher=slurm",
        f"+launcher.env={{SEEDQ_TEST_RUN:'{run_dir}'}}",
        f"hydra.run.dir={run_dir}",
        "log_interval_s=1",
        *overrides,
    ]


def salloc(run_dir: Path, *overrides: str, steps_wait_s: int = 0) -> subprocess.Popen:
    """``salloc`` one node with two tasks (two actors) running the learner, then the probe."""
    env = {
        **outside_slurm(),
        "PYTHONPATH": TREE,
        "STEPS_FILE": str(run_dir) + ".steps",
        "STEPS_WAIT_S": str(steps_wait_s),
    }
    return subprocess.Popen(
        ["salloc", "-N1", "-n2", "--time=5", "--immediate=60", "sh", "-c", AFTER_THE_LEARNER]
        + ["seedq-train", *train_args(run_dir, *overrides)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def left_behind(run_dir: Path, timeout: float = 20) -> list[str]:
    """Processes the run started that are still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (found := processes_with_env(f"SEEDQ_TEST_RUN={run_dir}")) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    return found


def steps_after(run_dir: Path) -> list[str]:
    return Path(str(run_dir) + ".steps").read_text().splitlines()


def test_tasks_per_node_expands_slurm_s_repeat_counts():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("4") == [4]
    with pytest.raises(NotInAllocation, match="expected 2\\(x3\\),1"):
        tasks_per_node("2(3)")


def test_outside_an_allocation_the_launcher_refuses_naming_salloc_and_sbatch():
    with pytest.raises(NotInAllocation, match="SLURM_JOB_ID is not set; .*sbatch.*salloc"):
        Allocation.from_env(outside_slurm())


def test_actors_go_on_the_chosen_nodes_as_many_as_configured_or_allocated():
    two = Allocation("7", ["cpu1", "cpu2"], tasks=[3, 1])
    nodes_only = Allocation("7", ["cpu1", "cpu2"])
    assert two.actor_slots(LauncherConfig(name="slurm"), 2) == [
        ("cpu1", 0),
        ("cpu1", 1),
        ("cpu1", 2),
        ("cpu2", 0),
    ]
    assert nodes_only.actor_slots(LauncherConfig(name="slurm"), 2) == [
        ("cpu1", 0),
        ("cpu1", 1),
        ("cpu2", 0),
        ("cpu2", 1),
    ]
    chosen = LauncherConfig(name="slurm", hosts=["cpu2"], actors_per_host=1)
    assert two.actor_slots(chosen, 2) == [("cpu2", 0)]
    with pytest.raises(ConfigError, match=r"\['gpu9'\] are not nodes of Slurm job 7"):
        two.actor_slots(LauncherConfig(name="slurm", hosts=["gpu9"]), 2)


def test_each_actor_is_one_task_on_one_node_of_the_job_with_user_options_last():
    assert srun_command("42", "cpu3", "seedq-actor-5", ["--mem=4G"], "sh", "-s") == [
        "srun",
        "--jobid=42",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "--cpu-bind=none",
        "--nodelist=cpu3",
        "--job-name=seedq-actor-5",
        "--mem=4G",
        "sh",
        "-s",
    ]


def test_srun_args_that_would_move_or_multiply_actors_are_refused():
    for option in ("--ntasks=4", "-N2", "--nodelist=cpu1", "-i", "--input=none"):
        with pytest.raises(ConfigError, match="launcher.srun_args entry"):
            validate_launcher(LauncherConfig(name="slurm", srun_args=[option]))
    validate_launcher(LauncherConfig(name="slurm", srun_args=["--mem=4G", "--nice=10"]))


def test_the_srun_args_example_of_its_help_and_docs_is_an_override_hydra_takes():
    """`launcher.srun_args=[--mem-per-cpu=2G]`, the example of the key's help and
    docs/multi-host.md, is refused by Hydra's override grammar (no viable alternative at
    input '[--mem-per-cpu='); an option holding = must be quoted."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from seedq.config import schema_for
    from seedq.schema import describe

    helps = {d.key: d.help for d in describe(schema_for("vtrace"))}
    help_text = helps["launcher.srun_args"]
    example = re.search(r"'(launcher\.srun_args=[^']*)'", help_text).group(1)
    (override,) = OverridesParser.create().parse_overrides([example])
    assert override.value() == ["--mem-per-cpu=2G"]


def test_actors_dial_the_learner_s_host_name_and_a_loopback_broker_stays_on_one_machine():
    assert advertise_host("0.0.0.0", "", ["cpu1", "cpu2"], "cpu1.cluster") == "cpu1.cluster"
    assert advertise_host("0.0.0.0", "ib-cpu1", ["cpu1"], "cpu1") == "ib-cpu1"
    assert advertise_host("127.0.0.1", "", ["cpu1"], "cpu1.cluster") == "127.0.0.1"
    with pytest.raises(ConfigError, match=r"actor nodes \['cpu2.invalid'\] are other machines"):
        advertise_host("127.0.0.1", "", ["cpu1", "cpu2.invalid"], "cpu1")


def test_a_loopback_broker_for_other_nodes_is_refused_by_the_launcher(monkeypatch):
    # Was refused only once the learner had been built and its broker bound.
    monkeypatch.setattr(slurm, "expand_nodelist", lambda nodelist: ["cpu1.invalid", "cpu2.invalid"])
    checked = []
    monkeypatch.setattr(SlurmLauncher, "check_nodes", lambda *args: checked.append(args))
    cfg = SimpleNamespace(
        actor=SimpleNamespace(transport="tcp", num_actors=1),
        launcher=LauncherConfig(name="slurm"),
        broker=SimpleNamespace(host="127.0.0.1", advertise_host=""),
        env=None,
        security=SimpleNamespace(curve=False, keys_dir=""),
    )
    environ = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "cpu[1-2].invalid"}
    with pytest.raises(ConfigError, match="broker.host='127.0.0.1' is loopback"):
        SlurmLauncher.for_run(cfg, "/tmp", environ)
    assert len(checked) == 1


def test_with_a_shared_key_directory_no_key_is_shipped_and_actors_read_it_in_place():
    cmd = ["py", "-m", "seedq.actor.main", "--keys-dir", "/shared/keys", "--log-file", "a.log"]
    script = actor_host_script(cmd, "", {}, remote_keys="")
    assert script.splitlines() == [
        "set -e",
        "exec py -m seedq.launch.remote_guard -- py -m seedq.actor.main --keys-dir /shared/keys",
    ]


@needs_slurm  # scontrol reads the cluster config even to expand a list
def test_a_compressed_nodelist_expands_through_scontrol():
    assert expand_nodelist("cpu[01-02,7],gpu5") == ["cpu01", "cpu02", "cpu7", "gpu5"]


def test_seedq_train_outside_an_allocation_exits_2_before_anything_starts(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "seedq.cli", *train_args(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**outside_slurm(), "PYTHONPATH": TREE},
    )
    assert (
        result.returncode,
        "launcher=slurm runs inside a Slurm allocation" in result.stderr + result.stdout,
        (run_dir / "metrics.csv").exists(),
    ) == (2, True, False), result.stderr


@needs_slurm
def test_cartpole_trains_with_actors_as_srun_steps_over_curve_and_leaves_no_step(tmp_path):
    run_dir, keys, shipped = tmp_path / "run", tmp_path / "keys", tmp_path / "node-keys"
    subprocess.run([sys.executable, "-m", "seedq.keys", str(keys)], check=True)
    process = salloc(
        run_dir,
        "total_env_steps=30000",
        "max_minutes=2",
        "security.curve=true",
        f"security.keys_dir={keys}",
        f"launcher.remote_keys_dir={shipped}",
    )
    output, _ = process.communicate(timeout=180)
    summary = json.loads((run_dir / "summary.json").read_text())
    logs = sorted(p.name for p in (run_dir / "actors").glob("*.log"))
    node = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    assert (
        "learner exit 0" in output,
        summary["stop_reason"],
        summary["updates"] > 0,
        logs,
        sorted(p.name for p in shipped.iterdir()),
        steps_after(run_dir),
        left_behind(run_dir),
    ) == (
        True,
        "total_env_steps",
        True,
        [f"{node}-0.log", f"{node}-1.log"],
        ["actor.key_secret", "learner.key"],
        [],
        [],
    ), output


def learner_pid(run_dir: Path, timeout: float = 120) -> int:
    """The learner's pid, from its log, once it has written a metrics row."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = run_dir / "metrics.csv"
        if metrics.exists() and len(metrics.read_text().splitlines()) > 1:
            return int(re.search(r"\[learner (\d+)\]", (run_dir / "cli.log").read_text())[1])
        time.sleep(0.2)
    raise AssertionError(f"no metrics in {timeout} s")


@needs_slurm
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_ctrl_c_sigterm_or_a_killed_learner_ends_every_actor_step(tmp_path, sig):
    run_dir = tmp_path / "run"
    # Stopped, the learner ends its steps before it exits; killed, it leaves that to them.
    process = salloc(run_dir, "max_minutes=3", steps_wait_s=20 if sig == signal.SIGKILL else 0)
    try:
        os.kill(learner_pid(run_dir), sig)
        output, _ = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    expected = {signal.SIGKILL: "learner exit 137"}.get(sig, "learner exit 75")
    assert (expected in output, steps_after(run_dir), left_behind(run_dir)) == (
        True,
        [],
        [],
    ), output


@needs_slurm
def test_an_actor_step_cancelled_by_slurm_is_restarted_and_the_run_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    # A step budget out of reach: the run must end on its time budget however fast it is.
    process = salloc(run_dir, "max_minutes=0.5", "total_env_steps=1000000000000")
    try:
        learner_pid(run_dir)
        job = re.search(r"Slurm job (\d+):", (run_dir / "cli.log").read_text())[1]
        steps = subprocess.run(
            ["squeue", "-h", "-s", "-j", job, "-o", "%i %j"], capture_output=True, text=True
        ).stdout.splitlines()
        victim = next(line.split()[0] for line in steps if line.endswith(" seedq-actor-0"))
        subprocess.run(["scancel", victim], check=True)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    summary = json.loads((run_dir / "summary.json").read_text())
    faults = json.loads((run_dir / "faults.json").read_text())
    assert (
        summary["stop_reason"],
        faults["actor_restarts"],
        steps_after(run_dir),
        left_behind(run_dir),
    ) == ("max_minutes", 1, [], []), output


def _submitit_missing() -> str:
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        return "hydra-submitit-launcher is not installed (pip install 'seedq[slurm]')"
    return ""


@pytest.mark.skipif(bool(_submitit_missing()), reason=_submitit_missing() or "ok")
def test_hydra_composes_the_submitit_slurm_launcher_for_sweeps():
    from hydra import compose, initialize_config_dir

    import seedq
    from seedq.config import register_configs

    register_configs()
    with initialize_config_dir(str(Path(seedq.__file__).parent / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=["hydra/launcher=submitit_slurm", "hydra.launcher.nodes=2"],
            return_hydra_config=True,
        )
    assert (cfg.hydra.launcher._target_.rsplit(".", 1)[1], cfg.hydra.launcher.nodes) == (
        "SlurmLauncher",
        2,
    )


@needs_slurm
@pytest.mark.skipif(bool(_submitit_missing()), reason=_submitit_missing() or "ok")
def test_a_two_job_sweep_runs_as_slurm_jobs_through_submitit(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "seedq.cli", "-m", "hydra/launcher=submitit_slurm", "seed=0,1"]
        + ["total_env_steps=5000", "actor.num_actors=1", "hydra.launcher.cpus_per_task=1"]
        + ["hydra.launcher.timeout_min=5", f"hydra.sweep.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**outside_slurm(), "PYTHONPATH": TREE},
    )
    summaries = [json.loads((tmp_path / j / "summary.json").read_text()) for j in ("0", "1")]
    job_logs = list((tmp_path / ".submitit").glob("*/*_log.out"))
    assert (result.returncode, [s["stop_reason"] for s in summaries], len(job_logs)) == (
        0,
        ["total_env_steps", "total_env_steps"],
        2,
    ), result.stderr[-3000:]


@needs_slurm
@pytest.mark.skipif(bool(_submitit_missing()), reason=_submitit_missing() or "ok")
def test_a_sweep_job_warned_of_its_time_limit_stops_with_a_checkpoint(tmp_path):
    """submitit's jobs ask Slurm for SIGUSR2 before their time limit (--signal=USR2@120), sent
    to every process of the job. seedq's job took it as submitit's own handler did: an
    UncompletedJobError raised mid-training, no stop checkpoint of its own, and the sweep ended
    in a traceback ("A temporary saved file already exists"). It stops as for SIGUSR1."""
    sweep = subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", "-m", "hydra/launcher=submitit_slurm"]
        + ["total_env_steps=5000,1000000000000", "max_minutes=3", "actor.num_actors=1"]
        + ["actor.envs_per_batch=8", "hydra.launcher.cpus_per_task=1", "log_interval_s=1"]
        + ["hydra.launcher.timeout_min=5", f"hydra.sweep.dir={tmp_path}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**outside_slurm(), "PYTHONPATH": TREE},
    )
    try:
        learner_pid(tmp_path / "1", timeout=180)
        (job,) = [p.name for p in (tmp_path / ".submitit").glob("*_1")]
        subprocess.run(["scancel", "--signal=USR2", job], check=True)
        output, _ = sweep.communicate(timeout=180)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    summaries = [json.loads((tmp_path / j / "summary.json").read_text()) for j in ("0", "1")]
    assert (
        sweep.returncode,
        "1 job of the sweep stopped" in output,
        "Traceback" in output,
        [s["stop_reason"] for s in summaries],
        bool(list((tmp_path / "1" / "checkpoints").glob("ckpt-*.pt"))),
    ) == (75, True, False, ["total_env_steps", "interrupted"], True), output[-3000:]


@pytest.mark.slow
@needs_slurm
def test_the_example_batch_script_trains_cartpole_to_150(tmp_path):
    run_dir, keys = tmp_path / "run", tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "seedq.keys", str(keys)], check=True)
    result = subprocess.run(
        ["sbatch", "--wait", "-N1", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=8"]
        + [f"--output={tmp_path}/job.out", "scripts/slurm/train.sbatch"]
        + train_args(run_dir, "stop_at_return=150", "max_minutes=5")
        # The script binds 0.0.0.0 for a real cluster; here everything stays on loopback.
        + ["broker.host=127.0.0.1", "security.curve=true", f"security.keys_dir={keys}"]
        + [f"launcher.remote_keys_dir={tmp_path}/node-keys"],
        capture_output=True,
        text=True,
        timeout=420,
        cwd=TREE,
        env={**outside_slurm(), "PYTHONPATH": TREE},
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (result.returncode, summary["stop_reason"], left_behind(run_dir)) == (
        0,
        "target_return",
        [],
    ), (tmp_path / "job.out").read_text()[-3000:]
