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
from seedq.cli import to_config
from seedq.config import ConfigError, register_configs
from seedq.envs import (
    KINDS,
    EnvConfig,
    EnvError,
    FootballConfig,
    football,
    make_env_batch,
    rows_per_env,
)
from seedq.envs.football import INSTALL_HINT, FootballBatch, check_scenario
from seedq.messages import EnvSpec

CONF_DIR = str(Path(seedq.__file__).parent / "conf")

register_configs()


class FakeFootballEnv:
    """gfootball's surface as FootballBatch uses it: old gym API, clock, goals, engine seed.

    An episode ends by a goal (reward 1) after ``goal_at`` steps, or by the clock after
    ``duration`` steps (``steps_left`` reaches 0 in the raw observation). Like gfootball, a game
    of ``players`` controlled players returns observations and rewards with a leading player
    axis and takes a list of actions; one player gets a bare observation, reward and action.
    Player ``p`` is paid the goal plus ``p / 10`` on every step, standing in for its own
    checkpoint rewards. Every value of a vector observation is ``1000 * game + 100 * player +
    step``; every value of mini-map plane ``k`` is ``10 * k + step``; so tests can see which
    game, player, step and plane they hold.
    """

    def __init__(
        self,
        engine_seed: int,
        representation: str = "simple115v2",
        frame_stack: int = 1,
        duration: int = 5,
        goal_at: int | None = None,
        players: int = 1,
        game: int = 0,
    ) -> None:
        self.unwrapped = self
        self._config = {"game_engine_random_seed": engine_seed}
        self.action_space = (
            SimpleNamespace(n=19) if players == 1 else SimpleNamespace(nvec=np.full(players, 19))
        )
        self.engine_seeds = [engine_seed]  # the seed of each episode, construction's first
        self.representation, self.frame_stack = representation, frame_stack
        self.duration, self.goal_at = duration, goal_at
        self.players, self.game = players, game
        self.actions: list[object] = []
        self.t = 0
        self.closed = False

    def _player_obs(self, player: int) -> np.ndarray:
        if self.representation == "extracted":
            planes = np.arange(4 * self.frame_stack) % 4
            return np.broadcast_to(10 * planes + self.t, (72, 96, 4 * self.frame_stack)).astype(
                np.uint8
            )
        value = 1000 * self.game + 100 * player + self.t
        return np.full(115 * self.frame_stack, value, dtype=np.float32)

    def _obs(self) -> np.ndarray:
        if self.players == 1:
            return self._player_obs(0)
        return np.stack([self._player_obs(p) for p in range(self.players)])

    def observation(self) -> list[dict]:
        return [{"steps_left": self.duration - self.t}] * self.players

    def reset(self) -> np.ndarray:
        self.t = 0
        self.engine_seeds.append(self._config["game_engine_random_seed"])
        return self._obs()

    def step(self, action: object) -> tuple[np.ndarray, object, bool, dict]:
        if self.players > 1:
            assert len(action) == self.players  # gfootball asserts one action per player
        self.actions.append(action)
        self.t += 1
        goal = self.t == self.goal_at
        done = goal or self.t >= self.duration
        reward = np.float32(goal) + np.arange(self.players, dtype=np.float32) / 10
        reward = float(reward[0]) if self.players == 1 else reward
        return self._obs(), reward, done, {"score_reward": int(goal)}

    def close(self) -> None:
        self.closed = True


def fake_batch(
    goals: list[int | None], duration: int = 5, seed: int = 0, **cfg: object
) -> tuple[FootballBatch, list[FakeFootballEnv]]:
    """A batch of one fake game per entry of ``goals`` (the step it scores on, or None), each
    filling ``controlled_players`` rows."""
    env_cfg = FootballConfig(**{"frame_stack": 1, **cfg})  # as conf/env/football
    made: list[FakeFootballEnv] = []

    def make_env(engine_seed: int) -> FakeFootballEnv:
        env = FakeFootballEnv(
            engine_seed,
            env_cfg.representation,
            env_cfg.frame_stack,
            duration=duration,
            goal_at=goals[len(made)],
            players=env_cfg.controlled_players,
            game=len(made),
        )
        made.append(env)
        return env

    rows = len(goals) * env_cfg.controlled_players
    return FootballBatch(env_cfg, rows, seed, make_env=make_env), made


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
    # Env 0 ran out of time on step 3; env 1 (game 1) scored on step 2 and has made 1 step since.
    assert (out.final_obs[:, 0].tolist(), out.obs[:, 0].tolist()) == ([3.0], [0.0, 1001.0])


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


