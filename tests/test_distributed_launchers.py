"""Who starts learner ranks: what each launcher tells a rank (pure), and real starts through
``torchrun``, an ``srun`` step of the local Slurm cluster and ssh to local sshd "hosts".

The real runs are two gloo ranks on this machine; the Slurm and ssh ones skip, saying why, where
``scripts/setup_slurm_local.sh`` or ``scripts/setup_test_hosts.sh`` have not been run (or the
one Slurm node is busy).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import run_cli
from ssh_hosts import SshdHost, client_config, missing_tools, user_key
from test_distributed import COMMON, algorithm_case, rank_reports
from test_slurm_launcher import needs_slurm, outside_slurm

from seedq import cli
from seedq.bench.common import compose
from seedq.cores import usable_cores
from seedq.exit_status import EXIT_REFUSED, EXIT_STOPPED
from seedq.learner_ranks import (
    EXIT_RANK_LOST,
    LearnersFailed,
    LearnersRefused,
    LearnersStopped,
    describe_failure,
    launch_error,
    leave_reason,
    remove_empty_dirs,
)
from seedq.parallel.agreement import RECENT, pool_recent
from seedq.parallel.ranks import (
    SEED_STRIDE,
    check_learners,
    check_ranks_fit,
    from_slurm_step,
    launched_rank,
    rank_config,
    rank_device,
    rank_share,
)
from seedq.schema import ConfigError

TREE = str(Path(__file__).resolve().parents[1])
needs_sshd = pytest.mark.skipif(bool(missing_tools()), reason=missing_tools() or "ready")
TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


def test_torchrun_s_variables_make_a_rank_and_one_process_makes_none():
    info = launched_rank({**TORCHRUN, "MASTER_ADDR": "gpu1", "MASTER_PORT": "1234"})
    assert (info.rank, info.world_size, info.local_rank, info.master_addr, info.master_port) == (
        1,
        2,
        1,
        "gpu1",
        1234,
    )
    assert launched_rank({"RANK": "0", "WORLD_SIZE": "1"}) is None
    assert launched_rank({}) is None


def test_the_launchers_empty_folders_go_and_a_file_it_wrote_stays(tmp_path):
    top = tmp_path / "elastic"
    (top / "run_1" / "attempt_0" / "0").mkdir(parents=True)
    (top / "run_1" / "attempt_0" / "1").mkdir()
    (top / "run_1" / "attempt_0" / "1" / "error.json").write_text("{}")
    (top / "run_2" / "attempt_0" / "0").mkdir(parents=True)
    remove_empty_dirs(str(top))
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == [
        "elastic",
        "elastic/run_1",
        "elastic/run_1/attempt_0",
        "elastic/run_1/attempt_0/1",
        "elastic/run_1/attempt_0/1/error.json",
    ]
    (top / "run_1" / "attempt_0" / "1" / "error.json").unlink()
    remove_empty_dirs(str(top))
    assert list(tmp_path.iterdir()) == []
    remove_empty_dirs(str(top))  # gone already: nothing to do


def test_an_srun_step_of_several_tasks_is_a_group_and_a_batch_script_is_not():
    step = {
        "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
        "SLURM_STEP_NODELIST": "gpu7",
        "SLURM_JOB_ID": "123456",
    }
    info = from_slurm_step(step)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (5, 8, 1, 4)
    assert (info.master_addr, info.master_port) == ("gpu7", 20000 + 123456 % 10000)
    # What a batch script sees: the job's tasks but no step of its own.
    assert launched_rank({"SLURM_NTASKS": "8", "SLURM_PROCID": "0", "SLURM_JOB_ID": "1"}) is None


def test_learners_set_to_another_count_than_the_launcher_started_is_refused():
    info = launched_rank(TORCHRUN)
    check_learners(1, info)
    check_learners(2, info)
    with pytest.raises(ConfigError, match="hardware.learners=4 but .* started 2 ranks"):
        check_learners(4, info)


def test_each_rank_takes_every_nth_actor_slot_so_hosts_spread_over_ranks():
    slots = [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)]
    assert rank_share(slots, 0, 2) == [("a", 0), ("b", 0), ("c", 0)]
    assert rank_share(slots, 1, 2) == [("a", 1), ("b", 1)]


def test_a_rank_s_gpu_is_its_local_rank_or_the_one_gpu_it_was_given():
    assert rank_device("cuda", 3, 8) == "cuda:3"
    assert rank_device("cuda:0", 3, 8) == "cuda:3"
    assert rank_device("cuda", 3, 1) == "cuda:0"  # srun --gpus-per-task=1
    assert rank_device("cpu", 3, 0) == "cpu"
    with pytest.raises(ConfigError, match="shows 2"):
        rank_device("cuda", 3, 2)


def test_a_rank_runs_rank_0_s_config_with_its_own_seed_port_and_device():
    cfg = compose(["broker.port=5555", "seed=7"])
    info = dataclasses.replace(launched_rank(TORCHRUN), rank=1, local_rank=1)
    mine = rank_config(cfg, info, cuda_devices=0)
    assert (mine.seed, mine.broker.port, mine.hardware.learners) == (7 + SEED_STRIDE, 5556, 2)
    assert rank_config(cfg, dataclasses.replace(info, rank=0, local_rank=0), 0).seed == 7
    sharded = compose(["broker.port=5555", "broker.shards=3"])
    ports = [
        rank_config(sharded, dataclasses.replace(info, local_rank=r), 0).broker.port for r in (0, 1)
    ]
    assert ports == [5555, 5558]  # rank 0's shards take 5555-5557, rank 1's 5558-5560


def test_a_learner_host_runs_in_the_run_dir_whatever_its_name():
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from seedq.launch.learner_hosts import host_script

    torchrun = ["python3", "-m", "torch.distributed.run"]
    script = host_script(compose([]), torchrun, ["env=gym"], "/runs/a,b")
    # Unquoted, Hydra took the folder with a comma for a sweep and every rank was refused.
    given = OverridesParser.create().parse_override(shlex.split(script.splitlines()[-1])[-1])
    assert (given.key_or_group, given.value()) == ("hydra.run.dir", "/runs/a,b")


def seeds_run_by_each_rank(monkeypatch, state: dict | None) -> list[int]:
    """The seed of the config each of two ranks runs (``rank_main`` with a stand-in process
    group that hands rank 0's broadcast to rank 1), rank 0 resuming ``state``."""
    import seedq.arch
    import seedq.learner_ranks as learner_ranks
    import seedq.parallel.agreement as agreement
    import seedq.parallel.group as group

    cfg = compose(["seed=7", "hardware.learners=2"])
    sent: list = []
    ran: list[int] = []

    class Group:
        def __init__(self, info, device, timeout_s):
            self.rank, self.world_size, self.lost, self.backend = info.rank, 2, False, "gloo"

        def broadcast_object(self, value):
            if self.rank == 0:
                sent.append(value)
                return value
            return sent[0]

        def align_agent(self, agent):
            pass

        def close(self):
            pass

    class Run:
        def __init__(self, config, run_dir, resume):
            ran.append(config.seed)
            self.agent = None

        def run(self):
            return None

    monkeypatch.setattr(group, "LearnerGroup", Group)
    monkeypatch.setattr(agreement, "RankAgreement", lambda g: SimpleNamespace(stopped_together=0))
    monkeypatch.setattr(seedq.arch, "run_class", lambda name: Run)
    monkeypatch.setattr(learner_ranks, "interrupt_once", lambda: None)
    monkeypatch.setattr(learner_ranks, "log_to_rank_file", lambda rank, run_dir: None)
    info = dataclasses.replace(launched_rank(TORCHRUN), rank=0, local_rank=0)
    for rank in (0, 1):
        me = dataclasses.replace(info, rank=rank, local_rank=rank)
        learner_ranks.rank_main(me, cfg.hardware, lambda: (cfg, state))
    return ran


def test_a_resumed_start_seeds_every_rank_where_no_earlier_start_did(monkeypatch):
    first = seeds_run_by_each_rank(monkeypatch, None)
    resumed = seeds_run_by_each_rank(monkeypatch, {"env_steps": 846_784})
    # Rank 0 keeps the run's seed (its run derives the resumed env seed from the checkpoint's
    # steps); rank 1 counts its steps from 0, so it needs a seed of this start's own: with its
    # first start's it replayed that start's episode starts and action samples at every resume.
    assert first == [7, 7 + SEED_STRIDE]
    assert resumed[0] == 7
    assert resumed[1] not in (first[1], resumed[0])


def test_recent_episodes_are_pooled_newest_first_one_rank_after_another():
    many = (list(range(200)), list(range(200)))
    few = ([-1.0, -2.0], [1, 2])
    returns, lengths = pool_recent([many, few])
    assert len(returns) == RECENT and len(lengths) == RECENT
    assert returns[-2:] == [-2.0, 199] and -1.0 in returns
    assert pool_recent([([], []), ([], [])]) == ([], [])


def failed(exitcode: int, pid: int, message: str = "") -> SimpleNamespace:
    """A rank's failure as torch's launcher reports it (``ProcessFailure``'s fields)."""
    name = "SIGKILL" if exitcode == -9 else ""
    return SimpleNamespace(exitcode=exitcode, pid=pid, message=message, signal_name=lambda: name)


def saved_checkpoint(run_dir: Path) -> None:
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "ckpt-000000004096.pt").write_bytes(b"")


