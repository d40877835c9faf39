"""Central inference: the learner's side of the broker.

``CentralInference`` implements the broker's ``BatchConsumer``: it acts for a batch of actor
requests with the shared model and the agent's selector, then records each request as one time
step of that actor's unroll. Completed unrolls go to the agent (``on_unroll``): a bounded
training queue, a replay. When training falls behind, the agent's sink blocks, the broker stops
answering, and the actors wait (backpressure, never unbounded memory).

Several broker shards may feed one ``CentralInference`` (each call under their shared lock), so
it keeps nothing between ``act`` and ``record`` but what it stores on the batch, and it records
only the *live* run of each actor id: an actor that moved to another shard may still have a
request of its old run in the old shard's batch, and that one is answered but not recorded.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from seedq.broker.batch import ActorSlot, RequestBatch
from seedq.core.agent import Agent, Exploration
from seedq.core.unroll import Unroll
from seedq.learner.inference import InferenceEngine
from seedq.learner.unroll_store import StepRecord, UnrollStore


class CentralInference:
    def __init__(
        self,
        engine: InferenceEngine,
        unroll_length: int,
        on_unroll: Callable[[Unroll], None],
        *,
        overlap: int = 1,
        columns: int = 0,
        exploration: Exploration | None = None,
    ) -> None:
        self.engine = engine
        self.exploration = exploration
        self.store = UnrollStore(unroll_length, on_unroll, overlap=overlap, columns=columns)
        self._live: dict[int, ActorSlot] = {}

    @classmethod
    def for_agent(cls, engine: InferenceEngine, agent: Agent) -> CentralInference:
        """Central inference cutting the unrolls ``agent`` trains on and feeding them to it."""
        length, overlap = agent.unroll_layout()
        return cls(
            engine,
            length,
            agent.on_unroll,
            overlap=overlap,
            columns=agent.unroll_columns(),
            exploration=agent.exploration,
        )

    def actor_started(self, slot: ActorSlot) -> None:
        actor_id = slot.hello.actor_id
        self._live[actor_id] = slot
        self.engine.ensure_rows(int(slot.rows.max()) + 1)
        self.engine.reset_rows(slot.rows)
        self.store.register(actor_id, slot.env_ids)
        if self.exploration is not None:
            self.exploration.actor_started(actor_id, slot.env_ids)

    def actor_left(self, slot: ActorSlot) -> None:
        actor_id = slot.hello.actor_id
        if self._live.get(actor_id) is not slot:
            return  # a newer run of this actor (on another shard) has taken over
        del self._live[actor_id]
        self.store.drop(actor_id)
        if self.exploration is not None:
            self.exploration.actor_left(actor_id)

    def act(self, batch: RequestBatch) -> np.ndarray:
        epsilon = None
        if self.exploration is not None:
            epsilon = np.concatenate(
                [self.exploration.epsilon(slot.hello.actor_id) for slot in batch.slots]
            )
        result = self.engine.infer(
            batch.obs, batch.done, batch.rows, batch.truncated_index, batch.final_obs, epsilon
        )
        batch.inference = result
        return result.actions

    def record(self, batch: RequestBatch) -> None:
        result = batch.inference
        assert result is not None, "record() before act()"
        live = self._live
        returns = {e.request: e.episode_returns for e in batch.episodes}
        for i, slot in enumerate(batch.slots):
            actor_id = slot.hello.actor_id
            if live.get(actor_id) is not slot:
                continue
            part = batch.part(i)
            self.store.append(
                actor_id,
                StepRecord(
                    obs=batch.obs[part],
                    reward=batch.reward[part],
                    done=batch.done[part],
                    truncated=batch.truncated[part],
                    truncation_value=result.truncation_value[part],
                    action=result.actions[part],
                    behaviour=result.behaviour[part],
                    core_state=tuple(s[part] for s in result.input_state),
                ),
            )
            if self.exploration is not None and i in returns:
                self.exploration.observe_returns(actor_id, returns[i])
