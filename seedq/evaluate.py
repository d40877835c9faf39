"""Running a trained policy without a learner: ``seedq.load_policy`` and ``seedq-eval``.

    seedq-eval checkpoint=runs/2026-11-23/10-00-00_CartPole-v1 episodes=20 video=true

``checkpoint`` is a checkpoint file or a run directory (its newest checkpoint); an existing
path given alone is taken as it (``seedq-eval RUN_DIR episodes=5``, as ``seedq-plot`` takes
run directories); one checkpoint per evaluation. V-trace
policies sample from their softmax (``mode=greedy`` takes the argmax); R2D2 policies act
epsilon-greedily with the run's eval epsilon (``epsilon=`` to change it; ``mode=greedy`` takes
the argmax, epsilon 0); PPO and SAC policies
sample from their Gaussian (``mode=greedy``: its mean, mapped into the Box's bounds as in
training). With
``video=true`` each episode is written as an MP4 under ``<run dir>/videos``: the rendered screen
for gymnasium envs (MuJoCo offscreen through EGL, see ``seedq.envs.mujoco``), the agent's own
view for Atari (84x84), MinAtar and Procgen. ``env.<key>=value`` changes the env for the
evaluation (a value of its key's type: ``true`` or ``false``, a whole number, ``1e3`` too, or
a string), e.g. ``env.rewards=scoring`` so a football agent trained with checkpoint rewards
is scored on goals alone (its mean return is then the scoring rate); ``env.kwargs.NAME=value``
(or ``+env.kwargs.NAME=value``, as training's command line adds it) changes one of
``gymnasium.make``'s arguments and keeps the others. An env whose reset or step raises ends
the evaluation with its traceback and the episode it was in, exit status 1, and no returns.

Football with ``env.controlled_players=P`` plays one game whose ``P`` players each act through
their own copy of the policy (as each is its own env in training), and an episode's return is
the mean over the players of their returns: the team's goal reward with ``scoring``, plus the
players' average checkpoint reward with ``scoring,checkpoints``, the same scale as the returns
training reports per env.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import numbers
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import yaml

from seedq.agents.registry import agent_class, agent_names
from seedq.envs import (
    EnvConfig,
    EnvError,
    env_config,
    make_env_batch,
    minatar,
    procgen,
    rows_per_env,
)
from seedq.envs.base import env_spec_of
from seedq.envs.config import MAX_SEED
from seedq.envs.gym import (
    ACTION_SPACES,
    batch_singles,
    continuous_actions,
    env_actions,
    joint_actions,
    obs_transform,
    single_action_space,
)
from seedq.envs.registry import KINDS, backend
from seedq.envs.section import family_keys
from seedq.learner.checkpoint import CheckpointError, read_checkpoint
from seedq.messages import CONTINUOUS, DISCRETE, EnvSpec
from seedq.schema import FLOAT_NOTATION, ConfigError
from seedq.tracking import Evaluation, attach_evaluation
from seedq.videos import EpisodeVideos, check_video_folder

logger = logging.getLogger(__name__)

MODES = ("sample", "greedy")
# What seedq-eval does with a checkpoint, in the advice to take an older one.
EVALUATE = "evaluate"
# An episode of an env without a time limit says at this many steps that it goes on, and again
# at ten times as many, and so on: a policy that never ends one (CliffWalking-v1's greedy walk
# into a wall) ran silently for good, and a line every 10,000 steps flooded the log.
LONG_EPISODE_STEPS = 10_000


class Policy:
    """A trained seedq policy for one env: call it on each observation for the env's action,
    ``reset()`` between episodes. It keeps the LSTM state itself and acts with its algorithm's
    own selector.

    ``action_space``: the env's, which calling the policy maps its actions into; None: the
    trained env's, read from the checkpoint on the first call (:func:`trained_action_space`).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        config: dict[str, Any],
        *,
        mode: str = "sample",
        epsilon: float | None = None,
        seed: int = 0,
        action_space: Any = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not allowed; choose one of {list(MODES)}")
        check_policy_arguments(epsilon=epsilon, seed=seed)
        self.model = model.eval()
        self.config = config
        self.algorithm = config["algorithm"]["name"]
        self.mode = mode
        agent = agent_class(self.algorithm)
        alg = SimpleNamespace(**config["algorithm"])
        self.select = agent.make_selector(alg, greedy=mode == "greedy")
        default = agent.default_epsilon(alg)
        if default is None and epsilon is not None:
            # It changed nothing: only a value-based policy (R2D2) acts epsilon-greedily.
            raise ValueError(
                f"epsilon={epsilon}: a {self.algorithm} policy has no epsilon (only R2D2's "
                "acts epsilon-greedily); mode=greedy or mode=sample chooses how it acts"
            )
        if default is not None and mode == "greedy":
            # Greedy is the argmax, as for every other policy; R2D2's eval epsilon acted
            # at random now and then under mode=greedy.
            if epsilon:
                raise ValueError(
                    f"epsilon={epsilon} with mode='greedy', which acts with epsilon 0: give "
                    "mode='sample' to act epsilon-greedily"
                )
            default = 0.0
        self.epsilon = default if epsilon is None else float(epsilon)
        self.generator = torch.Generator().manual_seed(seed)
        self.obs_shape: tuple[int, ...] | None = None  # set by load_policy
        self.spec: EnvSpec | None = None  # set by load_policy
        self.path: Path | None = None  # the checkpoint file, set by load_policy
        self.action_space = action_space
        self._to_env: Callable[[np.ndarray], np.ndarray] | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the recurrent state: the next observation starts an episode."""
        self._state = self.model.initial_state(1, "cpu")
        self._new_episode = True

    def __call__(self, obs: np.ndarray) -> Any:
        """The env's action for ``obs``: :meth:`act`'s, mapped into ``self.action_space`` as
        training's env batch maps it (``seedq.envs.gym.env_actions``): an int of a Discrete
        (its ``start`` added), the entries of a MultiDiscrete or MultiBinary, a Box's vector
        clipped to its bounds in its dtype."""
        if self._to_env is None:
            if self.action_space is None:
                self.action_space = trained_action_space(self.config, self.spec)
            env_id = self.config.get("env", {}).get("id", "the env")
            self._check_action_space(env_id)
            self._to_env = env_actions(env_id, self.action_space)
        action = self._to_env(np.asarray([self.act(obs)]))[0]
        return action.item() if action.ndim == 0 else action

    def _check_action_space(self, env_id: str) -> None:
        """A ValueError unless ``self.action_space`` takes the actions the policy was trained
        on (a continuous policy's vector, mapped as a Discrete's index, went out as garbage)."""
        from gymnasium import spaces

        space = self.action_space
        if not isinstance(space, spaces.Space):
            # A string or the env itself was read as the env's space and refused in its name.
            instead = ", not the env" if hasattr(space, "action_space") else ""
            raise ValueError(
                f"action_space={space!r} is not a gymnasium space: give env.action_space{instead}"
            )
        discrete = spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary
        if not (continuous_actions(space) or isinstance(space, discrete)):
            raise ValueError(f"action_space={space}: a policy acts in {ACTION_SPACES}")
        if self.spec is None:
            return
        continuous = continuous_actions(space)
        n = int(space.shape[0]) if continuous else joint_actions(env_id, space)[0]
        kind = CONTINUOUS if continuous else DISCRETE
        if (kind, n) != (self.spec.action_kind, self.spec.num_actions):
            raise ValueError(
                f"action_space={space} takes {n} {kind} actions; the policy was trained on "
                f"{self.spec.num_actions} {self.spec.action_kind} ones"
            )

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> int | np.ndarray:
        """The network's action for ``obs``: an index into its discrete actions, or the float32
        vector it chose, unclipped; what seedq's env batches take. Calling the policy maps it
        into the env's action space.

        ``obs`` is laid out as training's env batch delivered it (``self.obs_shape``);
        ``seedq.envs.gym.obs_transform`` turns a gymnasium env's raw ones into that layout."""
        obs = self._checked_obs(obs)
        obs_t = torch.as_tensor(obs)[None, None]
        done = torch.tensor([[self._new_episode]])
        out, self._state = self.model(obs_t, done, self._state)
        self._new_episode = False
        epsilon = None if self.epsilon is None else torch.tensor([float(self.epsilon)])
        action = self.select(out, epsilon, self.generator).actions[0]
        return action.numpy() if action.is_floating_point() else int(action)

    def _layout(self) -> str:
        """Where observations in the policy's layout come from, for a refusal."""
        kind = self.config.get("env", {}).get("kind")
        if kind in KINDS and not plays_gymnasium_id(kind):
            # obs_transform's advice was wrong here: Atari's are preprocessed stacks of frames.
            return (
                f"as seedq's env={kind} batch delivers them: seedq.envs.make_env_batch builds "
                "it from seedq.envs.env_config(policy.config['env'])"
            )
        return (
            "a gymnasium env's raw observations take seedq.envs.gym.obs_transform's layout: "
            "one-hots of Discrete states, Dict and Tuple ones flattened into a vector, "
            "channels-first images"
        )

    def _checked_obs(self, obs: Any) -> np.ndarray:
        """``obs`` as an array of the shape and dtype training delivered (``self.spec``), or a
        ValueError saying what to give instead: a string, a dict or a float frame reached the
        network as a torch TypeError, or as an action chosen from garbage."""
        if isinstance(obs, tuple) and len(obs) == 2 and isinstance(obs[1], dict):
            raise ValueError(
                "the policy was given an (obs, info) pair, what env.reset() returns; give it "
                "the observation: obs, info = env.reset(); policy(obs)"
            )
        wanted = "" if self.spec is None else f" of shape {self.obs_shape} {self.spec.obs_dtype}"
        try:
            array = np.asarray(obs)
        except ValueError:
            array = np.asarray(None)  # ragged nested sequences: refused below, as objects
        if array.dtype.kind not in "biuf":
            raise ValueError(
                f"an observation of {type(obs).__name__} {array.dtype}; the policy takes an "
                f"array of numbers{wanted} ({self._layout()})"
            )
        if self.spec is None:
            return array
        if array.shape != self.obs_shape:
            batch = array.shape[1:] == self.obs_shape
            raise ValueError(
                f"an observation of shape {array.shape}; the policy was trained on "
                f"{self.obs_shape} "
                + (
                    "and acts on one observation at a time, keeping one env's recurrent "
                    "state: call it once per observation, one policy per env"
                    if batch
                    else f"({self._layout()})"
                )
            )
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            # Training's broker refuses such rows too (seedq.messages.batch); the action chosen
            # from one was whatever the argmax of NaN is.
            bad = np.flatnonzero(~np.isfinite(array))[:5].tolist()
            raise ValueError(
                f"an observation holding NaN or inf (flat indices {bad}); the policy acts only "
                "on finite ones, as training did"
            )
        trained = np.dtype(self.spec.obs_dtype)
        if array.dtype == trained:
            return array
        if trained.kind in "ui" and array.dtype.kind == "f" and not (array % 1 == 0).all():
            raise ValueError(
                f"a {array.dtype} observation of fractions; the policy was trained on {trained} "
                f"ones, as its env gave them (frames: 0 to 255, not scaled to [0, 1])"
            )
        if trained.kind == "b" and not np.isin(array, (0, 1)).all():
            raise ValueError(
                "an observation with values other than 0 and 1; the policy was trained on bool "
                "ones (one-hots of Discrete states, MultiBinary entries)"
            )
        if trained.kind in "ui" and array.size:
            info = np.iinfo(trained)
            if array.min() < info.min or array.max() > info.max:
                raise ValueError(
                    f"an observation with values in [{array.min()}, {array.max()}]; the policy "
                    f"was trained on {trained} ones, in [{info.min}, {info.max}]"
                )
        return array.astype(trained)


