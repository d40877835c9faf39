"""Hydra composition of every config group combination, and validation of bad values."""

import itertools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import seedq
from seedq.cli import to_config
from seedq.config import ConfigError, SeedqConfig, register_configs
from seedq.launch.sharing import fit_to_share, runs_at_once

CONF_DIR = str(Path(seedq.__file__).parent / "conf")
GROUPS = {
    "algorithm": ["vtrace", "r2d2", "ppo"],
    "env": ["cartpole", "atari", "gym", "football"],
    "hardware": ["cpu", "gpu"],
    "launcher": ["local", "slurm"],
}

register_configs()


def compose_config(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["run_dir=/tmp/seedq-test", *overrides])
    return cfg


@pytest.mark.parametrize(
    "choice",
    [dict(zip(GROUPS, combo, strict=True)) for combo in itertools.product(*GROUPS.values())],
    ids=lambda c: "-".join(c.values()),
)
def test_every_group_combination_composes_and_validates(choice):
    cfg = compose_config(*(f"{group}={option}" for group, option in choice.items()))
    config = to_config(cfg)
    assert isinstance(config, SeedqConfig)


def test_defaults_train_vtrace_on_cartpole_on_the_cpu():
    config = to_config(compose_config())
    assert (config.algorithm.name, config.env.id, config.hardware.device) == (
        "vtrace",
        "CartPole-v1",
        "cpu",
    )


def test_atari_group_sets_deepmind_preprocessing():
    env = to_config(compose_config("env=atari", "env.id=ALE/Breakout-v5")).env
    # Episodic life as DeepMind, CleanRL and Sample Factory train Atari (scores count games).
    assert (env.id, env.frame_skip, env.frame_stack, env.screen_size, env.episodic_life) == (
        "ALE/Breakout-v5",
        4,
        4,
        84,
        True,
    )


def test_atari_tuning_clips_rewards_and_the_command_line_still_wins():
    tuned = to_config(compose_config("env=atari")).algorithm
    overridden = to_config(compose_config("env=atari", "algorithm.lr=0.002")).algorithm
    plain = to_config(compose_config()).algorithm
    assert (tuned.reward_clip, tuned.lr, overridden.lr, plain.reward_clip, plain.lr) == (
        "abs_one",
        0.00025,
        0.002,
        "none",
        0.001,
    )
    # V-trace's clip on Atari (docs/results.md, "V-trace's clip at 0.2"); none without it.
    assert (tuned.clip_eps, plain.clip_eps) == (0.2, None)


@pytest.mark.parametrize("algorithm", ["vtrace", "ppo"])
def test_the_atari_presets_learn_standardised_returns_of_clipped_rewards(algorithm):
    # Sample Factory's arrangement (docs/results.md, "Why Pong did not learn", item 10).
    tuned = to_config(compose_config(f"algorithm={algorithm}", "env=atari")).algorithm
    plain = to_config(compose_config(f"algorithm={algorithm}")).algorithm
    assert (tuned.value_norm, tuned.reward_scaling, tuned.reward_clip, plain.value_norm) == (
        True,
        False,
        "abs_one",
        False,
    )


def test_ppo_presets_carry_their_published_settings_and_activations():
    procgen = to_config(compose_config("algorithm=ppo", "env=procgen")).algorithm
    assert (
        procgen.model.torso,
        procgen.shared_body,
        procgen.gamma,
        procgen.unroll_length * procgen.batch_size,
        procgen.epochs,
        procgen.minibatches,
        procgen.lr,
        procgen.lr_schedule,
    ) == ("impala", True, 0.999, 16384, 3, 8, 0.0005, "constant")
    atari = to_config(compose_config("algorithm=ppo", "env=atari")).algorithm
    # Sample Factory's Atari example but for the entropy bonus (docs/results.md, run Q and
    # the nineteenth session's probes).
    assert (
        atari.unroll_length,
        atari.minibatch_size,
        atari.epochs,
        atari.lr,
        atari.clip_eps,
        atari.entropy_cost,
        atari.shared_body,
    ) == (128, 512, 4, 0.00025, 0.1, 0.005, True)
    mujoco = to_config(compose_config("algorithm=ppo", "env=mujoco")).algorithm
    gym = to_config(compose_config("algorithm=ppo", "env=gym", "env.id=Acrobot-v1")).algorithm
    # tanh is PPO's default; the MuJoCo preset keeps the ReLU its runs were measured with.
    assert (mujoco.model.activation, mujoco.epochs, gym.model.activation) == ("relu", 10, "tanh")


