"""seedq-eval and seedq.load_policy on the checkpoint of a short CartPole run."""

import re

import gymnasium as gym
import imageio.v3 as iio
import pytest
from cli_helpers import run_cli

import seedq
from seedq.evaluate import main


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    result = run_cli(
        "total_env_steps=200000",
        # A policy well above random play is all the tests need; stop there.
        "stop_at_return=100",
        "actor.num_actors=1",
        # Few envs per batch: more updates per env step, so 200k steps train a real policy.
        "actor.envs_per_batch=16",
        "broker.max_batch=32",
        f"hydra.run.dir={run_dir}",
        timeout=300,
    )
    assert result.returncode == 0, result.stdout
    return run_dir


def test_eval_prints_return_statistics_and_writes_readable_videos(cartpole_run, capsys):
    assert main([f"checkpoint={cartpole_run}", "episodes=2", "video=true", "seed=3"]) == 0
    output = capsys.readouterr().out
    stats = re.search(
        r"2 episodes: return mean ([\d.]+) std [\d.]+ min ([\d.]+) max ([\d.]+)", output
    )
    videos = sorted((cartpole_run / "videos").glob("*.mp4"))
    frames = [iio.imread(v).shape[0] for v in videos]
    # CartPole pays 1 per step, so an episode of return R has R steps: R + 1 frames.
    lengths = sorted(float(stats.group(i)) + 1 for i in (2, 3))
    assert (stats is not None, len(videos), sorted(frames)) == (True, 2, lengths)


def test_load_policy_acts_on_a_users_own_gymnasium_env(cartpole_run):
    policy = seedq.load_policy(str(cartpole_run), mode="greedy")
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        total += reward
        done = terminated or truncated
    assert total > 30  # a trained policy; random play averages about 22


def test_bad_arguments_and_missing_checkpoints_exit_2(tmp_path, capsys):
    assert main(["episodes=2"]) == 2
    assert main(["checkpoint", "x"]) == 2
    assert "nor an existing checkpoint file or run directory" in capsys.readouterr().err
    assert main([f"checkpoint={tmp_path}"]) == 2
    assert "no checkpoint there" in capsys.readouterr().err
    assert main([str(tmp_path)]) == 2  # an existing path alone is the checkpoint
    assert "no checkpoint there" in capsys.readouterr().err


def test_a_run_directory_given_alone_is_the_checkpoint(cartpole_run, capsys):
    assert main([str(cartpole_run), "episodes=1", "seed=2"]) == 0
    assert "1 episodes: return mean" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argument",
    ["episodes=0", "episodes=abc", "epsilon=1.5", "seed=-1", "seed=x"],
)
def test_arguments_out_of_range_exit_2_naming_them(cartpole_run, capsys, argument):
    assert main([f"checkpoint={cartpole_run}", argument]) == 2
    assert argument.split("=")[0] + "=" in capsys.readouterr().err


def test_eval_of_a_run_dir_skips_a_damaged_newest_checkpoint(cartpole_run, tmp_path, capsys):
    # A copy of the run with a damaged file ahead of its checkpoints: the run dir still
    # evaluates, from its newest checkpoint that reads.
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (saved,) = sorted((cartpole_run / "checkpoints").glob("ckpt-*.pt"))[-1:]
    (run / "checkpoints" / saved.name).write_bytes(saved.read_bytes())
    (run / "checkpoints" / "ckpt-999999999999.pt").write_bytes(b"garbage")
    assert main([f"checkpoint={run}", "episodes=1"]) == 0
    assert saved.name in capsys.readouterr().out


def test_help_prints_the_usage(capsys):
    assert main(["--help"]) == 0
    assert "seedq-eval checkpoint=" in capsys.readouterr().out


class RecordingPolicy:
    """Acts 0 and keeps what it was shown."""

    def __init__(self) -> None:
        self.seen: list = []

    def reset(self) -> None:
        pass

    def act(self, obs):
        self.seen.append((obs.shape, obs.dtype.name, obs.sum()))
        return 0


@pytest.mark.parametrize(
    ("env_id", "shape", "dtype"),
    [
        # Discrete states reach the policy as training's one-hots, not bare ints.
        ("FrozenLake-v1", (16,), "bool"),
        # gymnasium's HWC frames as training's channels-first ones.
        ("ALE/Pong-v5", (3, 210, 160), "uint8"),
        ("CartPole-v1", (4,), "float32"),
    ],
)
def test_gym_episodes_show_the_policy_what_training_showed_it(env_id, shape, dtype):
    from seedq.envs import GymConfig
    from seedq.eval_episodes import gym_episodes

    policy = RecordingPolicy()
    cfg = GymConfig(id=env_id, max_episode_steps=5)
    [(total, _)] = list(gym_episodes(policy, cfg, 1, 0, False))
    assert {(s, d) for s, d, _ in policy.seen} == {(shape, dtype)}
    if env_id == "FrozenLake-v1":
        assert all(n == 1 for *_, n in policy.seen)  # one state at a time


