"""The actor: steps batches of envs and sends every step to the learner. No neural network.

One actor process runs several env batches as coroutines on one asyncio loop (uvloop when
available). Each batch is a logical actor with its own DEALER socket and actor id: while one
batch's request is at the learner, the loop steps another, so the CPU keeps stepping envs while
inference runs (Sample Factory's double buffering, SEED RL's one request per env batch).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from seedq.core.stats import RunFault
from seedq.envs import EnvBatch
from seedq.envs.base import StepBatch, env_spec_of
from seedq.messages import (
    Bye,
    EnvSpec,
    Error,
    Hello,
    ProtocolError,
    Step,
    decode_reply,
    encode,
)

log = logging.getLogger(__name__)


class ActorError(RuntimeError):
    """The learner refused us or went away; the message says what to do."""


class ActorTakenOver(ActorError):
    """Another process joined the learner with this actor's ids, and the learner gave them to
    it."""


@dataclass
class ActorStats:
    env_steps: int = 0
    episodes: int = 0
    rejoins: int = 0  # recoverable refusals answered by a reset and a new run id
    env_failures: int = 0  # env batches whose reset or step raised, rebuilt and rejoined
    # The env call in progress: (actor id, "reset" or "step", its start on the monotonic
    # clock), None between calls; the actor process's watchdog reads it (actor.env_timeout_s).
    env_call: tuple[int, str, float] | None = None
    # Seconds from sending each Step to holding its actions; recorded only when a list is given
    # (seedq-bench pipeline).
    latencies: list[float] | None = None


class EpisodeTracker:
    """Raw episodic return and length per env, vectorised."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def update(self, reward: np.ndarray, done: np.ndarray) -> tuple[list[float], list[int]]:
        self.returns += reward
        self.lengths += 1
        if not done.any():
            return [], []
        ended = np.flatnonzero(done)
        finished = (self.returns[ended].tolist(), self.lengths[ended].tolist())
        self.returns[ended] = 0.0
        self.lengths[ended] = 0
        return finished


# Refusals an env batch answers by resetting its envs and joining again as a new run: they
# mean the learner forgot us (eviction, a restart of the learner's broker state), we lost
# lockstep, or one step carried a NaN. One message is lost, not the process.
RECOVERABLE_CODES = frozenset(
    [
        "busy",
        "not_joined",
        "unknown_actor",
        "stale_run",
        "non_finite",
        "bad_seq",
        "internal",
        "reconnected",  # not the learner's: Reconnected, seen by the actor itself
    ]
)


# Refusals of a step that leave its run joined at the learner: the actor says Bye before it
# rejoins, so the learner frees that run at once instead of seeing a second connection take
# the actor id over (and warning of it). After the others the learner holds no such run.
STILL_JOINED_CODES = frozenset(["non_finite", "bad_seq", "busy"])
# Of those, the refusal that answered the one step in flight of a run in lockstep: nothing of
# the old run can still come back, so the batch rejoins on the same connection, its Bye and
# Hello in order (on a new one the learner may read the Hello first and see the id taken
# over). bad_seq and busy mean lockstep was lost: a reply may still come, so a new connection.
ANSWERED_CODES = frozenset(["non_finite"])


@dataclass
class Patience:
    """How long an env batch waits for the learner and how often it rejoins (``actor`` config)."""

    reply_timeout_s: float = 600.0
    learner_lost_s: float = 5.0
    max_rejoins: int = 10
    env_timeout_s: float = 300.0


class EnvFailed(Exception):
    """The env batch's own reset or step raised (a simulator's crash, a bug in the env); the
    env's exception is the cause, ``episodes`` the episodes the batch finished before it."""

    def __init__(self, episodes: int) -> None:
        super().__init__(f"the envs raised after {episodes} finished episodes")
        self.episodes = episodes


class TooManyEnvFailures(RunFault):
    """An env batch's envs raised more than ``max_rejoins`` times in a row."""


