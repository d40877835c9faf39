"""``env.kind=atari``: ale_py's C++ ``AtariVectorEnv`` with DeepMind preprocessing.

The vector env runs in ``SameStep`` autoreset mode (``info["final_obs"]`` is a full ``[N, ...]``
uint8 array, valid only in the rows of envs that ended; ``Disabled`` is rejected by ale_py 0.12).
ale_py and gymnasium are imported when an env is built, not with this module.
"""

from __future__ import annotations

import difflib
import logging
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from seedq.envs.base import (
    BatchBase,
    EnvError,
    StepBatch,
    other_family_hint,
    split_done,
    vector_env_threads,
)
from seedq.envs.config import NUM_THREADS_HELP, EnvConfig, kind_setting
from seedq.envs.gym_ids import import_gymnasium, ram_id_hint
from seedq.schema import ConfigError, check_positive, in_unit_interval, positive, setting

logger = logging.getLogger(__name__)

# DeepMind's limit: 30 minutes of play at 60 Hz.
ATARI_MAX_EPISODE_FRAMES = 108_000


@dataclass
class AtariConfig(EnvConfig):
    """``env=atari``: the game and DeepMind's preprocessing, done by ale_py in C++."""

    kind: str = kind_setting("atari")
    id: str = setting(
        "ALE/Pong-v5", "An Atari id like ALE/Pong-v5, or a ROM name like pong; names the run."
    )
    max_episode_steps: int | None = setting(
        None,
        "Truncate episodes after this many agent steps (> 0); null keeps "
        f"{ATARI_MAX_EPISODE_FRAMES} frames (30 minutes of play).",
    )
    frame_skip: int = setting(
        4, "Emulator frames per agent step, max-pooled over the last two (> 0)."
    )
    frame_stack: int = setting(4, "Frames stacked into one observation (> 0).")
    screen_size: int = setting(
        84, "Observed frames are resized to screen_size x screen_size pixels (> 0)."
    )
    grayscale: bool = setting(True, "Grey frames (true) or RGB, 3 channels each (false).")
    noop_max: int = setting(
        30, "Up to this many random no-op actions after each reset (>= 0; 0: none)."
    )
    episodic_life: bool = setting(
        True,
        "A life loss reports terminated while the game goes on; only game over resets "
        "(DeepMind's semantics: no bootstrap across a lost life); returns still count games.",
    )
    fire_after_life_loss: bool = setting(
        False,
        "After a lost life the next step presses FIRE, whatever the action, so the agent need "
        "not learn to serve (Breakout); the Atari wrappers of CleanRL, Sample Factory and "
        "Stable-Baselines3 press it inside a reset. Games without FIRE or lives ignore it.",
    )
    repeat_action_probability: float = setting(
        0.25, "Sticky actions: the chance the previous action repeats, in [0, 1]."
    )
    full_action_space: bool = setting(
        False, "All 18 ALE actions (true) or only the game's minimal set (false)."
    )
    num_threads: int = setting(0, NUM_THREADS_HELP)

    threads_key: ClassVar[str] = "num_threads"

    def check(self) -> None:
        super().check()
        check_positive(self, "env", ["frame_skip", "frame_stack", "screen_size"])
        positive("env.noop_max", self.noop_max, zero_ok=True)
        positive("env.num_threads", self.num_threads, zero_ok=True)
        in_unit_interval("env.repeat_action_probability", self.repeat_action_probability)
        if self.max_episode_steps is not None and self.max_episode_steps * self.frame_skip > (
            MAX_ALE_FRAMES
        ):
            # ale_py takes the frames as a C int: more ended in a pybind TypeError at start.
            raise ConfigError(
                f"env.max_episode_steps={self.max_episode_steps} x env.frame_skip="
                f"{self.frame_skip} is more frames than ale_py can count ({MAX_ALE_FRAMES}); "
                f"use env.max_episode_steps={MAX_ALE_FRAMES // self.frame_skip} or fewer, or "
                "null for no limit"
            )

    def frames_per_step(self) -> int:
        return int(self.frame_skip)


MAX_ALE_FRAMES = 2**31 - 1  # ale_py's max_num_frames_per_episode is a C int


def atari_game(env_id: str) -> str:
    """The snake_case ROM name (``"pong"``) of ``env_id`` (``"ALE/Pong-v5"`` or ``"pong"``)."""
    return _atari_spec(env_id)[0]


