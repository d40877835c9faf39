"""Google Research Football (gfootball 2.10.2), ``env.kind=football``, as an :class:`EnvBatch`.

gfootball speaks the old gym API (``reset() -> obs``, ``step(a) -> (obs, reward, done, info)``)
and each game is one C++ engine, so :class:`FootballBatch` holds its engines in the actor process
and steps them in a Python loop, resetting a game on the step its episode ends.

Controlled players. With ``env.controlled_players=P`` the agent controls ``P`` left players of
each game (gfootball's ``number_of_left_players_agent_controls``): a game then returns an
observation per player (a leading ``[P]`` axis, which gfootball drops when ``P`` is 1), takes one
action per player and returns one reward per player (the team's goal reward for each, plus that
player's own checkpoint rewards with ``scoring,checkpoints``). Each controlled player is one row
(env) of the batch: a batch of ``num_envs`` rows holds ``num_envs // P`` games, game ``g``
owning rows ``g * P`` to ``g * P + P - 1``, so the rest of seedq (one action, one reward, one
recurrent state per env id) is unchanged. The rows of a game share its episode: they end on the
same step, with the same flags, and each truncated row gets its player's last observation in
``final_obs``.

Ending an episode (gfootball's ``football_env_core.py``). ``done`` comes from a goal or, in the
academy scenarios, the ball going out of play or changing team (``end_episode_on_score``,
``end_episode_on_out_of_play``, ``end_episode_on_possession_change``): all states of the game,
so the episode is *terminated*. It also comes when the engine's clock reaches the scenario's
``game_duration`` (400 steps in the academy, 3000 in 11 vs 11): a time limit that neither
simple115 nor the mini-map shows, so the episode is *truncated* and the learner bootstraps from
its last observation. The clock is ``steps_left`` in the raw observation, read through
``env.unwrapped.observation()`` (the cached per-player list gfootball built for this step):
``done`` with ``steps_left <= 0`` is the time limit, unless a goal was scored on that very step
(``info["score_reward"] != 0``), which ends the episode by itself. Counting steps here would not
do: the engine's clock also runs while the ball is out of play, between agent steps.

Seeding. gfootball reseeds its engine on every reset from its config's
``game_engine_random_seed``; passed once at construction (``other_config_options``), every
episode would replay the same engine randomness. So game ``g`` gets a numpy generator seeded with
``seed + env_offset + g * P`` (the global id of its first row) and each reset writes a fresh draw
into the config of the unwrapped ``FootballEnv`` (its ``_config``, the only way in), as gfootball
does itself from Python's global ``random`` when no seed is given.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import io
import logging
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from seedq.envs.base import BatchBase, EnvError, StepBatch
from seedq.envs.config import EnvConfig, kind_setting
from seedq.schema import setting

logger = logging.getLogger(__name__)

# The install script of a clone of seedq's repository, which an editable install runs from,
# named by its full path where this seedq has it: the relative one was only right in the
# clone's root (from a run folder, bash found no such file).
_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_football.sh"
INSTALL_COMMAND = f"bash {_SCRIPT if _SCRIPT.is_file() else 'scripts/install_football.sh'}"
INSTALL_HINT = (
    "env=football needs Google Research Football (gfootball), which is not installed: run "
    f"`{INSTALL_COMMAND}`{'' if _SCRIPT.is_file() else ' in a clone of seedq'} (builds "
    "gfootball 2.10.2 from source, ~20 min; cached afterwards)"
)
# One frame of each representation as gfootball returns it for a single controlled player;
# stacking concatenates frames along the last axis. The mini-map is 96 wide, 72 high, with
# planes (left team, right team, ball, active player) holding 0 or 255.
REPRESENTATIONS: dict[str, tuple[tuple[int, ...], np.dtype]] = {
    "simple115v2": ((115,), np.dtype(np.float32)),
    "simple115": ((115,), np.dtype(np.float32)),
    "extracted": ((72, 96, 4), np.dtype(np.uint8)),
}
REWARDS = ("scoring", "scoring,checkpoints")
FRAME_STACKS = (1, 4)  # gfootball's stacked=True keeps the last 4 observations
MAX_CONTROLLED_PLAYERS = 11  # a full team; each scenario may allow fewer
# Packages under scenarios/ that are not scenarios.
_NOT_SCENARIOS = frozenset({"tests"})
# gfootball draws its own engine seeds from [0, 2e9] (scenario_builder.py).
_MAX_ENGINE_SEED = 2_000_000_000


def import_gfootball() -> Any:
    """``gfootball.env``, or an EnvError that says how to install it.

    On the first import, gym 0.25's notice on stderr (that it does not support NumPy 2, which
    does not concern the parts gfootball uses) is logged at debug level instead.
    """
    football_env = sys.modules.get("gfootball.env")
    if football_env is not None:
        return football_env
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            import gfootball.env as football_env
    except ImportError as exc:
        if exc.name == "gfootball" or (exc.name or "").startswith("gfootball."):
            raise EnvError(INSTALL_HINT) from exc
        raise EnvError(
            f"gfootball is installed but cannot be imported ({exc}); rerun "
            f"`{INSTALL_COMMAND}`, which installs its run-time dependencies (the "
            "`football` extra of seedq's pyproject.toml) and rebuilds it if needed"
        ) from exc
    if captured.getvalue().strip():
        logger.debug("importing gfootball printed: %s", captured.getvalue().strip())
    # gfootball logs every episode end at INFO through absl ("Episode reward: ..."): one line
    # per episode per env in the actor logs. seedq reports episodes itself.
    logging.getLogger("absl").setLevel(logging.WARNING)
    return football_env


def football_scenarios() -> list[str]:
    """The scenario names gfootball knows (modules of ``gfootball/scenarios``)."""
    import_gfootball()
    from gfootball.env import scenario_builder

    return sorted(set(scenario_builder.all_scenarios()) - _NOT_SCENARIOS)


def check_scenario(scenario: str, scenarios: Sequence[str]) -> None:
    """Raise an EnvError naming ``env.scenario`` unless it is one of ``scenarios``.

    Checked before any engine exists: gfootball calls ``sys.exit(1)`` on an unknown scenario.
    """
    if scenario in scenarios:
        return
    close = difflib.get_close_matches(scenario, scenarios, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise EnvError(
        f"env.scenario={scenario!r} is not a gfootball scenario.{hint} Choose one of "
        f"{list(scenarios)}"
    )


def controllable_players(scenario: str) -> int:
    """How many left players of ``scenario`` the agent may control (its controllable ones).

    Builds the scenario's config only, no engine; ``scenario`` must be a known one (gfootball
    exits the process on an unknown name).
    """
    import_gfootball()
    from gfootball.env import config

    return int(config.Config({"level": scenario}).ScenarioConfig().controllable_left_players)


def check_controlled_players(scenario: str, controlled_players: int, available: int) -> None:
    """Raise an EnvError naming ``env.controlled_players`` if ``scenario`` has too few players.

    Checked before any engine exists: gfootball fails with an IndexError deep in its engine
    when asked to control more players than the scenario has (academy_3_vs_1_with_keeper with
    6), or leaves the extra ones without a player to control (5_vs_5, whose keeper is not
    controllable, with 5).
    """
    if controlled_players > available:
        raise EnvError(
            f"env.controlled_players={controlled_players} is more than scenario {scenario!r} "
            f"allows: it has {available} controllable left players; use at most {available}"
        )


@dataclass
class FootballConfig(EnvConfig):
    """``env=football``: the scenario, observation, reward and the players the agent controls."""

    kind: str = kind_setting("football")
    id: str = setting(
        "academy_empty_goal_close",
        "Names the run directory and the logs; env=football sets it to env.scenario.",
    )
    max_episode_steps: int | None = setting(
        None,
        "Truncate episodes after this many agent steps (> 0); null keeps the scenario's clock.",
    )
    scenario: str = setting(
        "academy_empty_goal_close",
        "The gfootball scenario, e.g. academy_3_vs_1_with_keeper or 11_vs_11_easy_stochastic.",
    )
    representation: str = setting(
        "simple115v2",
        f"Observation, one of {list(REPRESENTATIONS)}: simple115v2 and simple115 are float32 "
        "[115 * frame_stack] vectors (MLP), extracted the 72x96 super mini-map, uint8 "
        "[4 * frame_stack, 72, 96] (CNN).",
    )
    rewards: str = setting(
        "scoring",
        f"Reward, one of {list(REWARDS)}: goals, plus each player's own rewards for carrying "
        "the ball towards the goal with checkpoints.",
    )
    frame_stack: int = setting(
        4,
        f"One of {list(FRAME_STACKS)}: gfootball stacks the last 4 observations or none "
        "(env=football sets 1).",
    )
    controlled_players: int = setting(
        1,
        f"Left players the agent controls in each game, 1-{MAX_CONTROLLED_PLAYERS} (at most "
        "the scenario's); each is one env, so actor.envs_per_batch must be a multiple of it.",
    )

    rows_key: ClassVar[str] = "controlled_players"

    def rows_per_env(self) -> int:
        """Rows one game fills: one per controlled player."""
        return int(self.controlled_players)

    def check(self) -> None:
        """The football values the backend supports.

        The scenario, and how many of its players the agent may control, are checked against
        gfootball when the env is built (:func:`check_scenario`,
        :func:`check_controlled_players`).
        """
        super().check()
        if self.representation not in REPRESENTATIONS:
            raise EnvError(
                f"env.representation={self.representation!r} is not allowed; choose one of "
                f"{list(REPRESENTATIONS)}"
            )
        if self.rewards not in REWARDS:
            raise EnvError(
                f"env.rewards={self.rewards!r} is not allowed; choose one of {list(REWARDS)}"
            )
        if self.frame_stack not in FRAME_STACKS:
            raise EnvError(
                f"env.frame_stack={self.frame_stack!r} is not allowed with env=football; choose "
                f"{' or '.join(map(str, FRAME_STACKS))} (gfootball stacks the last 4 "
                "observations or none)"
            )
        if not 1 <= self.controlled_players <= MAX_CONTROLLED_PLAYERS:
            raise EnvError(
                f"env.controlled_players={self.controlled_players!r} is out of range; it must be "
                f"in [1, {MAX_CONTROLLED_PLAYERS}] (left players of one team; the scenario may "
                "have fewer)"
            )
        if not self.scenario:
            raise EnvError("env.scenario is empty; name a gfootball scenario, e.g. academy_corner")


def observation_spec(representation: str, frame_stack: int) -> tuple[tuple[int, ...], np.dtype]:
    """seedq's ``(obs_shape, dtype)``: ``[115 * stack]`` vectors, ``[4 * stack, 72, 96]`` maps."""
    shape, dtype = REPRESENTATIONS[representation]
    if len(shape) == 1:
        return (shape[0] * frame_stack,), dtype
    height, width, planes = shape
    return (planes * frame_stack, height, width), dtype