def test_a_policy_shown_another_shape_names_the_layout_it_wants(cartpole_run):
    policy = seedq.load_policy(str(cartpole_run))
    with pytest.raises(ValueError, match=r"shape \(5,\); the policy was trained on \(4,\)"):
        policy([0.0] * 5)


def test_env_overrides_change_the_evaluation_env_but_not_the_observation_shape(
    cartpole_run, capsys
):
    assert main([f"checkpoint={cartpole_run}", "episodes=2", "env.max_episode_steps=20"]) == 0
    stats = re.search(
        r"return mean [\d.]+ std [\d.]+ min [\d.]+ max ([\d.]+)", capsys.readouterr().out
    )
    assert float(stats.group(1)) <= 20  # CartPole pays 1 a step: episodes were cut at 20
    assert main([f"checkpoint={cartpole_run}", "env.colour=red"]) == 2
    assert "env.<one of" in capsys.readouterr().err
    assert main([f"checkpoint={cartpole_run}", "env.kind=gym", "env.id=Acrobot-v1"]) == 2
    assert "trained on (4,)" in capsys.readouterr().err
    # Another family with the same observations and actions: gymnasium's own CartPole.
    assert main([f"checkpoint={cartpole_run}", "env.kind=gym", "env.id=CartPole-v1"]) == 0


def test_another_env_family_leaves_the_trained_familys_keys_behind(
    cartpole_run, capsys, monkeypatch
):
    # A policy whose run had family keys (MinAtar's, say) evaluated with env.kind=... of
    # another family: those keys were blamed as the user's ("env.repeat_action_probability
    # is an atari and minatar key"); they do not carry over, the keys every env has do.
    import seedq.evaluate as evaluate

    loaded = evaluate.load_policy

    def with_family_keys(*args, **kwargs):
        policy = loaded(*args, **kwargs)
        policy.config = {
            **policy.config,
            "env": {**policy.config["env"], "kind": "minatar", "repeat_action_probability": 0.1},
        }
        return policy

    monkeypatch.setattr(evaluate, "load_policy", with_family_keys)
    args = [f"checkpoint={cartpole_run}", "env.id=CartPole-v1", "episodes=1"]
    assert main([*args, "env.kind=gym"]) == 0, capsys.readouterr().err


def test_env_overrides_that_change_the_actions_are_refused(cartpole_run, capsys, monkeypatch):
    # A MinAtar Breakout policy (3 actions) played Asterix (5, same frames) without a word.
    import dataclasses

    import seedq.evaluate as evaluate

    loaded = evaluate.load_policy

    def three_actions(*args, **kwargs):
        policy = loaded(*args, **kwargs)
        policy.spec = dataclasses.replace(policy.spec, num_actions=3)
        return policy

    monkeypatch.setattr(evaluate, "load_policy", three_actions)
    assert main([f"checkpoint={cartpole_run}", "env.max_episode_steps=20"]) == 2
    assert "takes 2 discrete actions; the policy was trained on 3" in capsys.readouterr().err


def test_an_epsilon_for_a_policy_without_one_and_a_misspelt_flag_are_refused(cartpole_run, capsys):
    # epsilon= changed nothing for V-trace's policy, and video=maybe read as false.
    assert main([f"checkpoint={cartpole_run}", "epsilon=0.5", "episodes=1"]) == 2
    assert "a vtrace policy has no epsilon" in capsys.readouterr().err
    for value in ("maybe", "on", "ture"):
        assert main([f"checkpoint={cartpole_run}", f"video={value}"]) == 2
        assert f"video={value!r} is not true or false" in capsys.readouterr().err


def test_a_long_evaluation_says_each_episode_as_it_ends(cartpole_run, capsys, monkeypatch):
    # An Atari evaluation (minutes an episode on a CPU) printed nothing until its last
    # episode ended. Once the evaluation has gone on for EpisodeProgress.QUIET_S since its
    # start or its last line, an ended episode is said on stderr; the last one is the summary's.
    from types import SimpleNamespace

    import seedq.evaluate as evaluate

    clock = iter([0.0, 3.0, 12.0, 15.0, 30.0, 50.0])
    monkeypatch.setattr(evaluate, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    assert main([f"checkpoint={cartpole_run}", "episodes=5", "seed=3"]) == 0
    captured = capsys.readouterr()
    line = r"seedq-eval: episode (\d) of 5: return [\d.]+ \((\d+) s so far\)"
    said = re.findall(line, captured.err)
    assert said == [("2", "12"), ("4", "30")], captured.err
    assert "5 episodes: return mean" in captured.out
