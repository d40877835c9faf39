"""seedq-bench's own options: a choice key takes only its choices, sizes are > 0 (one line,
exit 2, before anything is measured), and raw-env steps continuous envs with actions they take."""

import dataclasses
import json
import math
import threading

import numpy as np
import pytest

from seedq.bench.cli import main
from seedq.bench.raw_env import random_actions, step_batches
from seedq.envs.fake import FakeConfig
from seedq.envs.gym import GymConfig
from seedq.messages import CONTINUOUS, EnvSpec


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # A misspelt mode measured throughput without a word.
        (["anakin", "mode=foo"], "mode='foo' is not allowed; choose one of ['throughput', "),
        (["anakin", "mode=time_to_target"], "mode='time_to_target' is not allowed"),
        (["learner", "mode=runn"], "mode='runn' is not allowed; choose one of ['loop', 'run']"),
        (["broker", "policy=oracle"], "policy='oracle' is not allowed; choose one of"),
        # A ValueError of the policy head and RuntimeErrors of torch, each a traceback.
        (["learner", "num_actions=0"], "num_actions=0 is not allowed; it takes whole numbers > 0"),
        (["learner", "num_actions=-2"], "num_actions=-2 is not allowed"),
        (["learner", "obs_shape=0"], "obs_shape=0 is not allowed; it takes whole numbers > 0"),
        (["learner", "obs_shape=4,-4,84"], "obs_shape=4,-4,84 is not allowed"),
        (["inference", "num_actions=0", "models=mlp"], "num_actions=0 is not allowed"),
        # A TypeError of the empty table, a ZeroDivisionError, ValueErrors of numpy and
        # multiprocessing, and shards=0 measured the in-process broker under another name.
        (["anakin", "mode=time-to-target", "seeds="], "seeds= names nothing; give one or more"),
        # A list that names nothing, and points that all exceed max_inflight_mb: TypeErrors
        # of the empty table.
        (["inference", "models="], "models= names nothing; give one or more, e.g. models=mlp,"),
        (["broker", "obs="], "obs= names nothing; give one or more, e.g. obs=4:float32"),
        (["broker", "streams=4", "max_inflight_mb=0.00001"], "every point's observations in"),
        # Options of another mode, ignored without a word: anakin's documented time-to-target
        # command measured throughput at four sizes.
        (["anakin", "seeds=0,1,2", "target=475"], "only mode=time-to-target reads them"),
        (
            ["anakin", "mode=time-to-target", "num_envs=64"],
            "num_envs= seconds=: only mode=throughput",
        ),
        (["broker", "streams=1", "rounds=5"], "rounds=: only stages=true reads it; add stages"),
        (["learner", "mode=run", "requests=4"], "requests=: only mode=loop reads it"),
        (["broker", "stages=true", "rounds=0"], "rounds=0 is not allowed"),
        (["broker", "stages=true", "rounds=2", "parallel=-1"], "parallel=-1 is not allowed"),
        (["broker", "streams=1", "generators=-1"], "generators=-1 is not allowed"),
        (["broker", "streams=1", "shards=0"], "shards=0 is not allowed"),
    ],
)
def test_a_bad_choice_or_size_is_refused_in_one_line(capsys, argv, message):
    # Short settings, so that the code before the fix finished measuring soon.
    short = {"anakin": ["num_envs=8", "max_minutes=0.01"], "broker": ["warmup_s=0"]}
    code = main([*argv, "seconds=0.1", *short[argv[0]]] if argv[0] in short else argv)
    err = capsys.readouterr().err
    assert (code, err.count("\n"), message in err) == (2, 1, True), err


def test_random_continuous_actions_lie_within_the_bounds_even_unbounded_ones():
    low, high = (-2.0, 5.0, -math.inf), (2.0, math.inf, math.inf)
    spec = EnvSpec((3,), "float32", 3, CONTINUOUS, low, high)
    actions = random_actions(spec, 1000, np.random.default_rng(0))
    assert (actions.shape, actions.dtype) == ((1000, 3), np.float32)
    # Per dimension, the smallest and largest of 1000 draws: near the bounds, within them.
    drawn = np.stack([actions.min(axis=0), actions.max(axis=0)], axis=1)
    expected = np.array([[-2.0, 2.0], [5.0, 7.0], [-1.0, 1.0]])
    assert drawn == pytest.approx(expected, abs=0.02)
    assert (drawn[:, 0] >= expected[:, 0]).all() and (drawn[:, 1] <= expected[:, 1]).all()


