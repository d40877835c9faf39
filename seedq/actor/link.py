"""One env batch's connection to the learner (:class:`Link`): a DEALER socket that watches
its own connection state, so that a learner that is gone, a handshake the learner refuses and a
program at the endpoint that is no learner each end the actor with one line naming the cause,
not a silent wait.
"""

from __future__ import annotations

import time

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

# libzmq 4.3 reports how each ZeroMQ handshake ended; without that a link watches TCP only.
_HANDSHAKE_EVENTS = zmq.zmq_version_info() >= (4, 3) and all(
    hasattr(zmq, f"EVENT_HANDSHAKE_{name}")
    for name in ("SUCCEEDED", "FAILED_NO_DETAIL", "FAILED_PROTOCOL", "FAILED_AUTH")
)
_MECHANISM_MISMATCH = getattr(zmq, "PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH", None)
# The actor's limit on one handshake (libzmq's HANDSHAKE_IVL; a learner needs milliseconds):
# a frozen learner's connection then fails by timeout and is tried again, never counted as a
# refusal. A connection with no outcome after twice that is one libzmq took for a ZMTP 1.0
# peer that never finishes (an SSH server's banner does that): not a learner.
HANDSHAKE_TIMEOUT_S = 5.0
# Handshakes the peer ends at once, in a row, before the actor gives up: one can be a learner
# that restarts, libzmq retries every 0.1 s, so a refusing peer reaches this in a second.
HANDSHAKE_TRIES = 3
# A handshake that ended this share of HANDSHAKE_TIMEOUT_S after it began was ended by the peer:
# libzmq's timeout ends one at the full interval. The time is read when the event loop takes
# the event, which a loaded machine delays by seconds (at half the interval, a refusing learner
# was taken for a slow one on a loaded 2-core box, and the actor waited on).
PEER_ENDED_BEFORE = 0.8


class Link:
    """One DEALER connection for one run of an env batch, watching its own connection state.

    ZMQ reconnects silently, so a dead learner looks like a slow one and a refused handshake
    like a dead learner; the socket monitor says when the connection dropped and how each
    handshake ended, and heartbeats make a vanished host drop it too.
    """

    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str, curve: dict | None) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 4000)
        self.sock.setsockopt(zmq.HANDSHAKE_IVL, round(HANDSHAKE_TIMEOUT_S * 1000))
        for option, value in (curve or {}).items():
            self.sock.setsockopt(option, value)
        events = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED
        if _HANDSHAKE_EVENTS:
            events |= (
                zmq.EVENT_HANDSHAKE_SUCCEEDED
                | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                | zmq.EVENT_HANDSHAKE_FAILED_AUTH
            )
        self.monitor = self.sock.get_monitor_socket(events)
        self.sock.connect(endpoint)
        self.endpoint = endpoint
        self.curve = bool(curve)
        self.lost_since: float | None = None
        self.drops = 0  # sessions with the learner that dropped
        self.up = False  # a session with the learner is up (its handshake done)
        self.connected = False  # a connection to the endpoint came up at least once
        self.answered = False  # the learner took at least one step of this run
        self.handshake_since: float | None = None  # a TCP connection waits for its handshake
        self.refused = 0  # handshakes the peer ended at once, in a row
        self.failure: str | None = None  # why no session can come up: the actor must exit

    async def poll_events(self) -> None:
        while self.failure is None and await self.monitor.poll(timeout=0):
            event = parse_monitor_message(await self.monitor.recv_multipart())
            kind, now = event["event"], time.monotonic()
            if kind == zmq.EVENT_DISCONNECTED:
                self.lost_since = self.lost_since or now
                if self.up:
                    self.drops += 1
                self.up = False
                self.handshake_since = None
            elif kind == zmq.EVENT_CONNECTED:
                self.lost_since = None
                self.connected = True
                self.up = not _HANDSHAKE_EVENTS
                self.handshake_since = now if _HANDSHAKE_EVENTS else None
            elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.up = True
                self.handshake_since = None
                self.refused = 0
            else:
                self._handshake_failed(kind, event["value"], now)

    def _handshake_failed(self, kind: int, value: int, now: float) -> None:
        started, self.handshake_since = self.handshake_since, None
        where = f"the learner at {self.endpoint}"
        if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            # The learner's ZAP handler said no; libzmq does not try again.
            self.failure = (
                f"{where} refused this actor's CURVE key (status {value}): the public key of "
                "actor.key_secret in --keys-dir is not authorized on the learner; give this "
                "actor the learner's actor key pair, or add its actor.key to the learner's "
                "keys dir under authorized/"
            )
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == _MECHANISM_MISMATCH:
            self.failure = (
                f"CURVE is on at one side only: this actor uses CURVE (--keys-dir), {where} "
                "does not; drop --keys-dir, or start the learner with security.curve=true"
                if self.curve
                else f"CURVE is on at one side only: {where} requires CURVE and this actor "
                "has no --keys-dir; give it the learner's keys (seedq-keys)"
            )
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            self.failure = (
                f"the ZeroMQ handshake with {self.endpoint} broke the protocol (error "
                f"{value:#x}): not a seedq learner at that endpoint? check its host and port"
            )
        elif started is not None and now - started < PEER_ENDED_BEFORE * HANDSHAKE_TIMEOUT_S:
            # Ended by the peer, not by the timeout (a frozen learner's, tried again).
            self.refused += 1
            if self.refused >= HANDSHAKE_TRIES:
                self.failure = (
                    f"{where} ended the CURVE handshake {self.refused} times in a row: "
                    "learner.key in --keys-dir is not this learner's public key (copy its "
                    "learner.key), the learner runs without CURVE (drop --keys-dir), or it "
                    "is not a seedq learner at that endpoint"
                    if self.curve
                    # A learner that requires CURVE may also just hang up on a plain actor
                    # (the mismatch is then the learner's event, not this one's).
                    else f"{self.endpoint} ended the ZeroMQ handshake {self.refused} times "
                    "in a row: a learner there that requires CURVE (give this actor its keys "
                    "with --keys-dir), or not a seedq learner at that endpoint? check its host "
                    "and port"
                )

    def trouble(self, now: float) -> str | None:
        """Why no session with a learner can come up on this link, if that is known by now."""
        if self.failure is None and (
            self.handshake_since is not None
            and now - self.handshake_since >= 2 * HANDSHAKE_TIMEOUT_S
        ):
            self.failure = (
                f"connected to {self.endpoint} {now - self.handshake_since:.0f} s ago and no "
                "ZeroMQ handshake came: the program listening there is not a seedq learner; "
                "check the host and port of --endpoint"
            )
        return self.failure

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
        self.sock.close(linger=100)