def test_the_failure_message_names_the_rank_that_died_not_those_that_lost_it(tmp_path):
    saved_checkpoint(tmp_path)
    failures = {0: failed(EXIT_RANK_LOST, 40), 1: failed(-9, 41)}
    message = describe_failure(SimpleNamespace(failures=failures), str(tmp_path), 2)
    assert message.startswith(f"learner rank 1 (pid 41) on {os.uname().nodename} was killed by")
    assert "the other ranks (0) were stopped" in message
    assert f"seedq-train resume={tmp_path} continues it" in message


def test_rank_0_killed_before_a_checkpoint_names_the_stopped_ranks_and_offers_no_resume(tmp_path):
    # The launcher reports rank 0 alone; it said "the other ranks (none)" and gave a resume=
    # command that was then refused ("no checkpoint there").
    message = describe_failure(SimpleNamespace(failures={0: failed(-9, 40)}), str(tmp_path), 3)
    assert "the other ranks (1, 2) were stopped" in message
    assert "resume=" not in message and "newest checkpoint" not in message
    assert "Nothing was saved (no checkpoint yet): the same command starts the run again" in (
        message
    )


def test_metrics_without_a_checkpoint_are_started_over_with_resume_auto(tmp_path):
    (tmp_path / "metrics.csv").write_text("env_steps,return_mean\n512,3.0\n")
    message = describe_failure(SimpleNamespace(failures={1: failed(-9, 41)}), str(tmp_path), 2)
    assert f"the same command with resume=auto and run_dir={tmp_path} starts the run again" in (
        message
    )