def create_football_env(cfg: FootballConfig, engine_seed: int) -> Any:
    """One gfootball env (old gym API) for ``cfg``, its engine seeded with ``engine_seed``."""
    football_env = import_gfootball()
    with warnings.catch_warnings():
        # gym 0.25 warns once per wrapper that gfootball uses the old step API.
        warnings.simplefilter("ignore", DeprecationWarning)
        return football_env.create_environment(
            env_name=cfg.scenario,
            representation=cfg.representation,
            rewards=cfg.rewards,
            stacked=cfg.frame_stack > 1,
            number_of_left_players_agent_controls=cfg.controlled_players,
            render=False,
            other_config_options={"game_engine_random_seed": int(engine_seed)},
        )


def _engine_seed_streams(
    base: int | None, num_games: int, stride: int
) -> list[np.random.Generator]:
    """One generator per game: ``base + g * stride`` for game ``g``, or fresh entropy."""
    return [
        np.random.default_rng(None if base is None else base + g * stride) for g in range(num_games)
    ]


def _draw_engine_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(_MAX_ENGINE_SEED + 1))


def _set_engine_seed(env: Any, engine_seed: int) -> None:
    """Make the next reset of ``env`` seed its engine with ``engine_seed`` (see module doc)."""
    env.unwrapped._config["game_engine_random_seed"] = int(engine_seed)


