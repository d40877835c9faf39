"""Sebulba's in-process data path: actor threads and the inference desk they share.

Each actor thread owns one env batch and steps it in lockstep with central inference, exactly as
a SEED actor does (``seedq.actor.loop``), but its ``Step`` goes to :class:`InferenceDesk` as a
Python object: no socket, no msgpack, no copy of the observation on the way in.

The desk batches by *flat combining* instead of a broker thread: a thread that submits while
the model is free becomes the leader, takes every request waiting (its own and those of threads
that arrived while the previous batch ran), runs ``act`` and ``record`` for all of them and hands
each thread its actions. Batches therefore grow exactly when inference is the bottleneck, and a
lone request never waits for a deadline (the broker's "everyone who can send is waiting" rule,
without a thread of its own to wake). Replies go out after ``record``: the store has then copied
each observation, so an env may reuse its buffers on the next step.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from seedq.actor.stepping import ActorStats, EnvFailed, EpisodeTracker, next_step
from seedq.broker.batch import ActorSlot, RequestBatch
from seedq.broker.router import BatchConsumer
from seedq.core.stats import RunStats
from seedq.envs import EnvBatch
from seedq.messages import EnvSpec, Hello, Step

_WAIT_S = 0.1  # how often a waiting thread checks ``stop``


@dataclass
class _Request:
    slot: ActorSlot
    step: Step
    actions: np.ndarray | None = None
    failed: BaseException | None = field(default=None, repr=False)


class InferenceDesk:
    """Where actor threads hand in their steps and collect actions; feeds ``stats`` like the
    broker does (env steps, batches, episode returns), so the same Monitor reads it."""

    def __init__(
        self, consumer: BatchConsumer, stats: RunStats, stop: threading.Event, max_batch: int
    ) -> None:
        self.consumer = consumer
        self.stats = stats
        self.stop = stop
        self.max_batch = max_batch
        self._cv = threading.Condition()
        self._waiting: list[_Request] = []
        self._busy = False

    def submit(self, slot: ActorSlot, step: Step) -> np.ndarray | None:
        """The actions ``int32 [n_envs]`` for ``step``; None once the run is stopping."""
        request = _Request(slot, step)
        with self._cv:
            self._waiting.append(request)
        # A leader whose own request did not fit its batch (older ones fill max_batch) leads
        # again until it is answered.
        while True:
            with self._cv:
                while request.actions is None and request.failed is None:
                    if self.stop.is_set():
                        return None
                    if not self._busy:
                        self._busy = True
                        batch = self._take()
                        break
                    self._cv.wait(_WAIT_S)
                else:
                    return self._answer(request)
            try:
                self._run(batch)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _take(self) -> list[_Request]:
        """Waiting requests up to ``max_batch`` envs (always at least one), oldest first."""
        taken, envs = [], 0
        while self._waiting:
            n = self._waiting[0].slot.hello.n_envs
            if taken and envs + n > self.max_batch:
                break
            taken.append(self._waiting.pop(0))
            envs += n
        return taken

    def replace(self, old: ActorSlot, new: ActorSlot) -> None:
        """An actor thread starts over on new envs (its own raised): the learner drops the old
        run's partial unrolls and state on its rows, as the broker does when a SEED actor
        rejoins. Waits for the batch in progress, which may hold other threads' steps."""
        with self._cv:
            while self._busy:
                self._cv.wait(_WAIT_S)
            self._busy = True
        try:
            self.consumer.actor_left(old)
            self.consumer.actor_started(new)
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()

    @staticmethod
    def _answer(request: _Request) -> np.ndarray:
        if request.failed is not None:
            raise RuntimeError("inference failed for this batch") from request.failed
        assert request.actions is not None
        return request.actions

    def _run(self, requests: list[_Request]) -> None:
        try:
            batch = RequestBatch.from_steps([(r.slot, r.step) for r in requests])
            actions = self.consumer.act(batch)
            self.stats.record_batch(len(actions), batch.episodes)
            self.consumer.record(batch)
        except BaseException as exc:
            for request in requests:
                request.failed = exc
            raise
        offset = 0
        for request in requests:
            n = request.slot.hello.n_envs
            request.actions = actions[offset : offset + n]
            offset += n


def make_slot(actor_id: int, env: EnvBatch, spec: EnvSpec, first_row: int) -> ActorSlot:
    """The broker's record of one actor, made in process: rows ``first_row ..`` of the
    learner's state table, env ids from the batch's ``env_offset``."""
    hello = Hello(actor_id, uuid.uuid4().hex, env.num_envs, spec, first_env=env.env_offset)
    n = env.num_envs
    return ActorSlot(
        hello=hello,
        identity=b"",
        rows=np.arange(first_row, first_row + n, dtype=np.int64),
        env_ids=np.arange(env.env_offset, env.env_offset + n, dtype=np.int64),
    )


def step_env_batch(
    env: EnvBatch,
    slot: ActorSlot,
    desk: InferenceDesk,
    stop: threading.Event,
    seed: int,
    stats: ActorStats | None = None,
) -> None:
    """Thread body: step ``env`` with the desk's actions until ``stop`` (seedq.actor.loop's
    ``run_env_batch`` with the socket replaced by :meth:`InferenceDesk.submit`); the envs' own
    error in a reset or step is raised as :class:`~seedq.actor.stepping.EnvFailed`. ``stats``:
    where the env call in progress is noted (``env_call``), for the run's hung-env check."""
    hello = slot.hello
    n = env.num_envs
    stats = stats or ActorStats()
    try:
        stats.env_call = (hello.actor_id, "reset", time.monotonic())
        obs = env.reset(seed=seed)
    except Exception as exc:
        raise EnvFailed(0) from exc
    finally:
        stats.env_call = None
    tracker = EpisodeTracker(n)
    ended = 0
    step = Step.first(hello, obs)
    while not stop.is_set():
        actions = desk.submit(slot, step)
        if actions is None:
            return
        try:
            stats.env_call = (hello.actor_id, "step", time.monotonic())
            out = env.step(actions)
        except Exception as exc:
            raise EnvFailed(ended) from exc
        finally:
            stats.env_call = None
        returns, lengths = tracker.update(out.reward, out.episode_over)
        ended += len(returns)
        step = next_step(step, out, returns, lengths)