class EnvFailures:
    """One env batch's failures (:class:`EnvFailed`), each logged with the env's traceback.

    A failure after which the rebuilt batch finishes no episode before it fails again continues
    a row; more than ``limit`` in a row is an env that does not work (it fails at its reset, or
    at the same point of every episode) and raises :class:`TooManyEnvFailures`, naming the
    env's error. An env that crashes now and then, between finished episodes, is rebuilt each
    time. ``who`` names the batch in messages.
    """

    def __init__(self, who: str, limit: int) -> None:
        self.who = who
        self.limit = limit
        self.in_a_row = 0
        self.total = 0

    def note(self, failed: EnvFailed, num_envs: int) -> None:
        cause = failed.__cause__
        self.in_a_row = 1 if failed.episodes else self.in_a_row + 1
        self.total += 1
        what = f"{type(cause).__name__}: {cause}"
        over = self.in_a_row > self.limit
        log.warning(
            "%s: its envs raised (%s) after %d finished episodes; %s (%d in a row, %d in all)",
            self.who,
            what,
            failed.episodes,
            "giving up" if over else f"closing them and starting over with {num_envs} new ones",
            self.in_a_row,
            self.total,
            exc_info=cause,
        )
        if over:
            raise TooManyEnvFailures(
                f"{self.who}: its envs raised {self.in_a_row} times in a row without finishing "
                f"an episode, more than actor.max_rejoins={self.limit}; the last: {what} (its "
                "traceback is in the log above)"
            ) from cause


def hung_env_call(stats: ActorStats, timeout_s: float, thread: int | None, who: str) -> str:
    """ "" while the env call ``stats`` notes (``env_call``) is younger than ``timeout_s``;
    else the stack where ``thread`` is stuck goes to the log and the reason comes back, one
    line naming ``who`` (the actor process's watchdog and Sebulba's run loop end on it)."""
    call = stats.env_call
    if not timeout_s or call is None or time.monotonic() - call[2] < timeout_s:
        return ""
    frame = sys._current_frames().get(thread or -1)
    where = "".join(traceback.format_stack(frame)).rstrip() if frame else "(not found)"
    log.error("%s: where its envs' %s is stuck:\n%s", who, call[1], where)
    return (
        f"{who}: its envs' {call[1]} has run for {time.monotonic() - call[2]:.0f} s, more than "
        f"actor.env_timeout_s={timeout_s:g}: the env hangs"
    )


def close_quietly(env: EnvBatch, who: str) -> None:
    """Close an env batch that may be broken: its error is logged, not raised."""
    try:
        env.close()
    except Exception:  # a crashed simulator may fail to close too
        log.warning("%s: closing its envs failed", who, exc_info=True)


