"""``env.kind=minatar``: MinAtar's five 10x10 Atari-like games (Young & Tian, 2019).

``env.id`` is a game: ``breakout``, ``asterix``, ``freeway``, ``seaquest`` or
``space_invaders`` (``MinAtar/Breakout-v1`` and ``SpaceInvaders`` are accepted too). The games
are pure numpy and step in microseconds, so a policy learns one in minutes on a CPU: a fast
benchmark of the whole pipeline on images.

MinAtar's defaults are kept: sticky actions with probability 0.1 (``env.repeat_action_probability``
as ``conf/env/minatar.yaml`` sets it), difficulty ramping on (``env.difficulty_ramping``), the
game's minimal action set (``env.full_action_space=true``: all 6 actions). MinAtar has no time
limit of its own besides Freeway's 2500-step clock, which it reports as the end of the game
(terminated, as in the paper); a good Breakout player would play forever, so episodes are
truncated after ``env.max_episode_steps`` agent steps, :data:`MINATAR_MAX_EPISODE_STEPS` when
that is null.

Observations: MinAtar's state is a bool ``[10, 10, C]`` array (one channel per object kind: 4
in Breakout, 10 in Seaquest). It is delivered channels-first as uint8 ``[C, 10, 10]`` holding 0
or 255, so that the models' pixel scaling (uint8 / 255) gives exactly 0 and 1 while the wire
carries one byte per cell. Frames this small need the ``minatar`` torso (``torso=auto`` picks
it), the network of the MinAtar paper.

minatar is imported when an env is built, not with this module.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedq.envs.base import BatchBase, EnvError, StepBatch, other_family_hint
from seedq.envs.config import EnvConfig, kind_setting
from seedq.schema import in_unit_interval, setting

logger = logging.getLogger(__name__)

GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")
# Episodes longer than this are truncated when env.max_episode_steps is null.
MINATAR_MAX_EPISODE_STEPS = 10_000
INSTALL_HINT = "env.kind=minatar needs MinAtar; run: pip install 'seedq[minatar]'"


def minatar_game(env_id: str) -> str:
    """MinAtar's module name of ``env_id``: ``"space_invaders"`` for ``space_invaders``,
    ``SpaceInvaders`` or ``MinAtar/SpaceInvaders-v1``; an EnvError listing the games else."""
    name = env_id.removeprefix("MinAtar/").split("-v")[0]
    key = name.replace("_", "").lower()
    for game in GAMES:
        if game.replace("_", "") == key:
            return game
    close = difflib.get_close_matches(name.lower(), GAMES, n=2, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise EnvError(
        f"env.id={env_id!r} is not a MinAtar game.{other_family_hint(env_id, 'minatar')}{hint} "
        f"Choose one of {list(GAMES)}"
    )


def registered_full_action_space(env_id: str) -> bool | None:
    """Whether MinAtar's gymnasium registration of ``env_id`` plays all 6 actions: its ``-v0``
    ids do, its ``-v1`` ids the minimal set; None for a plain game name."""
    if not env_id.startswith("MinAtar/"):
        return None
    version = env_id.rpartition("-v")[2]
    return {"0": True, "1": False}.get(version)


_WARNED: set[str] = set()


def warn_registered_action_set(cfg: MinAtarConfig) -> None:
    """Once a process, when ``cfg.id`` is registered with all 6 actions (``MinAtar/Breakout-v0``)
    and ``env.full_action_space`` is left at its default, the minimal set: it was played so
    without a word."""
    if registered_full_action_space(cfg.id) and not cfg.full_action_space:
        if cfg.id not in _WARNED:
            _WARNED.add(cfg.id)
            logger.warning(
                "%s is registered with all 6 actions (MinAtar's -v0 ids; -v1 the minimal set), "
                "and env=minatar plays the game's minimal set by default; add "
                "env.full_action_space=true to play it as registered",
                cfg.id,
            )


def import_minatar() -> Any:
    """MinAtar's ``Environment`` class, or an EnvError with the install line."""
    try:
        from minatar import Environment
    except ImportError as exc:
        raise EnvError(INSTALL_HINT) from exc
    return Environment


def rgb_frame(obs: np.ndarray, scale: int = 32) -> np.ndarray:
    """One observation ``[C, 10, 10]`` as an RGB image ``[10 * scale, 10 * scale, 3]`` (videos):
    each object channel in its own colour, later channels drawn over earlier ones."""
    channels = obs.shape[0]
    # Evenly spaced hues, bright enough to tell apart on black.
    hues = np.arange(channels) / max(channels, 1)
    palette = 255 * (0.5 + 0.5 * np.cos(2 * np.pi * (hues[:, None] + [0.0, 1 / 3, 2 / 3])))
    image = np.zeros((*obs.shape[1:], 3), dtype=np.uint8)
    for c in range(channels):
        image[obs[c] > 0] = palette[c].astype(np.uint8)
    return np.kron(image, np.ones((scale, scale, 1), dtype=np.uint8))


