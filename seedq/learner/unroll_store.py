"""Turns the stream of inference requests into fixed-length unrolls.

The learner sees every env step of every actor as an inference request, so it records each one
as it answers it. All N envs of an actor step in lockstep (they share one vector env and one
message), so a whole actor's step is one record: no per-env Python work on the hot path.

Time convention (SEED RL): row t holds what *arrived* with observation t (the reward of the
previous action, whether obs t starts a new episode) and what the agent did at obs t (action,
policy logits). When an unroll of T+1 rows is full it is emitted and its last row becomes row 0
of the next one (one-step overlap), so every transition t -> t+1 is trained on exactly once.
R2D2 stores longer overlaps: its last ``burn_in + 1`` rows start the next sequence, so the next
sequence's burn-in replays the steps this one trained on.

Copies: a record's arrays are kept by reference (the request batch owns them and nothing writes
to them again) until its unroll is emitted; then every field is written once into the emitted
unroll's arrays. With ``columns``, completed actor unrolls wait until that many env columns are
complete and are written into one unroll of exactly that width, the batch the learner trains on,
so an observation is copied once between the request and the learner's tensor (it was four
times: into a per-actor buffer, out of it at emit, into the training batch, and by the learner
when that batch was a slice). The learner's store writes batches of 32 MB and more into arrays
it hands out again once the learner has let go of them (``ReusedArrays``), since glibc maps
each such block anew.

A joined batch takes each actor's oldest waiting unroll, one per actor, oldest first. First
come, first joined, a fast actor's second unroll took a slow actor's place, and the slow
actor's unroll waited a batch longer (CHANGELOG, twenty-eighth session). The batch waits for
the slow actor only while it can: when the registered actors have fewer columns than a batch,
or a second batch's worth is already waiting (an actor stopped, not yet evicted), it is filled
in arrival order, so a batch never waits on an actor that may not come back.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from seedq.core.unroll import TIME_FIELDS, StepRows, Unroll
from seedq.learner.memory import ReusedArrays


@dataclass
class StepRecord(StepRows):
    """What the learner knows about one actor's batch step after answering it.

    All arrays have leading dim N (the actor's envs); core_state is the state the inference
    used as input for this step (before any reset), each [N, H]. The store keeps the arrays
    until the unroll is emitted: whoever appends one must not write to its arrays afterwards.
    """


@dataclass
class _Completed:
    """An actor's complete unroll (its T+1 records) waiting to be written; ``start``: its first
    column not yet emitted."""

    key: Hashable
    rows: list[StepRecord]
    env_id: np.ndarray
    start: int = 0

    @property
    def left(self) -> int:
        return int(self.env_id.shape[0]) - self.start


class UnrollStore:
    """Per-actor unrolls; calls ``on_unroll`` with each completed Unroll (arrays of its own).

    An unroll has ``unroll_length + 1`` rows; the last ``overlap`` rows of one are the first
    rows of the next (1 for V-trace; burn-in + 1 for R2D2). ``columns``: env columns of every
    emitted unroll, joined from several actors' (0: each actor's unroll as it completes).
    ``arrays``: where the emitted unrolls' arrays come from; the largest are handed out again
    once their consumer has let go of them (default: a
    :class:`~seedq.learner.memory.ReusedArrays` with the learner process's budget,
    ``hardware.keep_freed_mb``).
    """

    def __init__(
        self,
        unroll_length: int,
        on_unroll: Callable[[Unroll], None],
        overlap: int = 1,
        columns: int = 0,
        arrays: ReusedArrays | None = None,
    ) -> None:
        if unroll_length <= 0:
            raise ValueError(f"unroll_length must be > 0, got {unroll_length}")
        if not 1 <= overlap <= unroll_length:
            raise ValueError(f"overlap must be in [1, unroll_length], got {overlap}")
        if columns < 0:
            raise ValueError(f"columns must be >= 0, got {columns}")
        self.unroll_length = unroll_length
        self.overlap = overlap
        self.columns = columns
        self._on_unroll = on_unroll
        self._arrays = arrays if arrays is not None else ReusedArrays()
        self._rows: dict[Hashable, list[StepRecord]] = {}
        self._env_ids: dict[Hashable, np.ndarray] = {}
        self._completed: list[_Completed] = []
        self._completed_columns = 0
        self.unrolls_emitted = 0

    def register(self, key: Hashable, env_id: np.ndarray) -> None:
        """(Re)start the stream of ``key``; any partial unroll it had is dropped."""
        self._rows[key] = []
        self._env_ids[key] = np.asarray(env_id, dtype=np.int64)

    def drop(self, key: Hashable) -> None:
        """End the stream of ``key``: its partial unroll is dropped (complete ones it left are
        still emitted)."""
        self._rows.pop(key, None)
        self._env_ids.pop(key, None)

    def append(self, key: Hashable, record: StepRecord) -> None:
        rows = self._rows[key]
        rows.append(record)
        if len(rows) <= self.unroll_length:
            return
        # The last rows start the next unroll: for V-trace the bootstrap value comes from the
        # observation the next unroll starts at; for R2D2 they are the next burn-in.
        self._rows[key] = rows[-self.overlap :]
        done = _Completed(key, rows, self._env_ids[key])
        if not self.columns:
            self._on_unroll(self._write([done], done.left))
            return
        self._completed.append(done)
        self._completed_columns += done.left
        while (parts := self._next_batch()) is not None:
            unroll = self._write(parts, self.columns)
            # The waiting list is settled before the batch is handed on, so a hand-off that
            # raises leaves no consumed unroll in it.
            self._completed = [part for part in self._completed if part.left]
            self._completed_columns -= self.columns
            self._on_unroll(unroll)

    def _next_batch(self) -> list[_Completed] | None:
        """The waiting unrolls the next joined batch is written from, in order, or None while
        it should wait: each actor's oldest, oldest first, until they fill a batch; in arrival
        order when that cannot happen soon (see the module's docstring)."""
        if self._completed_columns < self.columns:
            return None
        parts, keys, width = [], set(), 0
        for part in self._completed:
            if part.key not in keys:
                parts.append(part)
                keys.add(part.key)
                width += part.left
                if width >= self.columns:
                    return parts
        registered = sum(len(env_id) for env_id in self._env_ids.values())
        if registered < self.columns or self._completed_columns >= 2 * self.columns:
            return list(self._completed)
        return None

    def _write(self, parts: list[_Completed], width: int) -> Unroll:
        """``width`` columns from ``parts``, in order, written into one Unroll (consuming them:
        each part's ``start`` moves on)."""
        first = parts[0].rows[0]
        steps = self.unroll_length + 1
        fields = {}
        for name in TIME_FIELDS:
            like = getattr(first, name)
            fields[name] = self._arrays.empty((steps, width, *like.shape[1:]), like.dtype)
        states = [np.empty((width, *s.shape[1:]), s.dtype) for s in first.core_state]
        env_id = np.empty(width, np.int64)
        col = 0
        for part in parts:
            if col == width:
                break
            take = min(part.left, width - col)
            src, dst = slice(part.start, part.start + take), slice(col, col + take)
            for name, out in fields.items():
                np.stack([getattr(row, name)[src] for row in part.rows], out=out[:, dst])
            for out, state in zip(states, part.rows[0].core_state, strict=True):
                out[dst] = state[src]
            env_id[dst] = part.env_id[src]
            col += take
            part.start += take
        self.unrolls_emitted += 1
        return Unroll(**fields, core_state=tuple(states), env_id=env_id)
