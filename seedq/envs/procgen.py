"""``env.kind=procgen``: OpenAI's Procgen Benchmark (Cobbe et al., 2020) through its own C++
vector env (``procgen.ProcgenGym3Env``, the gym3 API).

``env.id`` is a game (``coinrun``, ``starpilot``, ... see :data:`GAMES`; ``procgen-coinrun-v0``
is accepted too), ``env.distribution_mode`` its level distribution, ``env.num_levels`` the
number of distinct levels (0: unlimited) starting at ``env.start_level``. The paper's two
protocols: ``distribution_mode=easy num_levels=200`` to measure generalisation (train on 200
levels, test with ``num_levels=0``), ``num_levels=0`` for sample efficiency.

Observations are the 64x64 RGB frames, uint8 ``[3, 64, 64]``; 15 actions in every game.

The gym3 API. ``act(actions)`` steps every env; ``observe()`` returns ``(reward, obs,
first)`` where ``first[i]`` marks the first observation of a new episode: the vector env resets
an ended episode on the same step, which is seedq's convention, but never hands out the last
observation of the ended one, and it cannot reset a single env. So every episode end is
reported as *terminated*, including the games' own timeouts (e.g. 1000 steps in CoinRun), which
is how the Procgen paper's PPO and IMPALA baselines treat them; ``env.max_episode_steps`` must
be null. Nor can the vector env be reset as a whole: :meth:`ProcgenBatch.reset` builds a fresh
one with the reset's seed (procgen derives every level from it).

Installing. The ``procgen`` package on PyPI has no wheel for Python 3.11; ``procgen-mirror``
0.10.7 is the same code (openai/procgen 0.10.7) built for 3.7-3.11, and runs with NumPy 2. Its
metadata pins ``numpy<2`` and ``gym<1`` (for the gym registration seedq does not use), so it is
installed without its dependencies next to the ``procgen`` extra, which holds what it imports::

    pip install 'seedq[procgen]' && pip install --no-deps procgen-mirror==0.10.7 gym3==0.3.3

procgen is imported when an env is built, not with this module.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from seedq.envs.base import BatchBase, EnvError, StepBatch, other_family_hint, vector_env_threads
from seedq.envs.config import NUM_THREADS_HELP, EnvConfig, kind_setting
from seedq.schema import positive, setting

logger = logging.getLogger(__name__)

GAMES = (
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
)
DISTRIBUTION_MODES = ("easy", "hard", "extreme", "memory", "exploration")
INSTALL_HINT = (
    "env.kind=procgen needs procgen, which has no wheel for this Python on PyPI; install its "
    "maintained build: pip install 'seedq[procgen]' && pip install --no-deps "
    "procgen-mirror==0.10.7 gym3==0.3.3"
)
# procgen's rand_seed is a C int.
_MAX_SEED = 2**31 - 1


def procgen_game(env_id: str) -> str:
    """The game of ``env_id`` (``coinrun`` or ``procgen-coinrun-v0``), or an EnvError."""
    name = env_id.removeprefix("procgen-").split("-v")[0].lower()
    if name in GAMES:
        return name
    close = difflib.get_close_matches(name, GAMES, n=2, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise EnvError(
        f"env.id={env_id!r} is not a Procgen game.{other_family_hint(env_id, 'procgen')}{hint} "
        f"Choose one of {list(GAMES)}"
    )


def rgb_frame(obs: np.ndarray, scale: int = 4) -> np.ndarray:
    """One observation ``[3, 64, 64]`` as an RGB image ``[64 * scale, 64 * scale, 3]`` (videos)."""
    return np.kron(obs.transpose(1, 2, 0), np.ones((scale, scale, 1), dtype=obs.dtype))


@dataclass
class ProcgenConfig(EnvConfig):
    """``env=procgen``: the game, its level distribution and which levels are played."""

    kind: str = kind_setting("procgen")
    id: str = setting("coinrun", "A Procgen game like coinrun or starpilot; names the run.")
    max_episode_steps: int | None = setting(
        None, "Must be null: procgen's vector env cannot reset one env, so each game keeps its own."
    )
    distribution_mode: str = setting(
        "hard", f"The level distribution, one of {list(DISTRIBUTION_MODES)}."
    )
    num_levels: int = setting(
        0, "Distinct levels to play (>= 0; 0: unlimited), e.g. 200 to test generalisation."
    )
    start_level: int = setting(0, "Seed of the first level (>= 0).")
    num_threads: int = setting(0, NUM_THREADS_HELP)

    threads_key: ClassVar[str] = "num_threads"

    def check(self) -> None:
        """A known game and mode, level counts and threads >= 0, no seedq time limit."""
        procgen_game(self.id)
        positive("env.num_threads", self.num_threads, zero_ok=True)
        if self.distribution_mode not in DISTRIBUTION_MODES:
            raise EnvError(
                f"env.distribution_mode={self.distribution_mode!r} is not allowed; choose one of "
                f"{list(DISTRIBUTION_MODES)}"
            )
        if self.num_levels < 0 or self.start_level < 0:
            raise EnvError(
                f"env.num_levels={self.num_levels} and env.start_level={self.start_level} must "
                "be >= 0 (num_levels=0: unlimited levels)"
            )
        if self.max_episode_steps is not None:
            raise EnvError(
                "env.max_episode_steps must be null for env.kind=procgen: procgen's vector env "
                "cannot reset one env, so each game keeps its own timeout"
            )


def import_procgen_env() -> Callable[..., Any]:
    """``procgen.ProcgenGym3Env``, or an EnvError with the install line.

    Importing procgen imports gym 0.x (for its gym registration), which prints a notice about
    NumPy 2 on stderr; it is logged at debug level instead.
    """
    module = sys.modules.get("procgen")
    if module is None:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured):
                import procgen as module
        except ImportError as exc:
            if exc.name in ("procgen", "gym3", "gym"):
                raise EnvError(f"{INSTALL_HINT} (missing: {exc.name})") from exc
            raise EnvError(f"procgen is installed but cannot be imported ({exc})") from exc
        if captured.getvalue().strip():
            logger.debug("importing procgen printed: %s", captured.getvalue().strip())
    return module.ProcgenGym3Env


class ProcgenBatch(BatchBase):
    """procgen's ``ProcgenGym3Env`` (``num_envs`` games, stepped by its C++ threads).

    Args:
        num_threads: its C++ worker threads (0: one per core, at most one per env).
        make_env: the gym3 env class (``procgen.ProcgenGym3Env``); tests pass a fake of it.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None,
        env_offset: int = 0,
        *,
        distribution_mode: str = "hard",
        num_levels: int = 0,
        start_level: int = 0,
        num_threads: int = 0,
        make_env: Callable[..., Any] | None = None,
    ) -> None:
        self.game = procgen_game(env_id)
        self._make_env = make_env if make_env is not None else import_procgen_env()
        self._options = dict(
            env_name=self.game,
            distribution_mode=distribution_mode,
            num_levels=int(num_levels),
            start_level=int(start_level),
            num_threads=vector_env_threads(num_threads, num_envs),
        )
        # Seeds of unseeded resets: reproducible from the construction seed.
        self._seeds = np.random.default_rng(None if seed is None else seed + env_offset)
        self._env: Any = None
        self._fresh_seed: int | None = None
        self._open(num_envs, self._seeds.integers(_MAX_SEED) if seed is None else seed + env_offset)
        ob_space = self._env.ob_space["rgb"]
        height, width, channels = ob_space.shape
        super().__init__(
            num_envs,
            (channels, height, width),
            np.dtype(np.uint8),
            int(self._env.ac_space.eltype.n),
            seed,
            env_offset,
        )
        logger.info(
            "procgen env %s: %d envs, %s, num_levels %d from %d, obs %s, %d actions",
            self.game,
            num_envs,
            distribution_mode,
            num_levels,
            start_level,
            self.obs_shape,
            self.num_actions,
        )

    def _open(self, num_envs: int, seed: int) -> None:
        """A new vector env whose levels all derive from ``seed``."""
        if self._env is not None:
            self._env.close()
            self._env = None
        try:
            self._env = self._make_env(num=num_envs, rand_seed=int(seed), **self._options)
        except (ValueError, AssertionError, RuntimeError) as exc:
            raise EnvError(f"cannot build procgen env {self.game!r}: {exc}") from exc
        self._fresh_seed = int(seed)

    @staticmethod
    def _layout(rgb: np.ndarray) -> np.ndarray:
        """``[N, 64, 64, 3]`` -> ``[N, 3, 64, 64]``, contiguous for the wire."""
        return np.ascontiguousarray(rgb.transpose(0, 3, 1, 2))

    def reset(self, seed: int | None = None) -> np.ndarray:
        base = self._reset_seed(seed)
        if base is None:
            base = int(self._seeds.integers(_MAX_SEED))
        if base != self._fresh_seed:  # the env built with this seed has not stepped yet
            self._open(self.num_envs, base)
        self._fresh_seed = None
        _, ob, _ = self._env.observe()
        return self._layout(ob["rgb"])

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        self._fresh_seed = None
        self._env.act(actions.astype(np.int32))
        reward, ob, first = self._env.observe()
        return StepBatch(
            self._layout(ob["rgb"]),
            np.asarray(reward, dtype=np.float32),
            np.asarray(first, dtype=bool).copy(),
            np.zeros(self.num_envs, dtype=bool),
            self._no_final_obs,
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def make_procgen(cfg: ProcgenConfig, num_envs: int, seed: int, env_offset: int) -> ProcgenBatch:
    """``env.kind=procgen``: game ``cfg.id`` with ``cfg``'s distribution mode and levels."""
    cfg.check()
    return ProcgenBatch(
        cfg.id,
        num_envs,
        seed,
        env_offset,
        distribution_mode=cfg.distribution_mode,
        num_levels=cfg.num_levels,
        start_level=cfg.start_level,
        num_threads=cfg.num_threads,
    )