def check_policy_arguments(*, epsilon: Any, seed: Any) -> None:
    """ValueError naming ``epsilon`` or ``seed`` where it is not a number in its range: an
    epsilon of 2 or NaN acted at random or greedily without a word, and a seed out of
    torch's range ended in its RuntimeError."""
    real = isinstance(epsilon, numbers.Real) and not isinstance(epsilon, bool)
    if epsilon is not None and not (real and 0.0 <= epsilon <= 1.0):
        why = "is out of range" if real else "is not a number"
        raise ValueError(f"epsilon={epsilon!r} {why}; it must be a number in [0, 1]")
    whole = isinstance(seed, numbers.Integral) and not isinstance(seed, bool)
    if not (whole and 0 <= seed <= MAX_SEED):
        why = "is out of range" if whole else "is not a whole number"
        raise ValueError(f"seed={seed!r} {why}; it must be a whole number in [0, {MAX_SEED}]")


def plays_gymnasium_id(kind: str | None) -> bool:
    """Whether an env of ``kind`` is the gymnasium id itself, made with ``gymnasium.make``
    (the registry's ``gymnasium_id``), not seedq's own env batch."""
    return kind in KINDS and backend(kind).gymnasium_id


def trained_action_space(config: Mapping[str, Any], spec: EnvSpec | None) -> Any:
    """The action space of the env a checkpoint trained on: a gymnasium id's own, built once as
    training built it (``env.kwargs`` applied), so a Discrete's ``start`` and a MultiDiscrete's
    entries are known; for seedq's own env batches, which take the policy's index, and the fake
    env, what ``spec`` records."""
    from gymnasium import spaces

    env = config.get("env") or {}
    if plays_gymnasium_id(env.get("kind")):
        try:
            return single_action_space(env["id"], env.get("kwargs"))
        except EnvError as exc:
            raise EnvError(
                f"the policy maps its actions into env.id={env['id']!r}'s action space, which "
                f"cannot be read here ({exc}); give load_policy action_space=env.action_space, "
                "or act with policy.act(obs), the network's action"
            ) from exc
    if spec is None:
        raise ValueError(
            "the policy has no env spec to map its actions with: give it "
            "action_space=env.action_space, or act with policy.act(obs)"
        )
    if spec.continuous:
        low, high = (np.array(bound, np.float32) for bound in (spec.action_low, spec.action_high))
        return spaces.Box(low, high, dtype=np.float32)
    return spaces.Discrete(spec.num_actions)