@dataclass
class MinAtarConfig(EnvConfig):
    """``env=minatar``: the game, sticky actions, difficulty ramping and the action set."""

    kind: str = kind_setting("minatar")
    id: str = setting(
        "breakout", f"A MinAtar game, one of {list(GAMES)} (or MinAtar/Breakout-v1); names the run."
    )
    max_episode_steps: int | None = setting(
        None,
        "Truncate episodes after this many agent steps (> 0); null keeps "
        f"{MINATAR_MAX_EPISODE_STEPS} steps.",
    )
    repeat_action_probability: float = setting(
        0.25,
        "Sticky actions: the chance the previous action repeats, in [0, 1] (env=minatar sets "
        "MinAtar's 0.1).",
    )
    full_action_space: bool = setting(
        False, "All 6 actions (true) or only the game's minimal set (false)."
    )
    difficulty_ramping: bool = setting(
        True, "Games speed up as an episode goes on (MinAtar's default)."
    )

    def check(self) -> None:
        """The id must name a MinAtar game (no import needed)."""
        super().check()
        in_unit_interval("env.repeat_action_probability", self.repeat_action_probability)
        minatar_game(self.id)


class MinAtarBatch(BatchBase):
    """``num_envs`` MinAtar games stepped in a Python loop, with same-step autoreset.

    Env ``i`` is seeded with ``base + i`` on a seeded reset (one ``RandomState`` drives both
    the game and its sticky actions, MinAtar's own seeding); later episodes continue that
    stream, so a run is reproducible from its seed.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None,
        env_offset: int = 0,
        *,
        sticky_action_prob: float = 0.1,
        difficulty_ramping: bool = True,
        full_action_space: bool = False,
        max_episode_steps: int | None = None,
    ) -> None:
        game = minatar_game(env_id)
        environment = import_minatar()
        self._envs = [
            environment(
                game,
                sticky_action_prob=float(sticky_action_prob),
                difficulty_ramping=bool(difficulty_ramping),
            )
            for _ in range(num_envs)
        ]
        first = self._envs[0]
        if full_action_space:
            self._action_set = np.arange(first.num_actions(), dtype=np.int64)
        else:
            self._action_set = np.asarray(first.minimal_action_set(), dtype=np.int64)
        height, width, channels = first.state_shape()
        super().__init__(
            num_envs,
            (channels, height, width),
            np.dtype(np.uint8),
            len(self._action_set),
            seed,
            env_offset,
        )
        self.game = game
        self.max_episode_steps = int(max_episode_steps or MINATAR_MAX_EPISODE_STEPS)
        self._t = np.zeros(num_envs, dtype=np.int64)
        logger.info(
            "minatar env %s: %d envs, obs %s, %d actions, sticky %.2f, ramping %s, max %d steps",
            game,
            num_envs,
            self.obs_shape,
            self.num_actions,
            sticky_action_prob,
            difficulty_ramping,
            self.max_episode_steps,
        )

    def _observe(self, env: Any) -> np.ndarray:
        """``[C, 10, 10]`` uint8 in {0, 255} from MinAtar's bool ``[10, 10, C]`` state."""
        return env.state().transpose(2, 0, 1).astype(np.uint8) * np.uint8(255)

    def reset(self, seed: int | None = None) -> np.ndarray:
        base = self._reset_seed(seed)
        obs = np.empty((self.num_envs, *self.obs_shape), dtype=np.uint8)
        for i, env in enumerate(self._envs):
            if base is not None:
                env.seed(base + i)
            env.reset()
            obs[i] = self._observe(env)
        self._t[:] = 0
        return obs

    def step(self, actions: np.ndarray) -> StepBatch:
        game_actions = self._action_set[self._check_actions(actions)]
        obs = np.empty((self.num_envs, *self.obs_shape), dtype=np.uint8)
        reward = np.empty(self.num_envs, dtype=np.float32)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        final_obs = []
        self._t += 1
        for i, env in enumerate(self._envs):
            reward[i], terminated[i] = env.act(int(game_actions[i]))
            if terminated[i]:
                env.reset()
                self._t[i] = 0
            elif self._t[i] >= self.max_episode_steps:
                truncated[i] = True
                final_obs.append(self._observe(env))
                env.reset()
                self._t[i] = 0
            obs[i] = self._observe(env)
        return StepBatch(obs, reward, terminated, truncated, self._final_obs(final_obs))

    def close(self) -> None:
        self._envs = []


def make_minatar(cfg: MinAtarConfig, num_envs: int, seed: int, env_offset: int) -> MinAtarBatch:
    """``env.kind=minatar``: ``cfg.id`` with the sticky-action, ramping, action-set and time-limit
    keys of ``cfg``."""
    warn_registered_action_set(cfg)
    return MinAtarBatch(
        cfg.id,
        num_envs,
        seed,
        env_offset,
        sticky_action_prob=cfg.repeat_action_probability,
        difficulty_ramping=cfg.difficulty_ramping,
        full_action_space=cfg.full_action_space,
        max_episode_steps=cfg.max_episode_steps,
    )
