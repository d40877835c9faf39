"""The ``actor`` section: how many actor processes, how their envs are batched, and how they
survive faults (restarts by the launcher, rejoins and learner-loss detection in the actor)."""

from __future__ import annotations

from dataclasses import dataclass

from seedq.schema import check_positive, choice, setting

TRANSPORTS = ("tcp", "inproc")


@dataclass
class ActorConfig:
    num_actors: int = setting(
        0,
        "actor processes the launcher starts (0: sized at start to the cores left after the "
        "learner's threads, at least 2 (fewer where actor.max_envs caps them), logged; with the "
        "ssh or slurm launcher 2, or launcher.actors_per_host)",
    )
    max_envs: int = setting(
        0,
        "the most envs sizing may give the run (actor.num_actors 0, or arch.sebulba.threads 0): "
        "fewer actor processes where the cores allow more, the cores left going to each vector "
        "env's threads; 0: no cap. A set actor.num_actors is kept. PPO's Atari preset sets 16, "
        "the envs it learns fastest per frame on",
    )
    envs_per_batch: int = setting(16, "envs stepped together and sent in one Step message")
    batches_per_actor: int = setting(
        2, "env batches per actor process, stepped while the others await their actions"
    )
    transport: str = setting(
        "tcp", "tcp: actor subprocesses; inproc: threads in the learner process (tests)"
    )
    max_restarts: int = setting(
        5,
        "crashes of one actor process within actor.restart_window_s that the launcher restarts "
        "(with backoff and a new run id); one more ends the run with the actor's last log lines",
    )
    restart_window_s: float = setting(
        300.0, "the sliding window in which actor.max_restarts counts an actor's crashes"
    )
    restart_backoff_s: float = setting(
        1.0, "delay before restarting a crashed actor; doubles with each crash in the window"
    )
    reply_timeout_s: float = setting(
        600.0,
        "an actor that got no reply to a request for this long exits (a learner that is "
        "connected but hung; a dead one is caught by learner_lost_s). Long, because an "
        "on-policy learner that pauses acting (PPO) answers no one while it trains: on a busy "
        "CPU an update of 2,048 frames x 4 epochs took over a minute",
    )
    learner_lost_s: float = setting(
        5.0,
        "an actor whose connection to the learner dropped exits when no reply came for this "
        "long (the learner process died)",
    )
    max_rejoins: int = setting(
        10,
        "recoverable refusals (busy, stale_run, non_finite, ...) in a row an env batch answers "
        "by resetting and rejoining with a new run id before its actor exits; also the failures "
        "of its envs (their reset or step raised) in a row, no episode finished between, that "
        "it answers by building them again (arch=seed and sebulba)",
    )
    env_timeout_s: float = setting(
        300.0,
        "an actor process whose envs' reset or step runs longer than this (a hung simulator) "
        "logs where it is stuck and exits, for the launcher to restart it as a crash; "
        "arch=sebulba, which cannot stop a thread, stops the run with a checkpoint instead; "
        "0: never",
    )


def validate_actor(actor: ActorConfig) -> None:
    choice("actor.transport", actor.transport, TRANSPORTS)
    check_positive(actor, "actor", ["envs_per_batch", "batches_per_actor"])
    check_positive(actor, "actor", ["num_actors", "max_envs"], zero_ok=True)
    check_positive(actor, "actor", ["reply_timeout_s", "learner_lost_s", "restart_window_s"])
    check_positive(
        actor,
        "actor",
        ["max_restarts", "restart_backoff_s", "max_rejoins", "env_timeout_s"],
        zero_ok=True,
    )
