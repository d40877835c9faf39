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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import zmq
import zmq.asyncio

from seedq.actor.link import Link
from seedq.actor.stepping import (
    ActorStats,
    EnvFailed,
    EnvFailures,
    EpisodeTracker,
    close_quietly,
    next_step,
)
from seedq.envs import EnvBatch
from seedq.envs.base import env_spec_of
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
    """How long an env batch waits for the learner and how often it rejoins: the ``actor.*``
    keys of a run that launches its actors, or ``seedq-actor``'s own flags for one started by
    hand (``by_hand``), which are what its messages must name."""

    reply_timeout_s: float = 600.0
    learner_lost_s: float = 5.0
    max_rejoins: int = 10
    env_timeout_s: float = 300.0
    by_hand: bool = False

    def name_of(self, field: str) -> str:
        """What the user set ``field`` by: ``--max-rejoins`` by hand, else ``actor.max_rejoins``."""
        return f"--{field.replace('_', '-')}" if self.by_hand else f"actor.{field}"

    def named(self, field: str) -> str:
        """``field`` and its value as the user set them: ``--max-rejoins=10``."""
        return f"{self.name_of(field)}={getattr(self, field):g}"


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
    failures in a row, no episode finished between them, raise
    :class:`~seedq.actor.stepping.TooManyEnvFailures` naming the env's error
    (:class:`~seedq.actor.stepping.EnvFailures`); without ``rebuild`` the env's exception is
    raised as it came.
    """
    stats = stats or ActorStats()
    patience = patience or Patience()
    in_a_row = 0
    episode_seed = seed
    failures = EnvFailures(
        f"actor {actor_id}", patience.max_rejoins, patience.name_of("max_rejoins")
    )
    current = env
    link: Link | None = None
    try:
        while not stop.is_set():
            link = link or Link(ctx, endpoint, curve_client)
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
                        f"taken, more than {patience.named('max_rejoins')}, last ({exc}); see the "
                        "learner's log for why"
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


async def _join_and_step(
    link: Link,
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


# A request of a link the learner never answered is noted after this long, then this often.
FIRST_NOTE_S = 10.0
NOTE_EVERY_S = 60.0


async def _receive_actions(
    link: Link,
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
                "actor %d: no answer from the learner at %s after %.0f s (%s); waiting up to %s s",
                actor_id,
                link.endpoint,
                now - start,
                "connected, but no answer yet: the learner may still be starting (compiling "
                "its model), or the port is another program's, or --keys-dir lacks its keys"
                if link.connected
                else "no connection: is the learner running, and is this its host and port?",
                patience.named("reply_timeout_s"),
            )
        if link.lost_since is not None and now - link.lost_since >= patience.learner_lost_s:
            raise ActorError(
                f"actor {actor_id}: the connection to the learner dropped "
                f"{now - link.lost_since:.0f} s ago and no reply came since "
                f"({patience.named('learner_lost_s')}); the learner is gone, exiting"
            )
        if now - start >= patience.reply_timeout_s:
            raise ActorError(
                f"actor {actor_id}: no reply from the learner for {patience.reply_timeout_s:.0f} "
                f"s ({patience.named('reply_timeout_s')}); is the learner running and reachable "
                "at this endpoint, and (with CURVE) does --keys-dir hold this learner's "
                "learner.key and an actor key it accepts?"
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
