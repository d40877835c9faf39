"""Turns the stream of inference requests into fixed-length unrolls.

The learner sees every env step of every actor as an inference request, so it writes each one
into a per-actor, time-major buffer ``[T+1, N, ...]`` as it answers it. All N envs of an actor
step in lockstep (they share one vector env and one message), so a whole actor is written with
one slice per field: no per-env Python work on the hot path.

Time convention (SEED RL): row t holds what *arrived* with observation t (the reward of the
previous action, whether obs t starts a new episode) and what the agent did at obs t (action,
policy logits). When an unroll of T+1 rows is full it is emitted and its last row becomes row 0
of the next one (one-step overlap), so every transition t -> t+1 is trained on exactly once.
R2D2 stores longer overlaps: its last ``burn_in + 1`` rows start the next sequence, so the next
sequence's burn-in replays the steps this one trained on.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from seedq.core.unroll import TIME_FIELDS, StepRows, Unroll


@dataclass
class StepRecord(StepRows):
    """What the learner knows about one actor's batch step after answering it.

    All arrays have leading dim N (the actor's envs); core_state is the state the inference
    used as input for this step (before any reset), each [N, H].
    """


class _ActorTrack:
    def __init__(self, rows: int, env_id: np.ndarray, first: StepRecord) -> None:
        self.buffers = {
            name: np.empty((rows, *getattr(first, name).shape), getattr(first, name).dtype)
            for name in TIME_FIELDS
        }
        # The input state of every row, shifted with the rows: the state before the row that
        # starts the next unroll may have been written one or more unrolls ago (overlap
        # greater than half an unroll), so it cannot be captured only when that row is written.
        self.states = [np.empty((rows, *s.shape), s.dtype) for s in first.core_state]
        self.env_id = env_id
        self.cursor = 0


class UnrollStore:
    """Per-actor unroll buffers; calls ``on_unroll`` with each completed Unroll (a copy).

    An unroll has ``unroll_length + 1`` rows; the last ``overlap`` rows of one are the first
    rows of the next (1 for V-trace; burn-in + 1 for R2D2).
    """

    def __init__(
        self, unroll_length: int, on_unroll: Callable[[Unroll], None], overlap: int = 1
    ) -> None:
        if unroll_length <= 0:
            raise ValueError(f"unroll_length must be > 0, got {unroll_length}")
        if not 1 <= overlap <= unroll_length:
            raise ValueError(f"overlap must be in [1, unroll_length], got {overlap}")
        self.unroll_length = unroll_length
        self.overlap = overlap
        self._on_unroll = on_unroll
        self._tracks: dict[Hashable, _ActorTrack] = {}
        self._env_ids: dict[Hashable, np.ndarray] = {}
        self.unrolls_emitted = 0

    def register(self, key: Hashable, env_id: np.ndarray) -> None:
        """(Re)start the stream of ``key``; any partial unroll it had is dropped."""
        self._tracks.pop(key, None)
        self._env_ids[key] = np.asarray(env_id, dtype=np.int64)

    def drop(self, key: Hashable) -> None:
        self._tracks.pop(key, None)
        self._env_ids.pop(key, None)

    def append(self, key: Hashable, record: StepRecord) -> None:
        track = self._tracks.get(key)
        if track is None:
            track = _ActorTrack(self.unroll_length + 1, self._env_ids[key], record)
            self._tracks[key] = track
        row = track.cursor
        for name in TIME_FIELDS:
            track.buffers[name][row] = getattr(record, name)
        for buf, state in zip(track.states, record.core_state, strict=True):
            buf[row] = state
        if row == self.unroll_length:
            self._emit(track)
        else:
            track.cursor = row + 1

    def _emit(self, track: _ActorTrack) -> None:
        unroll = Unroll(
            **{name: buf.copy() for name, buf in track.buffers.items()},
            core_state=tuple(buf[0].copy() for buf in track.states),
            env_id=track.env_id,
        )
        # The last rows start the next unroll: for V-trace the bootstrap value comes from the
        # observation the next unroll starts at; for R2D2 they are the next burn-in.
        keep = slice(self.unroll_length + 1 - self.overlap, self.unroll_length + 1)
        for buf in [*track.buffers.values(), *track.states]:
            buf[: self.overlap] = buf[keep].copy()  # the ranges overlap when overlap > keep.start
        track.cursor = self.overlap
        self.unrolls_emitted += 1
        self._on_unroll(unroll)
