"""The broker: a ZMQ ROUTER feeding the size-or-deadline batcher and replying to actors.

It runs in the learner process (no copy between broker and inference) on one thread, or in a
broker shard process of its own (``broker.shards``, :mod:`seedq.broker.shards`). Each actor has
one request in flight (a second one is refused as ``busy``), so the batcher never holds more
than one request per actor: backpressure is built in. A bad message is answered with an
``Error`` and counted by code in ``stats.bad_messages``; an unexpected exception while handling
one message is counted as ``internal``. Neither stops the loop, and each code is logged once,
so a flood of bad input cannot flood the log.

The per-message path is short on purpose (it bounds how many actors one core serves): a Step's
binary header is checked against the ``StepLayout`` its actor's Hello fixed, small frames are
received as bytes, and everything that looks at array values, the batch's assembly and the
replies' encoding happen once per batch (``seedq.messages.batch``). Learner state rows and env
ids come from the learner-wide ``ActorRegistry`` once a Hello is valid, and go back when the
actor leaves (Bye), restarts, falls silent (evicted by last-seen time) or joins another shard.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import zmq

from seedq.broker.batch import ActorSlot, RequestBatch
from seedq.broker.batcher import Batcher
from seedq.broker.registry import ActorRegistry
from seedq.core.stats import RunStats
from seedq.messages import (
    BINARY_MARK,
    BYE,
    HELLO,
    MAX_FRAMES,
    EnvSpec,
    Error,
    Hello,
    ProtocolError,
    StepLayout,
    decode_bye,
    decode_header,
    decode_hello,
    encode,
    env_difference,
    frames_size,
    reply_address,
)
from seedq.messages.batch import decode_steps, encode_replies
from seedq.messages.steps import parse_step_head

log = logging.getLogger(__name__)

DEFAULT_SILENT_TIMEOUT_S = 30.0
DEFAULT_MAX_MESSAGE_BYTES = 256 << 20
# Connections whose actor id another run took over, remembered (oldest forgotten first) so
# that whatever they send later is answered ``taken_over`` rather than ``not_joined``, which
# would have them rejoin and take the id back, each in turn, for ever.
MAX_TAKEN_OVER = 4096
_MARK = bytes([BINARY_MARK])
_MORE = zmq.RCVMORE


# A queued Step: (slot, seq, header frame, obs, final_obs or b"", episodes or b"", K).
Request = tuple[ActorSlot, int, bytes, Any, Any, Any, int]


class BatchConsumer(Protocol):
    """The learner side of the broker (central inference)."""

    def act(self, batch: RequestBatch) -> np.ndarray:
        """Actions int32 [B] (or float32 [B, D]) for the batch's envs, in order."""

    def record(self, batch: RequestBatch) -> None:
        """Called after the replies went out: store the steps as trajectory data."""

    def actor_started(self, slot: ActorSlot) -> None:
        """A new actor run began on ``slot.rows``: reset their state and partial unrolls."""

    def actor_left(self, slot: ActorSlot) -> None:
        """The actor's run ended (Bye, eviction, a new run or another shard replaced it): drop
        its partial unroll and per-actor state; its rows may be given to another actor."""


