"""Runs sized to the machine (issue 34): actor processes, Sebulba's threads and each vector env's
threads from the cores this process may use, with fake core counts."""

import logging

import pytest
from test_config import compose_config

from seedq.actor.config import ActorConfig
from seedq.agents.config import batch_of_envs
from seedq.agents.vtrace.config import VTraceConfig
from seedq.cli import to_config
from seedq.config import SeedqConfig
from seedq.cores import cgroup_quota_cores, usable_cores
from seedq.envs import AtariConfig
from seedq.envs.base import vector_env_threads
from seedq.launch.sizing import Sizes, plan_sizes, size_config, size_run, sized
from seedq.schema import ConfigError


@pytest.mark.parametrize(
    ("cores", "actors", "env_threads"),
    [
        (16, 14, 1),  # the H100 machine: 14 actors was the hand-found best there
        (64, 62, 1),
        (4, 2, 1),
        (3, 2, 3),  # fewer spare cores than actors: one thread per core in each env, as before
        (2, 2, 2),  # this box: today's 2 actors
        (1, 2, 1),
    ],
)
def test_actors_take_the_cores_the_learner_leaves(cores, actors, env_threads):
    sizes = plan_sizes(cores)
    assert (sizes.num_actors, sizes.env_threads) == (actors, env_threads)


def test_sebulba_threads_take_the_cores_the_learner_leaves():
    sizes = plan_sizes(16, arch="sebulba", envs_per_vector_env=32)
    assert (sizes.sebulba_threads, sizes.env_threads) == (14, 1)


def test_fewer_actors_than_cores_get_more_threads_each_up_to_one_per_env():
    assert plan_sizes(32, num_actors=6).env_threads == 5  # 30 spare cores // 6 actors
    assert plan_sizes(64, num_actors=2, envs_per_vector_env=16).env_threads == 16


def test_a_cap_on_envs_leaves_fewer_workers_and_gives_the_cores_to_their_threads():
    assert plan_sizes(16, max_actors=2) == Sizes(16, 2, 2, 14, 7)  # 14 spare cores // 2
    sebulba = plan_sizes(16, arch="sebulba", max_sebulba_threads=3, envs_per_vector_env=32)
    assert (sebulba.sebulba_threads, sebulba.env_threads) == (3, 4)
    # Not above the sized count, and a set count is kept whatever the cap.
    assert plan_sizes(4, max_actors=8).num_actors == 2
    assert plan_sizes(16, num_actors=6, max_actors=2).num_actors == 6


def test_set_values_are_kept():
    sizes = plan_sizes(16, num_actors=3, sebulba_threads=5, env_threads=7)
    assert (sizes.num_actors, sizes.sebulba_threads, sizes.env_threads) == (3, 5, 7)


def test_broker_shards_are_processes_the_learner_keeps_cores_for():
    sizes = plan_sizes(16, broker_shards=4)
    assert (sizes.learner_threads, sizes.num_actors) == (6, 10)


def test_actors_on_other_hosts_keep_the_floor_and_size_their_own_env_threads():
    sizes = plan_sizes(16, local_actors=False)
    assert (sizes.num_actors, sizes.env_threads) == (2, 0)


