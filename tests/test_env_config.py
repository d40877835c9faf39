"""Each env family owns its typed config: env=<kind> holds, shows and accepts its keys only;
a key of another family is refused at start; checkpoints of the flat section still load."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_cli
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import seedq
from seedq.cli import resumed_config, to_config
from seedq.command_keys import foreign_algorithm_key, foreign_env_key, misspelt_key, print_keys
from seedq.config import ConfigError, register_configs
from seedq.envs import (
    BACKENDS,
    AtariConfig,
    EnvConfig,
    FakeConfig,
    GymConfig,
    config_class,
    family_keys,
    foreign_key,
    saved_env_section,
    validate_env,
)
from seedq.envs.section import FLAT_DEFAULTS
from seedq.learner.checkpoint import load_checkpoint, plain_config, save_checkpoint

CONF_DIR = Path(seedq.__file__).parent / "conf"
# Every group option of env (conf/env/<kind>.yaml) is named by its kind.
ENV_OPTIONS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))

register_configs()


def compose_config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["run_dir=/tmp/seedq-test", *overrides])


# --------------------------------------------------------------- composition per family


def test_every_kind_has_an_env_group_option():
    assert ENV_OPTIONS == sorted(BACKENDS)


@pytest.mark.parametrize("kind", ENV_OPTIONS)
def test_env_option_composes_its_familys_config_and_nothing_else(kind):
    cfg = compose_config(f"env={kind}")
    env = cfg.env
    assert (OmegaConf.get_type(env), list(env), env.kind) == (
        config_class(kind),
        family_keys(kind),
        kind,
    )


def test_the_yaml_of_a_family_still_sets_its_values_over_the_dataclass():
    minatar = to_config(compose_config("env=minatar")).env
    football = to_config(compose_config("env=football", "env.scenario=academy_corner")).env
    assert (minatar.repeat_action_probability, football.frame_stack, football.id) == (
        0.1,
        1,
        "academy_corner",
    )


def test_a_wrong_type_of_a_family_key_fails_at_composition():
    with pytest.raises(ConfigCompositionException):
        compose_config("env=atari", "env.frame_skip=abc")


def test_a_family_key_is_checked_by_its_family():
    with pytest.raises(ConfigError, match=r"env\.frame_skip=0 is out of range"):
        to_config(compose_config("env=atari", "env.frame_skip=0"))


def test_a_kind_without_its_family_config_is_refused_naming_the_option():
    with pytest.raises(
        ConfigError, match="env.kind=gym comes with env=gym.*this run is env=cartpole"
    ):
        to_config(compose_config("env.kind=gym"))


def test_the_shared_keys_sit_in_the_base_and_every_family_starts_with_them():
    shared = [f.name for f in dataclasses.fields(EnvConfig)]
    assert shared == ["kind", "id", "max_episode_steps"]
    assert all(family_keys(kind)[:3] == shared for kind in BACKENDS)


# --------------------------------------------------------------- a key of another family


def test_a_key_of_another_family_names_the_family_that_has_it():
    assert foreign_key("scenario", "atari") == (
        "env.scenario is a football key; this run is env=atari "
        "(its keys: seedq-train --keys env=atari)"
    )
    assert foreign_key("vectorization", "cartpole").startswith(
        "env.vectorization is a gym and mujoco key; this run is env=cartpole"
    )
    # The family's own keys, and keys no family has (Hydra names those), are not foreign.
    assert (foreign_key("frame_skip", "atari"), foreign_key("frmae_skip", "atari")) == (None, None)


@pytest.mark.parametrize(
    ("argv", "family"),
    [
        (["env=atari", "env.scenario=11_vs_11_stochastic"], "a football key"),
        (["env.frame_skip=2"], "an atari key; this run is env=cartpole"),
        (["-m", "env=atari,minatar", "env.frame_skip=2"], "this run is env=minatar"),
        (["env=minatar", "+env.nan_every=3"], "a fake key"),
    ],
)
def test_the_command_line_is_checked_against_the_chosen_family(argv, family):
    assert family in foreign_env_key(argv)


def test_the_command_line_with_the_familys_own_keys_passes():
    assert foreign_env_key(["env=atari", "env.frame_skip=2", "--cfg", "job", "seed=3"]) is None


def test_seedq_train_refuses_a_key_of_another_family_with_exit_2_and_one_line(tmp_path):
    result = run_cli("env=atari", "env.scenario=11_vs_11_stochastic", f"run_dir={tmp_path}")
    assert (result.returncode, result.stdout.strip().splitlines()) == (
        2,
        [
            "seedq-train: env.scenario is a football key; this run is env=atari "
            "(its keys: seedq-train --keys env=atari)"
        ],
    )


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["algorithm=ppo", "algorithm.fixed_targets=true"], "a key of algorithm=vtrace; this run"),
        (["algorithm=r2d2", "algorithm.value_norm=true"], "algorithm=vtrace and ppo; this run"),
        (["algorithm.shared_body=false"], "algorithm=ppo; this run is algorithm=vtrace"),
        (["algorithm.replay_ratio=2"], "a key of algorithm=r2d2; this run is algorithm=vtrace"),
        (["-m", "algorithm=vtrace,ppo", "algorithm.fixed_targets=true"], "is algorithm=ppo"),
    ],
)
def test_the_command_line_is_checked_against_the_chosen_algorithm(argv, refusal):
    assert refusal in foreign_algorithm_key(argv)


def test_keys_every_algorithm_has_typos_and_resumed_runs_are_not_refused_here():
    # resume=<run> continues the run's saved algorithm and env, unknown before it is read.
    assert (
        foreign_algorithm_key(["algorithm=ppo", "algorithm.lr=0.001", "algorithm.clip_eps=0.2"]),
        foreign_algorithm_key(["algorithm=ppo", "algorithm.valu_norm=true"]),
        foreign_algorithm_key(["resume=runs/r2d2", "algorithm.replay_ratio=2"]),
        foreign_env_key(["resume=runs/pong", "env.num_threads=4"]),
    ) == (None, None, None, None)
    assert "this run is algorithm=vtrace" in foreign_algorithm_key(
        ["resume=auto", "run_dir=runs/x", "algorithm.replay_ratio=2"]
    )


def test_seedq_train_refuses_a_key_of_another_algorithm_with_exit_2_and_one_line(tmp_path):
    result = run_cli("algorithm=ppo", "algorithm.fixed_targets=true", f"run_dir={tmp_path}")
    assert (result.returncode, result.stdout.strip().splitlines()) == (
        2,
        [
            "seedq-train: algorithm.fixed_targets is a key of algorithm=vtrace; this run is "
            "algorithm=ppo (its keys: seedq-train --keys ppo)"
        ],
    )


# --------------------------------------------------------------- what a user is shown


def env_keys_in(yaml_text: str) -> list[str]:
    """The keys of the ``env:`` section of ``--cfg job``'s YAML."""
    return list(yaml.safe_load(yaml_text)["env"])


