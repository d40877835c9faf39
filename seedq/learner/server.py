"""The learner's side of the broker: central inference, trajectory recording, train queue.

``CentralInference`` implements the broker's ``BatchConsumer``: it acts for a batch of actor
requests with the shared model, then records each request as one time step of that actor's
unroll. Completed training batches go into a bounded queue; when training falls behind, the
put blocks, the broker stops answering, and the actors wait (backpressure, never unbounded
memory).
"""

from __future__ import annotations

import queue
import threading
import time

import numpy as np

from seedq.broker.router import ActorSlot, Batch
from seedq.learner.inference import InferenceEngine, InferenceResult
from seedq.learner.unroll_store import BatchAssembler, StepRecord, Unroll, UnrollStore


class CentralInference:
    def __init__(
        self,
        engine: InferenceEngine,
        unroll_length: int,
        batch_size: int,
        train_queue: queue.Queue,
        stop: threading.Event,
    ) -> None:
        self.engine = engine
        self.train_queue = train_queue
        self.stop = stop
        self.assembler = BatchAssembler(batch_size)
        self.store = UnrollStore(unroll_length, self._on_unroll)
        self._last: tuple[Batch, np.ndarray, InferenceResult] | None = None
        self.queue_wait_s = 0.0

    def actor_started(self, slot: ActorSlot) -> None:
        self.engine.ensure_rows(int(slot.rows.max()) + 1)
        self.engine.reset_rows(slot.rows)
        self.store.register(slot.hello.actor_id, slot.env_ids)

    def actor_left(self, slot: ActorSlot) -> None:
        self.store.drop(slot.hello.actor_id)

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
        result = self.engine.infer(obs, done, rows, truncated_index, final_obs)
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
            self.store.append(slot.hello.actor_id, record)

    def _on_unroll(self, unroll: Unroll) -> None:
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
        self.queue_wait_s += time.monotonic() - start


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