class Refused(Exception):
    """The learner answered a request with an Error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.detail = message


class Reconnected(Refused):
    """The connection dropped and came back while a reply was due: the learner's reply goes to
    the old connection's routing id, so it never comes (a learner frozen past the heartbeat
    timeout, a network cut). Recoverable: the actor rejoins on a new connection."""

    def __init__(self) -> None:
        super().__init__(
            "reconnected",
            "the connection to the learner dropped and came back while a reply was due (the "
            "learner stalled or the network broke); its reply went to the old connection",
        )


async def run_env_batch(
    ctx: zmq.asyncio.Context,
    endpoint: str,
    actor_id: int,
    env: EnvBatch,
    *,
    seed: int,
    stop: asyncio.Event,
    patience: Patience | None = None,
    stats: ActorStats | None = None,
    curve_client: dict | None = None,
    env_identity: str = "",
    rebuild: Callable[[], EnvBatch] | None = None,
) -> None:
    """Step ``env`` in lockstep with the learner until ``stop`` is set.

    ``env_identity``: what the envs are (:func:`seedq.messages.env_json` of the env section's
    identity), sent in the Hello so that a learner of other envs refuses them.

    A recoverable refusal (:data:`RECOVERABLE_CODES`) resets the envs and rejoins with a new run
    id on a new connection, so no stale reply can reach the new run (on the same one, after a
    Bye, where none can: :data:`ANSWERED_CODES`, and after the envs failed); more than
    ``patience.max_rejoins`` in a row, a fatal refusal, or losing the learner raise
    :class:`ActorError`. When the envs' own reset or step raises, ``rebuild`` (if given) builds
    the batch again, the broken one is closed and the new one rejoins as a new run: the
    episodes in flight are lost, not the process. More than ``patience.max_rejoins`` such
    failures in a row, no episode finished between them, raise :class:`TooManyEnvFailures`
    naming the env's error (:class:`EnvFailures`); without ``rebuild`` the env's exception is
    raised as it came.
    """
    stats = stats or ActorStats()
    patience = patience or Patience()
    in_a_row = 0
    episode_seed = seed
    failures = EnvFailures(f"actor {actor_id}", patience.max_rejoins)
    current = env
    link: _Link | None = None
    try:
        while not stop.is_set():
            link = link or _Link(ctx, endpoint, curve_client)
            link.answered = False
            keep = False  # rejoin on this connection: no reply of the old run can still come
            try:
                await _join_and_step(
                    link, actor_id, current, episode_seed, stop, patience, stats, env_identity
                )
                return
            except EnvFailed as failed:
                if rebuild is None:
                    raise failed.__cause__ from None  # type: ignore[misc]
                failures.note(failed, current.num_envs)
                stats.env_failures += 1
                close_quietly(current, f"actor {actor_id}")
                stats.env_call = (actor_id, "rebuild", time.monotonic())
                try:
                    current = rebuild()
                finally:
                    stats.env_call = None
                episode_seed += 1
                keep = True
            except Refused as exc:
                if exc.code == "taken_over":
                    # Another process joined with this actor id; rejoining would take it back
                    # and the two would stall each other in turn, so the learner's words end
                    # this one.
                    raise ActorTakenOver(exc.detail) from None
                if exc.code not in RECOVERABLE_CODES:
                    raise ActorError(f"actor {actor_id}: the learner refused us ({exc})") from None
                in_a_row = 0 if link.answered else in_a_row + 1
                if in_a_row > patience.max_rejoins:
                    raise ActorError(
                        f"actor {actor_id}: refused {in_a_row} times in a row without one step "
                        f"taken, last ({exc}); see the learner's log for why"
                    ) from None
                stats.rejoins += 1
                what = str(exc) if isinstance(exc, Reconnected) else f"refused ({exc})"
                log.warning("actor %d: %s; resetting its envs and rejoining", actor_id, what)
                episode_seed += 1  # a fresh reset, not a replay of the episodes that failed
                keep = exc.code in ANSWERED_CODES
            finally:
                if not keep:
                    link.close()
                    link = None
    finally:
        if link is not None:
            link.close()
        if current is not env:
            # The batches this task built are its own to close; ``env`` is the caller's.
            close_quietly(current, f"actor {actor_id}")


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


class _Link:
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


async def _join_and_step(
    link: _Link,
    actor_id: int,
    env: EnvBatch,
    seed: int,
    stop: asyncio.Event,
    patience: Patience,
    stats: ActorStats,
    env_identity: str = "",
) -> None:
    run_id = uuid.uuid4().hex
    spec = env_spec_of(env)
    sock = link.sock
    hello = Hello(actor_id, run_id, env.num_envs, spec, first_env=env.env_offset, env=env_identity)
    await sock.send_multipart(encode(hello))
    try:
        stats.env_call = (actor_id, "reset", time.monotonic())
        obs = env.reset(seed=seed)
    except Exception as exc:
        await _leave(sock, actor_id, run_id)
        raise EnvFailed(0) from exc
    finally:
        stats.env_call = None
    n = env.num_envs
    tracker = EpisodeTracker(n)
    ended = 0
    step = Step.first(hello, obs)
    latencies = stats.latencies
    while not stop.is_set():
        sent = time.perf_counter() if latencies is not None else 0.0
        await sock.send_multipart(encode(step), copy=False)
        try:
            actions = await _receive_actions(link, actor_id, step.seq, spec, n, patience, stop)
        except Refused as exc:
            if exc.code in STILL_JOINED_CODES:
                await _leave(sock, actor_id, run_id)
            raise
        if actions is None:
            break
        link.answered = True
        if latencies is not None:
            latencies.append(time.perf_counter() - sent)
        try:
            stats.env_call = (actor_id, "step", time.monotonic())
            out = env.step(actions)
        except Exception as exc:
            await _leave(sock, actor_id, run_id)
            raise EnvFailed(ended) from exc
        finally:
            stats.env_call = None
        returns, lengths = tracker.update(out.reward, out.episode_over)
        stats.env_steps += n
        stats.episodes += len(returns)
        ended += len(returns)
        step = next_step(step, out, returns, lengths)
    await sock.send_multipart(encode(Bye(actor_id, run_id)))


async def _leave(sock: zmq.asyncio.Socket, actor_id: int, run_id: str) -> None:
    """Say Bye for a run whose envs failed or whose step was refused: the learner frees it at
    once, so the batch rejoins as a new run, not as a second connection taking the actor id
    over. Never waits: a Bye that cannot be queued is left out (the learner's takeover of the
    id, or its eviction of a silent actor, frees the run instead)."""
    try:
        await sock.send_multipart(encode(Bye(actor_id, run_id)), flags=zmq.NOBLOCK)
    except zmq.Again:
        pass


def next_step(step: Step, out: StepBatch, returns: list, lengths: list) -> Step:
    """The request that follows ``step``: the env batch's result and the episodes it ended."""
    return Step.of_batch(step.actor_id, step.run_id, step.seq + 1, out, returns, lengths)