def test_gpu_group_uses_pinned_memory_on_cuda():
    hw = to_config(compose_config("hardware=gpu")).hardware
    assert (hw.device, hw.pin_memory) == ("cuda", True)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("algorithm.batch_size=-4", "algorithm.batch_size"),
        ("algorithm.unroll_length=0", "algorithm.unroll_length"),
        ("algorithm.gamma=1.5", "algorithm.gamma"),
        ("algorithm.optimizer=sgd", "algorithm.optimizer"),
        ("algorithm.pg_bootstrap=gae", "algorithm.pg_bootstrap"),
        ("algorithm.proximal_policy=target", "algorithm.proximal_policy"),
        ("algorithm.lr_decay_start=1.0", "algorithm.lr_decay_start"),
        ("algorithm.lr_decay_start=-0.5", "algorithm.lr_decay_start"),
        ("algorithm.model.torso=transformer", "algorithm.model.torso"),
        ("env.kind=dmlab", "env.kind"),
        ("broker.max_batch=0", "broker.max_batch"),
        ("hardware.device=tpu", "hardware.device"),
        ("hardware.amp=int8", "hardware.amp"),
        ("actor.num_actors=-1", "actor.num_actors"),
        ("seed=-1", "seed"),  # was numpy's "expected non-negative integer" from deep inside
        ("seed=1073741825", "seed"),  # env seeds are seed + i; ale_py's are 31-bit
    ],
)
def test_bad_value_fails_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        to_config(compose_config(override))


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["stop_at_return=nan"], "stop_at_return"),  # was taken: a target nothing reaches
        (["algorithm.grad_clip=nan"], "algorithm.grad_clip"),
        (["env=gym", "+env.kwargs.goal=[1.0,nan]"], r"env.kwargs.goal\[1\]"),
    ],
)
def test_nan_is_refused_for_every_key(overrides, key):
    with pytest.raises(ConfigError, match=rf"^{key}=nan is not a number"):
        to_config(compose_config(*overrides))


def test_the_largest_seed_runs_atari_env_seeds_in_ale_pys_range():
    pytest.importorskip("ale_py")
    from seedq.envs import AtariConfig, make_env_batch
    from seedq.envs.config import MAX_SEED

    to_config(compose_config(f"seed={MAX_SEED}"))
    env = make_env_batch(AtariConfig(), 2, seed=MAX_SEED, env_offset=4096)
    try:
        assert env.reset().shape == (2, 4, 84, 84)
    finally:
        env.close()


@pytest.mark.parametrize("kind", ["atari", "procgen"])
def test_bad_env_threads_fail_naming_the_key(kind):
    with pytest.raises(ConfigError, match=r"env\.num_threads"):
        to_config(compose_config(f"env={kind}", "env.num_threads=-2"))


@pytest.mark.parametrize("algorithm", ["vtrace", "ppo"])
@pytest.mark.parametrize("clip", ["0", "-0.1", "1.0", "3"])
def test_a_surrogate_clip_outside_0_1_is_refused(algorithm, clip):
    # At 1 or more the ratio's lower bound 1 - clip_eps is <= 0 and never binds: the
    # surrogate is no longer PPO's, which a typo (2 for 0.2) most often means.
    with pytest.raises(ConfigError, match=rf"^algorithm\.clip_eps={float(clip)} .*\(0, 1\)"):
        to_config(compose_config(f"algorithm={algorithm}", f"algorithm.clip_eps={clip}"))


def test_a_surrogate_clip_inside_0_1_is_taken():
    for algorithm in ("vtrace", "ppo"):
        cfg = to_config(compose_config(f"algorithm={algorithm}", "algorithm.clip_eps=0.99"))
        assert cfg.algorithm.clip_eps == 0.99


def test_ppo_refuses_a_decay_start_outside_its_budget():
    with pytest.raises(ConfigError, match=r"algorithm\.lr_decay_start=1\.5 .* \[0, 1\)"):
        to_config(compose_config("algorithm=ppo", "algorithm.lr_decay_start=1.5"))


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["algorithm.clip_eps=null"], r"set algorithm\.clip_eps"),
        (["algorithm.model.use_lstm=true"], r"with algorithm\.model\.use_lstm=true"),
        (["algorithm.shuffle_transitions=false"], r"with algorithm\.shuffle_transitions=false"),
    ],
)
def test_a_proximal_policy_at_the_batch_start_names_what_it_needs(overrides, says):
    base = ["env=atari", "algorithm.proximal_policy=batch_start"]
    with pytest.raises(ConfigError, match=r"algorithm\.proximal_policy=batch_start.*" + says):
        to_config(compose_config(*base, *overrides))
    to_config(compose_config(*base))  # the Atari preset has what it needs