def test_a_stop_while_the_ranks_start_says_nothing_was_saved(tmp_path):
    message = cli.stopped_ranks_message("SIGTERM", str(tmp_path))
    assert "rank 0 saving a checkpoint" not in message and "continues the run" not in message
    assert "before the learner ranks saved a checkpoint (exit status 75)" in message
    saved_checkpoint(tmp_path)
    assert "resume=auto and run_dir=" in cli.stopped_ranks_message("SIGTERM", str(tmp_path))


def test_a_rank_that_refused_makes_a_refusal_with_its_reason(tmp_path, monkeypatch):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    leave_reason("1 actor slot(s) for 2 learner ranks")
    refused = ProcessFailure(1, pid=41, exitcode=EXIT_REFUSED, error_file=str(error_file))
    failures = {0: failed(EXIT_RANK_LOST, 40), 1: refused}
    error = launch_error(SimpleNamespace(failures=failures), str(tmp_path), 2)
    assert isinstance(error, LearnersRefused)
    assert str(error).endswith("refused the run: 1 actor slot(s) for 2 learner ranks")
    assert isinstance(
        launch_error(SimpleNamespace(failures={1: failed(-9, 41)}), str(tmp_path), 2),
        LearnersFailed,
    )
    stopped = {0: failed(EXIT_STOPPED, 40), 1: failed(EXIT_STOPPED, 41)}
    assert isinstance(launch_error(SimpleNamespace(failures=stopped), "", 2), LearnersStopped)


