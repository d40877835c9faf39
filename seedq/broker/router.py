"""The broker: a ZMQ ROUTER feeding the size-or-deadline batcher and replying to actors.

It runs in the learner process (no copy between broker and inference) on one thread. Each
actor has one request in flight, so the batcher never holds more than one request per actor:
backpressure is built in. A bad message is answered with an ``Error`` and counted; it never
stops the loop.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import zmq

from seedq.broker.batcher import Batcher
from seedq.messages import (
    BYE,
    HELLO,
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
)

log = logging.getLogger(__name__)

MAX_TOTAL_ENVS = 1 << 20


@dataclass
class ActorSlot:
    """What the broker knows of one connected actor (one env batch)."""

    hello: Hello
    identity: bytes
    rows: np.ndarray  # the learner's state rows of its envs, int64 [N]
    env_ids: np.ndarray  # global env ids (first_env + i) that label its unrolls, int64 [N]
    next_seq: int = 0


@dataclass
class BrokerStats:
    env_steps: int = 0
    messages: int = 0
    batches: int = 0
    batch_envs: int = 0
    bad_messages: collections.Counter = field(default_factory=collections.Counter)
    episodes: int = 0
    recent_returns: collections.deque = field(default_factory=lambda: collections.deque(maxlen=100))
    recent_lengths: collections.deque = field(default_factory=lambda: collections.deque(maxlen=100))
    lock: threading.Lock = field(default_factory=threading.Lock)


Batch = list[tuple[ActorSlot, Step]]


class BatchConsumer(Protocol):
    """The learner side of the broker (central inference)."""

    def act(self, batch: Batch) -> np.ndarray:
        """Actions int32 [sum of n_envs] for the requests, in request order."""

    def record(self, batch: Batch) -> None:
        """Called after the replies went out: store the steps as trajectory data."""

    def actor_started(self, slot: ActorSlot) -> None:
        """A new actor run began on ``slot.rows``: reset their state and partial unrolls."""

    def actor_left(self, slot: ActorSlot) -> None:
        """The actor said Bye: drop its partial unroll."""


class Broker:
    """ROUTER socket + batcher + actor registry. ``serve`` loops until ``stop`` is set."""

    def __init__(
        self,
        socket: zmq.Socket,
        spec: EnvSpec,
        batcher: Batcher,
        consumer: BatchConsumer,
    ) -> None:
        self.socket = socket
        self.spec = spec
        self.batcher = batcher
        self.consumer = consumer
        self.actors: dict[int, ActorSlot] = {}
        self.stats = BrokerStats()
        self._next_row = 0
        self._waiting_actors = 0
        self._last_warning = 0.0

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

    def _drain(self, limit: int = 256) -> None:
        for _ in range(limit):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.stats.messages += 1
            self.handle(frames)

    def handle(self, frames: list) -> None:
        """Handle one message as received on the ROUTER (identity frame first)."""
        identity = bytes(frames[0].buffer) if hasattr(frames[0], "buffer") else bytes(frames[0])
        header: dict = {}
        try:
            if len(frames) < 2:
                raise ProtocolError("bad_frames", "message has no header frame")
            header = decode_header(frames[1])
            kind = header["kind"]
            if kind == STEP:
                self._step(identity, header, frames[2:])
            elif kind == HELLO:
                self._hello(identity, decode_hello(header))
            elif kind == BYE:
                self._bye(decode_bye(header))
            else:
                raise ProtocolError("bad_kind", f"{kind!r} messages are not sent to the learner")
        except ProtocolError as exc:
            self._reject(identity, header, exc)

    def _reject(self, identity: bytes, header: dict, exc: ProtocolError) -> None:
        self.stats.bad_messages[exc.code] += 1
        now = time.monotonic()
        if now - self._last_warning > 5.0:
            self._last_warning = now
            total = sum(self.stats.bad_messages.values())
            log.warning("rejected a message (%s); %d rejected so far", exc, total)
        actor_id = header.get("actor_id", -1)
        seq = header.get("seq", -1)
        error = Error(
            code=exc.code,
            message=exc.detail,
            actor_id=actor_id if isinstance(actor_id, int) else -1,
            seq=seq if isinstance(seq, int) else -1,
        )
        self.socket.send_multipart([identity, *encode(error)], copy=False)

    def _hello(self, identity: bytes, hello: Hello) -> None:
        if hello.spec != self.spec:
            raise ProtocolError(
                "spec_mismatch",
                f"actor {hello.actor_id} steps envs with {hello.spec}, the learner's model "
                f"expects {self.spec}; start actors with the learner's env config",
            )
        old = self.actors.get(hello.actor_id)
        if old is not None and old.hello == hello:
            old.identity = identity  # a repeated Hello of the same run changes nothing
            return
        if old is not None and old.hello.n_envs == hello.n_envs:
            rows = old.rows  # reconnect with a new run: same rows, fresh state
        else:
            if self._next_row + hello.n_envs > MAX_TOTAL_ENVS:
                raise ProtocolError("too_many_envs", f"learner serves at most {MAX_TOTAL_ENVS}")
            rows = np.arange(self._next_row, self._next_row + hello.n_envs, dtype=np.int64)
            self._next_row += hello.n_envs
        env_ids = np.arange(hello.first_env, hello.first_env + hello.n_envs, dtype=np.int64)
        self._check_env_ids(hello, env_ids)
        slot = ActorSlot(hello=hello, identity=identity, rows=rows, env_ids=env_ids)
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

    def _bye(self, bye: Bye) -> None:
        slot = self.actors.get(bye.actor_id)
        if slot is not None and slot.hello.run_id == bye.run_id:
            del self.actors[bye.actor_id]
            self.consumer.actor_left(slot)
            log.info("actor %d left", bye.actor_id)

    def _step(self, identity: bytes, header: dict, frames: list) -> None:
        actor_id = header.get("actor_id")
        slot = self.actors.get(actor_id) if isinstance(actor_id, int) else None
        if slot is None:
            raise ProtocolError("unknown_actor", f"actor {actor_id!r} sent a step before Hello")
        step = decode_step(header, frames, slot.hello)
        if step.seq != slot.next_seq:
            raise ProtocolError(
                "bad_seq", f"actor {actor_id} sent seq {step.seq}, expected {slot.next_seq}"
            )
        slot.identity = identity
        slot.next_seq += 1
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
            offset += n
        envs = offset
        self.stats.batches += 1
        self.stats.batch_envs += envs
        self.stats.env_steps += envs
        with self.stats.lock:
            for _, step in batch:
                self.stats.episodes += len(step.episode_returns)
                self.stats.recent_returns.extend(step.episode_returns)
                self.stats.recent_lengths.extend(step.episode_lengths)
        self.consumer.record(batch)

    def close(self) -> None:
        self.batcher.take_all()
