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

import dataclasses
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from seedq.envs import EnvConfig, EnvError, env_config, make_env_batch, rows_per_env
from seedq.envs.base import env_spec_of
from seedq.envs.registry import KINDS
from seedq.envs.section import family_keys
from seedq.eval_episodes import EnvCrashed, env_batch_episodes, gym_episodes
from seedq.learner.checkpoint import CheckpointError, read_checkpoint
from seedq.schema import FLOAT_NOTATION, ConfigError
from seedq.tracking import Evaluation, attach_evaluation
from seedq.trained_policy import EVALUATE, check_policy_arguments, load_policy, plays_gymnasium_id
from seedq.videos import EpisodeVideos, check_video_folder


def evaluate(
    checkpoint: str,
    *,
    episodes: int = 10,
    video: bool = False,
    mode: str = "sample",
    epsilon: float | None = None,
    seed: int = 0,
    env_overrides: dict[str, Any] | None = None,
    on_episode: Callable[[int, float], None] | None = None,
) -> tuple[list[float], list[Path]]:
    """Returns of ``episodes`` episodes and the videos written.

    ``env_overrides``: env config keys to change for evaluation (e.g. ``{"rewards":
    "scoring"}`` to count goals of a football agent trained with checkpoint rewards, or
    another scenario); the observations must keep the shape the policy was trained on.
    ``on_episode(k, return)`` is called as each episode ends (k from 1).
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
    run = gym_episodes if plays_gymnasium_id(env_cfg.kind) else env_batch_episodes
    recorder = None
    if video:
        folder = path.parent.parent / "videos"
        check_video_folder(folder)
        recorder = EpisodeVideos(folder, path.stem, fps=30)
    returns, videos = [], []
    try:
        for total, written in run(policy, env_cfg, episodes, seed, recorder):
            returns.append(total)
            if on_episode is not None:
                on_episode(len(returns), total)
            if written is not None:
                videos.append(written)
    finally:
        if recorder is not None:
            recorder.discard()  # the episode an error ended: a partial video is no video
    return returns, videos


class EpisodeProgress:
    """seedq-eval's line on stderr as an episode ends, once the evaluation has gone on for
    ``QUIET_S`` since its start or its last line: an Atari evaluation (minutes an episode on a
    CPU) printed nothing until its last episode ended; a quick one stays quiet."""

    QUIET_S = 10.0

    def __init__(self, episodes: int) -> None:
        self.episodes, self.start = episodes, time.monotonic()
        self.said = self.start

    def __call__(self, episode: int, total: float) -> None:
        now = time.monotonic()
        if now - self.said < self.QUIET_S or episode == self.episodes:
            return
        self.said = now
        print(
            f"seedq-eval: episode {episode} of {self.episodes}: return {total:.2f} "
            f"({now - self.start:.0f} s so far)",
            file=sys.stderr,
            flush=True,
        )


def check_arguments(*, episodes: int, epsilon: float | None, seed: int) -> None:
    """ValueError naming the first argument out of its range."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes} is out of range; it must be > 0")
    check_policy_arguments(epsilon=epsilon, seed=seed)


def whole_number(value: str) -> int:
    """An int argument's value: an integer, or a whole number in a float's notation (``1e2``,
    ``100.0``), as seedq-train takes them (``seedq.command_keys.whole_numbers``)."""
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
        progress = EpisodeProgress(int(args.get("episodes", 10)))
        returns, videos = evaluate(
            str(checkpoint), env_overrides=env_overrides, on_episode=progress, **args
        )
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