def test_seedq_train_exits_2_when_a_rank_refused(monkeypatch):
    def refuse(config):
        raise LearnersRefused("learner rank 1 (pid 41) on vm refused the run: too few slots")

    monkeypatch.setattr("seedq.learner_ranks.start_learners", refuse)
    config = SimpleNamespace(launcher=SimpleNamespace(learner_hosts=[]), run_dir="/runs/x")
    with pytest.raises(SystemExit) as exited:
        cli.start_learners(config, [])
    assert exited.value.code == EXIT_REFUSED


def test_more_ranks_than_cores_on_one_machine_are_refused_naming_the_count():
    check_ranks_fit(2, 2)
    with pytest.raises(
        ConfigError,
        match="hardware.learners=64 would start 64 learner ranks on "
        "this machine's 2 usable cores.*hardware.learners=2 or fewer",
    ):
        check_ranks_fit(64, 2)


def test_seedq_train_refuses_more_ranks_than_cores_before_starting_any(tmp_path):
    too_many = usable_cores() + 1
    result = run_cli(
        f"hardware.learners={too_many}", "env=fake", f"run_dir={tmp_path / 'run'}", timeout=60
    )
    assert result.returncode == 2, result.stdout[-3000:]
    assert f"hardware.learners={too_many} would start {too_many} learner ranks" in result.stdout
    assert "starting" not in result.stdout and not (tmp_path / "run").exists()


def test_sac_with_observation_statistics_on_several_ranks_is_refused():
    with pytest.raises(ConfigError, match="obs_norm=true would let hardware.learners=2"):
        compose(
            [
                "algorithm=sac",
                "env=gym",
                "env.id=Pendulum-v1",
                "hardware.learners=2",
                "algorithm.model.obs_norm=true",
            ]
        )


def quick_run(run_dir: Path, *extra: str) -> list[str]:
    return [*COMMON, *algorithm_case("vtrace"), f"hydra.run.dir={run_dir}", *extra]


