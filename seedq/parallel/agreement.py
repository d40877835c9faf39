"""What the run loop consults (``TrainingRun.dist``) so that N learner ranks are one run.

* :class:`SingleLearner`: one learner, nothing to agree on (every method passes through).
* :class:`RankAgreement`: one of N ranks. Each wake of the run loop the ranks sum their
  counters (env steps, messages, batches, episodes, evictions, bad messages) and agree on
  whether a metrics row is due; at a row they also pool the recent episode returns and the
  fault counts, then take rank 0's stop reason (or stop together when a rank failed). Only rank
  0 writes ``metrics.csv``, TensorBoard, ``faults.json``, ``summary.json`` and checkpoints, with
  the summed counters. All of it runs on the run loop's thread through the ``control`` group.

Every rank calls the same methods in the same order because every decision that leads to a
call is itself agreed. After a failure (a lost rank, an interrupt of one rank) no collective
is started any more: the summed counters are then the other ranks' last known values plus this
rank's current ones.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from seedq.core.stats import RunStats
from seedq.metrics import MetricsWriter
from seedq.parallel.group import LearnerGroup, LearnerRankLost

COUNTERS = ("env_steps", "messages", "batches", "batch_envs", "episodes", "evicted")
# Counted alike on every rank (the ranks skip the same updates): taken once, not summed.
AGREED_FAULTS = ("skipped_updates",)
RECENT = 100  # episodes behind return_mean (Monitor keeps as many per rank)


class SingleLearner:
    """One learner: it writes, and its own counters are the run's."""

    is_writer = True
    collective = None
    group = None

    def metrics_writer(self, run_dir: str, columns: list[str], cfg: Any = None) -> Any:
        return MetricsWriter(run_dir, columns, cfg)

    def rank_dir(self, run_dir: str) -> str:
        return run_dir

    def run_stats(self, local: RunStats) -> RunStats:
        return local

    def training_env_steps(self, local: int) -> int:
        return local

    def others_env_steps(self) -> int:
        """No other rank steps envs."""
        return 0

    def sync_env_steps(self) -> None:
        """One learner counts its env steps alone."""

    def agree_row(self, due: bool) -> bool:
        return due

    def sum_counters(self, faults: dict[str, int], *, final: bool = False) -> None:
        """Nothing to sum."""

    def agree_reason(self, reason: str, *, failed: bool, signalled: bool = False) -> str:
        return reason

    def summed_faults(self, local: dict[str, int]) -> dict[str, int]:
        return local


class NullWriter:
    """The metrics writer of ranks other than 0: rows are computed (for the stop rules) and
    dropped."""

    def write(self, row: Any) -> None:
        """Rank 0 writes the run's rows."""

    def write_episodes(self, episodes: Any) -> None:
        """And its episode log."""

    def close(self) -> None:
        """Nothing was opened."""


