"""``seedq-actor``'s arguments, checked before any env is built: each one it cannot use is a
ValueError naming it (exit status 2), instead of a ZeroMQ traceback, a hang, or an env that
fails at every reset."""

from __future__ import annotations

import socket

from seedq.actor.loop import Patience
from seedq.schema import positive

# The Hello's bound on an actor id and on its first env id, actor id x envs per batch.
MAX_ACTOR_ID = 2**31 - 1


def parse_actor_ids(text: str, envs_per_batch: int) -> list[int]:
    """The ids of ``--actor-ids``, or a ValueError saying what is wrong with them."""
    try:
        actor_ids = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(
            f"--actor-ids {text!r} is not a comma-separated list of whole numbers"
        ) from None
    for actor_id in actor_ids:
        if not 0 <= actor_id * max(envs_per_batch, 1) <= MAX_ACTOR_ID:
            raise ValueError(
                f"--actor-ids: actor id {actor_id} is out of range; ids are 0 or more, and an "
                f"id x --envs-per-batch (its first env id) at most {MAX_ACTOR_ID}"
            )
    repeated = sorted({a for a in actor_ids if actor_ids.count(a) > 1})
    if repeated:
        # Two env batches under one id would take it from each other at the learner.
        raise ValueError(
            f"--actor-ids {text!r} names actor {repeated[0]} more than once; each env batch "
            "needs its own id"
        )
    return actor_ids


def check_endpoints(endpoint: str) -> list[str]:
    """The learner's addresses of ``--endpoint`` (comma-separated, one per broker shard), or a
    ValueError naming the first one that is not a ZeroMQ address an actor can dial."""
    endpoints = [e.strip() for e in endpoint.split(",")]
    for address in endpoints:
        scheme, sep, rest = address.partition("://")
        host, colon, port = rest.rpartition(":")
        if scheme in ("ipc", "inproc") and sep and rest:
            continue
        if scheme == "tcp" and host.startswith("[") and host.endswith("]"):
            # The broker binds IPv4 only (an IPv6 broker.host is refused), and the DEALER has no
            # ZMQ_IPV6: it never connects, and waited --reply-timeout-s saying "no connection".
            raise ValueError(
                f"--endpoint {address!r} is an IPv6 address; seedq's learner and actors speak "
                "IPv4: give the learner's IPv4 address or a name that resolves to it"
            )
        # "*" is where a learner binds, not a host to dial (ZeroMQ: "Invalid argument").
        dialable = host and host != "*" and not any(c.isspace() for c in host)
        a_port = port.isdigit() and 0 < int(port) < 65536
        if scheme == "tcp" and sep and dialable and colon and a_port:
            continue
        raise ValueError(
            f"--endpoint {address!r} is not an address to dial: give tcp://HOST:PORT (or "
            "ipc://PATH, inproc://NAME), several separated by commas"
        )
    return endpoints


def check_patience(patience: Patience) -> None:
    """A ValueError naming the first of ``--reply-timeout-s``, ``--learner-lost-s``,
    ``--max-rejoins``, ``--env-timeout-s`` out of range: the bounds of their ``actor.*`` keys.
    Unchecked, a negative or zero timeout ended the actor at once as "no reply from the learner
    for -1 s", and nan waited for ever."""
    for name, zero_ok in (
        ("reply_timeout_s", False),
        ("learner_lost_s", False),
        ("max_rejoins", True),
        ("env_timeout_s", True),
    ):
        positive(f"--{name.replace('_', '-')}", getattr(patience, name), zero_ok=zero_ok)


def unresolved_hosts(endpoints: list[str]) -> list[str]:
    """The host names of tcp ``endpoints`` that do not resolve here, each with the resolver's
    words (a typo, or DNS not up yet)."""
    unresolved = []
    for address in endpoints:
        scheme, _, rest = address.partition("://")
        host = rest.rpartition(":")[0]
        if scheme != "tcp" or host == "*":
            continue
        try:
            socket.getaddrinfo(host, None, socket.AF_INET)
        except (OSError, UnicodeError) as exc:
            unresolved.append(f"{host} ({exc})")
    return unresolved