@pytest.mark.parametrize(
    "env",
    [FakeConfig(continuous_actions=True), GymConfig(kind="gym", id="Pendulum-v1")],
    ids=["fake", "pendulum"],
)
def test_raw_env_steps_a_continuous_env(env):
    # "an env process failed: actions must be a float array": it sent discrete indices.
    figures = step_batches(dataclasses.asdict(env), 1, 4, 0, 0, seconds=0.05, warmup_s=0.0)
    assert figures["env_steps"] > 0


def test_raw_env_processes_measure_from_one_start():
    # Each env process measured from its own start (0.2-0.5 s apart on a loaded box), so the
    # total summed rates partly measured with fewer processes stepping. Now each waits at a
    # barrier with its envs built: a process whose peers are not ready does not step.
    ready, out = threading.Barrier(2), {}
    env = dataclasses.asdict(FakeConfig())
    worker = threading.Thread(
        target=lambda: out.update(step_batches(env, 1, 4, 0, 0, 0.05, 0.0, ready)), daemon=True
    )
    worker.start()
    worker.join(timeout=1.0)
    assert worker.is_alive() and not out  # waiting for its peer, not stepping
    ready.wait(timeout=60)
    worker.join(timeout=60)
    assert out["env_steps"] > 0


@pytest.mark.parametrize("name", ["raw-env", "anakin", "broker"])
def test_a_subcommands_help_prints_its_options_and_what_it_measures(capsys, name):
    # `seedq-bench raw-env --help` was refused: "'--help': arguments are key=value", exit 2.
    code = main([name, "seconds=1", "--help"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith(f"usage: seedq-bench {name} "), out
    assert f"``seedq-bench {name}``" in out  # what it measures: its module's docstring


def test_inference_builds_the_network_for_a_continuous_envs_actions(capsys):
    # The bench built discrete-action networks whatever the env: SAC on env=mujoco was refused
    # ("this env has 6 discrete ones") and PPO on Box actions was timed with a discrete head.
    code = main(["inference", "algorithm=sac", "env=mujoco", "batch_sizes=2", "seconds=0.02"])
    out, err = capsys.readouterr()
    assert code == 0, err
    figures = json.loads(out.strip().splitlines()[-1])
    # SAC builds MLPs only: the default models are the ones it builds.
    assert [r["model"] for r in figures["results"]] == ["mlp"]
    assert figures["actions"] == "continuous[6]"  # HalfCheetah's Box
    code = main(["inference", "algorithm=ppo", "env=gym", "env.id=Pendulum-v1", "models=mlp",
                 "batch_sizes=2", "seconds=0.02"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["actions"] == "continuous[1]"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # SAC's MLP on Atari frames, timed under a "nature" label.
        (
            ["inference", "algorithm=sac", "env=mujoco", "models=mlp,nature"],
            "models=nature: algorithm=sac cannot build it (",
        ),
        # A continuous env's action length is the env's, not a count to set.
        (
            ["inference", "algorithm=ppo", "env=gym", "env.id=Pendulum-v1", "num_actions=4"],
            "num_actions=4 sets a discrete action count; env.id=Pendulum-v1 has continuous",
        ),
        # The config's "Use env=mujoco" came first, for a bench that trains on-policy only.
        (["learner", "algorithm=sac"], "learner: algorithm=sac is not on-policy"),
        (["learner", "algorithm=r2d2", "env=mujoco"], "learner: algorithm=r2d2 is not on-policy"),
        # The null env stayed null; env=atari sized its actors as Atari's (2 x 2 x 4 envs).
        (["pipeline", "env=atari"], "env=atari: pipeline steps a null env"),
        (["pipeline", "env.id=ALE/Breakout-v5"], "env.id=ALE/Breakout-v5: pipeline steps a null"),
        (["pipeline", "+env.kwargs.x=1", "env=gym"], "+env.kwargs.x=1 env=gym: pipeline steps"),
    ],
)
def test_what_a_bench_cannot_time_is_refused_with_its_own_reason(capsys, argv, message):
    short = {"inference": ["batch_sizes=1", "seconds=0.02"], "pipeline": ["seconds=0.2"]}
    code = main([*argv, *short.get(argv[0], [])])
    err = capsys.readouterr().err
    assert (code, err.count("\n"), message in err) == (2, 1, True), err


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_anakins_target_is_refused_by_its_own_name(capsys, value):
    # target=nan was refused as "stop_at_return=nan is not a number", a key never typed.
    code = main(["anakin", "mode=time-to-target", "seeds=0", f"target={value}", "max_minutes=0.01"])
    err = capsys.readouterr().err
    assert (code, err.startswith(f"seedq-bench anakin: target={value}: ")) == (2, True), err
