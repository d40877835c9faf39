"""The broker: a ZMQ ROUTER feeding the size-or-deadline batcher and replying to actors.

It runs in the learner process (no copy between broker and inference) on one thread. Each
actor has one request in flight (a second one is refused as ``busy``), so the batcher never
holds more than one request per actor: backpressure is built in. A bad message is answered with
an ``Error`` and counted by code in ``stats.bad_messages``; an unexpected exception while
handling one message is counted as ``internal``. Neither stops the loop, and each code is
logged once, so a flood of bad input cannot flood the log.

Learner state rows are allocated only once a Hello is valid, and rows of actors that leave
(Bye), restart with another ``n_envs`` or fall silent (evicted by last-seen time) are reused, so
hello/bye churn never grows the state table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import zmq

from seedq.broker.batcher import Batcher
from seedq.broker.rows import RowPool
from seedq.core.stats import RunStats
from seedq.messages import (
    BYE,
    HELLO,
    MAX_FRAMES,
    STEP,
    Actions,
    Bye,
    EnvSpec,
    Error,
    Hello,
    ProtocolError,
    Step,
    decode_bye,
    decode_header,
    decode_hello,
    decode_step,
    encode,
    frames_size,
    reply_address,
)

log = logging.getLogger(__name__)

MAX_TOTAL_ENVS = 1 << 20
DEFAULT_SILENT_TIMEOUT_S = 30.0
DEFAULT_MAX_MESSAGE_BYTES = 256 << 20


@dataclass
class ActorSlot:
    """What the broker knows of one connected actor (one env batch)."""

    hello: Hello
    identity: bytes
    rows: np.ndarray  # the learner's state rows of its envs, int64 [N]
    env_ids: np.ndarray  # global env ids (first_env + i) that label its unrolls, int64 [N]
    next_seq: int = 0
    last_seen: float = 0.0  # broker clock at its last valid message or our last reply to it
    in_flight: bool = False  # a Step of it is queued or being answered


Batch = list[tuple[ActorSlot, Step]]


class BatchConsumer(Protocol):
    """The learner side of the broker (central inference)."""

    def act(self, batch: Batch) -> np.ndarray:
        """Actions int32 [sum of n_envs] (or float32 [sum, D]) for the requests, in order."""

    def record(self, batch: Batch) -> None:
        """Called after the replies went out: store the steps as trajectory data."""

    def actor_started(self, slot: ActorSlot) -> None:
        """A new actor run began on ``slot.rows``: reset their state and partial unrolls."""

    def actor_left(self, slot: ActorSlot) -> None:
        """The actor's run ended (Bye, eviction, or a new run replaced it): drop its partial
        unroll and per-actor state; its rows may be given to another actor."""


class Broker:
    """ROUTER socket + batcher + actor registry. ``serve`` loops until ``stop`` is set.

    Args:
        silent_timeout_s: actors that sent nothing for this long (and wait for no reply) are
            evicted as if they had said Bye; 0 disables eviction.
        max_message_bytes: larger messages are refused (``too_large``); also set as the
            socket's ``MAXMSGSIZE`` so over-size frames from TCP peers are dropped by ZeroMQ
            before they are allocated (the peer is disconnected).
        clock: monotonic seconds; injectable for tests.
        stats: the run's counters this broker adds to (a new one by default).
    """

    def __init__(
        self,
        socket: zmq.Socket,
        spec: EnvSpec,
        batcher: Batcher,
        consumer: BatchConsumer,
        *,
        silent_timeout_s: float = DEFAULT_SILENT_TIMEOUT_S,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        clock: Callable[[], float] = time.monotonic,
        stats: RunStats | None = None,
    ) -> None:
        if silent_timeout_s < 0:
            raise ValueError(f"silent_timeout_s must be >= 0 (0 disables), got {silent_timeout_s}")
        self.socket = socket
        self.spec = spec
        self.batcher = batcher
        self.consumer = consumer
        self.silent_timeout_s = silent_timeout_s
        self.max_message_bytes = max_message_bytes
        self.clock = clock
        self.actors: dict[int, ActorSlot] = {}
        self.rows = RowPool(MAX_TOTAL_ENVS)
        self.stats = stats if stats is not None else RunStats()
        self._logged_codes: set[str] = set()
        self._next_eviction = 0.0
        socket.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)

    @property
    def connected_envs(self) -> int:
        return sum(slot.hello.n_envs for slot in self.actors.values())

    def serve(self, stop: threading.Event) -> None:
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        while not stop.is_set():
            wait = self.batcher.time_until_ready()
            timeout_ms = 100 if wait is None else min(100, int(np.ceil(wait * 1000)))
            if poller.poll(timeout_ms):
                self._drain()
            # Everyone who can send is waiting: a fuller batch cannot come, so do not wait out
            # the deadline.
            if self.batcher.ready() or (
                len(self.batcher) and self.batcher.pending_size >= self.connected_envs
            ):
                self._run_batch(self.batcher.take())
            self._maybe_evict()

    def _maybe_evict(self) -> None:
        if not self.silent_timeout_s:
            return
        now = self.clock()
        if now >= self._next_eviction:
            self._next_eviction = now + min(1.0, self.silent_timeout_s / 4)
            self.evict_silent(now, self.silent_timeout_s)

    def evict_silent(self, now: float, timeout_s: float) -> list[int]:
        """Evict actors silent for more than ``timeout_s``; returns their ids.

        An actor whose request is still queued is waiting for us, not silent; its silence
        counts from our reply.
        """
        silent = [
            slot
            for slot in self.actors.values()
            if not slot.in_flight and now - slot.last_seen > timeout_s
        ]
        for slot in silent:
            self._remove(slot)
        if silent:
            self.stats.evicted += len(silent)
            ids = [slot.hello.actor_id for slot in silent]
            log.warning("evicted %d actor(s) silent for > %.1f s: %s", len(ids), timeout_s, ids)
        return [slot.hello.actor_id for slot in silent]

    def _drain(self, limit: int = 256) -> None:
        for _ in range(limit):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.stats.messages += 1
            self.handle(frames)

    def handle(self, frames: list) -> None:
        """Handle one message as received on the ROUTER (identity frame first).

        Never raises: a protocol violation is answered with its code, anything else is counted
        as ``internal``.
        """
        identity = bytes(getattr(frames[0], "buffer", frames[0]))
        header: dict = {}
        try:
            self._dispatch(identity, frames, header)
        except ProtocolError as exc:
            self._reject(identity, header, exc.code, exc.detail, exc)
        except Exception as exc:  # a bug must cost one message, not the run
            self._reject(identity, header, "internal", "the learner failed on this message", exc)

    def _dispatch(self, identity: bytes, frames: list, header: dict) -> None:
        if len(frames) < 2:
            raise ProtocolError("bad_frames", "message has no header frame")
        if len(frames) - 1 > MAX_FRAMES:
            raise ProtocolError("bad_frames", f"{len(frames) - 1} frames > {MAX_FRAMES}")
        size = frames_size(frames[1:])
        if size > self.max_message_bytes:
            raise ProtocolError("too_large", f"message of {size} bytes > {self.max_message_bytes}")
        header.update(decode_header(frames[1]))
        kind = header["kind"]
        now = self.clock()
        if kind == STEP:
            self._step(identity, header, frames[2:], now)
            return
        if len(frames) != 2:
            raise ProtocolError("bad_frames", f"a {kind!r} message has only a header frame")
        if kind == HELLO:
            self._hello(identity, decode_hello(header), now)
        elif kind == BYE:
            self._bye(identity, decode_bye(header))
        else:
            raise ProtocolError("bad_kind", f"{kind!r} messages are not sent to the learner")

    def _reject(
        self, identity: bytes, header: dict, code: str, detail: str, exc: Exception
    ) -> None:
        self.stats.bad_messages[code] += 1
        if code not in self._logged_codes:
            self._logged_codes.add(code)
            log.warning(
                "rejected a message (%s); further %r rejections are only counted",
                exc,
                code,
                exc_info=code == "internal",
            )
        actor_id, seq = reply_address(header)
        error = Error(code=code, message=detail, actor_id=actor_id, seq=seq)
        try:
            self.socket.send_multipart([identity, *encode(error)], copy=False)
        except zmq.ZMQError as exc:
            # The peer is gone: the message is counted above, there is no one to tell.
            log.debug("could not answer a %r rejection: %s", code, exc)

    def _hello(self, identity: bytes, hello: Hello, now: float) -> None:
        if hello.spec != self.spec:
            raise ProtocolError(
                "spec_mismatch",
                f"actor {hello.actor_id} steps envs with {hello.spec}, the learner's model "
                f"expects {self.spec}; start actors with the learner's env config",
            )
        old = self.actors.get(hello.actor_id)
        if old is not None and old.hello == hello:
            old.identity = identity  # a repeated Hello of the same run changes nothing
            old.last_seen = now
            return
        env_ids = np.arange(hello.first_env, hello.first_env + hello.n_envs, dtype=np.int64)
        self._check_env_ids(hello, env_ids)
        rows = None
        if old is not None:
            # A new run of this actor: its old requests must never be answered or recorded.
            same_size = old.hello.n_envs == hello.n_envs
            self._remove(old, release_rows=not same_size)
            rows = old.rows if same_size else None
        if rows is None:
            rows = self.rows.allocate(hello.n_envs)
            if rows is None:
                raise ProtocolError(
                    "too_many_envs",
                    f"learner serves at most {MAX_TOTAL_ENVS} envs, {self.rows.in_use} in use",
                )
        slot = ActorSlot(hello=hello, identity=identity, rows=rows, env_ids=env_ids)
        slot.last_seen = now
        self.actors[hello.actor_id] = slot
        log.info("actor %d joined (run %s, %d envs)", hello.actor_id, hello.run_id, hello.n_envs)
        self.consumer.actor_started(slot)

    def _check_env_ids(self, hello: Hello, env_ids: np.ndarray) -> None:
        for other in self.actors.values():
            if other.hello.actor_id == hello.actor_id:
                continue
            lo, hi = int(other.env_ids[0]), int(other.env_ids[-1])
            if env_ids[0] <= hi and env_ids[-1] >= lo:
                raise ProtocolError(
                    "env_id_conflict",
                    f"actor {hello.actor_id} claims env ids {env_ids[0]}..{env_ids[-1]}, "
                    f"actor {other.hello.actor_id} already steps {lo}..{hi}; give each actor "
                    "its own first_env",
                )

    def _bye(self, identity: bytes, bye: Bye) -> None:
        slot = self.actors.get(bye.actor_id)
        if slot is None:
            raise ProtocolError("unknown_actor", f"Bye from actor {bye.actor_id}, not connected")
        if slot.hello.run_id != bye.run_id:
            raise ProtocolError("stale_run", f"Bye from run {bye.run_id!r}, not the current one")
        if slot.identity != identity:
            raise ProtocolError("not_joined", "Bye from a connection that did not send Hello")
        self._remove(slot)
        log.info("actor %d left", bye.actor_id)

    def _remove(self, slot: ActorSlot, *, release_rows: bool = True) -> None:
        """End an actor's run: its queued request is dropped, the consumer told, rows freed."""
        self.actors.pop(slot.hello.actor_id, None)
        self.batcher.remove(lambda request: request[0] is slot)
        slot.in_flight = False
        self.consumer.actor_left(slot)
        if release_rows:
            self.rows.release(slot.rows)

    def _step(self, identity: bytes, header: dict, frames: list, now: float) -> None:
        actor_id = header.get("actor_id")
        slot = self.actors.get(actor_id) if type(actor_id) is int else None  # bools are not ids
        if slot is None:
            raise ProtocolError("unknown_actor", f"actor {actor_id!r} sent a step before Hello")
        if slot.identity != identity:
            raise ProtocolError(
                "not_joined", f"step for actor {actor_id} from a connection that sent no Hello"
            )
        if slot.in_flight:
            raise ProtocolError(
                "busy", f"actor {actor_id} sent a step before its previous one was answered"
            )
        step = decode_step(header, frames, slot.hello)
        if step.seq != slot.next_seq:
            raise ProtocolError(
                "bad_seq", f"actor {actor_id} sent seq {step.seq}, expected {slot.next_seq}"
            )
        slot.next_seq += 1
        slot.last_seen = now
        slot.in_flight = True
        self.batcher.add((slot, step), slot.hello.n_envs)

    def _run_batch(self, batch: Batch) -> None:
        if not batch:
            return
        actions = self.consumer.act(batch)
        offset = 0
        for slot, step in batch:
            n = slot.hello.n_envs
            reply = Actions(slot.hello.actor_id, step.seq, actions[offset : offset + n])
            self.socket.send_multipart([slot.identity, *encode(reply)], copy=False)
            slot.in_flight = False
            offset += n
        now = self.clock()
        for slot, _ in batch:
            slot.last_seen = now  # its silence counts from our reply
        self.stats.record_batch(offset, (step for _, step in batch))
        self.consumer.record(batch)

    def close(self) -> None:
        self.batcher.take_all()