def _time_ran_out(env: Any, info: dict) -> bool:
    """Whether an episode that just ended was cut by the clock rather than ended by play."""
    steps_left = env.unwrapped.observation()[0]["steps_left"]
    return steps_left <= 0 and not info.get("score_reward", 0)


def _num_actions(action_space: Any) -> int:
    """Actions per player: ``Discrete(n)`` for one player, ``MultiDiscrete([n] * P)`` for more."""
    n = getattr(action_space, "n", None)
    return int(n if n is not None else action_space.nvec[0])


class FootballBatch(BatchBase):
    """``num_envs`` rows, ``env.controlled_players`` per gfootball game, with same-step autoreset.

    See the module doc for the rows of a game, the episode ends and the seeding.

    Observations (one player's, per row): simple115/simple115v2 float32 ``[115 * frame_stack]``;
    extracted (the super mini-map) uint8 ``[4 * frame_stack, 72, 96]``, channels-first with the
    four planes of each frame together, oldest frame first. Actions: gfootball's default set of
    19, one per row. Rewards: each row's player's own.

    ``env.max_episode_steps`` (optional) truncates episodes after that many agent steps, on top
    of the scenario's own clock.

    Args:
        cfg: the ``env`` section (``kind: football``).
        num_envs: rows in the batch, a multiple of ``cfg.controlled_players``.
        seed: base seed; game ``g`` draws its engine seeds from ``seed + env_offset + g * P``.
        env_offset: global index of the first row.
        make_env: builds one old-API game from an engine seed; tests pass a fake.
    """

    def __init__(
        self,
        cfg: FootballConfig,
        num_envs: int,
        seed: int | None,
        env_offset: int = 0,
        make_env: Callable[[int], Any] | None = None,
    ) -> None:
        cfg.check()
        players = cfg.rows_per_env()
        if num_envs % players:
            raise EnvError(
                f"a football batch of {num_envs} envs (actor.envs_per_batch) cannot be split into "
                f"games of env.controlled_players={players} rows, one per controlled player; "
                f"make actor.envs_per_batch a multiple of {players}"
            )
        if make_env is None:
            check_scenario(cfg.scenario, football_scenarios())
            check_controlled_players(cfg.scenario, players, controllable_players(cfg.scenario))
            make_env = functools.partial(create_football_env, cfg)
        obs_shape, obs_dtype = observation_spec(cfg.representation, cfg.frame_stack)
        self._players = players
        self._num_games = num_envs // players
        # gfootball's own layout of one player's observation: [115 * stack] or [72, 96, planes].
        frame, _ = REPRESENTATIONS[cfg.representation]
        self._raw_shape = (*frame[:-1], frame[-1] * cfg.frame_stack)
        self._channels_first = len(obs_shape) == 3
        self._max_steps = cfg.max_episode_steps
        base = None if seed is None else int(seed) + env_offset
        self._rngs = _engine_seed_streams(base, self._num_games, players)
        self._envs: list[Any] = []
        try:
            for rng in self._rngs:
                self._envs.append(make_env(_draw_engine_seed(rng)))
        except Exception:
            self.close()
            raise
        num_actions = _num_actions(self._envs[0].action_space)
        super().__init__(num_envs, obs_shape, obs_dtype, num_actions, seed, env_offset)
        self._steps = np.zeros(self._num_games, dtype=np.int64)
        logger.info(
            "football %s: %d envs (%d games x %d controlled players), %s, obs %s %s, %d actions, "
            "rewards %s",
            cfg.scenario,
            num_envs,
            self._num_games,
            players,
            cfg.representation,
            self.obs_shape,
            self.obs_dtype,
            self.num_actions,
            cfg.rewards,
        )

    def _layout(self, raw: Any) -> np.ndarray:
        """One game's raw observation as ``[P, *obs_shape]`` (callers copy it into their batch).

        gfootball drops the player axis when one player is controlled.
        """
        raw = np.asarray(raw, dtype=self.obs_dtype)
        expected = self._raw_shape if self._players == 1 else (self._players, *self._raw_shape)
        if raw.shape != expected:
            raise EnvError(
                f"gfootball returned an observation of shape {raw.shape}; expected {expected} for "
                "this representation, frame_stack and controlled_players"
            )
        raw = raw.reshape(self._players, *self._raw_shape)
        if self._channels_first:
            raw = raw.transpose(0, 3, 1, 2)  # [P, 72, 96, planes] -> [P, planes, 72, 96]
        return raw

    def _reset_game(self, g: int) -> np.ndarray:
        env = self._envs[g]
        _set_engine_seed(env, _draw_engine_seed(self._rngs[g]))
        self._steps[g] = 0
        return self._layout(env.reset())

    def reset(self, seed: int | None = None) -> np.ndarray:
        base = self._reset_seed(seed)
        if base is not None:
            self._rngs = _engine_seed_streams(base, self._num_games, self._players)
        obs = np.empty((self.num_envs, *self.obs_shape), dtype=self.obs_dtype)
        p = self._players
        for g in range(self._num_games):
            obs[g * p : (g + 1) * p] = self._reset_game(g)
        return obs

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        n, p = self.num_envs, self._players
        obs = np.empty((n, *self.obs_shape), dtype=self.obs_dtype)
        reward = np.empty(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        final_obs: list[np.ndarray] = []
        self._steps += 1
        per_game = actions.reshape(self._num_games, p).tolist()
        for g, game_actions in enumerate(per_game):
            env, rows = self._envs[g], slice(g * p, (g + 1) * p)
            # One player takes a bare action (gfootball's single-agent wrappers), more a list.
            raw, r, done, info = env.step(game_actions[0] if p == 1 else game_actions)
            reward[rows] = np.asarray(r, dtype=np.float32).reshape(p)
            limit = self._max_steps is not None and self._steps[g] >= self._max_steps
            if done or limit:
                if done and not _time_ran_out(env, info):
                    terminated[rows] = True
                else:
                    truncated[rows] = True
                    # Games in order, a game's rows contiguous: final_obs in increasing row order.
                    final_obs.append(self._layout(raw))
                obs[rows] = self._reset_game(g)
            else:
                obs[rows] = self._layout(raw)
        return StepBatch(obs, reward, terminated, truncated, self._final_obs(final_obs))

    def close(self) -> None:
        # gfootball's close hands the engine back to a per-process pool for the next env.
        for env in getattr(self, "_envs", []):
            env.close()
        self._envs = []
