"""The process group of the learner ranks and what the training threads do through it.

Three groups, so that each is used by one thread per rank and collectives are always issued in
the same order on every rank:

* the default group (NCCL on CUDA, gloo on the CPU): the gradients and the observation rows of
  each update, on the thread that trains (the training thread, or Anakin's loop);
* ``rounds`` (gloo): the training threads' lockstep rounds (:meth:`RankCollective.next_turn`);
* ``control`` (gloo): the run loop's agreement on rows, counters and stopping
  (:mod:`seedq.parallel.agreement`), and the start-up broadcasts.

A collective that fails (a peer process died: gloo sees its sockets close at once; or the
``hardware.learner_timeout_s`` timeout passed) marks the group lost: later collectives raise
:class:`LearnerRankLost` at once instead of waiting, and the run stops on it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

from seedq.core.stats import RunFault
from seedq.exit_status import EXIT_RANK_LOST
from seedq.parallel.ranks import RankInfo

log = logging.getLogger(__name__)

Result = TypeVar("Result")
# A rank that lost a peer exits with EXIT_RANK_LOST (seedq.learner_ranks), at the latest this
# many seconds after it noticed: before the launcher's 30 s grace ends in SIGKILL.
LOST_EXIT_S = 20.0


class LearnerRankLost(RunFault):
    """Another learner rank stopped answering (it died, or a collective timed out)."""


class LearnerGroup:
    """This process's membership in the learner ranks' process group."""

    def __init__(self, info: RankInfo, device: torch.device, timeout_s: float) -> None:
        self.info = info
        self.rank, self.world_size = info.rank, info.world_size
        self.device = device
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        self.lost: str = ""
        self._lost_lock = threading.Lock()
        timeout = timedelta(seconds=timeout_s)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        # torch's env:// rendezvous reads these (under torchrun they are set already, and
        # the launcher's store is reused).
        os.environ.update(info.environment())
        dist.init_process_group(
            self.backend,
            init_method="env://",
            rank=info.rank,
            world_size=info.world_size,
            timeout=timeout,
        )
        self.rounds = dist.new_group(backend="gloo", timeout=timeout)
        self.control = dist.new_group(backend="gloo", timeout=timeout)
        self.collective = RankCollective(self)

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    def call(self, what: str, collective: Callable[[], Result]) -> Result:
        """Run one collective; a failure marks the group lost and raises :class:`LearnerRankLost`
        (so does any call once the group is lost)."""
        if self.lost:
            raise LearnerRankLost(self.lost)
        try:
            return collective()
        except RuntimeError as exc:
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            with self._lost_lock:
                if not self.lost:
                    self.lost = (
                        f"learner rank {self.rank} on {self.info.host} lost the other ranks "
                        f"during {what} ({first_line[:200]})"
                    )
                    self._exit_if_stuck()
            raise LearnerRankLost(self.lost) from None

    def _exit_if_stuck(self) -> None:
        """Bound this rank's orderly stop after a lost peer: whatever waits on the dead peer
        (a collective of another thread, a library's teardown) cannot keep it alive past
        ``LOST_EXIT_S``; rank 0 has written its checkpoint by then, or keeps the last one."""

        def exit_now() -> None:
            log.error(
                "learner rank %d did not stop within %.0f s of losing the others; exiting",
                self.rank,
                LOST_EXIT_S,
            )
            os._exit(EXIT_RANK_LOST)

        timer = threading.Timer(LOST_EXIT_S, exit_now)
        timer.daemon = True
        timer.start()

    # ------------------------------------------------------------------- start-up

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (pickled; keep it to configs and CPU tensors)."""
        box = [value if self.rank == 0 else None]
        self.call("a start-up broadcast", lambda: dist.broadcast_object_list(box, 0, self.control))
        return box[0]

    def align_agent(self, agent: Any) -> None:
        """Every rank takes rank 0's agent state (networks, targets, optimizers, normalisers,
        update count), keeping its own random streams; called before anything trains."""
        own_rng = agent.state_dict().get("rng") if self.rank else None
        state = self.broadcast_object(on_cpu(agent.state_dict()) if self.rank == 0 else None)
        updates = self.broadcast_object(agent.stats.updates if self.rank == 0 else None)
        if self.rank == 0:
            return
        if own_rng is not None:
            state["rng"] = own_rng
        agent.load_state_dict(state)
        agent.stats.updates = updates

    # ------------------------------------------------------------------ the end

    def compare_weights(self, agent: Any, own_env_steps: int) -> bool:
        """Log this rank's digest of the networks and its own env step counter (rank 0's
        starts from the checkpoint's total on resume, the others' from 0; their sum is the
        run's); rank 0 also says whether all ranks match."""
        digest = state_digest(agent.model.state_dict())
        log.info(
            "learner rank %d of %d: %d updates, %d env steps counted here, weights digest %s",
            self.rank,
            self.world_size,
            agent.stats.updates,
            own_env_steps,
            digest,
        )
        digests: list[Any] = [None] * self.world_size
        self.call(
            "the weights check", lambda: dist.all_gather_object(digests, digest, self.control)
        )
        same = len(set(digests)) == 1
        if self.rank == 0:
            if same:
                log.info("weights identical on all %d learner ranks", self.world_size)
            else:
                log.error("learner ranks ended with different weights: %s", digests)
        return same

    def close(self) -> None:
        """Leave the group; after a lost rank the group is abandoned instead (tearing it down
        could wait on the dead peer)."""
        if not self.lost and dist.is_initialized():
            dist.destroy_process_group()


class RankCollective:
    """The training threads' side (:class:`~seedq.core.collective.LearnerCollective`)."""

    def __init__(self, group: LearnerGroup) -> None:
        self.group = group
        self.world_size = group.world_size
        # This rank's env step counter (the run sets it), and the run's total as summed at the
        # last round: what learning-rate schedules read, the same on every rank at an update.
        self.local_env_steps: Callable[[], int] = lambda: 0
        self.env_steps = 0
        self.local_at_round = 0  # this rank's share of env_steps

    def next_turn(self, ready: bool, stopping: bool) -> tuple[bool, bool]:
        local = self.local_env_steps()
        flags = torch.tensor([0 if ready else 1, 1 if stopping else 0, local], dtype=torch.int64)
        try:
            self.group.call(
                "a training round", lambda: dist.all_reduce(flags, group=self.group.rounds)
            )
        except LearnerRankLost:
            # The run loop reports it; this thread just stops training.
            return False, True
        self.env_steps, self.local_at_round = int(flags[2]), local
        return int(flags[0]) == 0, int(flags[1]) > 0

    def average_gradients(self, grads: Sequence[Tensor], finite: bool) -> None:
        by_dtype: dict[torch.dtype, list[Tensor]] = {}
        for grad in grads:
            by_dtype.setdefault(grad.dtype, []).append(grad)
        for same in by_dtype.values():
            flat = torch.cat([g.reshape(-1) for g in same])
            if not finite:
                flat.fill_(math.nan)
            self.group.call("a gradient average", lambda flat=flat: dist.all_reduce(flat))
            flat.div_(self.world_size)
            offset = 0
            for grad in same:
                grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
                offset += grad.numel()

    def gather_rows(self, rows: Tensor) -> Tensor:
        rows = rows.contiguous()
        parts = [torch.empty_like(rows) for _ in range(self.world_size)]
        self.group.call("an observation gather", lambda: dist.all_gather(parts, rows))
        return torch.cat(parts)


def on_cpu(value: Any) -> Any:
    """``value`` (nested dicts, lists, tuples) with every tensor copied to the CPU."""
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(on_cpu(v) for v in value)
    return value


def state_digest(state: dict[str, Tensor]) -> str:
    """A short hash of a state dict's names and exact bytes."""
    h = hashlib.sha256()
    for name, tensor in state.items():
        h.update(name.encode())
        data = tensor.detach().cpu().reshape(-1)
        h.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return h.hexdigest()[:16]
