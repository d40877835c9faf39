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

from seedq.envs import EnvBatch
from seedq.envs.base import env_spec_of
from seedq.messages import (
    ACTIONS,
    ERROR,
    Bye,
    EnvSpec,
    Hello,
    Step,
    decode_actions,
    decode_error,
    decode_header,
    encode,
)

log = logging.getLogger(__name__)


class ActorError(RuntimeError):
    """The learner refused us or went away; the message says what to do."""


@dataclass
class ActorStats:
    env_steps: int = 0
    episodes: int = 0
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


async def run_env_batch(
    ctx: zmq.asyncio.Context,
    endpoint: str,
    actor_id: int,
    env: EnvBatch,
    *,
    seed: int,
    stop: asyncio.Event,
    reply_timeout_s: float = 120.0,
    stats: ActorStats | None = None,
    curve_client: dict | None = None,
) -> None:
    """Step ``env`` in lockstep with the learner until ``stop`` is set."""
    stats = stats or ActorStats()
    run_id = uuid.uuid4().hex
    spec = env_spec_of(env)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    for option, value in (curve_client or {}).items():
        sock.setsockopt(option, value)
    sock.connect(endpoint)
    try:
        hello = Hello(actor_id, run_id, env.num_envs, spec, first_env=env.env_offset)
        await sock.send_multipart(encode(hello))
        obs = env.reset(seed=seed)
        n = env.num_envs
        tracker = EpisodeTracker(n)
        step = Step(
            actor_id=actor_id,
            run_id=run_id,
            seq=0,
            obs=obs,
            reward=np.zeros(n, np.float32),
            terminated=np.zeros(n, bool),
            truncated=np.zeros(n, bool),
            final_obs=obs[:0],
        )
        latencies = stats.latencies
        while not stop.is_set():
            sent = time.perf_counter() if latencies is not None else 0.0
            await sock.send_multipart(encode(step), copy=False)
            actions = await _receive_actions(
                sock, actor_id, step.seq, spec, n, reply_timeout_s, stop
            )
            if actions is None:
                break
            if latencies is not None:
                latencies.append(time.perf_counter() - sent)
            out = env.step(actions)
            returns, lengths = tracker.update(out.reward, out.terminated | out.truncated)
            stats.env_steps += n
            stats.episodes += len(returns)
            step = Step(
                actor_id=actor_id,
                run_id=run_id,
                seq=step.seq + 1,
                obs=out.obs,
                reward=out.reward,
                terminated=out.terminated,
                truncated=out.truncated,
                final_obs=out.final_obs,
                episode_returns=returns,
                episode_lengths=lengths,
            )
        await sock.send_multipart(encode(Bye(actor_id, run_id)))
    finally:
        sock.close(linger=100)


async def _receive_actions(
    sock: zmq.asyncio.Socket,
    actor_id: int,
    seq: int,
    spec: EnvSpec,
    n_envs: int,
    timeout_s: float,
    stop: asyncio.Event,
) -> np.ndarray | None:
    """Wait for the reply to ``seq``; None when asked to stop meanwhile."""
    waited = 0.0
    while not stop.is_set():
        if await sock.poll(timeout=500):
            break
        waited += 0.5
        if waited >= timeout_s:
            raise ActorError(
                f"actor {actor_id}: no reply from the learner for {timeout_s:.0f} s; "
                "is the learner running and reachable at this endpoint, and (with CURVE) does "
                "--keys-dir hold this learner's learner.key and an actor key it accepts?"
            )
    else:
        return None
    frames = await sock.recv_multipart(copy=False)
    header = decode_header(frames[0])
    if header["kind"] == ERROR:
        error = decode_error(header)
        raise ActorError(
            f"actor {actor_id}: the learner refused us ({error.code}): {error.message}"
        )
    if header["kind"] != ACTIONS:
        raise ActorError(f"actor {actor_id}: unexpected {header['kind']!r} reply")
    reply = decode_actions(header, frames[1:], n_envs, spec)
    if reply.seq != seq:
        raise ActorError(f"actor {actor_id}: reply for seq {reply.seq}, expected {seq}")
    # The frame buffer belongs to ZMQ; the env may keep the array, so copy (N actions).
    return reply.actions.copy()


def install_event_loop_policy() -> None:
    """Use uvloop where installed; it halves asyncio's per-message overhead."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency on Linux/macOS
        log.info("uvloop not available; using the default asyncio loop")
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