def test_cfg_job_shows_the_familys_keys_only():
    result = run_cli("env=atari", "--cfg", "job")
    assert (result.returncode, env_keys_in(result.stdout)) == (0, family_keys("atari"))


def listed_keys(out: str) -> set[str]:
    return set(re.findall(r"^  (\S+) = ", out, flags=re.M))


def test_keys_show_the_chosen_familys_env_keys_only(capsys):
    print_keys(["env=atari", "env."])
    atari = listed_keys(capsys.readouterr().out)
    print_keys(["env."])
    cartpole = listed_keys(capsys.readouterr().out)
    assert (atari, cartpole) == (
        {f"env.{k}" for k in family_keys("atari")},
        {"env.kind", "env.id", "env.max_episode_steps"},
    )


# --------------------------------------------------------------- checkpoints of the flat section


def flat_section(**values) -> dict:
    """An env section as checkpoints saved it before each family had its own config."""
    shared = {"kind": "cartpole", "id": "CartPole-v1", "max_episode_steps": None}
    return {**shared, **FLAT_DEFAULTS, **values}


def test_a_flat_section_keeps_its_familys_keys_and_drops_the_others_defaults():
    saved = flat_section(kind="minatar", id="breakout", repeat_action_probability=0.1)
    assert saved_env_section(saved) == {
        "kind": "minatar",
        "id": "breakout",
        "max_episode_steps": None,
        "repeat_action_probability": 0.1,
        "full_action_space": False,
        "difficulty_ramping": True,
    }


