"""The ``env`` section of the config (Hydra group ``env``) and its validation.

``seedq/conf/env/<name>.yaml`` files pick a kind and hold only the values that differ from the
defaults here; ``seedq.config`` composes this section with the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seedq.envs.base import EnvError
from seedq.envs.football import FRAME_STACKS, MAX_CONTROLLED_PLAYERS, REPRESENTATIONS, REWARDS
from seedq.envs.gym import VECTORIZATIONS
from seedq.envs.minatar import MINATAR_MAX_EPISODE_STEPS
from seedq.envs.procgen import DISTRIBUTION_MODES
from seedq.envs.registry import BACKENDS, KINDS
from seedq.schema import ConfigError, check_positive, choice, in_unit_interval, positive, setting

_KINDS_HELP = "; ".join(f"{kind}: {b.summary}" for kind, b in BACKENDS.items())


@dataclass
class EnvConfig:
    """What the actors step: the env kind, its id, and the options of each backend."""

    kind: str = setting("cartpole", f"Env backend, one of {list(KINDS)} ({_KINDS_HELP}).")
    id: str = setting(
        "CartPole-v1",
        "Env id: a gymnasium id (cartpole, gym), an Atari id like ALE/Pong-v5 or a ROM name "
        "(atari), a MinAtar game like breakout (minatar), a Procgen game like coinrun (procgen), "
        "a MuJoCo id like HalfCheetah-v5 (mujoco); names the run directory (football sets it to "
        "env.scenario).",
    )
    max_episode_steps: int | None = setting(
        None,
        "Truncate episodes after this many agent steps (> 0); null keeps the env's own limit "
        "(atari: 108000 frames, football: the scenario's clock, minatar: "
        f"{MINATAR_MAX_EPISODE_STEPS} steps, mujoco: the id's 1000); procgen: must be null.",
    )
    frame_skip: int = setting(
        4, "atari: emulator frames per agent step, max-pooled over the last two (> 0)."
    )
    frame_stack: int = setting(
        4,
        "atari: frames stacked into one observation (> 0); football: one of "
        f"{list(FRAME_STACKS)} (gfootball stacks the last 4 observations or none).",
    )
    screen_size: int = setting(
        84, "atari: observed frames are resized to screen_size x screen_size pixels (> 0)."
    )
    grayscale: bool = setting(True, "atari: grey frames (true) or RGB, 3 channels each (false).")
    noop_max: int = setting(
        30, "atari: up to this many random no-op actions after each reset (>= 0; 0: none)."
    )
    episodic_life: bool = setting(
        False,
        "atari: a life loss reports terminated while the game goes on; only game over resets "
        "(DeepMind's semantics).",
    )
    repeat_action_probability: float = setting(
        0.25,
        "atari, minatar: sticky actions, the chance the previous action repeats, in [0, 1] "
        "(env=minatar sets MinAtar's 0.1).",
    )
    full_action_space: bool = setting(
        False,
        "atari: all 18 ALE actions (true) or only the game's minimal set (false); minatar: all "
        "6 actions or the game's minimal set.",
    )
    vectorization: str = setting(
        "sync",
        f"gym, mujoco: how envs are vectorised, one of {list(VECTORIZATIONS)}: sync steps them "
        "in the actor process, async in one subprocess each.",
    )
    num_threads: int = setting(
        0,
        "atari, procgen: C++ threads each vector env steps its envs with (>= 0); 0: sized at "
        "start so that the env threads of all actors (or Sebulba's env threads) together match "
        "the cores left after the learner's (logged), or one per core on an actor host of the "
        "ssh or slurm launcher.",
    )
    difficulty_ramping: bool = setting(
        True, "minatar: games speed up as an episode goes on (MinAtar's default)."
    )
    distribution_mode: str = setting(
        "hard", f"procgen: the level distribution, one of {list(DISTRIBUTION_MODES)}."
    )
    num_levels: int = setting(
        0, "procgen: distinct levels to play (>= 0; 0: unlimited), e.g. 200 to test generalisation."
    )
    start_level: int = setting(0, "procgen: seed of the first level (>= 0).")
    scenario: str = setting(
        "academy_empty_goal_close",
        "football: the gfootball scenario, e.g. academy_3_vs_1_with_keeper or "
        "11_vs_11_easy_stochastic.",
    )
    representation: str = setting(
        "simple115v2",
        f"football: observation, one of {list(REPRESENTATIONS)}: simple115v2 and simple115 are "
        "float32 [115 * frame_stack] vectors (MLP), extracted the 72x96 super mini-map, uint8 "
        "[4 * frame_stack, 72, 96] (CNN).",
    )
    rewards: str = setting(
        "scoring",
        f"football: reward, one of {list(REWARDS)}: goals, plus each player's own rewards for "
        "carrying the ball towards the goal with checkpoints.",
    )
    controlled_players: int = setting(
        1,
        f"football: left players the agent controls in each game, 1-{MAX_CONTROLLED_PLAYERS} "
        "(at most the scenario's); each is one env, so actor.envs_per_batch must be a multiple "
        "of it.",
    )
    obs_shape: list[int] = setting(
        help="fake: observation shape; at least 3 elements (env id, step, episode).",
        factory=lambda: [4],
    )
    obs_dtype: str = setting("float32", "fake: observation numpy dtype, e.g. float32 or uint8.")
    num_actions: int = setting(
        2, "fake: size of the discrete action space, or length of the continuous one (> 0)."
    )
    continuous_actions: bool = setting(
        False, "fake: actions are float vectors of num_actions values in [-1, 1]."
    )
    episode_length: int = setting(
        10, "fake: steps per episode of env 0; env g runs episode_length + g % 3 (> 0)."
    )
    truncate_episodes: bool = setting(
        False, "fake: episodes end truncated (true, with a final observation) or terminated."
    )
    nan_every: int = setting(
        0,
        "fake: every nan_every-th step of a batch gives env 0 a NaN reward and, for float "
        "observations, a NaN observation (fault-injection tests; 0: never).",
    )


def validate_env(env: Any, actor: Any) -> None:
    """Check the ``env`` section (an EnvConfig or DictConfig of one) and the actor batch size.

    Raises:
        ConfigError: naming the bad key and what is allowed; the backend's own checks (e.g.
            football's) included.
    """
    choice("env.kind", env.kind, KINDS)
    choice("env.vectorization", env.vectorization, VECTORIZATIONS)
    check_positive(
        env, "env", ["frame_skip", "frame_stack", "screen_size", "num_actions", "episode_length"]
    )
    positive("env.noop_max", env.noop_max, zero_ok=True)
    positive("env.num_threads", env.num_threads, zero_ok=True)
    positive("env.nan_every", env.nan_every, zero_ok=True)
    in_unit_interval("env.repeat_action_probability", env.repeat_action_probability)
    if env.max_episode_steps is not None:
        positive("env.max_episode_steps", env.max_episode_steps)
    backend = BACKENDS[env.kind]
    if backend.check is not None:
        try:
            backend.check(env)
        except EnvError as exc:
            raise ConfigError(str(exc)) from None
    rows = backend.rows_per_env(env)
    if actor.envs_per_batch % rows:
        raise ConfigError(
            f"actor.envs_per_batch={actor.envs_per_batch} is not a multiple of "
            f"env.{backend.rows_key}={rows}: each env.kind={env.kind} environment fills {rows} "
            f"rows of an actor batch; make actor.envs_per_batch a multiple of "
            f"env.{backend.rows_key}"
        )
