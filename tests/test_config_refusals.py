"""Config values seedq took silently or crashed on later are refused at start, in one line.

Each was found by an audit: a key that named another group's option than the one chosen, a key
the chosen launcher or architecture never reads, inf where a finite number is needed, and
values that passed validation to raise (or segfault) once the run started.
"""

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from hydra import compose, initialize_config_dir

from seedq.agents.common.replay import SequenceReplay, SumTree
from seedq.command_keys import key_refusal
from seedq.config import register_configs, validate
from seedq.schema import ConfigError

CONF_DIR = str(Path(__file__).resolve().parents[1] / "seedq" / "conf")

register_configs()


def compose_config(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=["run_dir=/tmp/seedq-test", *overrides])


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        validate(compose_config(*overrides))
    return str(caught.value)


@pytest.mark.parametrize(
    "overrides, says",
    [
        # Exited 0 without anakin.yaml's preset (hardware.num_threads=0, its arch_tuning).
        (["arch.name=anakin"], "arch.name=anakin comes with arch=anakin"),
        (["arch=anakin", "arch.name=seed"], "this run is arch=anakin: write arch=seed"),
        # ConfigAttributeError: Key 'log_std' not in 'VTraceConfig'.
        (["algorithm.name=ppo"], "this run is algorithm=vtrace: write algorithm=ppo"),
        (["algorithm.name=sac"], "write algorithm=sac"),
    ],
)
def test_a_group_name_key_set_apart_from_its_group_is_refused(overrides, says):
    assert says in refusal(*overrides)


@pytest.mark.parametrize("option", ["seed", "sebulba", "anakin"])
def test_each_arch_option_names_itself(option):
    validate(compose_config(f"arch={option}", f"arch.name={option}"))


def test_choosing_the_algorithm_group_names_it():
    validate(compose_config("algorithm=ppo", "algorithm.name=ppo"))


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["launcher.hosts=[a,b]"], "launcher.hosts=[a,b] is read by launcher=ssh and"),
        (["launcher.actors_per_host=8"], "this run is launcher=local, which would ignore it"),
        (["launcher=ssh", "launcher.hosts=[a]", "launcher.srun_args=['--mem=1G']"], "srun_args"),
        # Ran locally, without a word: only arch=seed starts actor processes.
        (["arch=sebulba", "launcher=ssh", "launcher.hosts=[x]"], "arch=sebulba has none"),
        (["arch=anakin", "launcher=slurm"], "launcher=slurm starts actor processes"),
        (["launcher.learner_hosts=[a,b]"], "with hardware.learners=1 the one learner runs here"),
        # Accepted, and both of h1's actors wrote one log file, actors/h1-0.log.
        (["launcher=ssh", "launcher.hosts=[h1,h2,h1]"], "launcher.hosts names h1 more than once"),
    ],
)
def test_a_launcher_key_nothing_will_act_on_is_refused(overrides, says):
    assert says in refusal(*overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        ["launcher=ssh", "launcher.hosts=[a,b]", "launcher.actors_per_host=8"],
        ["launcher=slurm", "launcher.hosts=[node1]"],
        # Keys at their defaults are no request.
        ["arch=sebulba", "launcher.hosts=[]", "launcher.actors_per_host=0"],
        ["hardware.learners=2", "launcher.learner_hosts=[a,b]"],
    ],
)
def test_launcher_keys_the_launcher_reads_pass(overrides):
    validate(compose_config(*overrides))


def test_learner_ranks_whose_broker_ports_pass_65535_are_refused():
    # Rank 1 of hardware.learners=2 broker.port=65535 failed to bind 65536: exit 3, 15 s in.
    says = refusal("hardware.learners=2", "broker.port=65535")
    assert "reach port 65536" in says and "at most 65534, or 0" in says
    says = refusal("hardware.learners=2", "broker.shards=2", "broker.port=65533")
    assert "reach port 65536" in says and "at most 65532" in says
    validate(compose_config("hardware.learners=2", "broker.shards=2", "broker.port=65532"))
    # Two learner hosts, one rank each: each host's rank takes broker.port alone.
    validate(
        compose_config("hardware.learners=2", "launcher.learner_hosts=[a,b]", "broker.port=65535")
    )


@pytest.mark.parametrize("algorithm", ["vtrace", "ppo"])
def test_saving_the_replay_of_an_algorithm_without_one_is_refused(algorithm):
    # Accepted without a word: nothing was saved, and a resume refilled nothing either way.
    says = refusal(f"algorithm={algorithm}", "checkpoint.replay=true")
    assert f"algorithm={algorithm} keeps none" in says and "drop the key" in says