def load_policy(
    path: str,
    *,
    mode: str = "sample",
    epsilon: float | None = None,
    seed: int = 0,
    action_space: Any = None,
) -> Policy:
    """The policy of a checkpoint file or of a run directory's newest checkpoint that reads
    (CPU), acting on one observation at a time.

    ``mode``: ``"sample"`` (V-trace's softmax, PPO's and SAC's Gaussian, R2D2 epsilon-greedy
    with ``epsilon``, the run's eval epsilon if None) or ``"greedy"`` (the argmax, the mean).
    ``seed``: of the policy's own random stream. ``action_space``: the env's the policy acts
    in, if not the trained env's (read from the checkpoint's config when first needed).

    Raises:
        CheckpointError: no checkpoint at ``path``, or one that is damaged or not seedq's.
        ValueError: a mode, epsilon, seed or action space the policy cannot act with.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path={path!r}: give a run directory or a checkpoint file, a str or Path")
    read, state = read_checkpoint(path, EVALUATE)
    config = state["config"]
    if "spec" not in state:
        raise CheckpointError(f"{read} is not a seedq checkpoint (it has no spec)")
    spec = state["spec"]
    alg = config["algorithm"]
    model_cfg = SimpleNamespace(**alg["model"])
    if alg["name"] not in agent_names():
        # A newer seedq's algorithm, or a file edited by hand: the registry's KeyError.
        raise CheckpointError(
            f"{read} was written by algorithm={alg['name']!r}, which this seedq does not have "
            f"(it has {agent_names()}); load it with the seedq that trained it"
        )
    agent = agent_class(alg["name"])
    model = agent.build_model(
        EnvSpec.from_dict(spec),
        SimpleNamespace(**{**alg, "model": model_cfg}),
        channels_last=config["hardware"]["channels_last"],
    )
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        # Wrong shapes, missing or unexpected keys: a file edited or written by another network.
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise CheckpointError(
            f"{read}: its weights do not fit the network its config builds ({detail[:400]}); "
            "it is damaged or not a seedq checkpoint"
        ) from None
    policy = Policy(model, config, mode=mode, epsilon=epsilon, seed=seed, action_space=action_space)
    policy.obs_shape = tuple(spec["obs_shape"])
    policy.spec = EnvSpec.from_dict(spec)
    policy.path = read  # the checkpoint file it came from
    if action_space is not None:
        # Refused here, where it enters, not at the first step.
        policy._check_action_space(config.get("env", {}).get("id", "the env"))
    return policy


def _gym_episodes(
    policy: Policy,
    env_cfg: EnvConfig,
    episodes: int,
    seed: int,
    video: EpisodeVideos | None,
) -> Iterator[tuple[float, Path | None]]:
    """Each episode's return and its video (None without ``video``), played through
    ``gymnasium.make`` as training made the env."""
    import gymnasium as gym

    make_env_batch(env_cfg, 1, seed=seed).close()  # same checks and ALE registration as training
    # The env as training built it (env.kwargs: gymnasium.make's arguments, env=gym and mujoco).
    kwargs = dict(getattr(env_cfg, "kwargs", None) or {})
    if video:
        kwargs["render_mode"] = "rgb_array"
    if env_cfg.max_episode_steps:
        kwargs["max_episode_steps"] = env_cfg.max_episode_steps
    # Rendering classic-control, toy-text and Box2D envs goes through pygame; no display is
    # needed. SDL's own SIGTERM handler turns the signal into a quit event no one reads: a
    # rendering seedq-eval ran on through `kill`, `timeout` and a scheduler's SIGTERM.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_NO_SIGNAL_HANDLERS", "1")
    env = _make_rendering(env_cfg.id, kwargs) if video else gym.make(env_cfg.id, **kwargs)
    # The observations as training's env batch delivers them: one-hots of Discrete states,
    # channels-first images, float32 vectors.
    transform, _, _ = obs_transform(env_cfg.id, env.observation_space)
    # The policy's actions as the env takes them (a Discrete's start, a MultiDiscrete's
    # entries, a Box's bounds), as training's env batch maps them.
    to_env = env_actions(env_cfg.id, env.action_space)
    unlimited = env.spec is None or env.spec.max_episode_steps is None
    try:
        for episode in range(episodes):
            with _env_call(episode, episodes):
                obs, _ = env.reset(seed=seed + episode)
            policy.reset()
            if video:
                video.start(episode)
                video.add(_render(env))
            total, done, steps, said_at = 0.0, False, 0, LONG_EPISODE_STEPS
            while not done:
                row = transform(batch_singles(env.observation_space, [obs]))[0]
                action = to_env(np.asarray([policy.act(row)]))[0]
                with _env_call(episode, episodes):
                    obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
                steps += 1
                if unlimited and not done and steps == said_at:
                    said_at *= 10
                    logger.warning(
                        "episode %d of %d: %d steps and not ended; %s has no time limit, "
                        "env.max_episode_steps=N ends each episode after N steps",
                        episode + 1,
                        episodes,
                        steps,
                        env_cfg.id,
                    )
                if video:
                    video.add(_render(env))
            yield total, video.finish() if video else None
    finally:
        env.close()


def _make_rendering(env_id: str, kwargs: dict[str, Any]) -> Any:
    """``gymnasium.make(env_id, **kwargs)`` (``render_mode="rgb_array"`` among them) for
    ``video=true``, or an EnvError before any episode when the env renders no frames: one that
    takes no ``render_mode`` (a user's env) or names no ``rgb_array`` among its
    ``metadata["render_modes"]`` ended the evaluation in a traceback."""
    import gymnasium as gym

    refusal = f"video=true: {env_id} renders no frames"
    try:
        with warnings.catch_warnings():
            # gymnasium's warning that the mode is not the env's: the refusal below says it.
            warnings.filterwarnings("ignore", message=".*render_mode.*")
            env = gym.make(env_id, **kwargs)
    except Exception as exc:
        plain = {k: v for k, v in kwargs.items() if k != "render_mode"}
        try:
            gym.make(env_id, **plain).close()
        except Exception:
            raise exc from None  # not the render mode: the env's own error
        raise EnvError(
            f"{refusal} (made with render_mode='rgb_array' it raised {type(exc).__name__}: "
            f"{exc}); evaluate without video"
        ) from None
    modes = list(env.metadata.get("render_modes") or [])
    if "rgb_array" not in modes:
        env.close()
        raise EnvError(
            f"{refusal} (its render_modes: {modes}, without 'rgb_array'); evaluate without video"
        )
    return env


class EnvCrashed(EnvError):
    """The env's own reset or step raised during an evaluation; the env's error is the cause."""


@contextlib.contextmanager
def _env_call(episode: int, episodes: int) -> Iterator[None]:
    """An env's reset or step: its error (a simulator's crash, a bug in the env) becomes an
    :class:`EnvCrashed` naming the episode, whose returns so far would be biased."""
    try:
        yield
    except Exception as exc:
        raise EnvCrashed(
            f"the env raised in episode {episode + 1} of {episodes} ({type(exc).__name__}: "
            f"{exc}); no returns are reported (its traceback is above)"
        ) from exc


def _render(env: Any) -> np.ndarray:
    import gymnasium as gym

    try:
        return env.render()
    except gym.error.DependencyNotInstalled as exc:
        raise EnvError(f"video=true: {exc}; pip install 'seedq[video]'") from None


def _agent_view(obs: np.ndarray) -> np.ndarray:
    """The newest grey frame of a stack ``[K, H, W]``, 4x larger, as RGB."""
    frame = obs[-1] if obs.ndim == 3 else obs
    frame = np.kron(frame, np.ones((4, 4), dtype=frame.dtype))
    return np.repeat(frame[..., None], 3, axis=-1)


def _rgb_agent_view(obs: np.ndarray) -> np.ndarray:
    """The newest RGB frame of a stack ``[3 * K, H, W]`` (each frame's channels together, as
    ``env.grayscale=false`` lays them out), 4x larger."""
    frame = obs[-3:].transpose(1, 2, 0)
    return np.kron(frame, np.ones((4, 4, 1), dtype=frame.dtype))


# Kinds whose observations are not Atari-style stacks of grey frames.
_AGENT_VIEWS = {"minatar": minatar.rgb_frame, "procgen": procgen.rgb_frame}


def agent_view(env_cfg: EnvConfig) -> Callable[[np.ndarray], np.ndarray]:
    """How a video shows one observation of ``env_cfg``'s env batch: Atari's newest frame, in
    colour with ``env.grayscale=false`` (its blue channel alone was shown, as grey)."""
    if env_cfg.kind in _AGENT_VIEWS:
        return _AGENT_VIEWS[env_cfg.kind]
    return _agent_view if getattr(env_cfg, "grayscale", True) else _rgb_agent_view


def _row_policies(policy: Policy, rows: int) -> list[Policy]:
    """``policy`` and copies of it, one per row of an env: the copies share the model and the
    random streams, and each keeps its own recurrent state from its first ``reset()``."""
    return [policy, *(copy.copy(policy) for _ in range(rows - 1))]


def _env_batch_episodes(
    policy: Policy,
    env_cfg: EnvConfig,
    episodes: int,
    seed: int,
    video: EpisodeVideos | None,
) -> Iterator[tuple[float, Path | None]]:
    """Episodes played through seedq's env batch: one env, which may fill several rows
    (football's controlled players); an episode's return is the mean of its rows' returns,
    yielded with its video (None without ``video``)."""
    rows = rows_per_env(env_cfg)
    policies = _row_policies(policy, rows)
    view = agent_view(env_cfg)
    env = make_env_batch(env_cfg, rows, seed=seed)
    try:
        with _env_call(0, episodes):
            obs = env.reset(seed=seed)
        for episode in range(episodes):
            for row_policy in policies:
                row_policy.reset()
            if video:
                video.start(episode)
                video.add(view(obs[0]))
            totals, done = np.zeros(rows), False
            while not done:
                actions = [
                    row_policy.act(row) for row_policy, row in zip(policies, obs, strict=True)
                ]
                with _env_call(episode, episodes):
                    step = env.step(np.array(actions, dtype=np.int64))
                totals += step.reward
                # The rows of one env end together.
                done = bool(step.episode_over[0])
                if not done and (step.terminated[0] or step.truncated[0]):
                    # A learning episode ended inside the game (a lost life): the policy starts
                    # afresh, as the learner reset it in training.
                    for row_policy in policies:
                        row_policy.reset()
                if video:
                    video.add(view(step.final_obs[0] if step.truncated[0] else step.obs[0]))
                obs = step.obs  # after an end: the next episode's first observation
            yield float(totals.mean()), video.finish() if video else None
    finally:
        env.close()


def evaluate(
    checkpoint: str,
    *,
    episodes: int = 10,
    video: bool = False,
    mode: str = "sample",
    epsilon: float | None = None,
    seed: int = 0,
    env_overrides: dict[str, Any] | None = None,
) -> tuple[list[float], list[Path]]:
    """Returns of ``episodes`` episodes and the videos written.

    ``env_overrides``: env config keys to change for evaluation (e.g. ``{"rewards":
    "scoring"}`` to count goals of a football agent trained with checkpoint rewards, or
    another scenario); the observations must keep the shape the policy was trained on.
    """
    check_arguments(episodes=episodes, epsilon=epsilon, seed=seed)
    policy = load_policy(checkpoint, mode=mode, epsilon=epsilon, seed=seed)
    path = policy.path
    trained = dict(policy.config["env"])
    if "kind" in (env_overrides or {}) and env_overrides["kind"] != trained.get("kind"):
        # Another family (e.g. gymnasium's CartPole for the native one): the trained env's
        # family keys do not apply there; the keys every family has carry over, and the
        # observation and action checks below still judge whether the policy can act in it.
        common = {f.name for f in dataclasses.fields(EnvConfig)}
        trained = {k: v for k, v in trained.items() if k in common}
    env = merged_env(trained, env_overrides or {})
    try:
        env_cfg = env_config(env)
    except ConfigError as exc:
        kind = env.get("kind", "cartpole")
        if kind in KINDS and set(env) <= set(family_keys(kind)):
            raise  # a value of the wrong type (env.grayscale=flase): the message names it
        allowed = sorted(trained)
        raise EnvError(f"{exc}; keys are env.<one of {allowed}>") from None
    env_cfg.check()  # the values training would refuse (env.max_episode_steps=0)
    if env_overrides:
        probe = make_env_batch(env_cfg, rows_per_env(env_cfg), seed=seed)
        shape, probed = tuple(probe.obs_shape), env_spec_of(probe)
        probe.close()
        if shape != policy.obs_shape:
            raise EnvError(
                f"with {env_overrides} the env gives observations of shape {shape}; the policy "
                f"was trained on {policy.obs_shape}"
            )
        trained = policy.spec
        if (probed.action_kind, probed.num_actions) != (trained.action_kind, trained.num_actions):
            # Fewer actions played on silently (a 3-action policy on a 5-action game); more
            # failed mid-episode.
            raise EnvError(
                f"with {env_overrides} the env takes {probed.num_actions} {probed.action_kind} "
                f"actions; the policy was trained on {trained.num_actions} "
                f"{trained.action_kind} ones"
            )
    if env_cfg.kind == "fake":
        raise EnvError("env.kind=fake has nothing to evaluate")
    if env_cfg.kind == "football" and video:
        raise EnvError(
            "video=true is not available for env=football: gfootball renders through OpenGL, "
            "which seedq does not set up; evaluate without video"
        )
    run = _gym_episodes if plays_gymnasium_id(env_cfg.kind) else _env_batch_episodes
    recorder = None
    if video:
        folder = path.parent.parent / "videos"
        check_video_folder(folder)
        recorder = EpisodeVideos(folder, path.stem, fps=30)
    returns, videos = [], []
    try:
        for total, written in run(policy, env_cfg, episodes, seed, recorder):
            returns.append(total)
            if written is not None:
                videos.append(written)
    finally:
        if recorder is not None:
            recorder.discard()  # the episode an error ended: a partial video is no video
    return returns, videos


def check_arguments(*, episodes: int, epsilon: float | None, seed: int) -> None:
    """ValueError naming the first argument out of its range."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes} is out of range; it must be > 0")
    check_policy_arguments(epsilon=epsilon, seed=seed)