def _atari_spec(env_id: str) -> tuple[str, dict]:
    """``env_id``'s ROM name and the keyword arguments gymnasium registered it with (none for
    a ROM name)."""
    try:
        import ale_py
        from ale_py import roms
    except ImportError as exc:
        raise EnvError(
            'env.kind=atari needs ale_py (ROMs included); run: pip install "ale-py>=0.10"'
        ) from exc
    gym = import_gymnasium()
    gym.register_envs(ale_py)
    rom_ids = roms.get_all_rom_ids()
    if env_id in rom_ids:
        return env_id, {}
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        spec = None
    # ale_py's own registrations only: MinAtar registers MinAtar/Breakout-v1 with a "game" too,
    # which env=atari took for ALE's Breakout once minatar was imported.
    ale = spec is not None and str(spec.entry_point).startswith("ale_py")
    game = spec.kwargs.get("game") if ale else None
    if spec is not None and game is None:
        other = other_family_hint(env_id, "atari") or " Use env=gym (or cartpole) for it."
        raise EnvError(
            f"{env_id!r} is not an Atari id.{other} Or give env=atari an Atari id like "
            "'ALE/Pong-v5'"
        )
    if game is None and (ram := ram_id_hint(env_id)):
        raise EnvError(f"{env_id!r}: env=atari steps screens; {ram}")
    if game is None:
        ale_ids = [i for i in gym.registry if i.startswith("ALE/")]
        close = difflib.get_close_matches(env_id, ale_ids, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise EnvError(
            f"unknown Atari env id {env_id!r}.{other_family_hint(env_id, 'atari') or hint} "
            "Atari ids look like 'ALE/Pong-v5'; list "
            "the games with `python -c 'import ale_py.roms as r; print(r.get_all_rom_ids())'` "
            "or the ids with `python -c 'import gymnasium, ale_py; "
            "gymnasium.register_envs(ale_py); gymnasium.pprint_registry()'`"
        )
    return str(game), dict(spec.kwargs)


_WARNED: set[tuple] = set()


def registered_differences(cfg: AtariConfig, registered: dict) -> list[tuple[str, Any, Any]]:
    """The keys left at env=atari's defaults that play ``cfg.id`` otherwise than gymnasium
    registered it, as (key, env=atari's value, the registered one): ``PongNoFrameskip-v4`` has
    no sticky actions, env=atari's default has them (ALE v5's). A key the user changed is taken
    as chosen. Frame skips are left out: env=atari skips ``frame_skip`` frames whatever the id
    (a NoFrameskip id is meant for that)."""
    defaults = AtariConfig()
    differences = []
    for key in ("repeat_action_probability", "full_action_space"):
        ours, default = getattr(cfg, key), getattr(defaults, key)
        kind = type(default)
        if key in registered and kind(ours) == default and kind(registered[key]) != default:
            differences.append((f"env.{key}", ours, kind(registered[key])))
    return differences


def _atari_rom_path(game: str) -> Any:
    from ale_py import roms

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # get_rom_path warns before returning None
            path = roms.get_rom_path(game)
    except OSError as exc:  # missing or corrupt .bin, or a bad ALE_ROMS_DIR
        raise EnvError(
            f"the ROM for {game!r} cannot be loaded ({exc}); reinstall the ROMs with: "
            'pip install --force-reinstall "ale-py>=0.10"'
        ) from exc
    if path is None:
        raise EnvError(
            f"ale_py has no ROM named {game!r}; list them with "
            "`python -c 'import ale_py.roms as r; print(r.get_all_rom_ids())'`"
        )
    return path


class AtariBatch(BatchBase):
    """ale_py's C++ ``AtariVectorEnv`` with DeepMind preprocessing and SameStep autoreset.

    Preprocessing (all in C++): ``frame_skip`` with max-pooling of the last two frames,
    ``screen_size`` square grey (or RGB) frames, ``frame_stack`` stacked frames, up to
    ``noop_max`` no-ops and FIRE on reset, sticky actions with ``repeat_action_probability``,
    no reward clipping (the learner clips). ``max_episode_steps`` counts agent steps; ale_py
    counts frames, so it gets ``max_episode_steps * frame_skip`` (default 108000 frames).

    ``episodic_life`` maps to ale_py's ``life_loss_info``: a life loss reports terminated while
    the game goes on, and only game over resets (DeepMind's semantics). ale_py's own
    ``episodic_life`` would restart the game on every life loss, so it is not used.
    ``fire_after_life_loss`` replaces the action of the step after a lost life by FIRE: to the
    agent, a state in which every action serves. CleanRL's and Sample Factory's wrappers take
    that step (and a no-op before it) inside the reset a lost life triggers there.

    Observations are uint8 ``[frame_stack, S, S]`` (grey) or ``[3 * frame_stack, S, S]`` (RGB,
    channels of each frame together).
    """

    def __init__(
        self, cfg: AtariConfig, num_envs: int, seed: int | None, env_offset: int = 0
    ) -> None:
        game, registered = _atari_spec(cfg.id)
        _atari_rom_path(game)
        differences = registered_differences(cfg, registered)
        if differences and (cfg.id, tuple(differences)) not in _WARNED:
            _WARNED.add((cfg.id, tuple(differences)))  # once a process, not once a batch
            logger.warning(
                "%s is registered with %s, and env=atari plays it with its defaults %s; add %s "
                "to play it as registered",
                cfg.id,
                ", ".join(f"{key[4:]}={theirs}" for key, _, theirs in differences),
                ", ".join(f"{key}={ours}" for key, ours, _ in differences),
                " ".join(f"{key}={theirs}" for key, _, theirs in differences),
            )
        import ale_py
        from ale_py.vector_env import AtariVectorEnv
        from gymnasium.vector import AutoresetMode

        if cfg.max_episode_steps is not None:
            max_frames = int(cfg.max_episode_steps) * int(cfg.frame_skip)
        else:
            max_frames = ATARI_MAX_EPISODE_FRAMES
        num_threads = vector_env_threads(cfg.num_threads, num_envs)
        try:
            env = AtariVectorEnv(
                game,
                num_envs,
                # batch_size == num_envs: step() waits for every env (no async batches).
                batch_size=num_envs,
                num_threads=num_threads,
                max_num_frames_per_episode=max_frames,
                repeat_action_probability=float(cfg.repeat_action_probability),
                full_action_space=bool(cfg.full_action_space),
                autoreset_mode=AutoresetMode.SAME_STEP,
                img_height=int(cfg.screen_size),
                img_width=int(cfg.screen_size),
                grayscale=bool(cfg.grayscale),
                stack_num=int(cfg.frame_stack),
                frameskip=int(cfg.frame_skip),
                maxpool=True,
                noop_max=int(cfg.noop_max),
                episodic_life=False,
                life_loss_info=bool(cfg.episodic_life),
                reward_clipping=False,
                use_fire_reset=True,
            )
        except (ValueError, RuntimeError, AssertionError) as exc:
            raise EnvError(f"cannot build AtariVectorEnv for {cfg.id!r} ({game}): {exc}") from exc
        self._env = env
        self._episodic_life = bool(cfg.episodic_life)
        # The FIRE action's index in the game's action set (None: not pressed for the agent).
        actions = list(env.ale.get_action_set())
        fire = ale_py.Action.FIRE
        self._fire = actions.index(fire) if cfg.fire_after_life_loss and fire in actions else None
        self._serve = np.zeros(num_envs, dtype=bool)  # envs whose last step lost a life
        self._lives = np.zeros(num_envs)
        self._grayscale = bool(cfg.grayscale)
        stack, size = int(cfg.frame_stack), int(cfg.screen_size)
        channels = stack if self._grayscale else 3 * stack
        super().__init__(
            num_envs,
            (channels, size, size),
            np.dtype(np.uint8),
            int(env.single_action_space.n),
            seed,
            env_offset,
        )
        logger.info(
            "atari env %s (%s): %d envs, %d threads, obs %s, %d actions, max %d frames",
            cfg.id,
            game,
            num_envs,
            num_threads,
            self.obs_shape,
            self.num_actions,
            max_frames,
        )

    def _layout(self, obs: np.ndarray) -> np.ndarray:
        """Grey ``[B, stack, H, W]`` as is; RGB ``[B, stack, H, W, 3]`` -> ``[B, 3*stack, H, W]``.

        The three channels of each frame stay adjacent, so a model's first conv sees frames in
        order.
        """
        if self._grayscale:
            return obs
        b, stack, h, w, c = obs.shape
        return np.ascontiguousarray(obs.transpose(0, 1, 4, 2, 3)).reshape(b, stack * c, h, w)

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, info = self._env.reset(seed=self._reset_seed(seed))
        self._episode_frames = np.asarray(info["episode_frame_number"]).copy()
        self._lives = np.asarray(info["lives"]).copy()
        self._serve[:] = False
        return self._layout(obs)

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        if self._fire is not None and self._serve.any():
            actions = np.where(self._serve, self._fire, actions)
        obs, reward, terminated, truncated, info = self._env.step(actions)
        if self._fire is not None:
            # Fewer lives than before and no reset (a reset, at game over, restores them).
            lives = np.asarray(info["lives"])
            self._serve = lives < self._lives
            self._lives = lives.copy()
        terminated, truncated = split_done(terminated, truncated)
        if truncated.any():
            # info["final_obs"] is [N, ...]; rows of envs that did not end hold stale frames.
            final_obs = self._layout(info["final_obs"][truncated])
        else:
            final_obs = self._no_final_obs
        game_over = None
        if self._episodic_life:
            # A lost life terminates without a reset; a game over resets the env in this same
            # step, which starts its frame count again (the no-ops and FIRE of the reset).
            frames = np.asarray(info["episode_frame_number"])
            game_over = (terminated | truncated) & (frames < self._episode_frames)
            self._episode_frames = frames.copy()
        return StepBatch(
            self._layout(obs),
            reward.astype(np.float32),
            terminated,
            truncated,
            final_obs,
            game_over,
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            # The C++ worker threads stop when the interface is freed.
            self._env = None