def test_torchrun_starts_the_ranks_as_one_run(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            # torchrun's own folders (else a torchelastic_* folder in the temp dir per run)
            f"--log-dir={tmp_path / 'elastic'}",
            "-m",
            "seedq.cli",
            *quick_run(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": TREE},
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 learner ranks (gloo, cpu) started by torch's launcher" in result.stdout
    assert "weights identical on all 2 learner ranks" in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["updates"] >= 50
    assert (tmp_path / "metrics.csv").read_text().count("wall_time,") == 1
    # Rank 0 held the run dir (the lock's file names its pid; the lock ended with it).
    assert (tmp_path / ".seedq.lock").read_text().strip().isdigit()


@needs_slurm
def test_the_learners_batch_script_runs_one_rank_per_task_of_its_srun_step(tmp_path):
    # The batch script's #SBATCH lines ask for GPUs; run as a shell script inside an
    # allocation of two tasks, its srun makes the two ranks.
    script = str(Path(TREE) / "scripts" / "slurm" / "learners.sbatch")
    env = {
        **outside_slurm(),
        "PYTHONPATH": TREE,
        "SEEDQ_HARDWARE": "hardware=cpu",
        "SEEDQ_RUN_DIR": str(tmp_path),
    }
    overrides = [*COMMON, *algorithm_case("vtrace"), "actor.transport=tcp", "launcher=slurm"]
    result = subprocess.run(
        ["salloc", "-N1", "-n2", "--time=5", "--immediate=60", "bash", script, *overrides],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=400,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 learner ranks (gloo, cpu) started by slurm" in result.stdout
    assert "weights identical on all 2 learner ranks" in result.stdout
    # Each rank ran its share of the allocation's two actor slots as a job step.
    node = os.uname().nodename.split(".")[0]
    assert sorted(p.name for p in (tmp_path / "actors").glob("*.log")) == [
        f"{node}-0.log",
        f"{node}-1.log",
    ]


@pytest.fixture
def learner_hosts(tmp_path):
    key = user_key(tmp_path)
    a, b = SshdHost(tmp_path / "host-a", key), SshdHost(tmp_path / "host-b", key)
    config = client_config(tmp_path, key, {"learner-a": a, "learner-b": b})
    yield config
    for host in (a, b):
        host.kill()


@needs_sshd
def test_ssh_starts_torchrun_on_each_learner_host(tmp_path, learner_hosts):
    run_dir = tmp_path / "run"
    scratch = tmp_path / "hosts-tmp"  # the hosts' temp dir
    scratch.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "seedq.cli",
            "hardware.learners=2",
            "launcher.learner_hosts=[learner-a,learner-b]",
            "launcher.learner_port=29531",
            f"launcher.ssh_args=[-F,{learner_hosts}]",
            f"+launcher.env={{PYTHONPATH:'{TREE}',TMPDIR:'{scratch}'}}",
            *quick_run(run_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=400,
        env={**os.environ, "PYTHONPATH": TREE},
    )
    logs = {p.name: p.read_text() for p in (run_dir / "learners").glob("*.log")}
    assert result.returncode == 0, result.stdout[-2000:] + str(logs)[-3000:]
    # Each host's torchrun output streams into its own log; rank 0 (host a) writes the run.
    assert "weights identical on all 2 learner ranks" in logs["learner-a.log"]
    assert "learner rank 0 of 2" not in logs["learner-b.log"]
    reports = rank_reports(run_dir)
    assert reports[0]["digest"] == reports[1]["digest"]
    assert reports[0]["updates"] >= 50
    # torchrun's own folders are in the run dir, not one per run in each host's temp dir.
    assert list(scratch.glob("torchelastic_*")) == []
    assert (run_dir / "learners" / "elastic").is_dir()


def test_rank_reports_reads_rank_logs(tmp_path):
    (tmp_path / "learners").mkdir()
    (tmp_path / "learners" / "rank-0.log").write_text(
        "learner rank 0 of 2: 7 updates, 10 env steps counted here, weights digest ab12\n"
    )
    assert rank_reports(tmp_path) == {0: {"updates": 7, "steps": 10, "digest": "ab12"}}


STUCK_RANK = """
import time, torch, seedq.parallel.group as g
from seedq.parallel.ranks import RankInfo
g.LOST_EXIT_S = 1.0
group = g.LearnerGroup(RankInfo(0, 1, 0, 1, "127.0.0.1", {port}, "test"), torch.device("cpu"), 30)
try:
    group.call("a test", lambda: (_ for _ in ()).throw(RuntimeError("peer gone")))
except g.LearnerRankLost as exc:
    print("lost:", exc, flush=True)
time.sleep(60)  # stuck in its orderly stop (a teardown waiting on the dead peer)
"""


def test_a_rank_stuck_after_losing_the_others_exits_by_itself():
    from ssh_hosts import free_port

    result = subprocess.run(
        [sys.executable, "-c", STUCK_RANK.format(port=free_port())],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": TREE},
    )
    assert result.returncode == EXIT_RANK_LOST, result.stdout + result.stderr
    assert "lost the other ranks during a test (peer gone)" in result.stdout
    assert "did not stop within 1 s of losing the others" in result.stderr


def test_a_stop_signal_after_the_ranks_stopped_is_noted_not_a_kill(monkeypatch, caplog):
    # torch's launcher gave SIGTERM back to its default as the ranks ended: a scheduler's second
    # SIGTERM, as seedq-train exited 75 with the ranks' checkpoint, made its status 143.
    import logging
    import os
    import signal

    from seedq.learner_ranks import LearnersStopped

    def stopped(config):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as torch's launcher leaves it
        raise LearnersStopped("SIGTERM")

    monkeypatch.setattr("seedq.learner_ranks.start_learners", stopped)
    config = SimpleNamespace(launcher=SimpleNamespace(learner_hosts=[]), run_dir="/runs/x")
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1)
    try:
        with pytest.raises(SystemExit) as exited, caplog.at_level(logging.INFO, logger="seedq"):
            try:
                cli.start_learners(config, [], quiet_after=True)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # noted, not this process's end
        assert exited.value.code == 75
        assert "SIGTERM after the run ended: it exits as it is" in caplog.text
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGUSR1, before[1])
        signal.signal(signal.SIGINT, signal.default_int_handler)