@pytest.mark.parametrize(
    "cause", ["algorithm.model.use_lstm=true", "algorithm.shuffle_transitions=false"]
)
def test_whole_batch_keys_that_a_model_cannot_take_are_named_in_one_error(cause):
    both = ["algorithm.fixed_targets=true", "algorithm.proximal_policy=batch_start"]
    with pytest.raises(ConfigError) as raised:
        to_config(compose_config("env=atari", *both, cause))
    message = str(raised.value)
    assert f"with {cause}" in message
    assert message.startswith(
        "algorithm.fixed_targets=true and algorithm.proximal_policy=batch_start need "
    )
    fixes = message.rsplit("so set ", 1)[1].split()
    assert fixes == ["algorithm.fixed_targets=false", "algorithm.proximal_policy=behaviour"]
    to_config(compose_config("env=atari", *both, cause, *fixes))  # the named fix is enough


def test_bad_choice_lists_the_allowed_values():
    with pytest.raises(ConfigError, match=r"choose one of \['adam', 'rmsprop'\]"):
        to_config(compose_config("algorithm.optimizer=sgd"))


def test_wrong_type_fails_at_composition():
    with pytest.raises(ConfigCompositionException, match="batch_size"):
        compose_config("algorithm.batch_size=lots")


def test_unknown_key_fails_at_composition():
    with pytest.raises(Exception, match="no_such_key"):
        compose_config("algorithm.no_such_key=1")


def test_resolved_config_round_trips_through_yaml():
    cfg = compose_config("env=atari")
    again = OmegaConf.create(OmegaConf.to_yaml(cfg))
    assert again.env.id == "ALE/Pong-v5"


def test_a_joblib_sweep_counts_its_jobs_as_joblib_does():
    assert runs_at_once({"n_jobs": 3}, cores=8) == 3
    assert runs_at_once({"n_jobs": -1}, cores=8) == 8  # joblib's default: one job per core
    assert runs_at_once({"n_jobs": -2}, cores=8) == 7
    assert runs_at_once({"_target_": "hydra._internal.core_plugins.basic_launcher"}, 8) == 1
    assert runs_at_once(None, cores=8) == 1


def test_runs_at_once_cap_actor_processes_and_threads_but_keep_the_env_batches():
    cfg = compose_config("hardware.num_threads=0", "actor.num_actors=2")
    changed = fit_to_share(cfg, ["hardware.num_threads=0"], {"n_jobs": 2}, cores=2)
    assert changed == {
        "actor.num_actors": 1,
        "hardware.train_threads": 1,  # 0, the run's cores, becomes its share
        "actor.batches_per_actor": 4,
    }
    assert (cfg.actor.num_actors, cfg.actor.batches_per_actor) == (1, 4)  # 4 env batches still
    assert cfg.hardware.num_threads == 0  # given on the command line: left as given


def test_runs_at_once_sizes_nothing_for_one_run_or_when_set_to_one():
    cfg = compose_config("actor.num_actors=2")
    assert fit_to_share(cfg, [], None, cores=2) == {}
    assert fit_to_share(cfg, [], {"n_jobs": 2}, cores=2) != {}
    cfg = compose_config("hardware.runs_at_once=1", "actor.num_actors=2")
    assert fit_to_share(cfg, ["hardware.runs_at_once=1"], {"n_jobs": 4}, cores=2) == {}
    assert cfg.actor.num_actors == 2


def test_a_share_of_cores_caps_the_torch_threads_a_hardware_preset_sets():
    # gpu.yaml: 4 threads
    cfg = compose_config("hardware=gpu", "hardware.runs_at_once=4", "actor.num_actors=2")
    changed = fit_to_share(cfg, ["hardware=gpu", "hardware.runs_at_once=4"], cores=8)
    # 2 actors already fit in 2 cores; the training thread's 0 (gpu.yaml's 4 threads on
    # CUDA) is capped at the share as well
    assert changed == {"hardware.num_threads": 2, "hardware.train_threads": 2}