def cgroup(tmp_path, v2=None, v1=None):
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(f"{v1[0]}\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(f"{v1[1]}\n")
    return tmp_path


@pytest.mark.parametrize(
    ("v2", "v1", "cores"),
    [
        ("400000 100000", None, 4),  # docker --cpus=4
        ("150000 100000", None, 2),  # 1.5 cores: two threads get time
        ("max 100000", None, 16),  # no quota
        (None, (200000, 100000), 2),  # cgroup v1
        (None, (-1, 100000), 16),  # cgroup v1, no quota
        (None, None, 16),  # no cgroup files at all
        ("6400000 100000", None, 16),  # a quota above the affinity mask
    ],
)
def test_usable_cores_cap_the_affinity_mask_by_the_cgroup_quota(tmp_path, v2, v1, cores):
    assert usable_cores(affinity=16, cgroup_root=cgroup(tmp_path, v2, v1)) == cores


@pytest.mark.parametrize(
    ("proc_cgroup", "own", "quota_in"),
    [
        # systemd-run -p CPUQuota=100%, a Slurm job: a child cgroup of the mount's root.
        ("1:cpu:/seedq.scope", "cpu/seedq.scope", "cpu/seedq.scope"),
        ("4:cpu,cpuacct:/slurm/job_7", "cpu/slurm/job_7", "cpu/slurm"),  # a parent's quota
        ("0::/user.slice/run-1.scope", "user.slice/run-1.scope", "user.slice/run-1.scope"),
        # A container's own cgroup mounted as the root while /proc names it from the host's.
        ("1:cpu:/docker/abc", "cpu", "cpu"),
    ],
)
def test_the_quota_of_the_process_s_own_cgroup_is_read(tmp_path, proc_cgroup, own, quota_in):
    (tmp_path / own).mkdir(parents=True)
    folder = tmp_path / quota_in
    if quota_in.startswith("cpu"):
        (folder / "cpu.cfs_quota_us").write_text("100000\n")
        (folder / "cpu.cfs_period_us").write_text("100000\n")
    else:
        (folder / "cpu.max").write_text("100000 100000\n")
    (tmp_path / "self-cgroup").write_text(f"{proc_cgroup}\n")
    assert usable_cores(16, tmp_path, tmp_path / "self-cgroup") == 1


def test_no_quota_reads_as_none(tmp_path):
    assert cgroup_quota_cores(cgroup(tmp_path, "max 100000")) is None


def test_a_composed_config_is_sized_and_the_choice_logged(caplog):
    cfg = compose_config("env=atari")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        changed = size_config(cfg, cores=16)
    assert changed == {
        "actor.num_actors": 14,
        "arch.sebulba.threads": 14,
        "env.num_threads": 1,
        # The V-trace Atari preset's batch stays 16 unrolls (the 112 envs feed several), in
        # minibatches of 128 of its 16 x 32 transitions.
        "algorithm.minibatches": 4,
    }
    assert (cfg.actor.num_actors, cfg.env.num_threads) == (14, 1)
    assert "actor.num_actors=14" in caplog.text and "env.num_threads=1" in caplog.text
    assert "sized to 16 cores, 2 of them for the learner's threads" in caplog.text


def test_a_share_of_one_core_says_it_shares_it_with_the_learner(caplog):
    # Under the joblib launcher each of two runs on 2 cores gets one: "sized to 1 cores, 2 of
    # them for the learner's threads" read as a contradiction.
    cfg = compose_config("env=atari")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        size_config(cfg, cores=1)
    assert "sized to 1 core, shared with the learner's" in caplog.text


def test_a_family_without_cpp_threads_sizes_the_workers_only(caplog):
    cfg = compose_config("env=catch")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        changed = size_config(cfg, cores=16)
    assert (changed, "num_threads" in caplog.text) == (
        {"actor.num_actors": 14, "arch.sebulba.threads": 14},
        False,
    )


@pytest.mark.parametrize(
    "key",
    [
        "actor.num_actors=-1",
        "arch.sebulba.threads=-1",
        "env.num_threads=-1",
        # The sizing line counted "the learner's 1000000002 threads" before the refusal.
        "broker.shards=1000000000",
        "broker.shards=0",
    ],
)
def test_a_key_out_of_range_is_left_to_validation_and_nothing_is_sized_or_logged(caplog, key):
    cfg = compose_config("env=atari", key)
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        changed = size_config(cfg, cores=16)
    assert (changed, caplog.text, cfg.actor.num_actors == 0) == (
        {},
        "",
        not key.startswith("actor.num_actors"),
    )


def test_the_log_names_the_keys_it_sized_not_those_given(caplog):
    cfg = compose_config("env=atari", "actor.num_actors=3")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        size_config(cfg, cores=16)
    sized_line = next(r.message for r in caplog.records if r.message.startswith("sized to"))
    assert "env.num_threads=" in sized_line and "actor.num_actors" not in sized_line


def test_nothing_is_logged_when_only_a_key_the_arch_does_not_run_was_sized(caplog):
    # SAC's MuJoCo preset sets actor.num_actors=1 and MuJoCo has no C++ env threads: under
    # arch=seed only arch.sebulba.threads was filled in, which the log does not show, and the
    # line read "sized to 2 cores, shared with the learner's 2 threads:  (set a key to ...)".
    cfg = compose_config("env=mujoco", "env.id=Hopper-v5", "algorithm=sac")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        size_config(cfg, cores=2)
    assert cfg.actor.num_actors == 1
    assert [r.message for r in caplog.records if r.message.startswith("sized to")] == []


def test_sebulba_s_line_names_its_threads_not_the_actor_processes_it_does_not_start(caplog):
    cfg = compose_config("env=atari", "arch=sebulba")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        size_config(cfg, cores=16)
    sized_line = next(r.message for r in caplog.records if r.message.startswith("sized to"))
    assert "arch.sebulba.threads=14" in sized_line and "actor.num_actors" not in sized_line


@pytest.mark.parametrize(("actors", "warned"), [(8, False), (9, True), (40, True)])
def test_many_more_local_actor_processes_than_cores_are_warned(caplog, actors, warned):
    cfg = compose_config("env=atari", f"actor.num_actors={actors}")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        size_config(cfg, cores=2)
    assert (f"actor.num_actors={actors} actor processes on 2 cores" in caplog.text) == warned


def test_keys_on_the_command_line_win():
    cfg = compose_config("env=atari", "actor.num_actors=3", "env.num_threads=2")
    size_run(cfg, ["actor.num_actors=3", "env.num_threads=2"], cores=16)
    assert (cfg.actor.num_actors, cfg.env.num_threads) == (3, 2)


@pytest.mark.parametrize("cores", [2, 16, 64])
def test_ppo_atari_preset_runs_the_16_envs_it_was_measured_on_whatever_the_cores(cores, caplog):
    # 16 envs learned Pong several times faster per frame than 112 (docs/results.md); the
    # cores the cap leaves go to each vector env's threads.
    cfg = compose_config("env=atari", "algorithm=ppo")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        size_config(cfg, cores=cores)
    actor = to_config(cfg).actor
    envs = actor.num_actors * actor.batches_per_actor * actor.envs_per_batch
    assert (actor.num_actors, envs) == (2, 16)
    assert cfg.env.num_threads == (2 if cores == 2 else 4)
    assert "at most actor.max_envs=16 envs" in caplog.text


@pytest.mark.parametrize(
    ("overrides", "actors"),
    [
        # Named on the command line, the actors are kept above the preset's cap.
        (["actor.num_actors=14"], 14),
        # A cap below one actor's envs still starts one.
        (["actor.max_envs=4"], 1),
        (["actor.max_envs=0"], 14),
    ],
)
def test_a_cap_on_envs_yields_to_a_named_count_and_keeps_one_actor(overrides, actors, caplog):
    cfg = compose_config("env=atari", "algorithm=ppo", *overrides)
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        size_run(cfg, overrides, cores=16)
    assert cfg.actor.num_actors == actors
    # Only a sized count that misses the cap is warned about, not a named one.
    assert ("is fewer than one" in caplog.text) == (overrides == ["actor.max_envs=4"])


def test_a_cap_below_one_worker_s_envs_is_logged_as_missed(caplog):
    cfg = compose_config("env=atari", "algorithm=ppo", "arch=sebulba")
    with caplog.at_level(logging.INFO, logger="seedq.launch.sizing"):
        size_config(cfg, cores=16)
    # One Sebulba thread of 32 envs, the cap 16: said, not hidden.
    assert cfg.arch.sebulba.threads == 1
    assert "actor.max_envs=16 is fewer than one Sebulba thread's envs: the run steps 32" in (
        caplog.text
    )


def test_a_negative_cap_on_envs_is_refused_by_name():
    cfg = compose_config("env=atari", "actor.max_envs=-1")
    assert size_config(cfg, cores=16)["actor.num_actors"] == 14
    with pytest.raises(ConfigError, match="actor.max_envs"):
        to_config(cfg)


def test_runs_at_once_size_each_run_to_its_share():
    cfg = compose_config("env=procgen", "hardware.runs_at_once=2")
    size_run(cfg, ["hardware.runs_at_once=2"], cores=16)
    assert (cfg.actor.num_actors, cfg.env.num_threads) == (6, 1)  # 8 cores each, 2 learner


@pytest.mark.parametrize(("runs", "env_threads"), [(8, 2), (16, 1)])
def test_a_share_of_few_cores_gives_each_vector_env_the_share_not_the_machine(runs, env_threads):
    # 8 runs on 16 cores: 2 each, fewer than the learner's threads and the 2 actors. The env
    # threads stayed 0, which each actor read as one per core of the machine: 16 threads in
    # every vector env of every run, 512 (or 1,024 at 16 runs) on 16 cores.
    cfg = compose_config("env=atari", f"hardware.runs_at_once={runs}")
    size_run(cfg, [f"hardware.runs_at_once={runs}"], cores=16)
    assert cfg.env.num_threads == env_threads


def test_a_config_built_in_code_is_sized_in_a_copy():
    cfg = SeedqConfig(env=AtariConfig())
    copy = sized(cfg, cores=16)
    assert (cfg.actor.num_actors, copy.actor.num_actors, copy.env.num_threads) == (0, 14, 1)
    assert sized(copy, cores=16) is copy


@pytest.mark.parametrize(("requested", "envs", "threads"), [(3, 16, 3), (32, 16, 16), (1, 1, 1)])
def test_a_vector_env_takes_the_threads_asked_for_up_to_one_per_env(requested, envs, threads):
    assert vector_env_threads(requested, envs) == threads


def test_a_vector_env_without_a_size_takes_one_thread_per_core():
    assert vector_env_threads(0, 1024) == usable_cores()


def test_an_on_policy_batch_of_0_takes_one_unroll_of_every_env_once_the_actors_are_sized():
    cfg = compose_config("env=atari", "algorithm.batch_size=0")
    changed = size_config(cfg, cores=16)
    actor = cfg.actor
    assert (actor.num_actors, actor.batches_per_actor) == (14, 2)
    assert (
        changed["algorithm.batch_size"]
        == cfg.algorithm.batch_size
        == 14 * 2 * (actor.envs_per_batch)
    )
    sebulba = compose_config("env=atari", "arch=sebulba", "algorithm.batch_size=0")
    size_config(sebulba, cores=16)
    assert sebulba.algorithm.batch_size == 14 * sebulba.arch.sebulba.envs_per_thread


def test_a_batch_of_0_in_code_is_sized_and_refused_where_it_means_nothing():
    cfg = SeedqConfig(algorithm=VTraceConfig(batch_size=0))
    copy = sized(cfg, cores=16)
    assert (cfg.algorithm.batch_size, copy.algorithm.batch_size) == (0, 14 * 2 * 16)
    with pytest.raises(ConfigError, match="algorithm.batch_size"):
        to_config(compose_config("algorithm=r2d2", "algorithm.batch_size=0"))


@pytest.mark.parametrize(
    "algorithm, by_envs", [("vtrace", True), ("ppo", True), ("r2d2", False), ("sac", False)]
)
def test_batch_size_0_means_every_env_for_on_policy_algorithms_only(algorithm, by_envs):
    """The class flag, read from the composed (structured) config and from the typed one."""
    env = ["env=gym", "env.id=Pendulum-v1"] if algorithm == "sac" else []
    composed = compose_config(f"algorithm={algorithm}", *env)
    assert batch_of_envs(composed.algorithm) is by_envs
    assert batch_of_envs(to_config(composed).algorithm) is by_envs


@pytest.mark.parametrize(
    ("algorithm", "cores", "batch", "minibatches"),
    [
        # The 2-core box keeps the presets' old 4 minibatches (16 envs).
        ("vtrace", 2, 16, 4),
        ("ppo", 2, 16, 4),
        # 16 cores: V-trace's 112 envs feed batches of 16 unrolls; PPO's preset caps its envs
        # at 16 (actor.max_envs), so it trains the 2-core box's batches. Either way the same
        # transitions per minibatch, so the same updates per frame.
        ("vtrace", 16, 16, 4),
        ("ppo", 16, 16, 4),
        ("ppo", 64, 16, 4),
    ],
)
def test_atari_presets_keep_their_updates_per_frame_on_any_machine(
    algorithm, cores, batch, minibatches
):
    cfg = compose_config("env=atari", f"algorithm={algorithm}")
    size_config(cfg, cores=cores)
    alg = to_config(cfg).algorithm
    assert (alg.batch_size, alg.minibatches) == (batch, minibatches)
    transitions = alg.batch_size * alg.unroll_length
    assert transitions // alg.minibatches == alg.minibatch_size


@pytest.mark.parametrize(
    ("overrides", "minibatches"),
    [
        # Not a whole number of shares: the floor, each share a little larger.
        (
            [
                "algorithm.batch_size=10",
                "algorithm.unroll_length=20",
                "algorithm.minibatch_size=64",
            ],
            3,
        ),
        # Larger than the batch: one.
        (
            ["algorithm.batch_size=2", "algorithm.unroll_length=8", "algorithm.minibatch_size=999"],
            1,
        ),
        # A recurrent model splits whole env columns: 64 transitions are 4 columns of 16.
        (
            [
                "algorithm.batch_size=12",
                "algorithm.unroll_length=16",
                "algorithm.minibatch_size=64",
                "algorithm.model.use_lstm=true",
            ],
            3,
        ),
        # V-trace without shuffling splits by column too.
        (
            [
                "algorithm.batch_size=12",
                "algorithm.unroll_length=16",
                "algorithm.minibatch_size=64",
                "algorithm.shuffle_transitions=false",
            ],
            3,
        ),
    ],
)
def test_minibatches_0_are_shares_of_minibatch_size_transitions(overrides, minibatches):
    cfg = compose_config("algorithm.minibatches=0", *overrides)
    changed = size_config(cfg, cores=2)
    assert changed["algorithm.minibatches"] == minibatches
    assert to_config(cfg).algorithm.minibatches == minibatches


def test_a_number_of_minibatches_wins_over_minibatch_size():
    cfg = compose_config("env=atari", "algorithm.minibatches=8")
    size_config(cfg, cores=16)
    assert (cfg.algorithm.minibatches, cfg.algorithm.minibatch_size) == (8, 128)


@pytest.mark.parametrize("algorithm", ["vtrace", "ppo"])
def test_minibatches_0_without_a_minibatch_size_is_refused_by_name(algorithm):
    cfg = compose_config(f"algorithm={algorithm}", "algorithm.minibatches=0")
    with pytest.raises(ConfigError, match="algorithm.minibatch_size"):
        to_config(cfg)
    with pytest.raises(ConfigError, match="algorithm.minibatch_size"):
        to_config(compose_config(f"algorithm={algorithm}", "algorithm.minibatch_size=-1"))


def test_minibatches_0_in_code_are_sized_in_the_copy():
    cfg = SeedqConfig(
        algorithm=VTraceConfig(batch_size=8, unroll_length=16, minibatches=0, minibatch_size=32),
        actor=ActorConfig(num_actors=2),
    )
    copy = sized(cfg, cores=2)
    assert (cfg.algorithm.minibatches, copy.algorithm.minibatches) == (0, 4)


@pytest.mark.parametrize("env", [["env=gym", "env.id=Pendulum-v1"], ["env=mujoco"]])
def test_sacs_four_envs_are_four_on_sebulba_too(env):
    # The preset's 4 envs (one update per env step: more envs only slow each episode) were
    # the SEED path's alone: arch=sebulba stepped its default, threads x 32 envs.
    cfg = compose_config("algorithm=sac", *env, "arch=sebulba")
    size_config(cfg, cores=16)
    assert (cfg.arch.sebulba.threads, cfg.arch.sebulba.envs_per_thread) == (1, 4)
    seed = compose_config("algorithm=sac", *env)
    size_config(seed, cores=16)
    assert (seed.actor.num_actors, seed.actor.batches_per_actor, seed.actor.envs_per_batch) == (
        1,
        1,
        4,
    )
