"""SAC's replay: single transitions, sampled uniformly at a bounded replay ratio.

It is ``seedq.agents.common.replay``'s ``SequenceReplay`` and ``RateLimiter`` (R2D2's machinery)
with sequences of two rows, obs t and obs t + 1 with what arrived with them, so a transition
follows ``seedq.agents.common.targets``' row convention (a truncated episode's bootstrap value
arrives in row 1). Priority exponent and importance exponent are 0: every stored transition is
equally likely and every weight is 1. The rate limiter holds the samples per inserted transition
at ``updates_per_step * batch_size``: the learner waits for new data instead of over-sampling,
and the inference thread (with it the actors) waits when the learner falls behind.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from seedq.agents.common.replay import RateLimiter, SequenceReplay, check_fits
from seedq.agents.sac.config import SACConfig
from seedq.core.unroll import Unroll
from seedq.limits import available_memory_bytes
from seedq.messages import EnvSpec

log = logging.getLogger(__name__)

# The share of the machine's available memory SAC's replay may take (R2D2's default).
REPLAY_MEMORY_FRACTION = 0.8
_ROW_FIELDS = ("obs", "action", "reward", "done", "truncated", "truncation_value")


def transition_fields(spec: EnvSpec) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    return {
        "obs": ((2, *spec.obs_shape), np.dtype(spec.obs_dtype)),
        "action": ((2, spec.num_actions), np.dtype(np.float32)),
        "reward": ((2,), np.dtype(np.float32)),
        "done": ((2,), np.dtype(bool)),
        "truncated": ((2,), np.dtype(bool)),
        "truncation_value": ((2,), np.dtype(np.float32)),
    }


def make_replay(cfg: SACConfig, spec: EnvSpec, seed: int) -> SequenceReplay:
    fields = transition_fields(spec)
    needed = check_fits(
        SequenceReplay.bytes_needed(cfg.replay_capacity, fields),
        available_memory_bytes(),
        capacity=cfg.replay_capacity,
        items="transitions",
        each=f"transition of {spec.obs_shape} {spec.obs_dtype} observations",
        fraction=REPLAY_MEMORY_FRACTION,
        fraction_key=None,
    )
    log.info("replay: %d transitions, %.2f GiB", cfg.replay_capacity, needed / 2**30)
    limiter = RateLimiter(
        samples_per_insert=cfg.updates_per_step * cfg.batch_size,
        min_size=cfg.learning_starts,
        max_credit=cfg.replay_slack_batches * cfg.batch_size,
    )
    return SequenceReplay(
        cfg.replay_capacity, fields, alpha=0.0, beta=0.0, limiter=limiter, seed=seed
    )


def unroll_transitions(unroll: Unroll) -> dict[str, np.ndarray]:
    """The ``T B`` transitions of an unroll ``[T+1, B]``, each field ``[T B, 2, ...]``."""
    out = {}
    for name in _ROW_FIELDS:
        rows = getattr(unroll, name)  # [T+1, B, ...]
        pairs = np.stack([rows[:-1], rows[1:]], axis=2)  # [T, B, 2, ...]
        out[name] = pairs.reshape(-1, *pairs.shape[2:])
    return out


class TransitionSink:
    """Completed unrolls -> replay, waiting while the rate limiter refuses."""

    def __init__(self, replay: SequenceReplay, stop: threading.Event) -> None:
        self.replay = replay
        self.stop = stop

    def __call__(self, unroll: Unroll) -> None:
        data = unroll_transitions(unroll)
        count = len(data["reward"])
        self.replay.insert(data, np.ones(count), self.stop.is_set)
