"""Central inference: the learner's side of the broker.

``CentralInference`` implements the broker's ``BatchConsumer``: it acts for a batch of actor
requests with the shared model and the agent's selector, then records each request as one time
step of that actor's unroll. Completed unrolls go to the agent (``on_unroll``): a bounded
training queue, a replay. When training falls behind, the agent's sink blocks, the broker stops
answering, and the actors wait (backpressure, never unbounded memory).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from seedq.broker.router import ActorSlot, Batch
from seedq.core.agent import Agent, Exploration
from seedq.core.unroll import Unroll
from seedq.learner.inference import InferenceEngine, InferenceResult
from seedq.learner.unroll_store import StepRecord, UnrollStore


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

    @classmethod
    def for_agent(cls, engine: InferenceEngine, agent: Agent) -> CentralInference:
        """Central inference cutting the unrolls ``agent`` trains on and feeding them to it."""
        length, overlap = agent.unroll_layout()
        return cls(engine, length, agent.on_unroll, overlap=overlap, exploration=agent.exploration)

    def actor_started(self, slot: ActorSlot) -> None:
        self.engine.ensure_rows(int(slot.rows.max()) + 1)
        self.engine.reset_rows(slot.rows)
        self.store.register(slot.hello.actor_id, slot.env_ids)
        if self.exploration is not None:
            self.exploration.actor_started(slot.hello.actor_id, slot.env_ids)

    def actor_left(self, slot: ActorSlot) -> None:
        self.store.drop(slot.hello.actor_id)
        if self.exploration is not None:
            self.exploration.actor_left(slot.hello.actor_id)

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
            else _cat([self.exploration.epsilon(slot.hello.actor_id) for slot, _ in batch])
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
            if self.exploration is not None:
                self.exploration.observe_returns(slot.hello.actor_id, step.episode_returns)
            self.store.append(slot.hello.actor_id, record)


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
