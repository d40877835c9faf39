"""env=football: gfootball's old gym API adapted to seedq's EnvBatch contract.

Most tests drive :class:`FootballBatch` with a fake old-API env, so they run without gfootball;
the tests at the end build real engines and skip when gfootball is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

import seedq
from seedq.actor import football
from seedq.actor.envs import KINDS, EnvError, make_env_batch
from seedq.actor.football import INSTALL_HINT, FootballBatch, check_scenario
from seedq.cli import to_config
from seedq.config import ConfigError, EnvConfig, register_configs

CONF_DIR = str(Path(seedq.__file__).parent / "conf")

register_configs()


class FakeFootballEnv:
    """gfootball's surface as FootballBatch uses it: old gym API, clock, goals, engine seed.

    An episode ends by a goal (reward 1) after ``goal_at`` steps, or by the clock after
    ``duration`` steps (``steps_left`` reaches 0 in the raw observation). Every value of the
    observation is the step within the episode, plus ``10 * plane`` for mini-map planes, so
    tests can see which step and which plane they hold.
    """

    def __init__(
        self,
        engine_seed: int,
        representation: str = "simple115v2",
        frame_stack: int = 1,
        duration: int = 5,
        goal_at: int | None = None,
    ) -> None:
        self.unwrapped = self
        self._config = {"game_engine_random_seed": engine_seed}
        self.action_space = SimpleNamespace(n=19)
        self.engine_seeds = [engine_seed]  # the seed of each episode, construction's first
        self.representation, self.frame_stack = representation, frame_stack
        self.duration, self.goal_at = duration, goal_at
        self.t = 0
        self.closed = False

    def _obs(self) -> np.ndarray:
        if self.representation == "extracted":
            planes = np.arange(4 * self.frame_stack) % 4
            return np.broadcast_to(10 * planes + self.t, (72, 96, 4 * self.frame_stack)).astype(
                np.uint8
            )
        return np.full(115 * self.frame_stack, self.t, dtype=np.float32)

    def observation(self) -> list[dict]:
        return [{"steps_left": self.duration - self.t}]

    def reset(self) -> np.ndarray:
        self.t = 0
        self.engine_seeds.append(self._config["game_engine_random_seed"])
        return self._obs()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, dict]:
        self.t += 1
        goal = self.t == self.goal_at
        done = goal or self.t >= self.duration
        return self._obs(), float(goal), done, {"score_reward": int(goal)}

    def close(self) -> None:
        self.closed = True


def fake_batch(
    goals: list[int | None], duration: int = 5, seed: int = 0, **cfg: object
) -> tuple[FootballBatch, list[FakeFootballEnv]]:
    """A batch of one fake env per entry of ``goals`` (the step it scores on, or None)."""
    env_cfg = EnvConfig(**{"kind": "football", "frame_stack": 1, **cfg})  # as conf/env/football
    made: list[FakeFootballEnv] = []

    def make_env(engine_seed: int) -> FakeFootballEnv:
        env = FakeFootballEnv(
            engine_seed,
            env_cfg.representation,
            env_cfg.frame_stack,
            duration=duration,
            goal_at=goals[len(made)],
        )
        made.append(env)
        return env

    return FootballBatch(env_cfg, len(goals), seed, make_env=make_env), made


def run(batch: FootballBatch, steps: int):
    batch.reset()
    actions = np.zeros(batch.num_envs, dtype=np.int64)
    return [batch.step(actions) for _ in range(steps)]


# --------------------------------------------------------------------- episode ends


def test_clock_ends_are_truncated_and_goals_terminated():
    batch, _ = fake_batch(goals=[2, None, None], duration=2)
    out = run(batch, 2)[-1]
    assert (out.terminated.tolist(), out.truncated.tolist()) == (
        [True, False, False],
        [False, True, True],
    )


def test_truncated_envs_return_their_last_observation_and_start_a_new_episode():
    batch, _ = fake_batch(goals=[None, 2], duration=3)
    out = run(batch, 3)[-1]
    # Env 0 ran out of time on step 3; env 1 scored on step 2 and has made 1 step since.
    assert (out.final_obs[:, 0].tolist(), out.obs[:, 0].tolist()) == ([3.0], [0.0, 1.0])


def test_goal_ends_carry_no_final_observation():
    batch, _ = fake_batch(goals=[1])
    out = run(batch, 1)[0]
    assert (out.terminated[0], out.reward[0], out.final_obs.shape) == (True, 1.0, (0, 115))


def test_a_goal_on_the_last_step_is_a_termination():
    batch, _ = fake_batch(goals=[3], duration=3)
    out = run(batch, 3)[-1]
    assert (out.terminated[0], out.truncated[0]) == (True, False)


def test_max_episode_steps_truncates_before_the_scenario_clock():
    batch, _ = fake_batch(goals=[None], duration=400, max_episode_steps=2)
    ends = [bool(out.truncated[0]) for out in run(batch, 4)]
    assert ends == [False, True, False, True]


# --------------------------------------------------------------------- observations


@pytest.mark.parametrize(
    ("representation", "frame_stack", "shape", "dtype"),
    [
        ("simple115v2", 1, (115,), np.float32),
        ("simple115", 4, (460,), np.float32),
        ("extracted", 1, (4, 72, 96), np.uint8),
        ("extracted", 4, (16, 72, 96), np.uint8),
    ],
)
def test_observation_layout_per_representation(representation, frame_stack, shape, dtype):
    batch, _ = fake_batch([None, None], representation=representation, frame_stack=frame_stack)
    out = run(batch, 1)[0]
    assert (batch.obs_shape, batch.obs_dtype, out.obs.shape, out.obs.dtype) == (
        shape,
        np.dtype(dtype),
        (2, *shape),
        np.dtype(dtype),
    )


def test_mini_map_planes_become_channels():
    batch, _ = fake_batch(goals=[None], representation="extracted", frame_stack=4)
    out = run(batch, 1)[0]
    # Plane p of every stacked frame holds 10 * p + step (step 1 here).
    assert out.obs[0, :, 5, 7].tolist() == [1, 11, 21, 31] * 4


# --------------------------------------------------------------------- seeding and closing


def test_every_episode_of_every_env_gets_its_own_reproducible_engine_seed():
    seeds = []
    for _ in range(2):
        batch, envs = fake_batch(goals=[None, None], duration=1, seed=7)
        run(batch, 2)
        seeds.append([env.engine_seeds for env in envs])
    flat = [s for env_seeds in seeds[0] for s in env_seeds[1:]]  # reset seeds, both envs
    assert (seeds[0] == seeds[1], len(set(flat)) == len(flat)) == (True, True)


def test_close_releases_every_engine():
    batch, envs = fake_batch(goals=[None, None])
    batch.close()
    batch.close()
    assert [env.closed for env in envs] == [True, True]


def test_out_of_range_actions_are_refused():
    batch, _ = fake_batch(goals=[None])
    batch.reset()
    with pytest.raises(EnvError, match=r"\[0, 19\)"):
        batch.step(np.array([19]))


# --------------------------------------------------------------------- configuration


def compose_config(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=["run_dir=/tmp/seedq-test", *overrides])


@pytest.mark.parametrize("algorithm", ["vtrace", "r2d2"])
def test_football_composes_with_each_algorithm_and_its_tuning(algorithm):
    config = to_config(compose_config(f"algorithm={algorithm}", "env=football"))
    env = config.env
    assert (env.kind, env.id, env.representation, env.frame_stack, config.algorithm.gamma) == (
        "football",
        "academy_empty_goal_close",
        "simple115v2",
        1,
        0.997,
    )


def test_the_run_is_named_after_the_scenario():
    env = to_config(compose_config("env=football", "env.scenario=academy_corner")).env
    assert (env.scenario, env.id) == ("academy_corner", "academy_corner")


@pytest.mark.parametrize(
    ("override", "key", "allowed"),
    [
        ("env.representation=pixels", "env.representation", "simple115v2"),
        ("env.rewards=checkpoints", "env.rewards", "scoring,checkpoints"),
        ("env.frame_stack=2", "env.frame_stack", "1 or 4"),
        ("env.controlled_players=2", "env.controlled_players", "use 1"),
    ],
)
def test_bad_football_values_name_the_key_and_what_is_allowed(override, key, allowed):
    with pytest.raises(ConfigError, match=key) as info:
        to_config(compose_config("env=football", override))
    assert allowed in str(info.value)


@pytest.mark.parametrize("representation", list(football.REPRESENTATIONS))
@pytest.mark.parametrize("rewards", football.REWARDS)
@pytest.mark.parametrize("frame_stack", football.FRAME_STACKS)
def test_config_validation_accepts_what_the_backend_supports(representation, rewards, frame_stack):
    env = to_config(
        compose_config(
            "env=football",
            f"env.representation={representation}",
            f"env.rewards='{rewards}'",  # quoted: a bare comma would make a Hydra sweep
            f"env.frame_stack={frame_stack}",
        )
    ).env
    assert (env.representation, env.rewards, env.frame_stack) == (
        representation,
        rewards,
        frame_stack,
    )


def test_football_is_an_env_kind():
    assert "football" in KINDS


def test_unknown_scenario_names_the_key_and_suggests_close_names():
    with pytest.raises(EnvError, match=r"env.scenario='academy_corners'.*academy_corner"):
        check_scenario("academy_corners", ["academy_corner", "11_vs_11_stochastic"])


def test_backend_refuses_representations_it_cannot_lay_out():
    with pytest.raises(EnvError, match="env.representation='pixels'"):
        fake_batch(goals=[None], representation="pixels")


# --------------------------------------------------------------------- gfootball missing


def test_missing_gfootball_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "gfootball", None)
    monkeypatch.setitem(sys.modules, "gfootball.env", None)
    with pytest.raises(EnvError) as info:
        make_env_batch(EnvConfig(kind="football"), 1, seed=0)
    assert str(info.value) == INSTALL_HINT


def test_seedq_train_without_gfootball_fails_at_start_up_with_one_message(tmp_path):
    # A `gfootball` module that is not there, first on the path of the seedq-train process.
    (tmp_path / "gfootball.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'gfootball'\", name='gfootball')\n"
    )
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "seedq.cli", "env=football", f"hydra.run.dir={tmp_path / 'run'}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    errors = [line for line in result.stdout.splitlines() if " ERROR " in line]
    assert (result.returncode, len(errors), INSTALL_HINT in result.stdout) == (2, 1, True)


# --------------------------------------------------------------------- real gfootball


def _needs_gfootball() -> None:
    pytest.importorskip(
        "gfootball.env", reason="gfootball is not installed (bash scripts/install_football.sh)"
    )


@pytest.mark.parametrize(
    ("representation", "frame_stack", "shape"),
    [("simple115v2", 1, (115,)), ("extracted", 4, (16, 72, 96))],
)
def test_real_academy_episodes_end_and_restart(representation, frame_stack, shape):
    _needs_gfootball()
    cfg = EnvConfig(
        kind="football",
        scenario="academy_empty_goal_close",
        representation=representation,
        frame_stack=frame_stack,
    )
    with make_env_batch(cfg, 2, seed=0) as env:
        env.reset()
        rng = np.random.default_rng(0)
        outs = [env.step(rng.integers(env.num_actions, size=2)) for _ in range(450)]
    ends = sum(int((out.terminated | out.truncated).sum()) for out in outs)
    # 400-step episodes: each env ends at least once, by play or by the clock.
    assert (env.obs_shape, env.num_actions, outs[-1].obs.shape, ends >= 2) == (
        shape,
        19,
        (2, *shape),
        True,
    )


def test_real_clock_end_is_a_truncation_with_the_last_observation():
    _needs_gfootball()
    # Nobody moves in academy_run_to_score while the player idles: only the clock ends it.
    cfg = EnvConfig(kind="football", scenario="academy_run_to_score", frame_stack=1)
    with make_env_batch(cfg, 1, seed=0) as env:
        env.reset()
        outs = [env.step(np.zeros(1, dtype=np.int64)) for _ in range(401)]
    ends = [(t, bool(o.terminated[0]), bool(o.truncated[0])) for t, o in enumerate(outs, 1)]
    ended = [end for end in ends if end[1] or end[2]]
    assert (ended, outs[-1].final_obs.shape) == ([(401, False, True)], (1, 115))


def test_real_unknown_scenario_lists_gfootball_scenarios():
    _needs_gfootball()
    with pytest.raises(EnvError, match="academy_3_vs_1_with_keeper"):
        make_env_batch(EnvConfig(kind="football", scenario="academy_3_vs_1"), 1, seed=0)


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm=vtrace", "algorithm.batch_size=4", "algorithm.unroll_length=10"],
        [
            "algorithm=r2d2",
            "env.representation=extracted",
            "env.frame_stack=4",
            "algorithm.sequence_length=8",
            "algorithm.burn_in=4",
            "algorithm.batch_size=4",
            "algorithm.replay_min_size=8",
            "algorithm.replay_capacity=64",
            "algorithm.model.lstm_size=32",
            "algorithm.model.head_size=32",
        ],
    ],
    ids=["vtrace-simple115v2", "r2d2-extracted"],
)
def test_real_football_trains_through_actor_and_learner(tmp_path, overrides):
    _needs_gfootball()
    from seedq.launch.local import LocalRun

    cfg = compose_config(
        "env=football",
        "total_env_steps=400",
        "actor.num_actors=1",
        "actor.envs_per_batch=4",
        "log_interval_s=1",
        f"run_dir={tmp_path}",
        *overrides,
    )
    summary = LocalRun(to_config(cfg), str(tmp_path)).run()
    assert (summary.env_steps >= 400, summary.updates >= 1) == (True, True)
    # The run's checkpoint plays football through seedq-eval (video is refused: no OpenGL).
    from seedq.evaluate import main as eval_main

    assert eval_main([f"checkpoint={tmp_path}", "episodes=1"]) == 0
    assert eval_main([f"checkpoint={tmp_path}", "episodes=1", "video=true"]) != 0
