"""The load of ``seedq-bench broker``: processes that each hold many actor streams.

A stream is what one env batch of a real actor is to the broker: its own DEALER socket, a Hello,
then one Step at a time in lockstep with the replies. The Steps are encoded once per stream with
:func:`seedq.messages.encode` (the real wire format); each send only patches the sequence number
into the encoded header, so a generator spends its CPU on sockets, not on encoding, and the
broker is what the figures measure.

Round trips are timed per stream and reported per measuring window (raw seconds, so the parent
computes exact percentiles over all generators).
"""

from __future__ import annotations

import time
import uuid
from array import array
from typing import Any

import numpy as np
import zmq

from seedq.messages import ERROR, EnvSpec, Hello, Step, decode_error, decode_header, encode

# A seq nobody sends: its encoded bytes mark where the header holds the seq.
SEQ_MARK = 0x5EED_C0DE_5EED_C0DE


def seq_slot(header: bytes) -> tuple[int, str]:
    """Where (offset, byte order) the 8-byte seq lies in a header encoded with ``SEQ_MARK``."""
    for order in ("little", "big"):  # a binary header / msgpack's uint64
        at = header.find(SEQ_MARK.to_bytes(8, order))
        if at >= 0:
            return at, order
    raise ValueError("the encoded Step header does not hold its seq as 8 bytes")


class Stream:
    """One actor stream: a DEALER socket, its pre-encoded Step and the time of its last send."""

    def __init__(
        self, ctx: zmq.Context, endpoint: str, actor_id: int, n_envs: int, spec: EnvSpec
    ) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.actor_id, self.n_envs, self.spec = actor_id, n_envs, spec
        self.sent_at = 0.0
        self.seq = 0
        self.join()

    def join(self) -> None:
        """Hello with a new run id, and the Step frames of that run."""
        run_id = uuid.uuid4().hex
        n, shape = self.n_envs, self.spec.obs_shape
        hello = Hello(self.actor_id, run_id, n, self.spec, first_env=self.actor_id * n)
        self.sock.send_multipart(encode(hello))
        obs = np.zeros((n, *shape), self.spec.obs_dtype)
        step = Step(
            self.actor_id, run_id, SEQ_MARK, obs, np.zeros(n, np.float32), np.zeros(n, bool),
            np.zeros(n, bool), obs[:0],
        )  # fmt: skip
        frames = [f if isinstance(f, bytes) else np.asarray(f).tobytes() for f in encode(step)]
        self.header = bytearray(frames[0])
        self.seq_at, self.seq_order = seq_slot(frames[0])
        # Large constant frames are sent as one zmq.Frame again and again: no copy per send.
        self.body = [zmq.Frame(f) if len(f) > 65536 else f for f in frames[1:]]
        self.seq = 0

    def send(self) -> None:
        self.header[self.seq_at : self.seq_at + 8] = self.seq.to_bytes(8, self.seq_order)
        self.sock.send(self.header, zmq.SNDMORE if self.body else 0)
        for i, frame in enumerate(self.body):
            self.sock.send(frame, zmq.SNDMORE if i + 1 < len(self.body) else 0, copy=False)
        self.sent_at = time.perf_counter()


def _refusal(frames: list[bytes]) -> str | None:
    """The code of an Error reply (one msgpack map frame); None for actions."""
    if len(frames) != 1 or not 0x80 <= frames[0][0] <= 0x8F:
        return None
    try:
        header = decode_header(frames[0])
    except Exception:  # noqa: BLE001 - a binary Actions header is not an Error
        return None
    return decode_error(header).code if header.get("kind") == ERROR else None


def generate(
    endpoints: list[str],
    actor_ids: list[int],
    n_envs: int,
    spec_dict: dict[str, Any],
    control: Any,
    results: Any,
) -> None:
    """Generator process: streams ``actor_ids`` until ``control['stop']`` is set.

    ``control['window']`` (a shared int) starts a new measuring window when it changes; the
    round trips of the window that ended go to ``results`` as ``(window, seconds array,
    refusals by code, streams answered at least once)``. Actor ``a`` dials
    ``endpoints[a % len(endpoints)]`` (its broker shard).
    """
    from seedq.limits import raise_open_file_limit

    raise_open_file_limit()
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, len(actor_ids) + 64)
    spec = EnvSpec.from_dict(spec_dict)
    streams = [Stream(ctx, endpoints[a % len(endpoints)], a, n_envs, spec) for a in actor_ids]
    by_socket = {s.sock: s for s in streams}
    poller = zmq.Poller()
    for s in streams:
        poller.register(s.sock, zmq.POLLIN)
        s.send()
    window, rtts, refusals, answered = control["window"].value, array("d"), {}, set()
    try:
        while not control["stop"].is_set():
            if control["window"].value != window:
                report = (window, np.frombuffer(rtts, np.float64).copy(), refusals, len(answered))
                results.put(report)
                window, rtts, refusals, answered = control["window"].value, array("d"), {}, set()
            for sock, _ in poller.poll(100):
                stream = by_socket[sock]
                frames = sock.recv_multipart()
                now = time.perf_counter()
                code = _refusal(frames)
                if code is None:
                    rtts.append(now - stream.sent_at)
                    answered.add(stream.actor_id)
                    stream.seq += 1
                else:  # evicted or refused: counted, and the stream joins again
                    refusals[code] = refusals.get(code, 0) + 1
                    stream.join()
                stream.send()
        results.put((window, np.frombuffer(rtts, np.float64).copy(), refusals, len(answered)))
    finally:
        for s in streams:
            s.sock.close(linger=0)
        ctx.term()