# --------------------------------------------------------------------- controlled players


def test_each_game_fills_one_row_per_controlled_player():
    batch, games = fake_batch(goals=[None, None], controlled_players=3)
    obs = batch.reset()
    # Rows 0-2 are game 0's players 0-2, rows 3-5 game 1's.
    assert (batch.num_envs, len(games), obs[:, 0].tolist()) == (
        6,
        2,
        [0.0, 100.0, 200.0, 1000.0, 1100.0, 1200.0],
    )


def test_each_players_mini_map_becomes_a_row_of_channels():
    batch, _ = fake_batch(
        goals=[None], representation="extracted", frame_stack=4, controlled_players=2
    )
    out = run(batch, 1)[0]
    assert (out.obs.shape, out.obs[:, :, 5, 7].tolist()) == (
        (2, 16, 72, 96),
        [[1, 11, 21, 31] * 4] * 2,
    )


def test_each_row_acts_for_its_own_player():
    batch, games = fake_batch(goals=[None, None], controlled_players=3)
    batch.reset()
    batch.step(np.arange(6))
    assert [game.actions for game in games] == [[[0, 1, 2]], [[3, 4, 5]]]


def test_the_rows_of_a_game_end_together():
    batch, _ = fake_batch(goals=[2, None], duration=3, controlled_players=2)
    outs = run(batch, 3)
    # Game 0 scores on step 2; game 1 runs out of time on step 3.
    flags = [(out.terminated.tolist(), out.truncated.tolist()) for out in outs[1:]]
    assert flags == [
        ([True, True, False, False], [False] * 4),
        ([False] * 4, [False, False, True, True]),
    ]


def test_every_truncated_row_gets_its_players_last_observation_in_row_order():
    batch, _ = fake_batch(goals=[None, None], duration=2, controlled_players=2)
    out = run(batch, 2)[-1]
    assert (out.final_obs[:, 0].tolist(), out.obs[:, 0].tolist()) == (
        [2.0, 102.0, 1002.0, 1102.0],
        [0.0, 100.0, 1000.0, 1100.0],
    )


def test_each_row_is_paid_its_own_players_reward():
    batch, _ = fake_batch(goals=[2], controlled_players=3)
    rewards = np.stack([out.reward for out in run(batch, 2)])
    np.testing.assert_allclose(rewards, [[0.0, 0.1, 0.2], [1.0, 1.1, 1.2]], rtol=1e-6)


def test_each_game_seeds_its_engine_from_the_global_id_of_its_first_row():
    _, games = fake_batch(goals=[None, None], seed=7, controlled_players=3)
    first_seeds = [game.engine_seeds[0] for game in games]
    expected = [football._draw_engine_seed(np.random.default_rng(7 + row)) for row in (0, 3)]
    assert first_seeds == expected


def test_a_batch_that_does_not_split_into_games_is_refused():
    cfg = FootballConfig(frame_stack=1, controlled_players=3)
    with pytest.raises(EnvError, match=r"env.controlled_players=3.*actor.envs_per_batch"):
        FootballBatch(cfg, 4, 0, make_env=lambda seed: FakeFootballEnv(seed, players=3))


def test_more_players_than_the_scenario_has_names_the_key_and_the_limit():
    with pytest.raises(EnvError, match=r"env.controlled_players=3 .*use at most 2"):
        football.check_controlled_players("academy_empty_goal_close", 3, 2)


def test_rows_per_env_is_the_controlled_players_for_football_only():
    rows = [
        rows_per_env(FootballConfig(controlled_players=3)),
        rows_per_env(EnvConfig()),
    ]
    assert rows == [3, 1]


