"""The ``actor`` section: how many actor processes, and how their envs are batched."""

from __future__ import annotations

from dataclasses import dataclass

from seedq.schema import check_positive, choice, setting

TRANSPORTS = ("tcp", "inproc")


@dataclass
class ActorConfig:
    num_actors: int = setting(2, "actor processes the launcher starts")
    envs_per_batch: int = setting(16, "envs stepped together and sent in one Step message")
    batches_per_actor: int = setting(
        2, "env batches per actor process, stepped while the others await their actions"
    )
    transport: str = setting(
        "tcp", "tcp: actor subprocesses; inproc: threads in the learner process (tests)"
    )


def validate_actor(actor: ActorConfig) -> None:
    choice("actor.transport", actor.transport, TRANSPORTS)
    check_positive(actor, "actor", ["num_actors", "envs_per_batch", "batches_per_actor"])