def whole_number(value: str) -> int:
    """An int argument's value: an integer, or a whole number in a float's notation (``1e2``,
    ``100.0``), as seedq-train takes them (``seedq.cli.whole_numbers``)."""
    if FLOAT_NOTATION.fullmatch(value):
        number = Decimal(value)
        if number != number.to_integral_value():
            raise ValueError(value)
        return int(number)
    return int(value)


def env_value(text: str) -> Any:
    """An ``env.<key>=`` value as YAML reads it, a number in a float's notation (``1e3``,
    which YAML 1.1 leaves a string) as a float; the env config checks its type.

    Raises:
        ValueError: text YAML cannot read (``[1``).
    """
    if not text:
        return text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "not YAML"
        raise ValueError(f"{text!r} does not read as a value ({problem})") from None
    if isinstance(value, str) and FLOAT_NOTATION.fullmatch(value):
        return float(value)
    return value


def flag(value: str) -> bool:
    """``video=``'s value: a typo (``video=ture``, ``video=on``) is refused, not read as false."""
    if value.lower() not in ("1", "true", "yes", "0", "false", "no"):
        raise ValueError(value)
    return value.lower() in ("1", "true", "yes")


ARGUMENTS = {
    "checkpoint": str,
    "episodes": whole_number,
    "video": flag,
    "mode": str,
    "epsilon": float,
    "seed": whole_number,
}


