"""seedq-eval's command line: each ``env.<key>=`` value of the type its key holds, whole numbers
in a float's notation as seedq-train takes them, and one checkpoint per evaluation; anything
else refused in one line, exit 2, never a traceback nor an evaluation of another env."""

import re

import pytest
from cli_helpers import run_cli

import seedq.evaluate as evaluate
from seedq.envs.section import env_config
from seedq.evaluate import main
from seedq.schema import ConfigError


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """The run directory of a short CartPole run (its policy need not be good)."""
    path = tmp_path_factory.mktemp("run")
    result = run_cli("total_env_steps=3000", "actor.num_actors=1", f"hydra.run.dir={path}")
    assert result.returncode == 0, result.stdout
    return path


def refusal(capsys, argv):
    """seedq-eval's exit status and its one line on stderr."""
    code = main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return code, err


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        # A TypeError in the range checks, a gymnasium TypeError, and one in the id's lookup.
        ("env.max_episode_steps=abc", "env.max_episode_steps='abc' is not allowed"),
        ("env.max_episode_steps=[1]", "env.max_episode_steps=[1] is not allowed"),
        ("env.max_episode_steps=2.5", "env.max_episode_steps=2.5 is not allowed"),
        ("env.id=123", "env.id=123 is not allowed; it takes a string"),
        ("env.id=[1", "env.id='[1' does not read as a value"),
    ],
)
def test_an_env_value_of_the_wrong_type_is_refused_naming_it(run_dir, capsys, argument, message):
    code, err = refusal(capsys, [str(run_dir), "episodes=1", argument])
    assert (code, message in err) == (2, True), err


def test_a_misspelt_bool_is_refused_not_read_as_true(run_dir, capsys, monkeypatch):
    # env.grayscale=flase on a Pong policy ran with grayscale: a non-empty string is truthy.
    loaded = evaluate.load_policy

    def atari_policy(*args, **kwargs):
        policy = loaded(*args, **kwargs)
        policy.config = {**policy.config, "env": {"kind": "atari", "id": "ALE/Pong-v5"}}
        return policy

    monkeypatch.setattr(evaluate, "load_policy", atari_policy)
    code, err = refusal(capsys, [str(run_dir), "env.grayscale=flase"])
    assert (code, err) == (
        2,
        "seedq-eval: env.grayscale='flase' is not allowed; it takes true or false\n",
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"kind": "atari", "grayscale": "flase"}, "env.grayscale='flase' is not allowed"),
        ({"kind": "atari", "frame_skip": "abc"}, "env.frame_skip='abc' is not allowed"),
        ({"kind": "atari", "frame_skip": True}, "env.frame_skip=True is not allowed"),
        ({"kind": "fake", "obs_shape": [4.5]}, r"env.obs_shape=\[4.5\] is not allowed"),
        ({"kind": "gym", "kwargs": 3}, "env.kwargs=3 is not allowed; it takes a mapping"),
    ],
)
def test_the_env_config_of_a_plain_section_checks_each_values_type(section, message):
    with pytest.raises(ConfigError, match=message):
        env_config(section)


def test_whole_numbers_in_a_floats_notation_are_taken_as_seedq_train_takes_them(run_dir, capsys):
    # episodes=1e2 was "not an integer" and env.max_episode_steps=1e1 a TypeError.
    assert main([str(run_dir), "episodes=2e0", "seed=1.0", "env.max_episode_steps=1e1"]) == 0
    stats = re.search(r"(\d+) episodes: .* max ([\d.]+)", capsys.readouterr().out)
    assert (stats.group(1), float(stats.group(2)) <= 10) == ("2", True)
    assert env_config({"kind": "atari", "frame_skip": 2.0}).frame_skip == 2


def test_a_second_checkpoint_is_refused_as_a_second_one(run_dir, capsys):
    # It was "nor an existing checkpoint file or run directory" though it exists.
    for argv in ([str(run_dir), str(run_dir)], [str(run_dir), f"checkpoint={run_dir}"]):
        code, err = refusal(capsys, [*argv, "episodes=1"])
        assert (code, f"{str(run_dir)!r} is a second checkpoint" in err) == (2, True), err
