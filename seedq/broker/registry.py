"""The learner's actor registry: state rows and env ids of every actor, across broker shards.

Rows index the learner's per-env state (recurrent state, unroll columns); env ids label the
unrolls. Both are learner-wide, while each broker shard owns its own connections, so the
shards share one registry (thread-safe). It also knows which shard holds each actor: an actor
that joins a shard while another shard still holds it (it restarted and was told to dial
another shard, or a second process uses its id) is *revoked* there: its old run is taken over,
as when a new run joins one broker on another connection.
"""

from __future__ import annotations

import bisect
import threading
from typing import Protocol

import numpy as np

from seedq.broker.rows import RowPool
from seedq.messages import Hello, ProtocolError

MAX_TOTAL_ENVS = 1 << 20


class Shard(Protocol):
    def revoke(self, actor_id: int, run_id: str, by_run: str) -> None:
        """End ``actor_id``'s run ``run_id`` soon (thread-safe): its run ``by_run`` joined
        another shard. A newer run of the id on this shard is left alone."""


class ActorRegistry:
    """Rows (lowest free first) and env-id ranges of the connected actors, and their shard."""

    def __init__(self, limit: int = MAX_TOTAL_ENVS, launched: tuple[int, int] = (0, 0)) -> None:
        """``launched``: ``(ids, envs_per_batch)`` of the actors the run's own launcher starts,
        ids ``0..ids-1``, each on env ids ``[id * envs_per_batch, (id + 1) * envs_per_batch)``.
        Those env ids are kept for them: an actor started by hand that claims one is refused,
        since it would otherwise hold them while a launched actor was away (a stall, a
        restart) and that actor, refused on its return, would crash until the run ended."""
        self.rows = RowPool(limit)
        self.launched_ids, self.launched_per_batch = launched
        self.launched_envs = launched[0] * launched[1]
        self._lock = threading.Lock()
        self._starts: list[tuple[int, int, int]] = []  # (first env, last env, actor), sorted
        self._ranges: dict[int, tuple[int, int, int]] = {}
        # actor id -> the shard that holds its run, and the run's id
        self._owner: dict[int, tuple[Shard, str]] = {}

    def join(self, hello: Hello, shard: Shard, old_rows: np.ndarray | None = None) -> np.ndarray:
        """Rows for a valid Hello on ``shard``; ``old_rows``: those of this actor's run on the
        same shard that the new run replaces (kept when the size matches, else freed).

        Raises ``env_id_conflict`` or ``too_many_envs`` (and changes nothing then).
        """
        first, last = hello.first_env, hello.first_env + hello.n_envs - 1
        with self._lock:
            self._check_env_ids(hello.actor_id, first, last)
            if old_rows is not None and len(old_rows) == hello.n_envs:
                rows = old_rows
            else:
                returned = 0 if old_rows is None else len(old_rows)
                if self.rows.free + returned < hello.n_envs:
                    raise ProtocolError(
                        "too_many_envs",
                        f"learner serves at most {self.rows.limit} envs, {self.rows.in_use} in use",
                    )
                if old_rows is not None:
                    self.rows.release(old_rows)
                rows = self.rows.allocate(hello.n_envs)
            owner = self._owner.get(hello.actor_id)
            if owner is not None and owner[0] is not shard:
                owner[0].revoke(hello.actor_id, owner[1], hello.run_id)
            self._set_range(hello.actor_id, first, last)
            self._owner[hello.actor_id] = (shard, hello.run_id)
            return rows

    def leave(self, actor_id: int, shard: Shard, rows: np.ndarray) -> None:
        """``actor_id``'s run on ``shard`` ended; its rows are free again."""
        with self._lock:
            owner = self._owner.get(actor_id)
            if owner is not None and owner[0] is shard:
                del self._owner[actor_id]
                self._set_range(actor_id, None, None)
            self.rows.release(rows)

    def _set_range(self, actor_id: int, first: int | None, last: int | None) -> None:
        old = self._ranges.pop(actor_id, None)
        if old is not None:
            del self._starts[bisect.bisect_left(self._starts, old)]
        if first is not None:
            entry = (first, last, actor_id)
            self._ranges[actor_id] = entry
            bisect.insort(self._starts, entry)

    def _check_env_ids(self, actor_id: int, first: int, last: int) -> None:
        n = last - first + 1
        per = self.launched_per_batch
        if actor_id < self.launched_ids and (first, n) != (actor_id * per, per):
            # Not the launched actor of that id (its envs are actor id x per on): it would take
            # the id over, and the launched batch, refused, ended for the rest of the run.
            raise ProtocolError(
                "env_id_conflict",
                f"actor {actor_id} claims env ids {first}..{last}, but actor ids "
                f"0..{self.launched_ids - 1} are this run's own actors, each on {per} envs "
                f"from env id actor id x {per}; {_ids_that_fit(self.launched_envs, n)}",
            )
        if actor_id >= self.launched_ids and first < self.launched_envs:
            raise ProtocolError(
                "env_id_conflict",
                f"actor {actor_id} claims env ids {first}..{last}, but env ids "
                f"0..{self.launched_envs - 1} are kept for this run's own actors (ids "
                f"0..{self.launched_ids - 1}); {_ids_that_fit(self.launched_envs, n)}",
            )
        # Ranges do not overlap, so only the last one starting at or before `last` can.
        at = bisect.bisect_right(self._starts, (last, float("inf"), 0))
        for lo, hi, other in self._starts[max(0, at - 2) : at]:
            if other != actor_id and first <= hi and last >= lo:
                # The remedy a user has: seedq-actor has no first_env, its envs start at
                # actor id x envs per batch; ids whose envs lie past every range in use fit.
                free = max(self._starts[-1][1] + 1, self.launched_envs)
                raise ProtocolError(
                    "env_id_conflict",
                    f"actor {actor_id} claims env ids {first}..{last}, actor {other} already "
                    f"steps {lo}..{hi}; {_ids_that_fit(free, n)}",
                )


def _ids_that_fit(free: int, n: int) -> str:
    """The remedy of an env-id conflict: ``seedq-actor`` has no first env id, its envs start
    at actor id x ``n`` (envs per batch); ids whose envs start at ``free`` or past it fit."""
    return f"start it with --actor-ids {-(-free // n)} or higher (its envs start at actor id x {n})"