def test_probe_builds_one_game_with_a_row_per_controlled_player(monkeypatch):
    from seedq.envs import registry

    requested: list[int] = []

    def make_fake_batch(env_cfg: EnvConfig, num_envs: int, seed: int) -> FootballBatch:
        requested.append(num_envs)
        return FootballBatch(
            env_cfg, num_envs, seed, make_env=lambda s: FakeFootballEnv(s, players=3)
        )

    monkeypatch.setattr(registry, "make_env_batch", make_fake_batch)
    config = to_config(
        compose_config("env=football", "env.controlled_players=3", "actor.envs_per_batch=12")
    )
    spec = registry.env_spec(config.env, seed=config.seed)
    assert (requested, spec) == ([3], EnvSpec((115,), "float32", 19))


def test_eval_acts_for_every_player_and_reports_the_mean_of_their_returns(monkeypatch):
    from seedq import eval_episodes
    from seedq.agents.config import ModelConfig
    from seedq.agents.vtrace.network import build_network

    games: list[FakeFootballEnv] = []

    def make_fake_batch(env_cfg: EnvConfig, num_envs: int, seed: int) -> FootballBatch:
        def make_env(engine_seed: int) -> FakeFootballEnv:
            games.append(FakeFootballEnv(engine_seed, goal_at=2, players=3))
            return games[-1]

        return FootballBatch(env_cfg, num_envs, seed, make_env=make_env)

    monkeypatch.setattr(eval_episodes, "make_env_batch", make_fake_batch)
    model = build_network((115,), 19, ModelConfig(hidden_sizes=[8]), channels_last=False)
    policy = eval_episodes.Policy(model, {"algorithm": {"name": "vtrace"}})
    cfg = FootballConfig(frame_stack=1, controlled_players=3)
    returns = [total for total, _ in eval_episodes.env_batch_episodes(policy, cfg, 2, 0, False)]
    # Players are paid 0, 0.1, 0.2 a step plus the goal on step 2: returns 1, 1.2, 1.4.
    assert (returns, [len(a) for a in games[0].actions]) == (pytest.approx([1.2, 1.2]), [3] * 4)


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
        ("env.controlled_players=0", "env.controlled_players", "[1, 11]"),
        ("env.controlled_players=12", "env.controlled_players", "[1, 11]"),
        ("env.controlled_players=3", "env.controlled_players=3", "actor.envs_per_batch=16"),
    ],
)
def test_bad_football_values_name_the_key_and_what_is_allowed(override, key, allowed):
    with pytest.raises(ConfigError, match=key) as info:
        to_config(compose_config("env=football", override))
    assert allowed in str(info.value)


@pytest.mark.parametrize(("players", "envs_per_batch"), [(1, 5), (3, 12), (11, 11)])
def test_config_accepts_controlled_players_that_divide_the_actor_batch(players, envs_per_batch):
    config = to_config(
        compose_config(
            "env=football",
            f"env.controlled_players={players}",
            f"actor.envs_per_batch={envs_per_batch}",
        )
    )
    assert (config.env.controlled_players, config.actor.envs_per_batch) == (
        players,
        envs_per_batch,
    )


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
        make_env_batch(FootballConfig(), 1, seed=0)
    assert str(info.value) == INSTALL_HINT