class RankAgreement:
    """One of several learner ranks: summed counters, one writer, agreed rows and stops."""

    collective: Any

    def __init__(self, group: LearnerGroup) -> None:
        self.group = group
        self.collective = group.collective
        self.is_writer = group.is_writer
        self.local = RunStats()
        self.total = RunStats()
        self.codes = sorted(self.total.bad_messages)
        self.others = torch.zeros(len(COUNTERS) + len(self.codes), dtype=torch.int64)
        self.others_recent: list[tuple[list[float], list[float]]] = []
        self.others_faults: dict[str, int] = {}
        self.stopped_together = False

    def metrics_writer(self, run_dir: str, columns: list[str], cfg: Any = None) -> Any:
        """Rank 0's writer (CSV, TensorBoard, the trackers ``cfg`` names); a null one else."""
        return MetricsWriter(run_dir, columns, cfg) if self.is_writer else NullWriter()

    def rank_dir(self, run_dir: str) -> str:
        """Where this rank's own files go (its actors' logs): the run dir for rank 0, else
        ``learners/rank-K``, so the ranks' files do not collide."""
        if self.group.rank == 0:
            return run_dir
        path = os.path.join(run_dir, "learners", f"rank-{self.group.rank}")
        os.makedirs(path, exist_ok=True)
        return path

    def run_stats(self, local: RunStats) -> RunStats:
        """The summed counters the monitor and the checkpoint read (kept up to date by the
        calls below); ``local`` is this rank's own."""
        self.local = local
        self.collective.local_env_steps = lambda: local.env_steps
        self._refresh()
        return self.total

    def training_env_steps(self, local: int) -> int:
        """The run's env steps as the training rounds last summed them (identical on every
        rank at a given update, so schedules such as a linear learning rate agree)."""
        return self.collective.env_steps

    def others_env_steps(self) -> int:
        """The other ranks' env steps as last summed, at a row or a training round (whichever
        is newer): never more than they have stepped, so a rank that stops at its own count
        plus these has not stopped before the run's budget was spent. Read by the thread that
        counts this rank's steps."""
        at_row = int(self.others[COUNTERS.index("env_steps")])
        collective = self.collective
        return max(at_row, collective.env_steps - collective.local_at_round)

    def sync_env_steps(self) -> None:
        """A round outside a training loop (Anakin's act-and-learn step), to sum env steps.
        The sum is every rank's count after its step, so the step budget is checked against
        it at once, not against the others' counts of the round before (which ran the ranks
        one round of blocks past the budget)."""
        self.collective.next_turn(True, False)
        self.others[COUNTERS.index("env_steps")] = self.collective.env_steps - self.local.env_steps
        self._refresh()

    # ------------------------------------------------------------ the collectives

    def _counts(self) -> torch.Tensor:
        local = self.local
        values = [getattr(local, name) for name in COUNTERS]
        values += [local.bad_messages[code] for code in self.codes]
        return torch.tensor(values, dtype=torch.int64)

    def _sum(self, head: list[int]) -> torch.Tensor:
        """All-reduce ``head`` and this rank's counters; keep the others' share; the summed
        head."""
        mine = self._counts()
        vector = torch.cat([torch.tensor(head, dtype=torch.int64), mine])
        self.group.call(
            "the run loop's exchange", lambda: dist.all_reduce(vector, group=self.group.control)
        )
        self.others = vector[len(head) :] - mine
        self._refresh()
        return vector[: len(head)]

    def _refresh(self) -> None:
        """The totals from the others' last known counters and this rank's current ones."""
        total = self.others + self._counts()
        for i, name in enumerate(COUNTERS):
            setattr(self.total, name, int(total[i]))
        for j, code in enumerate(self.codes):
            self.total.bad_messages[code] = int(total[len(COUNTERS) + j])
        with self.local.lock:
            mine = (list(self.local.recent_returns), list(self.local.recent_lengths))
        returns, lengths = pool_recent([mine, *self.others_recent])
        with self.total.lock:
            self.total.recent_returns = collections.deque(returns, maxlen=RECENT)
            self.total.recent_lengths = collections.deque(lengths, maxlen=RECENT)

    def agree_row(self, due: bool) -> bool:
        """Sum the counters; True on every rank when a row is due on any."""
        return int(self._sum([int(due)])[0]) > 0

    def sum_counters(self, faults: dict[str, int], *, final: bool = False) -> None:
        """Before a row: sum the counters, pool recent episodes and fault counts. At the end
        (``final``) only when the ranks stopped together; else from what is known."""
        if final and (not self.stopped_together or self.group.lost):
            self._refresh()
            return
        try:
            self._pool(faults)
        except LearnerRankLost:
            if not final:
                raise
            # The last row and checkpoint still get written, with what is known.
            self._refresh()

    def _pool(self, faults: dict[str, int]) -> None:
        self._sum([])
        with self.local.lock:
            mine = (list(self.local.recent_returns), list(self.local.recent_lengths))
        # Each rank's episodes since the last row go to rank 0's episode log.
        finished = self.local.drain_episodes()
        gathered: list[Any] = [None] * self.group.world_size
        self.group.call(
            "the run loop's row",
            lambda: dist.all_gather_object(gathered, (mine, faults, finished), self.group.control),
        )
        for _, _, episodes in gathered:
            self.total.add_unlogged(episodes)
        others = [g for rank, g in enumerate(gathered) if rank != self.group.rank]
        self.others_recent = [recent for recent, _, _ in others]
        self.others_faults = {}
        for _, counts, _ in others:
            for key, value in counts.items():
                self.others_faults[key] = self.others_faults.get(key, 0) + value
        self._refresh()

    def agree_reason(self, reason: str, *, failed: bool, signalled: bool = False) -> str:
        """Rank 0's stop reason on every rank; "learner_failed" when any rank failed; the
        reason of a rank that got a stop signal (``signalled``: SIGTERM, SIGUSR1, ...) when
        any did, so a signal to one rank stops them all together, checkpointed."""
        gathered: list[Any] = [None] * self.group.world_size
        self.group.call(
            "the run loop's stop check",
            lambda: dist.all_gather_object(
                gathered, (reason, failed, signalled), self.group.control
            ),
        )
        failed_ranks = [rank for rank, (_, bad, _) in enumerate(gathered) if bad]
        signalled_reasons = [r for r, _, sig in gathered if sig]
        if failed_ranks:
            agreed = "learner_failed"
        elif signalled_reasons:
            agreed = signalled_reasons[0]
        else:
            agreed = gathered[0][0]
        self.stopped_together = bool(agreed)
        return agreed

    def summed_faults(self, local: dict[str, int]) -> dict[str, int]:
        """This rank's fault counts plus the others' (skipped updates are agreed, not summed:
        every rank skips the same ones)."""
        return {
            key: value + (0 if key in AGREED_FAULTS else self.others_faults.get(key, 0))
            for key, value in local.items()
        }


def pool_recent(
    ranks: list[tuple[list[float], list[float]]],
) -> tuple[list[float], list[float]]:
    """The ``RECENT`` most recent episodes over all ranks, oldest first: taken newest first,
    one from each rank in turn, so each rank contributes alike while it has episodes."""
    columns = [list(zip(r, n, strict=True))[::-1] for r, n in ranks]
    picked: list[tuple[float, float]] = []
    depth = 0
    while len(picked) < RECENT and any(depth < len(c) for c in columns):
        picked += [c[depth] for c in columns if depth < len(c)]
        depth += 1
    picked = picked[:RECENT][::-1]
    return [r for r, _ in picked], [n for _, n in picked]


_joined: list[RankAgreement] = []


def this_process() -> SingleLearner | RankAgreement:
    """The agreement of the learner rank this process is running, or a single learner's."""
    return _joined[-1] if _joined else SingleLearner()


@contextmanager
def joined(agreement: RankAgreement) -> Iterator[RankAgreement]:
    """Runs built inside this block are ranks of ``agreement``'s group."""
    _joined.append(agreement)
    try:
        yield agreement
    finally:
        _joined.remove(agreement)