def merged_env(trained: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The ``env`` section ``trained`` with ``overrides`` applied: a dotted key
    (``kwargs.render_mode``) changes one entry of a mapping and keeps its others, a plain key
    replaces its value (``kwargs={...}`` the whole mapping)."""
    env = dict(trained)
    for key, value in overrides.items():
        head, dot, rest = key.partition(".")
        if not dot:
            env[key] = value
            continue
        inner = env.get(head)
        if inner is not None and not isinstance(inner, Mapping):
            raise ConfigError(f"env.{head} is {inner!r}, not a mapping: env.{key} cannot set it")
        env[head] = merged_env(inner or {}, {rest: value})
    return env


def main(argv: Sequence[str] | None = None) -> int:
    args: dict[str, Any] = {}
    env_overrides: dict[str, Any] = {}
    argv = sys.argv[1:] if argv is None else argv
    if any(item in ("-h", "--help") for item in argv):
        print(__doc__.strip())
        return 0
    for item in argv:
        key, sep, value = item.partition("=")
        if key.startswith("+env."):
            key = key[1:]  # Hydra's "add a key" of the training command line, as it was written
        if sep and key.startswith("env.") and len(key) > 4:
            try:
                env_overrides[key[4:]] = env_value(value)
            except ValueError as exc:
                print(f"seedq-eval: {key}={exc}", file=sys.stderr)
                return 2
            continue
        # seedq-eval RUN_DIR: an existing path alone is the checkpoint.
        if (sep and key == "checkpoint") or (not sep and os.path.exists(item)):
            path = value if sep else item
            if "checkpoint" in args:
                # One checkpoint an evaluation: a second path was said not to exist, and a
                # second checkpoint= replaced the first without a word.
                print(
                    f"seedq-eval: {path!r} is a second checkpoint (the first: "
                    f"{args['checkpoint']!r}); seedq-eval evaluates one checkpoint file or run "
                    "directory at a time: run it once for each",
                    file=sys.stderr,
                )
                return 2
            args["checkpoint"] = path
            continue
        if not sep or key not in ARGUMENTS:
            print(
                f"seedq-eval: {item!r} is not key=value with a key of {list(ARGUMENTS)} "
                "or env.<key>, nor an existing checkpoint file or run directory",
                file=sys.stderr,
            )
            return 2
        try:
            args[key] = ARGUMENTS[key](value)
        except ValueError:
            kind = {whole_number: "a whole number", flag: "true or false"}.get(
                ARGUMENTS[key], "a number"
            )
            print(f"seedq-eval: {key}={value!r} is not {kind}", file=sys.stderr)
            return 2
    if "checkpoint" not in args:
        print("seedq-eval: checkpoint=<checkpoint file or run dir> is required", file=sys.stderr)
        return 2
    try:
        checkpoint, _ = read_checkpoint(args.pop("checkpoint"), EVALUATE)
        returns, videos = evaluate(str(checkpoint), env_overrides=env_overrides, **args)
    except EnvCrashed as exc:
        assert exc.__cause__ is not None
        traceback.print_exception(exc.__cause__)
        print(f"seedq-eval: {exc}", file=sys.stderr)
        return 1
    except (CheckpointError, EnvError, ValueError) as exc:
        print(f"seedq-eval: {exc}", file=sys.stderr)
        return 2
    # A run tracked by W&B or MLflow (logger=...) gets these returns and videos too.
    evaluation = Evaluation(str(checkpoint), list(returns), [str(v) for v in videos])
    for problem in attach_evaluation(evaluation, checkpoint.parent.parent):
        print(f"seedq-eval: {problem}", file=sys.stderr)
    r = np.array(returns)
    print(f"checkpoint: {checkpoint}")
    print(
        f"{len(r)} episodes: return mean {r.mean():.2f} std {r.std():.2f} "
        f"min {r.min():.2f} max {r.max():.2f}"
    )
    for path in videos:
        print(f"video: {path}")
    return 0 if all(math.isfinite(x) for x in returns) else 1


if __name__ == "__main__":
    sys.exit(main())