@pytest.mark.parametrize(
    "overrides", [["algorithm=r2d2"], ["algorithm=sac", "env=gym", "env.id=Pendulum-v1"]]
)
def test_saving_the_replay_of_a_replay_algorithm_passes(overrides):
    from seedq.cli import to_config  # sized to this machine, as R2D2's eval batches need

    assert to_config(compose_config(*overrides, "checkpoint.replay=true"))


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["algorithm.lr=inf"], "algorithm.lr=inf"),
        (["algorithm.adam_eps=inf"], "algorithm.adam_eps=inf"),
        (["algorithm.entropy_cost=inf"], "algorithm.entropy_cost=inf"),
        (["algorithm.grad_clip=-inf"], "algorithm.grad_clip=-inf"),
        (["max_minutes=inf"], "max_minutes=inf"),
        (["algorithm=ppo", "algorithm.value_clip=inf"], "algorithm.value_clip=inf"),
        (["algorithm=ppo", "algorithm.init_log_std=inf"], "algorithm.init_log_std=inf"),
    ],
)
def test_infinity_is_refused_where_a_finite_number_is_needed(overrides, key):
    assert key in refusal(*overrides) and "finite" in refusal(*overrides)


@pytest.mark.parametrize(
    "overrides, key",
    [
        # ValueError in the V-trace loss at the first update.
        (["algorithm.clip_rho_threshold=-1"], "algorithm.clip_rho_threshold=-1.0"),
        (["algorithm.clip_pg_rho_threshold=-5"], "algorithm.clip_pg_rho_threshold=-5.0"),
        # torch's RMSprop refuses these at the first update, or steps to NaN.
        (["algorithm.optimizer=rmsprop", "algorithm.rmsprop_eps=-1"], "algorithm.rmsprop_eps"),
        (["algorithm.optimizer=rmsprop", "algorithm.rmsprop_momentum=-1"], "rmsprop_momentum"),
        (["algorithm.optimizer=rmsprop", "algorithm.rmsprop_alpha=-1"], "rmsprop_alpha=-1.0"),
        (["algorithm.optimizer=rmsprop", "algorithm.rmsprop_alpha=2"], "rmsprop_alpha=2.0"),
        # sys.setswitchinterval refuses 0 as the learner starts.
        (["hardware.gil_switch_interval_s=0"], "hardware.gil_switch_interval_s=0"),
        (["hardware.gil_switch_interval_s=-1"], "hardware.gil_switch_interval_s=-1"),
        # OverflowError setting ZMQ_MAXMSGSIZE, and from ctypes' mallopt.
        (["broker.max_message_bytes=100000000000000000000"], "broker.max_message_bytes"),
        (["hardware.keep_freed_mb=1000000000000000"], "hardware.keep_freed_mb"),
        # A segmentation fault in torch.set_num_threads.
        (["hardware.num_threads=1000000"], "at most 1024 torch threads"),
        (["hardware.train_threads=1000000"], "hardware.train_threads=1000000"),
        # ZeroMQ aborted the learner (or each shard process): "Too many open files".
        (["broker.io_threads=100000"], "broker.io_threads=100000"),
        # Every n-step target quietly cut to the sequence's 5 trained transitions.
        (
            [
                "algorithm=r2d2",
                "algorithm.n_step=10",
                "algorithm.sequence_length=5",
                "algorithm.burn_in=0",
            ],
            "algorithm.n_step=10 is more than algorithm.sequence_length=5",
        ),
        # Actors crashed in a loop encoding their first step.
        (["env=fake", "env.obs_dtype=complex64"], "env.obs_dtype='complex64' cannot travel"),
    ],
)
def test_a_value_that_failed_after_start_is_refused_before(overrides, key):
    assert key in refusal(*overrides)


def test_an_n_step_of_the_whole_sequence_passes():
    validate(
        compose_config(
            "algorithm=r2d2",
            "algorithm.n_step=5",
            "algorithm.sequence_length=5",
            "algorithm.burn_in=0",
            "actor.num_actors=2",  # sized at start otherwise; R2D2 needs an env batch to explore
        )
    )


def test_the_replay_size_is_computed_without_building_its_tree():
    # 1e12 sequences: building the SumTree to read its size was a numpy ArrayMemoryError
    # before the memory check could refuse the capacity.
    fields = {"obs": ((3, 4), np.dtype(np.float32))}
    needed = SequenceReplay.bytes_needed(10**12, fields)
    assert needed == 10**12 * (48 + 8) + 2 * 2**40 * 8
    assert SumTree.leaves(5) == SumTree(5).size == 8


@pytest.mark.parametrize("group", ["arch", "hardware", "launcher", "env", "algorithm"])
def test_a_group_set_to_null_is_refused_naming_its_options(group):
    # Hydra's traceback (Config group override must be a string), or for env=null a key
    # reported missing.
    says = key_refusal([f"{group}=null"])
    assert says is not None and says.startswith(f"{group}=null chooses no {group}"), says
    assert "choose one of" in says


def test_logger_null_is_refused_pointing_at_the_empty_list():
    says = key_refusal(["logger=null"])
    assert says is not None and "'logger=[]'" in says and "tensorboard" in says, says
    assert key_refusal(["logger=[]"]) is None


