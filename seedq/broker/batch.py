"""What the broker hands to central inference: one batch of actor requests, already assembled.

The broker decodes the requests of a batch together (``seedq.messages.batch``), so its consumer
gets whole-batch arrays (the model's input as is) plus, per request, the actor and where its
envs sit in the batch. Sebulba's in-process desk builds the same object from ``Step`` objects
(:meth:`RequestBatch.from_steps`), so central inference has one input type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from seedq.messages import Hello, Step, StepLayout
from seedq.messages.batch import ObsParts


@dataclass(eq=False)
class ActorSlot:
    """What the broker knows of one connected actor (one env batch)."""

    hello: Hello
    identity: bytes
    rows: np.ndarray  # the learner's state rows of its envs, int64 [N]
    env_ids: np.ndarray  # global env ids (first_env + i) that label its unrolls, int64 [N]
    next_seq: int = 0
    last_seen: float = 0.0  # broker clock at its last valid message or our last reply to it
    in_flight: bool = False  # a Step of it is queued or being answered
    layout: StepLayout | None = None  # what its Hello fixed about its Steps


class Episodes(NamedTuple):
    """The episodes one request finished (``RunStats.record_batch`` reads these names)."""

    request: int
    episode_returns: list[float]
    episode_lengths: list[int]


@dataclass
class RequestBatch:
    """R requests (one per actor), B envs in all, requests in order and envs in order within.

    slots: the actors, [R]; seqs: int [R]; sizes: n_envs of each, [R]; offsets: int64 [R + 1],
    request i's envs are ``offsets[i]:offsets[i + 1]``; rows: int64 [B], the learner state rows;
    obs: [B, *obs_shape] (``observations``: the array, or the frames it is joined from when
    first read); reward: float32 [B]; truncated: bool [B];
    done: bool [B], the obs starts an episode (terminated, truncated, or the actor's seq 0);
    final_obs: [K, *obs_shape], the last obs of each truncated env; truncated_index: int64 [K],
    their positions in the batch; episodes: the requests that finished episodes.
    ``inference``: what the consumer's ``act`` computed, kept for its ``record``.
    """

    slots: list[ActorSlot]
    seqs: list[int]
    sizes: list[int]
    offsets: np.ndarray
    rows: np.ndarray
    observations: np.ndarray | ObsParts
    reward: np.ndarray
    truncated: np.ndarray
    done: np.ndarray
    final_obs: np.ndarray
    truncated_index: np.ndarray
    episodes: list[Episodes] = field(default_factory=list)
    inference: Any = None

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def obs(self) -> np.ndarray:
        """[B, *obs_shape]; large observations are joined into one array on first reading."""
        if isinstance(self.observations, ObsParts):
            self.observations = self.observations.join()
        return self.observations

    @property
    def num_envs(self) -> int:
        return int(self.offsets[-1])

    def part(self, i: int) -> slice:
        """Request ``i``'s envs in the batch arrays."""
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    @classmethod
    def assemble(
        cls,
        slots: list[ActorSlot],
        seqs: list[int],
        sizes: list[int],
        obs: np.ndarray | ObsParts,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        final_obs: np.ndarray,
        truncated_index: np.ndarray,
        episodes: Sequence[tuple[int, list[float], list[int]]] = (),
    ) -> RequestBatch:
        count, n = len(sizes), sizes[0]
        if sizes.count(n) == count:
            offsets = np.arange(0, (count + 1) * n, n, dtype=np.int64)
        else:
            offsets = np.zeros(count + 1, np.int64)
            np.cumsum(sizes, out=offsets[1:])
        rows = slots[0].rows if count == 1 else np.concatenate([s.rows for s in slots])
        done = terminated | truncated
        if 0 in seqs:  # seq 0 carries the reset observation: it starts an episode too
            done |= np.repeat(np.asarray(seqs) == 0, sizes)
        return cls(
            slots=slots,
            seqs=seqs,
            sizes=sizes,
            offsets=offsets,
            rows=rows,
            observations=obs,
            reward=reward,
            truncated=truncated,
            done=done,
            final_obs=final_obs,
            truncated_index=truncated_index,
            episodes=[Episodes(*e) for e in episodes] if episodes else [],
        )

    @classmethod
    def from_steps(cls, requests: Sequence[tuple[ActorSlot, Step]]) -> RequestBatch:
        """A batch of in-process requests (Sebulba's actor threads, tests), in arrays of its own."""
        steps = [step for _, step in requests]
        sizes = [slot.hello.n_envs for slot, _ in requests]
        offsets = np.cumsum([0, *sizes[:-1]])
        truncated = _cat([np.asarray(s.truncated, bool) for s in steps])
        return cls.assemble(
            slots=[slot for slot, _ in requests],
            seqs=[s.seq for s in steps],
            sizes=sizes,
            obs=_cat([s.obs for s in steps]),
            reward=_cat([np.asarray(s.reward, np.float32) for s in steps]),
            terminated=_cat([np.asarray(s.terminated, bool) for s in steps]),
            truncated=truncated,
            final_obs=_cat([s.final_obs for s in steps]),
            truncated_index=_cat(
                [np.flatnonzero(s.truncated) + o for s, o in zip(steps, offsets, strict=True)]
            ),
            episodes=[
                (i, list(s.episode_returns), list(s.episode_lengths))
                for i, s in enumerate(steps)
                if s.episode_returns
            ],
        )


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    # A copy even of one request's arrays: the batch owns what it holds (the unroll store keeps
    # the rows until their unroll is written), and an env may reuse its buffers next step.
    return np.concatenate(arrays)