# A request of a link the learner never answered is noted after this long, then this often.
FIRST_NOTE_S = 10.0
NOTE_EVERY_S = 60.0


async def _receive_actions(
    link: _Link,
    actor_id: int,
    seq: int,
    spec: EnvSpec,
    n_envs: int,
    patience: Patience,
    stop: asyncio.Event,
) -> np.ndarray | None:
    """Wait for the reply to ``seq``; None when asked to stop meanwhile."""
    sock = link.sock
    start = time.monotonic()
    next_note = start + FIRST_NOTE_S
    drops = link.drops
    while not stop.is_set():
        if await sock.poll(timeout=250):
            break
        await link.poll_events()
        now = time.monotonic()
        trouble = link.trouble(now)
        if trouble is not None:
            raise ActorError(f"actor {actor_id}: {trouble}")
        if link.drops > drops and link.up and not await sock.poll(timeout=0):
            raise Reconnected
        if not link.answered and now >= next_note:
            # A standalone actor pointed at the wrong place waited in silence for the whole
            # reply_timeout_s; say what is known while it waits.
            next_note = now + NOTE_EVERY_S
            log.warning(
                "actor %d: no answer from the learner at %s after %.0f s (%s); waiting up to "
                "actor.reply_timeout_s=%.0f s",
                actor_id,
                link.endpoint,
                now - start,
                "connected, but no answer yet: the learner may still be starting (compiling "
                "its model), or the port is another program's, or --keys-dir lacks its keys"
                if link.connected
                else "no connection: is the learner running, and is this its host and port?",
                patience.reply_timeout_s,
            )
        if link.lost_since is not None and now - link.lost_since >= patience.learner_lost_s:
            raise ActorError(
                f"actor {actor_id}: the connection to the learner dropped "
                f"{now - link.lost_since:.0f} s ago and no reply came since; the learner is "
                "gone, exiting"
            )
        if now - start >= patience.reply_timeout_s:
            raise ActorError(
                f"actor {actor_id}: no reply from the learner for {patience.reply_timeout_s:.0f} "
                "s; is the learner running and reachable at this endpoint, and (with CURVE) does "
                "--keys-dir hold this learner's learner.key and an actor key it accepts?"
            )
    else:
        return None
    frames = await sock.recv_multipart()
    try:
        reply = decode_reply(frames, n_envs, spec)
    except ProtocolError as exc:
        raise ActorError(f"actor {actor_id}: the learner's reply is unreadable ({exc})") from None
    if isinstance(reply, Error):
        raise Refused(reply.code, reply.message)
    if reply.seq != seq:
        raise ActorError(f"actor {actor_id}: reply for seq {reply.seq}, expected {seq}")
    # The reply's bytes are read-only and the env may keep the array, so copy (N actions).
    return reply.actions.copy()


def install_event_loop_policy() -> None:
    """Use uvloop where installed; it halves asyncio's per-message overhead."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency on Linux/macOS
        log.info("uvloop not available; using the default asyncio loop")
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