def test_seedq_train_refuses_a_group_name_key_in_one_line(tmp_path):
    result = run_cli("arch.name=anakin", "total_env_steps=2000", f"run_dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "Traceback" not in result.stdout, result.stdout
    assert "arch.name=anakin comes with arch=anakin" in result.stdout
    assert "run finished" not in result.stdout


def test_glibc_is_never_given_a_trim_threshold_past_a_c_int(monkeypatch):
    # ctypes masks a Python int to a C int: 4096 MB reached mallopt as 0 (trim everything).
    from seedq.learner import memory

    given = []

    class Libc:
        def mallopt(self, param, value):
            given.append((param, value))
            return 1

    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: Libc())
    monkeypatch.setattr(memory.sys, "platform", "linux")
    monkeypatch.setattr(memory, "_kept_bytes", memory._kept_bytes)  # the process's budget, kept
    assert memory.keep_freed_memory(4096)
    assert dict(given)[memory.M_TRIM_THRESHOLD] == 2**31 - 1


@pytest.mark.parametrize(
    "argv, says",
    [
        # Each ran without a word: the run used none of them.
        (["arch.sebulba.threads=4"], "arch.sebulba.threads is read by arch=sebulba only"),
        (["arch=sebulba", "arch.anakin.num_envs=64"], "this run is arch=sebulba"),
        (["arch=anakin", "actor.num_actors=4"], "counterpart here is arch.anakin.num_envs"),
        (["arch=anakin", "broker.deadline_ms=2"], "broker.deadline_ms is read by arch=seed"),
        (["arch=sebulba", "actor.envs_per_batch=8"], "is arch.sebulba.envs_per_thread"),
        (["arch=sebulba", "broker.max_batch=8"], "this run is arch=sebulba"),
        (["arch=sebulba", "actor.max_restarts=1"], "actor.max_restarts is read by arch=seed"),
        (["-m", "arch=seed,sebulba", "arch.sebulba.threads=4"], "this run is arch=seed"),
    ],
)
def test_a_key_the_chosen_arch_never_reads_is_refused(argv, says):
    refused = key_refusal(argv)
    assert refused is not None and says in refused, refused


def test_keys_the_chosen_arch_reads_pass_and_resumed_runs_are_not_checked():
    assert [
        key_refusal(argv)
        for argv in (
            ["arch=sebulba", "arch.sebulba.threads=4", "actor.max_envs=64"],
            ["arch=sebulba", "actor.env_timeout_s=30", "actor.max_rejoins=2"],
            ["arch=anakin", "arch.anakin.num_envs=64"],
            ["actor.num_actors=4", "broker.deadline_ms=2"],
            ["resume=runs/x", "arch.anakin.num_envs=64"],
        )
    ] == [None] * 5


def test_seedq_train_refuses_a_key_of_another_arch_in_one_line(tmp_path):
    result = run_cli("arch.anakin.num_envs=64", f"run_dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "Traceback" not in result.stdout, result.stdout
    assert result.stdout.strip().splitlines() == [
        "seedq-train: arch.anakin.num_envs is read by arch=anakin only; this run is arch=seed, "
        "which would ignore it (drop the key, or choose the arch that reads it)"
    ]
    assert not (tmp_path / "run").exists()


def test_a_sweep_on_a_launcher_plugin_not_installed_names_the_extra(monkeypatch):
    """getting-started's `seedq-train -m hydra/launcher=submitit_slurm seed=0,1,2` without
    seedq[slurm] got Hydra's "Could not find 'hydra/launcher/submitit_slurm'", listing basic
    and joblib, with nothing on how to get it."""
    import importlib.util

    from seedq.command_keys import missing_launcher

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    said = missing_launcher(["-m", "hydra/launcher=submitit_slurm", "seed=0,1,2"])
    assert said == (
        "hydra/launcher=submitit_slurm needs Hydra's submitit launcher, which is not "
        "installed: pip install 'seedq[slurm]'"
    )


@pytest.mark.parametrize("advertised", ["tcp://learner.example", "learner:5555", "fe80::1", "a b"])
def test_an_advertise_host_actors_cannot_dial_is_refused(advertised):
    # Each made an endpoint no actor connects to: every actor waited actor.reply_timeout_s.
    says = f"broker.advertise_host={advertised!r} is not a host name or IPv4 address"
    assert says in refusal(f"broker.advertise_host='{advertised}'")


def test_a_host_name_or_ipv4_address_is_advertised():
    for advertised in ("learner.example", "10.0.0.5", "ib-cpu1"):
        validate(compose_config(f"broker.advertise_host={advertised}"))


@pytest.mark.parametrize("override", ["env.kwargs.map_name=8x8", "launcher.env.OMP_NUM_THREADS=1"])
def test_a_new_entry_of_a_mapping_key_without_plus_names_the_plus(override):
    # Hydra's answer was "Key 'map_name' is not in struct" with its config's types.
    says = key_refusal(["env=gym", "env.id=FrozenLake-v1", override])
    assert says is not None and says.endswith(f"Hydra adds one with +: +{override}")
    assert key_refusal(["env=gym", "env.id=FrozenLake-v1", f"+{override}"]) is None


@pytest.mark.parametrize("family", ["cartpole", "gym", "mujoco", "atari"])
def test_an_empty_env_id_is_refused_as_empty(family):
    # gymnasium's "Malformed environment ID: ." (or "unknown Atari env id ''") came instead.
    assert refusal(f"env={family}", "env.id=").startswith(
        f"env.id is empty: give env={family} the id of an env"
    )