def test_a_flat_section_drops_the_threads_its_machine_was_sized_to_unless_they_are_its_own():
    cartpole = flat_section(num_threads=1)
    atari = flat_section(kind="atari", id="ALE/Pong-v5", num_threads=3)
    kept = (saved_env_section(cartpole), saved_env_section(atari))
    assert ("num_threads" in kept[0], kept[1]["num_threads"]) == (False, 3)


def test_a_flat_section_with_another_familys_key_set_is_refused_in_one_line():
    saved = flat_section(kind="atari", id="ALE/Pong-v5", scenario="11_vs_11_stochastic")
    with pytest.raises(ConfigError) as info:
        saved_env_section(saved)
    assert str(info.value) == (
        "its env section sets scenario='11_vs_11_stochastic', a football key, on an "
        "env.kind=atari run (which ignored it); env=atari has no such key"
    )


def old_checkpoint(run_dir: Path, **env) -> Path:
    """A checkpoint of an Atari run as a seedq before the env families wrote it."""
    config = plain_config(to_config(compose_config("env=atari", f"run_dir={run_dir}")))
    config["env"] = flat_section(**{"kind": "atari", "id": "ALE/Breakout-v5", **env})
    state = {"config": config, "env_steps": 100, "updates": 1, "model": {}}
    return Path(save_checkpoint(str(run_dir), state, keep=1))


def test_a_checkpoint_of_the_flat_section_loads_and_resumes_as_its_family(tmp_path):
    path = old_checkpoint(tmp_path, frame_skip=3)
    # Every key the flat section had of the family, none of another; keys the family has
    # gained since (env.fire_after_life_loss) take their defaults on resume.
    loaded = set(load_checkpoint(path)["config"]["env"])
    assert loaded == set(family_keys("atari")) & set(flat_section())
    resume = f"resume={tmp_path}"
    config, _ = resumed_config(compose_config(resume), [resume, "max_minutes=1"])
    assert (type(config.env), config.env.id, config.env.frame_skip, config.max_minutes) == (
        AtariConfig,
        "ALE/Breakout-v5",
        3,
        1,
    )
    assert config.env.fire_after_life_loss is False


def test_a_checkpoint_that_set_another_familys_key_is_refused_naming_the_file(tmp_path):
    path = old_checkpoint(tmp_path, scenario="11_vs_11_stochastic")
    with pytest.raises(
        ConfigError, match=rf"^{path} cannot be used: its env section sets scenario"
    ):
        load_checkpoint(path)


# --------------------------------------------------------------- typed sections from mappings


def test_an_actors_env_section_becomes_its_familys_dataclass():
    from seedq.envs import env_config

    assert env_config({"kind": "gym", "id": "Acrobot-v1", "vectorization": "async"}) == GymConfig(
        id="Acrobot-v1", vectorization="async"
    )
    with pytest.raises(ConfigError, match="env.frame_skip is an atari key; this run is env=fake"):
        env_config({"kind": "fake", "frame_skip": 2})


