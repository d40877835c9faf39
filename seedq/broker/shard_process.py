"""One broker shard in a process of its own: its ROUTER socket, batcher and actors, with the
learner's hub standing in for central inference and the actor registry.

The shard runs the same :class:`~seedq.broker.router.Broker` as an in-process broker; only its
consumer and registry are proxies that talk to the hub over the link
(:mod:`seedq.broker.shard_link`): a batch goes to the hub as arrays and its actions come back;
a Hello is registered with the hub (learner-wide rows and env ids) before it is accepted. A
process of its own gives the shard a core of its own: the per-message work is Python, and
threads of one process share one interpreter lock.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Any

import numpy as np
import zmq

from seedq.broker import shard_link as link
from seedq.broker.batch import ActorSlot, RequestBatch
from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.broker.security import bind_router, secure_server
from seedq.core.stats import RunStats
from seedq.exit_status import EXIT_REFUSED
from seedq.messages import EnvSpec, Hello, ProtocolError, encode
from seedq.schema import ConfigError

log = logging.getLogger(__name__)

COUNTERS_EVERY_S = 0.25
# A shard with nothing to count still sends an empty count this often: its heartbeat.
HEARTBEAT_S = 1.0
EMPTY_COUNT = {"messages": 0, "evicted": 0, "refused": 0, "bad": {}}
# How long a shard that refused its settings waits for its reason to reach the hub.
REFUSAL_LINGER_MS = 2000


class ShardStopped(Exception):
    """The hub said stop (or went away) while the shard waited for it."""


class HubLink:
    """The shard's end of the link: requests that wait for their answer, and the hub's
    unsolicited messages (revoke, stop) handled whenever they arrive."""

    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock
        self.broker: Broker | None = None
        self.counters: _Counters | None = None
        self.stop = threading.Event()

    def request(self, frames: list, answer: tuple[bytes, ...]) -> list:
        self.sock.send_multipart(frames, copy=False)
        while True:
            frames = self.sock.recv_multipart(copy=False)
            op = frames[0].bytes
            if op in answer:
                return frames
            self.handle(frames)
            if self.stop.is_set():
                raise ShardStopped

    def handle(self, frames: list) -> None:
        op = frames[0].bytes
        if op == link.REVOKE:
            assert self.broker is not None
            actor_id, run_id, by_run = link.unpack(frames[1])
            self.broker.revoke(actor_id, run_id, by_run)
        elif op == link.FLUSH:
            assert self.counters is not None
            self.counters.send(flushed=True)
        elif op == link.STOP:
            self.stop.set()

    def poll(self) -> None:
        """Handle what the hub sent meanwhile (the broker loop's side socket)."""
        while self.sock.poll(0):
            self.handle(self.sock.recv_multipart(copy=False))

    def send(self, *frames: Any) -> None:
        self.sock.send_multipart(list(frames), copy=False)


class RemoteConsumer:
    """Central inference, in the learner process: batches go there and actions come back."""

    def __init__(self, hub: HubLink, spec: EnvSpec) -> None:
        self.hub = hub
        self.spec = spec

    def act(self, batch: RequestBatch) -> np.ndarray:
        frames = self.hub.request(link.encode_batch(batch), (link.ACTIONS,))
        actions = np.frombuffer(frames[1].buffer, self.spec.action_dtype)
        return actions.reshape(self.spec.action_shape(batch.num_envs))

    def record(self, batch: RequestBatch) -> None:
        """The hub records a batch itself, right after answering it."""

    def actor_started(self, slot: ActorSlot) -> None:
        self.hub.send(link.STARTED, encode(slot.hello)[0], np.asarray(slot.rows, np.int64))

    def actor_left(self, slot: ActorSlot) -> None:
        self.hub.send(link.LEFT, np.asarray([slot.hello.actor_id], np.int64))


class RemoteRegistry:
    """The learner-wide actor registry, in the learner process: Hellos are registered there."""

    def __init__(self, hub: HubLink) -> None:
        self.hub = hub
        self.rows = _NoRows()

    def join(self, hello: Hello, shard: Any, old_rows: np.ndarray | None = None) -> np.ndarray:
        old = b"" if old_rows is None else np.asarray(old_rows, np.int64).tobytes()
        frames = self.hub.request([link.JOIN, encode(hello)[0], old], (link.ROWS, link.REFUSED))
        if frames[0].bytes == link.REFUSED:
            refusal = link.unpack(frames[1])
            raise ProtocolError(refusal["code"], refusal["detail"])
        return link.int_array(frames[1]).copy()

    def leave(self, actor_id: int, shard: Any, rows: np.ndarray) -> None:
        self.hub.send(link.RELEASE, np.asarray([actor_id], np.int64), np.asarray(rows, np.int64))


class _NoRows:
    """Rows are counted by the hub's registry; a shard has none of its own."""

    high = in_use = 0


def serve_shard(
    index: int,
    bind: str,
    link_endpoint: str,
    spec_dict: dict,
    settings: dict,
    keys_dir: str = "",
) -> None:
    """Process entry point: bind ``bind`` (``tcp://host:port``, port 0: any free one), tell the
    hub where, and serve until the hub says stop or goes away."""
    from seedq.limits import raise_open_file_limit
    from seedq.processes import exit_with_parent

    exit_with_parent(settings["parent_pid"])
    raise_open_file_limit()
    ctx = zmq.Context(io_threads=settings.get("io_threads", 1))
    ctx.set(zmq.MAX_SOCKETS, settings.get("max_sockets", 65536))
    hub_sock = ctx.socket(zmq.PAIR)
    hub_sock.setsockopt(zmq.LINGER, 0)
    hub_sock.connect(link_endpoint)
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    curve = secure_server(router, ctx, keys_dir) if keys_dir else None
    address, _, port = bind.rpartition(":")
    host = address.removeprefix("tcp://")
    try:
        bound = f"{address}:{bind_router(router, host, int(port))}"
    except ConfigError as exc:
        # One line in the shard's log, and the reason to the hub: the learner refuses the run
        # with it (exit 2, which a supervisor does not restart).
        log.error("%s", exc)
        with contextlib.suppress(zmq.ZMQError):
            hub_sock.send_multipart([link.REFUSED, link.pack({"detail": str(exc)})], zmq.NOBLOCK)
        hub_sock.close(linger=REFUSAL_LINGER_MS)
        if curve is not None:
            curve.stop()
        ctx.destroy(linger=0)
        sys.exit(EXIT_REFUSED)
    hub = HubLink(hub_sock)
    spec = EnvSpec.from_dict(spec_dict)
    stats = RunStats()
    broker = Broker(
        router,
        spec,
        Batcher(settings["max_batch"], settings["deadline_ms"] / 1000.0),
        RemoteConsumer(hub, spec),
        silent_timeout_s=settings["silent_timeout_s"],
        max_message_bytes=settings["max_message_bytes"],
        stats=stats,
        registry=RemoteRegistry(hub),
        env=settings.get("env", ""),
    )
    hub.broker = broker
    hub.send(link.READY, link.pack({"index": index, "endpoint": bound}))
    counters = _Counters(hub, stats, curve)
    hub.counters = counters
    try:
        broker.serve(hub.stop, side=(hub_sock, hub.poll), tick=counters.maybe_send)
    except ShardStopped:
        pass
    finally:
        counters.send()
        if curve is not None:
            curve.stop()
        router.close(linger=0)
        hub_sock.close(linger=0)
        ctx.term()


class _Counters:
    """Sends the hub what this shard counted (messages, rejections, evictions) now and then."""

    def __init__(self, hub: HubLink, stats: RunStats, curve: Any = None) -> None:
        self.hub, self.stats, self.curve = hub, stats, curve
        self.sent = {"messages": 0, "evicted": 0, "refused": 0, "bad": {}}
        self.next = self.last_sent = 0.0

    def maybe_send(self) -> None:
        now = time.monotonic()
        if now >= self.next:
            self.next = now + COUNTERS_EVERY_S
            if not self.send() and now - self.last_sent >= HEARTBEAT_S:
                # Nothing to count: an empty count says the loop still turns (ShardHub
                # takes a shard silent past broker.silent_timeout_s for hung).
                self.hub.send(link.COUNTERS, link.pack(EMPTY_COUNT))
                self.last_sent = now

    def send(self, *, flushed: bool = False) -> bool:
        """Send what was counted since the last send; False when there was nothing.
        ``flushed``: the hub asked (the run stops); sent even when empty, and marked."""
        stats, sent = self.stats, self.sent
        bad = {code: n for code, n in stats.bad_messages.items() if n}
        refused = self.curve.refused if self.curve is not None else 0
        delta = {
            "messages": stats.messages - sent["messages"],
            "evicted": stats.evicted - sent["evicted"],
            "refused": refused - sent["refused"],
            "bad": {code: n - sent["bad"].get(code, 0) for code, n in bad.items()},
        }
        if not (
            flushed
            or delta["messages"]
            or delta["evicted"]
            or delta["refused"]
            or any(delta["bad"].values())
        ):
            return False
        self.hub.send(link.COUNTERS, link.pack({**delta, "flushed": flushed}))
        self.last_sent = time.monotonic()
        self.sent = {
            "messages": stats.messages,
            "evicted": stats.evicted,
            "refused": refused,
            "bad": bad,
        }
        return True
