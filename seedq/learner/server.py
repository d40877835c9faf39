"""The learner's side of the broker: central inference, trajectory recording, unroll sinks.

``CentralInference`` implements the broker's ``BatchConsumer``: it acts for a batch of actor
requests with the shared model, then records each request as one time step of that actor's
unroll. Completed unrolls go to a sink: V-trace's ``TrainQueueSink`` (a bounded queue of
training batches) or R2D2's replay. When training falls behind, the sink blocks, the broker
stops answering, and the actors wait (backpressure, never unbounded memory).
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from seedq.broker.router import ActorSlot, Batch
from seedq.learner.inference import InferenceEngine, InferenceResult
from seedq.learner.unroll_store import BatchAssembler, StepRecord, Unroll, UnrollStore


class Exploration:
    """Epsilon per global env id: a ladder over the exploring envs, ``eval_epsilon`` beyond.

    Env ids ``>= len(epsilons)`` are evaluation envs; their episodes are reported apart.
    """

    def __init__(self, epsilons: np.ndarray, eval_epsilon: float) -> None:
        self.epsilons = np.asarray(epsilons, dtype=np.float32)
        self.eval_epsilon = eval_epsilon

    def __call__(self, env_ids: np.ndarray) -> np.ndarray:
        inside = env_ids < len(self.epsilons)
        ladder = self.epsilons[np.minimum(env_ids, len(self.epsilons) - 1)]
        return np.where(inside, ladder, np.float32(self.eval_epsilon))

    def is_eval(self, slot: ActorSlot) -> bool:
        return bool(slot.env_ids[0] >= len(self.epsilons))


class CentralInference:
    def __init__(
        self,
        engine: InferenceEngine,
        unroll_length: int,
        on_unroll: Callable[[Unroll], None],
        *,
        overlap: int = 1,
        exploration: Exploration | None = None,
    ) -> None:
        self.engine = engine
        self.exploration = exploration
        self.store = UnrollStore(unroll_length, on_unroll, overlap=overlap)
        self._last: tuple[Batch, np.ndarray, InferenceResult] | None = None
        self.eval_returns: collections.deque = collections.deque(maxlen=100)
        self.eval_episodes = 0
        # Per actor, fixed while it stays connected: its envs' epsilons, and whether it is an
        # eval actor. Looked up on every request, so computed once when it joins.
        self._epsilon: dict[int, np.ndarray] = {}
        self._eval_actors: set[int] = set()

    def actor_started(self, slot: ActorSlot) -> None:
        self.engine.ensure_rows(int(slot.rows.max()) + 1)
        self.engine.reset_rows(slot.rows)
        self.store.register(slot.hello.actor_id, slot.env_ids)
        if self.exploration is not None:
            actor = slot.hello.actor_id
            self._epsilon[actor] = self.exploration(slot.env_ids)
            if self.exploration.is_eval(slot):
                self._eval_actors.add(actor)
            else:
                self._eval_actors.discard(actor)

    def actor_left(self, slot: ActorSlot) -> None:
        self.store.drop(slot.hello.actor_id)
        self._epsilon.pop(slot.hello.actor_id, None)
        self._eval_actors.discard(slot.hello.actor_id)

    def act(self, batch: Batch) -> np.ndarray:
        steps = [step for _, step in batch]
        obs = _cat([s.obs for s in steps])
        # seq 0 carries the reset observation: it starts an episode too.
        done = _cat([s.terminated | s.truncated | (s.seq == 0) for s in steps])
        rows = _cat([slot.rows for slot, _ in batch])
        offsets = np.cumsum([0] + [s.obs.shape[0] for s in steps[:-1]])
        truncated_index = _cat(
            [np.flatnonzero(s.truncated) + off for s, off in zip(steps, offsets, strict=True)]
        )
        final_obs = _cat([s.final_obs for s in steps])
        epsilon = (
            None
            if self.exploration is None
            else _cat([self._epsilon[slot.hello.actor_id] for slot, _ in batch])
        )
        result = self.engine.infer(obs, done, rows, truncated_index, final_obs, epsilon)
        self._last = (batch, done, result)
        return result.actions

    def record(self, batch: Batch) -> None:
        assert self._last is not None and self._last[0] is batch
        _, done, result = self._last
        self._last = None
        offset = 0
        for slot, step in batch:
            part = slice(offset, offset + slot.hello.n_envs)
            offset = part.stop
            record = StepRecord(
                obs=step.obs,
                reward=step.reward,
                done=done[part],
                truncated=step.truncated,
                truncation_value=result.truncation_value[part],
                action=result.actions[part],
                behaviour=result.behaviour[part],
                core_state=tuple(s[part] for s in result.input_state),
            )
            if slot.hello.actor_id in self._eval_actors:
                self.eval_returns.extend(step.episode_returns)
                self.eval_episodes += len(step.episode_returns)
            self.store.append(slot.hello.actor_id, record)


class TrainQueueSink:
    """V-trace: cut unrolls into batches of ``batch_size`` columns for a bounded queue."""

    def __init__(self, batch_size: int, train_queue: queue.Queue, stop: threading.Event) -> None:
        self.assembler = BatchAssembler(batch_size)
        self.train_queue = train_queue
        self.stop = stop
        self.wait_s = 0.0

    def __call__(self, unroll: Unroll) -> None:
        for batch in self.assembler.add(unroll):
            self._put(batch)

    def _put(self, batch: Unroll) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            try:
                self.train_queue.put(batch, timeout=0.1)
                break
            except queue.Full:
                continue
        self.wait_s += time.monotonic() - start


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