def test_the_install_hint_names_the_script_wherever_the_run_starts() -> None:
    # `bash scripts/install_football.sh` was only right in the clone's root.
    script = INSTALL_HINT.split("`bash ", 1)[1].split("`", 1)[0]
    assert Path(script) == Path(__file__).resolve().parents[1] / "scripts" / "install_football.sh"


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
    cfg = FootballConfig(
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
    cfg = FootballConfig(scenario="academy_run_to_score", frame_stack=1)
    with make_env_batch(cfg, 1, seed=0) as env:
        env.reset()
        outs = [env.step(np.zeros(1, dtype=np.int64)) for _ in range(401)]
    ends = [(t, bool(o.terminated[0]), bool(o.truncated[0])) for t, o in enumerate(outs, 1)]
    ended = [end for end in ends if end[1] or end[2]]
    assert (ended, outs[-1].final_obs.shape) == ([(401, False, True)], (1, 115))


def test_real_unknown_scenario_lists_gfootball_scenarios():
    _needs_gfootball()
    with pytest.raises(EnvError, match="academy_3_vs_1_with_keeper"):
        make_env_batch(FootballConfig(scenario="academy_3_vs_1"), 1, seed=0)


def test_real_scenarios_limit_the_controlled_players():
    _needs_gfootball()
    cfg = FootballConfig(scenario="academy_empty_goal_close", controlled_players=3)
    # academy_3_vs_1_with_keeper: keeper and three attackers, all controllable.
    assert football.controllable_players("academy_3_vs_1_with_keeper") == 4
    with pytest.raises(EnvError, match=r"env.controlled_players=3 .*use at most 2"):
        make_env_batch(cfg, 3, seed=0)


def test_real_three_controlled_players_are_rows_of_one_game():
    _needs_gfootball()
    cfg = FootballConfig(
        scenario="academy_3_vs_1_with_keeper",
        rewards="scoring,checkpoints",
        frame_stack=1,
        controlled_players=3,
    )
    with make_env_batch(cfg, 6, seed=0) as env:
        first = env.reset()
        rng = np.random.default_rng(0)
        outs = []
        ended = np.zeros(2, dtype=bool)  # per game
        # Random play loses the ball or kicks it out within ~100 steps; the clock ends at 400.
        while not ended.all() and len(outs) < 401:
            outs.append(env.step(rng.integers(env.num_actions, size=6)))
            ended |= (outs[-1].terminated | outs[-1].truncated)[::3]
    ends = np.stack([o.terminated | o.truncated for o in outs]).reshape(len(outs), 2, 3)
    shared = bool((ends == ends[..., :1]).all())
    final_rows = all(o.final_obs.shape == (int(o.truncated.sum()), 115) for o in outs)
    # The player on the ball collects checkpoint rewards that its teammates do not.
    own_rewards = any((o.reward.reshape(2, 3) != o.reward.reshape(2, 3)[:, :1]).any() for o in outs)
    assert (first.shape, bool(ended.all()), shared, final_rows, own_rewards) == (
        (6, 115),
        True,
        True,
        True,
        True,
    )


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
    from seedq.arch.seed import SeedRun

    cfg = compose_config(
        "env=football",
        "total_env_steps=400",
        "actor.num_actors=1",
        "actor.envs_per_batch=4",
        "log_interval_s=1",
        f"run_dir={tmp_path}",
        *overrides,
    )
    summary = SeedRun(to_config(cfg), str(tmp_path)).run()
    assert (summary.env_steps >= 400, summary.updates >= 1) == (True, True)
    # The run's checkpoint plays football through seedq-eval (video is refused: no OpenGL).
    from seedq.evaluate import main as eval_main

    assert eval_main([f"checkpoint={tmp_path}", "episodes=1"]) == 0
    assert eval_main([f"checkpoint={tmp_path}", "episodes=1", "video=true"]) != 0


def test_real_football_trains_with_three_controlled_players(tmp_path):
    _needs_gfootball()
    from seedq.arch.seed import SeedRun
    from seedq.evaluate import main as eval_main

    cfg = compose_config(
        "env=football",
        "env.scenario=academy_3_vs_1_with_keeper",
        "env.controlled_players=3",
        "total_env_steps=300",
        "actor.num_actors=1",
        "actor.envs_per_batch=6",
        "algorithm=vtrace",
        "algorithm.batch_size=4",
        "algorithm.unroll_length=10",
        "log_interval_s=1",
        f"run_dir={tmp_path}",
    )
    run = SeedRun(to_config(cfg), str(tmp_path))
    summary = run.run()
    assert (run.spec, summary.env_steps >= 300, summary.updates >= 1) == (
        EnvSpec((115,), "float32", 19),
        True,
        True,
    )
    # seedq-eval plays the three players of one game with the run's policy.
    assert eval_main([f"checkpoint={tmp_path}", "episodes=1"]) == 0
