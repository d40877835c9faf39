"""The actor: steps batches of envs and sends every step to the learner. No neural network.

One actor process runs several env batches as coroutines on one asyncio loop (uvloop when
available). Each batch is a logical actor with its own DEALER socket and actor id: while one
batch's request is at the learner, the loop steps another, so the CPU keeps stepping envs while
inference runs (Sample Factory's double buffering, SEED RL's one request per env batch).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

import numpy as np
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

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


@dataclass
class ActorStats:
    env_steps: int = 0
    episodes: int = 0
    rejoins: int = 0  # recoverable refusals answered by a reset and a new run id
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


@dataclass
class Patience:
    """How long an env batch waits for the learner and how often it rejoins (``actor`` config)."""

    reply_timeout_s: float = 600.0
    learner_lost_s: float = 5.0
    max_rejoins: int = 10


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
) -> None:
    """Step ``env`` in lockstep with the learner until ``stop`` is set.

    A recoverable refusal (:data:`RECOVERABLE_CODES`) resets the envs and rejoins with a new run
    id on a new connection, so no stale reply can reach the new run; more than
    ``patience.max_rejoins`` in a row, a fatal refusal, or losing the learner raise
    :class:`ActorError`.
    """
    stats = stats or ActorStats()
    patience = patience or Patience()
    in_a_row = 0
    episode_seed = seed
    while not stop.is_set():
        link = _Link(ctx, endpoint, curve_client)
        try:
            await _join_and_step(link, actor_id, env, episode_seed, stop, patience, stats)
            return
        except Refused as exc:
            if exc.code == "taken_over":
                # Another process joined with this actor id; rejoining would take it back and
                # the two would stall each other in turn, so the learner's words end this one.
                raise ActorError(exc.detail) from None
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
        finally:
            link.close()


class _Link:
    """One DEALER connection for one run of an env batch, watching its own connection state.

    ZMQ reconnects silently, so a dead learner looks like a slow one; the socket monitor says
    when the connection dropped, and heartbeats make a vanished host drop it too.
    """

    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str, curve: dict | None) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 4000)
        for option, value in (curve or {}).items():
            self.sock.setsockopt(option, value)
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        self.sock.connect(endpoint)
        self.endpoint = endpoint
        self.lost_since: float | None = None
        self.drops = 0  # connections that dropped
        self.connected = False  # a connection to the endpoint came up at least once
        self.answered = False  # the learner took at least one step of this run

    async def poll_events(self) -> None:
        while await self.monitor.poll(timeout=0):
            event = parse_monitor_message(await self.monitor.recv_multipart())
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self.lost_since = self.lost_since or time.monotonic()
                self.drops += 1
            elif event["event"] == zmq.EVENT_CONNECTED:
                self.lost_since = None
                self.connected = True

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
) -> None:
    run_id = uuid.uuid4().hex
    spec = env_spec_of(env)
    sock = link.sock
    hello = Hello(actor_id, run_id, env.num_envs, spec, first_env=env.env_offset)
    await sock.send_multipart(encode(hello))
    obs = env.reset(seed=seed)
    n = env.num_envs
    tracker = EpisodeTracker(n)
    step = Step.first(hello, obs)
    latencies = stats.latencies
    while not stop.is_set():
        sent = time.perf_counter() if latencies is not None else 0.0
        await sock.send_multipart(encode(step), copy=False)
        actions = await _receive_actions(link, actor_id, step.seq, spec, n, patience, stop)
        if actions is None:
            break
        link.answered = True
        if latencies is not None:
            latencies.append(time.perf_counter() - sent)
        out = env.step(actions)
        returns, lengths = tracker.update(out.reward, out.episode_over)
        stats.env_steps += n
        stats.episodes += len(returns)
        step = next_step(step, out, returns, lengths)
    await sock.send_multipart(encode(Bye(actor_id, run_id)))


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
        if link.drops > drops and link.lost_since is None and not await sock.poll(timeout=0):
            raise Reconnected
        now = time.monotonic()
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