class Broker:
    """ROUTER socket + batcher + actor table. ``serve`` loops until ``stop`` is set.

    Args:
        silent_timeout_s: actors that sent nothing for this long (and wait for no reply) are
            evicted as if they had said Bye; 0 disables eviction.
        max_message_bytes: larger messages are refused (``too_large``); also set as the
            socket's ``MAXMSGSIZE`` so over-size frames from TCP peers are dropped by ZeroMQ
            before they are allocated (the peer is disconnected).
        clock: monotonic seconds; injectable for tests.
        stats: the run's counters this broker adds to (a new one by default).
        registry: the learner-wide rows and env ids (shared by shards; a new one by default).
        consumer_lock: held around every call into ``consumer`` (shards share one consumer).
        env: what the learner's envs are (a Hello's ``env``, :func:`env_json`); a Hello that
            says other envs is refused ``env_mismatch``. "": the spec alone is checked.
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
        registry: ActorRegistry | None = None,
        consumer_lock: Any = None,
        env: str = "",
    ) -> None:
        if silent_timeout_s < 0:
            raise ValueError(f"silent_timeout_s must be >= 0 (0 disables), got {silent_timeout_s}")
        self.socket = socket
        self.spec = spec
        self.env = env
        self.batcher = batcher
        self.consumer = consumer
        self.silent_timeout_s = silent_timeout_s
        self.max_message_bytes = max_message_bytes
        self.clock = clock
        self.actors: dict[int, ActorSlot] = {}
        self.connected_envs = 0
        self.registry = registry if registry is not None else ActorRegistry()
        self.stats = stats if stats is not None else RunStats()
        self._lock = consumer_lock if consumer_lock is not None else contextlib.nullcontext()
        self._logged_codes: set[str] = set()
        self._next_eviction = 0.0
        # The broker clock when a drain that then found the socket empty began: everything the
        # actors sent before it has been read (None: not yet).
        self._heard_all_at: float | None = None
        # (actor id, run id, the run on another shard that took the id), from the hub.
        self._revoked: collections.deque[tuple[int, str, str]] = collections.deque()
        # A connection whose actor id another run took -> (the actor id, which run took it).
        self._taken_over: collections.OrderedDict[bytes, tuple[int, str]] = (
            collections.OrderedDict()
        )
        socket.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)

    @property
    def rows(self):  # noqa: ANN201 - the registry's RowPool
        return self.registry.rows

    def revoke(self, actor_id: int, run_id: str, by_run: str) -> None:
        """End ``actor_id``'s run ``run_id`` at the next turn of the loop: its run ``by_run``
        joined another shard (thread-safe)."""
        self._revoked.append((actor_id, run_id, by_run))

    def _end_revoked(self) -> None:
        """Take over the runs whose ids joined other shards, as a Hello on another connection
        of one broker does: a step in flight and whatever the connection sends later are
        refused ``taken_over``, so a second process with the id exits rather than rejoining
        and taking the id back, in turn, for ever (``unknown_actor`` had it rejoin, and a step
        dropped unanswered had its actor wait ``actor.reply_timeout_s``)."""
        while self._revoked:
            actor_id, run_id, by_run = self._revoked.popleft()
            slot = self.actors.get(actor_id)
            if slot is None or slot.hello.run_id != run_id:
                continue  # gone, or a newer run joined here since: the revocation crossed it
            log.warning(
                "actor %d: run %s joined another broker shard and took the id over from run "
                "%s, which is refused from now on (taken_over): its actor restarted on another "
                "shard, or two processes were started with this actor id",
                actor_id,
                by_run,
                run_id,
            )
            self._take_over(slot, f"run {by_run}, on another broker shard")

    def serve(
        self,
        stop: threading.Event,
        *,
        side: tuple[zmq.Socket, Callable[[], None]] | None = None,
        tick: Callable[[], None] | None = None,
    ) -> None:
        """Serve until ``stop`` is set. ``side``: another socket to watch and what to call when
        it is readable (a shard's link to the learner); ``tick``: called once per turn."""
        poll_items = [(self.socket, zmq.POLLIN)]
        if side is not None:
            poll_items.append((side[0], zmq.POLLIN))
        batcher = self.batcher
        while not stop.is_set():
            wait = batcher.time_until_ready()
            timeout_ms = 100 if wait is None else min(100, math.ceil(wait * 1000))
            ready = zmq.zmq_poll(poll_items, timeout_ms)
            if ready:
                self._drain()
                if side is not None:
                    side[1]()
            self._end_revoked()
            self.answer_ready()
            self.evict_if_due()
            if tick is not None:
                tick()

    def answer_ready(self) -> int:
        """Answer every batch that is due: full, or its oldest request waited ``deadline_s``,
        or everyone who can send is waiting (a fuller batch cannot come, so the deadline is not
        waited out). Returns how many batches went out."""
        batcher, answered = self.batcher, 0
        while batcher.ready() or (len(batcher) and batcher.pending_size >= self.connected_envs):
            self._run_batch(batcher.take())
            answered += 1
        return answered

    def _drain(self, limit: int = 4096, *, to_empty: bool = False) -> None:
        """Receive what is queued, until a batch is full (it goes out before more is read) or,
        ``to_empty``, until the socket is empty. A drain that ends on an empty socket has heard
        everything sent before it began (``_heard_all_at``)."""
        batcher = self.batcher
        started = self.clock()
        for _ in range(limit):
            try:
                self._receive()
            except zmq.Again:
                self._heard_all_at = started
                return
            if not to_empty and batcher.pending_size >= batcher.max_batch:
                return

    def _receive(self) -> None:
        sock = self.socket
        identity = sock.recv(zmq.NOBLOCK)
        self.stats.messages += 1
        head = sock.recv(zmq.NOBLOCK)
        try:
            if head[:1] == _MARK:
                self._step(identity, head, None)
            else:
                self._control(identity, head, self._rest(copy=False))
        except ProtocolError as exc:
            self._discard_rest()
            self._reject(identity, exc.code, exc.detail, exc)
        except Exception as exc:  # a bug must cost one message, not the run
            self._discard_rest()
            self._reject(identity, "internal", "the learner failed on this message", exc)

    def handle(self, frames: list) -> None:
        """Handle one message as received on the ROUTER (identity frame first).

        Never raises: a protocol violation is answered with its code, anything else is counted
        as ``internal``.
        """
        identity = bytes(getattr(frames[0], "buffer", frames[0]))
        try:
            if len(frames) < 2:
                raise ProtocolError("bad_frames", "message has no header frame")
            head = bytes(getattr(frames[1], "buffer", frames[1]))
            if head[:1] == _MARK:
                self._step(identity, head, list(frames[2:]))
            else:
                self._control(identity, head, list(frames[2:]))
        except ProtocolError as exc:
            self._reject(identity, exc.code, exc.detail, exc)
        except Exception as exc:  # a bug must cost one message, not the run
            self._reject(identity, "internal", "the learner failed on this message", exc)

    def _rest(self, copy: bool) -> list:
        """The frames of the current message after the header (at most MAX_FRAMES)."""
        sock, rest = self.socket, []
        while sock.getsockopt(_MORE):
            if len(rest) == MAX_FRAMES:
                self._discard_rest()
                raise ProtocolError("bad_frames", f"more than {MAX_FRAMES} frames")
            rest.append(sock.recv(zmq.NOBLOCK, copy=copy))
        return rest

    def _discard_rest(self) -> None:
        sock = self.socket
        while sock.getsockopt(_MORE):
            sock.recv(zmq.NOBLOCK, copy=False)

    def _step(self, identity: bytes, head: bytes, rest: list | None) -> None:
        """Admit a Step into the batcher, or raise (the Error goes to its actor and seq)."""
        fields = parse_step_head(head)
        try:
            self._admit(identity, head, rest, fields)
        except ProtocolError as exc:
            exc.address = (fields[4], fields[8])
            raise

    def _admit(self, identity: bytes, head: bytes, rest: list | None, fields: tuple) -> None:
        actor_id = fields[4]
        slot = self.actors.get(actor_id)
        if slot is None or slot.identity != identity:
            self._refuse_if_taken_over(identity)
        if slot is None:
            # Said of every such step, the one an actor sends right after a Hello the learner
            # refused (it does not wait for an answer to it) and one after an eviction.
            raise ProtocolError(
                "unknown_actor",
                f"actor {actor_id} is not joined: its step came without an accepted Hello (none "
                "sent, one refused, or its run was evicted)",
            )
        if slot.identity != identity:
            raise ProtocolError(
                "not_joined", f"step for actor {actor_id} from a connection that sent no Hello"
            )
        if slot.in_flight:
            raise ProtocolError(
                "busy", f"actor {actor_id} sent a step before its previous one was answered"
            )
        layout = slot.layout
        seq, n_final, n_episodes = layout.check_head(fields, len(head), slot.next_seq)
        if rest is None:
            rest = self._rest(copy=layout.inline)
        size = len(head) + sum(map(len, rest)) if rest else len(head)
        if size > self.max_message_bytes:
            raise ProtocolError("too_large", f"message of {size} bytes > {self.max_message_bytes}")
        if len(rest) != layout.frame_count(n_final, n_episodes):
            raise ProtocolError(
                "bad_frames",
                f"{len(rest)} array frames, the header declares "
                f"{layout.frame_count(n_final, n_episodes)}",
            )
        obs = b"" if layout.inline else rest[0]
        final = rest[int(not layout.inline)] if n_final else b""
        episodes = rest[-1] if n_episodes else b""
        sizes = len(obs), len(final), len(episodes)
        layout.check_sizes(*sizes, n_final, n_episodes)
        slot.next_seq = seq + 1
        slot.last_seen = self.clock()
        slot.in_flight = True
        self.batcher.add((slot, seq, head, obs, final, episodes, n_final), layout.n_envs)

    def _control(self, identity: bytes, head: bytes, rest: list) -> None:
        if len(rest) + 1 > MAX_FRAMES:
            raise ProtocolError("bad_frames", f"{len(rest) + 1} frames > {MAX_FRAMES}")
        size = len(head) + frames_size(rest)
        if size > self.max_message_bytes:
            raise ProtocolError("too_large", f"message of {size} bytes > {self.max_message_bytes}")
        header = decode_header(head)
        kind = header["kind"]
        if rest:
            raise ProtocolError("bad_frames", f"a {kind!r} message has only a header frame")
        try:
            if kind == HELLO:
                self._hello(identity, decode_hello(header), self.clock())
            elif kind == BYE:
                self._bye(identity, decode_bye(header))
            else:
                raise ProtocolError("bad_kind", f"{kind!r} messages are not sent to the learner")
        except ProtocolError as exc:
            exc.address = reply_address(header)
            raise

    def _reject(self, identity: bytes, code: str, detail: str, exc: Exception) -> None:
        """Count a refused message and answer it with its Error, addressed to the actor and
        seq its header named (``exc.address``) where it could be read."""
        self.stats.bad_messages[code] += 1
        if code not in self._logged_codes:
            self._logged_codes.add(code)
            log.warning(
                "rejected a message (%s); further %r rejections are only counted",
                exc,
                code,
                exc_info=code == "internal",
            )
        actor_id, seq = getattr(exc, "address", (-1, -1))
        error = Error(code=code, message=detail, actor_id=actor_id, seq=seq)
        try:
            self.socket.send_multipart([identity, *encode(error)], copy=False)
        except zmq.ZMQError as send_error:
            # The peer is gone: the message is counted above, there is no one to tell.
            log.debug("could not answer a %r rejection: %s", code, send_error)

    def _hello(self, identity: bytes, hello: Hello, now: float) -> None:
        self._refuse_if_taken_over(identity)
        if hello.spec != self.spec:
            raise ProtocolError(
                "spec_mismatch",
                f"actor {hello.actor_id} steps envs with {hello.spec}, the learner's model "
                f"expects {self.spec}; start actors with the learner's env config",
            )
        if self.env and hello.env and hello.env != self.env:
            raise ProtocolError(
                "env_mismatch",
                f"actor {hello.actor_id} steps other envs than the learner's: "
                f"{env_difference(hello.env, self.env)}; start actors with the learner's env "
                "config",
            )
        layout = StepLayout(hello)
        if layout.least_bytes > self.max_message_bytes:
            # Its first step would exceed the socket's MAXMSGSIZE: ZeroMQ drops the connection
            # without a word, and the actor took that for a learner that stalls, in a loop.
            raise ProtocolError(
                "too_large",
                f"actor {hello.actor_id}'s {hello.n_envs} envs make Steps of at least "
                f"{layout.least_bytes} bytes, more than this learner's broker.max_message_bytes="
                f"{self.max_message_bytes}; start it with --envs-per-batch "
                f"{layout.most_envs_within(self.max_message_bytes)} or fewer",
            )
        old = self.actors.get(hello.actor_id)
        if old is not None and old.hello == hello:
            old.identity = identity  # a repeated Hello of the same run changes nothing
            old.last_seen = now
            return
        # Checked (env ids, rows) before the old run ends: a bad Hello leaves it running.
        rows = self.registry.join(hello, self, None if old is None else old.rows)
        if old is not None and old.identity == identity:
            # A new run of this actor: its old requests must never be answered or recorded.
            self._remove(old, release_rows=False)
        elif old is not None:
            # Another connection: the actor restarted (killed before its old connection was
            # seen to drop), or a second process uses this actor id. Either way the old run is
            # told, rather than left to wait for a reply that never comes.
            log.warning(
                "actor %d: run %s joined on another connection and took the id over from run "
                "%s, which is refused from now on (taken_over): its actor restarted or "
                "rejoined, or two processes were started with this actor id",
                hello.actor_id,
                hello.run_id,
                old.hello.run_id,
            )
            self._take_over(old, f"run {hello.run_id}", release_rows=False)
        env_ids = np.arange(hello.first_env, hello.first_env + hello.n_envs, dtype=np.int64)
        slot = ActorSlot(hello, identity, rows, env_ids, last_seen=now, layout=layout)
        self.actors[hello.actor_id] = slot
        self.connected_envs += hello.n_envs
        log.info("actor %d joined (run %s, %d envs)", hello.actor_id, hello.run_id, hello.n_envs)
        with self._lock:
            self.consumer.actor_started(slot)

    def _bye(self, identity: bytes, bye: Any) -> None:
        slot = self.actors.get(bye.actor_id)
        if slot is None or slot.identity != identity:
            self._refuse_if_taken_over(identity)
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
        if self.actors.get(slot.hello.actor_id) is slot:
            del self.actors[slot.hello.actor_id]
            self.connected_envs -= slot.hello.n_envs
        if slot.in_flight:
            self.batcher.remove(lambda request: request[0] is slot)
            slot.in_flight = False
        with self._lock:
            self.consumer.actor_left(slot)
        if release_rows:
            self.registry.leave(slot.hello.actor_id, self, slot.rows)

    def _take_over(self, slot: ActorSlot, by: str, *, release_rows: bool = True) -> None:
        """End ``slot``'s run for a new run of its actor id on another connection of this
        broker (``by``: which run): its request in flight, if any, and whatever its connection
        sends later are refused ``taken_over``, and its actor exits."""
        actor_id, seq = slot.hello.actor_id, slot.next_seq - 1
        in_flight = slot.in_flight
        self._remove(slot, release_rows=release_rows)
        self._taken_over[slot.identity] = (actor_id, by)
        self._taken_over.move_to_end(slot.identity)
        if len(self._taken_over) > MAX_TAKEN_OVER:
            self._taken_over.popitem(last=False)
        if in_flight:
            exc = _taken_over_error(actor_id, by)
            exc.address = (actor_id, seq)
            self._reject(slot.identity, exc.code, exc.detail, exc)

    def _refuse_if_taken_over(self, identity: bytes) -> None:
        taken = self._taken_over.get(identity)
        if taken is not None:
            raise _taken_over_error(*taken)

    def evict_if_due(self) -> None:
        """Every ``min(1 s, silent_timeout_s / 4)``: read the socket empty, then evict those
        silent for ``silent_timeout_s`` before the moment everything sent had been heard.

        Silence is judged at that moment, not at the clock's now: time the broker spent away
        from the socket (in the consumer, which holds it while an on-policy learner trains, or
        on a starved core) hides the requests live actors sent meanwhile, and the drain reads
        them first. A stopped actor's silence still grows at the clock's pace however little
        the broker listens, where excusing each stretch away from the socket would let a
        broker that is away most of the time (waiting on a full training queue) never evict."""
        if not self.silent_timeout_s:
            return
        now = self.clock()
        if now < self._next_eviction:
            return
        self._next_eviction = now + min(1.0, self.silent_timeout_s / 4)
        self._drain(to_empty=True)
        if self._heard_all_at is not None:
            self.evict_silent(self._heard_all_at, self.silent_timeout_s)

    def evict_silent(self, now: float, timeout_s: float) -> list[int]:
        """Evict actors silent for more than ``timeout_s`` at ``now``, a moment by which every
        message sent to the broker has been read; returns their ids.

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
        ids = [slot.hello.actor_id for slot in silent]
        if silent:
            self.stats.evicted += len(silent)
            log.warning("evicted %d actor(s) silent for > %.1f s: %s", len(ids), timeout_s, ids)
        return ids

    def _run_batch(self, requests: list[Request]) -> None:
        batch = self._assemble(requests)
        if batch is None:
            return
        with self._lock:
            actions = self.consumer.act(batch)
        slots = batch.slots
        replies = encode_replies(
            [slot.hello.actor_id for slot in slots], batch.seqs, batch.sizes, actions
        )
        send, more = self.socket.send, zmq.SNDMORE
        now = self.clock()
        for slot, reply in zip(slots, replies, strict=True):
            send(slot.identity, more)
            send(reply)
            slot.in_flight = False
            slot.last_seen = now  # its silence counts from our reply
        self.stats.record_batch(batch.num_envs, batch.episodes)
        with self._lock:
            self.consumer.record(batch)

    def _assemble(self, requests: list[Request]) -> RequestBatch | None:
        """The batch of ``requests``; those whose arrays fail a check are answered with their
        Error and left out (their seq may be sent again)."""
        while requests:
            slots = [r[0] for r in requests]
            seqs = [r[1] for r in requests]
            sizes = [slot.layout.n_envs for slot in slots]
            decoded = decode_steps(
                slots[0].layout,
                sizes,
                [r[2] for r in requests],
                [r[3] for r in requests],
                [r[4] for r in requests],
                [r[5] for r in requests],
                [r[6] for r in requests],
            )
            if not decoded.errors:
                return RequestBatch.assemble(
                    slots, seqs, sizes, decoded.obs, decoded.reward, decoded.terminated,
                    decoded.truncated, decoded.final_obs, decoded.truncated_index,
                    decoded.episodes,
                )  # fmt: skip
            for i, exc in decoded.errors:
                slot = slots[i]
                slot.in_flight = False
                slot.next_seq = seqs[i]  # as if never received
                exc.address = (slot.hello.actor_id, seqs[i])
                self._reject(slot.identity, exc.code, exc.detail, exc)
            bad = {i for i, _ in decoded.errors}
            requests = [r for i, r in enumerate(requests) if i not in bad]
        return None

    def close(self) -> None:
        self.batcher.take_all()


def _taken_over_error(actor_id: int, by: str) -> ProtocolError:
    """The refusal of a run whose actor id another run (``by``) took over."""
    return ProtocolError(
        "taken_over",
        f"actor id {actor_id} was taken over by another process ({by}) joining the learner; "
        "give each actor process its own --actor-ids",
    )
