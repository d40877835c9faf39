"""The ``broker`` section: where the learner listens and how it micro-batches requests."""

from __future__ import annotations

from dataclasses import dataclass

from seedq.schema import ConfigError, check_positive, setting


@dataclass
class BrokerConfig:
    host: str = setting("127.0.0.1", "address the learner's broker binds")
    port: int = setting(0, "TCP port of the broker (0: pick a free one)")
    advertise_host: str = setting(
        "",
        "address actors dial (empty: broker.host; with a wildcard broker.host, launcher=ssh: this "
        "machine's address on the route to the first host that is not this machine, "
        "launcher=slurm: its host name)",
    )
    max_batch: int = setting(64, "envs per inference batch")
    deadline_ms: float = setting(
        2.0, "a batch goes to inference this long after its first request, full or not"
    )
    max_message_bytes: int = setting(
        64 * 1024 * 1024,
        "largest message the broker accepts; a peer sending a larger one is disconnected",
    )
    silent_timeout_s: float = setting(
        30.0,
        "an actor silent this long (killed, stopped, host gone) is evicted: its rows, partial "
        "unrolls and recurrent state are freed and batches stop waiting for it (0: never)",
    )
    shards: int = setting(
        1,
        "broker processes receiving and batching actor messages, each on its own port "
        "(broker.port + i, or free ports) and core; actor a dials shard a % shards. 1: the "
        "broker is a thread of the learner. Add shards when one broker core is the limit "
        "(docs/scaling.md)",
    )
    io_threads: int = setting(
        1, "ZeroMQ I/O threads of each broker process (TCP framing, CURVE encryption)"
    )


MAX_SHARDS = 64
# Far more than any NIC needs (about one per 300 MB/s of CURVE traffic); each takes file
# descriptors, and ZeroMQ aborts the process when they run out (100,000: "Too many open files").
MAX_IO_THREADS = 256
# The largest broker.max_message_bytes: ZeroMQ's ZMQ_MAXMSGSIZE is an int64.
MAX_MESSAGE_BYTES = 2**63 - 1


def validate_broker(broker: BrokerConfig) -> None:
    check_positive(
        broker, "broker", ["max_batch", "deadline_ms", "max_message_bytes", "shards", "io_threads"]
    )
    if broker.max_message_bytes > MAX_MESSAGE_BYTES:
        # A larger one is an OverflowError when the broker binds.
        raise ConfigError(
            f"broker.max_message_bytes={broker.max_message_bytes} is out of range; at most "
            f"{MAX_MESSAGE_BYTES} (2^63 - 1, ZeroMQ's limit)"
        )
    if broker.io_threads > MAX_IO_THREADS:
        raise ConfigError(
            f"broker.io_threads={broker.io_threads}: at most {MAX_IO_THREADS} (one I/O thread "
            "carries ~1 GB/s, ~300 MB/s with CURVE)"
        )
    if broker.shards > MAX_SHARDS:
        raise ConfigError(
            f"broker.shards={broker.shards}: at most {MAX_SHARDS} (one per core is the most "
            "that helps)"
        )
    check_positive(broker, "broker", ["silent_timeout_s"], zero_ok=True)
    advertised = broker.advertise_host
    if advertised and (
        ":" in advertised or "/" in advertised or any(c.isspace() for c in advertised)
    ):
        # Actors dial tcp://ADVERTISE_HOST:PORT over IPv4: a URL, a port or an IPv6 address
        # here made an endpoint no actor connects to, and each waited actor.reply_timeout_s.
        raise ConfigError(
            f"broker.advertise_host={advertised!r} is not a host name or IPv4 address; give the "
            "name or IPv4 address actors reach this machine by (e.g. learner.example or "
            "10.0.0.5), without scheme or port (the port is broker.port's)"
        )
    if not 0 <= broker.port <= 65535 - (broker.shards - 1):
        raise ConfigError(
            f"broker.port={broker.port!r} is out of range; it must be in "
            f"[0, {65535 - (broker.shards - 1)}] (shards use broker.port + i)"
        )
