"""The episodes ``seedq-eval`` plays with a :class:`seedq.trained_policy.Policy`, each yielded
with its return and its video: through ``gymnasium.make`` for a kind that is a gymnasium id
(:func:`gym_episodes`, the env as training made it, rendered for video), else through seedq's
own env batch (:func:`env_batch_episodes`, its preprocessing; football's controlled players
each act through their own copy of the policy). An env whose reset or step raises ends the
evaluation as :class:`EnvCrashed`, naming the episode.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from seedq.envs import EnvConfig, EnvError, make_env_batch, rows_per_env
from seedq.envs.gym_spaces import batch_singles, env_actions, obs_transform
from seedq.trained_policy import Policy
from seedq.videos import EpisodeVideos, agent_view, make_rendering, render

logger = logging.getLogger(__name__)

# An episode of an env without a time limit says at this many steps that it goes on, and again
# at ten times as many, and so on: a policy that never ends one (CliffWalking-v1's greedy walk
# into a wall) ran silently for good, and a line every 10,000 steps flooded the log.
LONG_EPISODE_STEPS = 10_000


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


def gym_episodes(
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
    env = make_rendering(env_cfg.id, kwargs) if video else gym.make(env_cfg.id, **kwargs)
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
                video.add(render(env))
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
                    video.add(render(env))
            yield total, video.finish() if video else None
    finally:
        env.close()


def _row_policies(policy: Policy, rows: int) -> list[Policy]:
    """``policy`` and copies of it, one per row of an env: the copies share the model and the
    random streams, and each keeps its own recurrent state from its first ``reset()``."""
    return [policy, *(copy.copy(policy) for _ in range(rows - 1))]


def env_batch_episodes(
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