def test_validate_env_takes_the_dataclass_or_a_mapping_of_one():
    actor = type("Actor", (), {"envs_per_batch": 8})()
    validate_env(FakeConfig(), actor)
    validate_env({"kind": "fake", "nan_every": 0}, actor)
    with pytest.raises(ConfigError, match=r"env\.nan_every=-1"):
        validate_env({"kind": "fake", "nan_every": -1}, actor)


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["algorithm.lrr=3"], "algorithm.lrr is not a key of algorithm=vtrace; did you mean"),
        (["sed=1"], "sed is not a key; did you mean seed?"),
        (["env=atari", "env.frmae_skip=2"], "not a key of env=atari; did you mean env.frame_skip"),
        (["algorithm=ppo", "algorithm.clip_ep=0.2"], "did you mean algorithm.clip_eps?"),
        (["actor.num_actor=3"], "did you mean actor.num_actors?"),
        (["algoritm.lr=0.1"], "did you mean algorithm.lr?"),
        (["algorithm.model.torzo=nature"], "did you mean algorithm.model.torso?"),
        (["-m", "algorithm.lrr=1e-3,1e-4"], "did you mean algorithm.lr?"),
        (
            ["resume=runs/x", "algorithm.replay_ration=2"],
            "of any algorithm; did you mean algorithm.replay_ratio or",
        ),
    ],
)
def test_a_misspelt_key_is_refused_with_the_nearest_keys(argv, refusal):
    assert refusal in misspelt_key(argv)


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (
            ["algorithm.discount=0.9"],
            "algorithm.discount is not a key of algorithm=vtrace; did you mean algorithm.gamma?",
        ),
        (
            ["algorithm.learning_rate=1e-3"],
            "did you mean algorithm.lr or algorithm.indicator_lr_scale?",
        ),
        (["env=atari", "env.sticky_actions=0.1"], "did you mean env.repeat_action_probability?"),
    ],
)
def test_a_key_named_by_its_idea_is_refused_with_the_key_whose_help_names_it(argv, refusal):
    assert refusal in misspelt_key(argv)


def test_a_key_with_nothing_near_is_refused_without_a_guess():
    """Hydra's own words for it ("To append to your config use +algorithm.zzzzqq=1") sent the
    user to a ``+`` override that the schema then refuses too."""
    assert misspelt_key(["algorithm.zzzzqq=1"]) == (
        "algorithm.zzzzqq is not a key of algorithm=vtrace "
        "(every key: seedq-train --keys vtrace env=cartpole)"
    )
    assert "did you mean" not in misspelt_key(["algorithm.zzz=1"])  # not algorithm.lr


@pytest.mark.parametrize(
    "argv",
    [
        ["algorithm=ppo", "env=atari", "algorithm.lr=1e-3", "env.frame_skip=2", "seed=3"],
        ["hardware=gpu", "launcher=ssh", "arch=sebulba", "logger=[tensorboard,wandb]"],
        ["launcher.env.OMP_NUM_THREADS=1", "algorithm.model.hidden_sizes=[32,32]"],
        ["+algorithm.lrr=3", "++seed=2", "~logger", "hydra.run.dir=x", "hydra/launcher=joblib"],
        ["arch.sebulba.threads=2", "logger.wandb.project=p", "tuning=vtrace_atari"],
        ["--cfg", "job", "-m", "seed=1,2"],
    ],
)
def test_known_keys_groups_adds_and_hydras_own_are_not_refused_as_misspelt(argv):
    assert misspelt_key(argv) is None


def test_seedq_train_refuses_a_misspelt_key_with_exit_2_and_one_line(tmp_path):
    result = run_cli("algorithm.lrr=3", f"run_dir={tmp_path}")
    assert (result.returncode, result.stdout.strip().splitlines()) == (
        2,
        [
            "seedq-train: algorithm.lrr is not a key of algorithm=vtrace; did you mean "
            "algorithm.lr? (every key: seedq-train --keys vtrace env=cartpole)"
        ],
    )


@pytest.mark.parametrize(("steps", "refused"), [(536_870_911, False), (536_870_912, True)])
def test_an_atari_episode_longer_than_ale_py_can_count_is_refused(steps, refused):
    # max_episode_steps x frame_skip past a C int ended in a pybind TypeError at start, exit 1.
    from seedq.envs.atari import AtariConfig
    from seedq.schema import ConfigError

    config = AtariConfig(max_episode_steps=steps, frame_skip=4)
    if refused:
        with pytest.raises(ConfigError, match="use env.max_episode_steps=536870911 or fewer"):
            config.check()
    else:
        config.check()
