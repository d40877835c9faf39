"""Prioritised sequence replay for R2D2: a sum tree, a rate limiter and the sequence store.
SAC stores two-row transitions in it with both exponents 0: uniform sampling, unit weights.

Sampling follows Schaul et al. 2016 ("Prioritized Experience Replay", eq. 1-2) with R2D2's
sequence priorities: P(i) = p_i^alpha / sum_k p_k^alpha, importance weights
w_i = (N P(i))^-beta normalised by the largest weight of the sampled batch.

The rate limiter bounds the replay ratio (how many times, on average, each stored sequence is
trained on) from both sides: the learner waits for new data instead of over-sampling, and the
inference thread (and with it the actors) waits when the learner has fallen behind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from seedq.schema import ConfigError

log = logging.getLogger(__name__)

ArrayLike = Tensor | np.ndarray


def sampling_probabilities(priorities: ArrayLike, alpha: float) -> ArrayLike:
    """P(i) = p_i^alpha / sum_k p_k^alpha over the given priorities ``[N]``."""
    numpy = isinstance(priorities, np.ndarray)
    p = torch.from_numpy(priorities) if numpy else torch.as_tensor(priorities)
    p = p if p.is_floating_point() else p.to(torch.get_default_dtype())
    scaled = p**alpha
    probs = scaled / scaled.sum()
    return probs.numpy() if numpy else probs


def importance_weights(probs_of_sampled: ArrayLike, buffer_len: int, beta: float) -> ArrayLike:
    """w_i = (N P(i))^-beta / max_j w_j over the sampled batch ``[B]`` (N = ``buffer_len``)."""
    numpy = isinstance(probs_of_sampled, np.ndarray)
    p = torch.from_numpy(probs_of_sampled) if numpy else torch.as_tensor(probs_of_sampled)
    p = p if p.is_floating_point() else p.to(torch.get_default_dtype())
    w = (buffer_len * p) ** (-beta)
    w = w / w.max()
    return w.numpy() if numpy else w


class SumTree:
    """Binary tree of priority sums over ``capacity`` leaves: O(log N) update and sample.

    Leaves live at ``[size, 2 size)`` of a flat array (``size`` = capacity rounded up to a power
    of two), internal node ``i`` holds the sum of ``2i`` and ``2i + 1``; node 1 is the total.
    Updates and lookups are vectorised over a batch, one NumPy step per tree level.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.size = self.leaves(capacity)
        self.depth = self.size.bit_length() - 1
        self.nodes = np.zeros(2 * self.size, dtype=np.float64)

    @staticmethod
    def leaves(capacity: int) -> int:
        """The leaves of a tree over ``capacity`` priorities: capacity rounded up to a power of
        two (its nodes array is twice that)."""
        return 1 << max(0, (capacity - 1).bit_length())

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.nodes[self.size + np.asarray(indices, dtype=np.int64)]

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        indices = np.asarray(indices, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if indices.size == 0:
            return
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise IndexError(f"leaf index out of [0, {self.capacity})")
        if not np.all(np.isfinite(values)) or values.min() < 0:
            raise ValueError("priorities must be finite and >= 0")
        # With repeated indices the last value wins, as for sequential updates.
        self.nodes[self.size + indices] = values
        parents = np.unique((self.size + indices) >> 1)
        for _ in range(self.depth):
            self.nodes[parents] = self.nodes[2 * parents] + self.nodes[2 * parents + 1]
            parents = np.unique(parents >> 1)

    def find(self, values: np.ndarray) -> np.ndarray:
        """Leaf index whose cumulative range holds each value in ``[0, total)``."""
        values = np.array(values, dtype=np.float64)
        node = np.ones(values.shape, dtype=np.int64)
        for _ in range(self.depth):
            left = self.nodes[2 * node]
            # Rounding can leave a value at or past the sum of a subtree; never step into an
            # empty right subtree because of it.
            right = (values >= left) & (self.nodes[2 * node + 1] > 0)
            values = np.where(right, values - left, values)
            node = 2 * node + right
        return node - self.size

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified sampling: one uniform draw in each of ``batch_size`` equal slices."""
        total = self.total
        if total <= 0:
            raise ValueError("cannot sample from a sum tree whose priorities are all zero")
        u = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        return self.find(np.minimum(u, np.nextafter(total, 0)))


class RateLimiter:
    """Keeps ``samples`` within a window around ``samples_per_insert * (inserts - min_size)``.

    ``credit`` is how many more sequences the learner may sample; sampling B needs
    ``credit >= B`` (no over-sampling), inserting is refused once ``credit > max_credit`` (the
    learner is too far behind). ``max_credit`` must be at least one batch, or nothing could
    ever move.
    """

    def __init__(self, samples_per_insert: float, min_size: int, max_credit: float) -> None:
        if samples_per_insert <= 0:
            raise ValueError(f"samples_per_insert must be > 0, got {samples_per_insert}")
        self.samples_per_insert = samples_per_insert
        self.min_size = min_size
        self.max_credit = max_credit
        self.inserts = 0
        self.samples = 0

    @property
    def credit(self) -> float:
        return self.samples_per_insert * (self.inserts - self.min_size) - self.samples

    def can_sample(self, batch_size: int) -> bool:
        return self.inserts >= self.min_size and self.credit >= batch_size

    def can_insert(self, count: int) -> bool:
        return self.inserts + count <= self.min_size or self.credit <= self.max_credit

    def replay_ratio(self) -> float:
        """Achieved samples per inserted sequence since the start."""
        return self.samples / self.inserts if self.inserts else 0.0


@dataclass
class SampledSequences:
    indices: np.ndarray  # [B] slots in the replay
    generations: np.ndarray  # [B] what each slot held when sampled (stale updates are dropped)
    weights: np.ndarray  # float32 [B] normalised importance weights
    data: dict[str, np.ndarray]  # each [B, ...]


class SequenceReplay:
    """Fixed-capacity ring of sequences with prioritised sampling; safe across threads.

    ``fields`` maps a name to the ``(shape, dtype)`` of one sequence's array (observations stay
    in their env dtype, uint8 frames included).
    """

    def __init__(
        self,
        capacity: int,
        fields: dict[str, tuple[tuple[int, ...], np.dtype]],
        *,
        alpha: float,
        beta: float,
        limiter: RateLimiter,
        seed: int = 0,
    ) -> None:
        self.capacity = capacity
        self.alpha, self.beta = alpha, beta
        self.storage = {
            name: np.zeros((capacity, *shape), dtype=dtype)
            for name, (shape, dtype) in fields.items()
        }
        self.tree = SumTree(capacity)
        self.generation = np.zeros(capacity, dtype=np.int64)
        self.limiter = limiter
        self.rng = np.random.default_rng(seed)
        self.cursor = 0
        self.size = 0
        self.added = 0
        self.cond = threading.Condition()

    @staticmethod
    def bytes_needed(capacity: int, fields: dict[str, tuple[tuple[int, ...], np.dtype]]) -> int:
        per_sequence = sum(
            int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            for shape, dtype in fields.values()
        )
        # Computed, not built: the refusal of a replay too large for memory must not first
        # allocate its sum tree.
        return capacity * (per_sequence + 8) + 2 * SumTree.leaves(capacity) * 8

    def __len__(self) -> int:
        return self.size

    def insert(
        self, data: dict[str, np.ndarray], priorities: np.ndarray, stop: Callable[[], bool]
    ) -> bool:
        """Store K sequences; waits while the rate limiter refuses. False if stopped first.

        ValueError, the replay untouched, if a priority is not finite (checked before anything
        is written: the sum tree refused it only after the sequences had replaced others)."""
        count = len(priorities)
        scaled = self._scaled(priorities)
        if not np.isfinite(scaled).all():
            raise ValueError(
                f"priorities must be finite; {int((~np.isfinite(scaled)).sum())} of {count} "
                "are not, nothing was inserted"
            )
        with self.cond:
            while not self.limiter.can_insert(count):
                if stop():
                    return False
                self.cond.wait(timeout=0.1)
            slots = (self.cursor + np.arange(count)) % self.capacity
            for name, array in data.items():
                self.storage[name][slots] = array
            self.generation[slots] += 1
            self.tree.update(slots, scaled)
            self.cursor = int((self.cursor + count) % self.capacity)
            self.size = min(self.size + count, self.capacity)
            self.added += count
            self.limiter.inserts += count
            self.cond.notify_all()
        return True

    def sample(self, batch_size: int, stop: Callable[[], bool]) -> SampledSequences | None:
        """Sample B sequences by priority; waits for the rate limiter. None if stopped first.

        Only the sum-tree draw happens under the lock; the batch is copied outside it, so a
        large copy never stalls inserts (and with them inference and every actor). Guarantee:
        each returned row is a whole sequence, never a mix of two, and ``generations[i]`` is
        the generation of the sequence in ``data`` row i. A slot overwritten while the copy ran
        is copied again under the lock, so its row holds the newer sequence; its weight is the
        one computed from the priority it was drawn with.
        """
        with self.cond:
            while not self.limiter.can_sample(batch_size):
                if stop():
                    return None
                self.cond.wait(timeout=0.1)
            if self.alpha == 0:
                # Uniform replay (SAC): every weight is 1, and one draw of B slots replaces a
                # walk down the sum tree per level (20 levels for 1e6 transitions).
                indices = self.rng.integers(0, self.size, batch_size)
                weights = np.ones(batch_size, dtype=np.float32)
            else:
                indices = self.tree.sample(batch_size, self.rng)
                probs = self.tree.get(indices) / self.tree.total
                weights = importance_weights(probs, self.size, self.beta).astype(np.float32)
            generations = self.generation[indices].copy()
            self.limiter.samples += batch_size
            self.cond.notify_all()
        data = self._gather(indices)
        with self.cond:
            # insert writes a slot and bumps its generation in one critical section, so an
            # unchanged generation means no write touched the slot while we copied it.
            stale = np.flatnonzero(self.generation[indices] != generations)
            if stale.size:
                for name, rows in self._gather(indices[stale]).items():
                    data[name][stale] = rows
                generations[stale] = self.generation[indices[stale]]
        return SampledSequences(indices, generations, weights, data)

    def _gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """A copy of the sequences in ``indices`` ([B, ...] per field)."""
        return {name: array[indices] for name, array in self.storage.items()}

    def update_priorities(
        self, indices: np.ndarray, generations: np.ndarray, priorities: np.ndarray
    ) -> None:
        """Set new priorities, skipping slots overwritten since they were sampled."""
        with self.cond:
            fresh = self.generation[indices] == generations
            self.tree.update(indices[fresh], self._scaled(np.asarray(priorities)[fresh]))

    def mean_priority(self) -> float:
        """Mean stored priority p (not p^alpha) over the filled slots."""
        with self.cond:
            if not self.size:
                return 0.0
            scaled = self.tree.get(np.arange(self.size))
            return float(np.mean(scaled ** (1.0 / self.alpha))) if self.alpha else 0.0

    def state_dict(self) -> dict[str, np.ndarray]:
        """Contents, priorities and counters as arrays (copies; :meth:`save_state` writes
        them without copying the contents)."""
        state: dict[str, np.ndarray] = {}
        self.save_state(lambda name, array: state.__setitem__(name, np.array(array)))
        return state

    def save_state(self, put: Callable[[str, np.ndarray], None]) -> None:
        """Hand each array of the replay's state to ``put``, which writes it (``replay.npz``,
        one entry each) while inserts go on: the contents are the live arrays, not a copy
        (the replay takes most of the memory). An item written to while they were handed on
        may be saved half old, half new (one field of one sequence, another of the next), so
        the items whose generation moved in the meantime are marked ``torn`` last, and
        :meth:`load_state_dict` leaves them out."""
        with self.cond:
            size = self.size
            leaves = self.tree.get(np.arange(size))
            generation = self.generation[:size].copy()
            counters = np.array(
                [self.cursor, size, self.added, self.limiter.inserts, self.limiter.samples],
                dtype=np.int64,
            )
        for name, array in self.storage.items():
            put(f"storage/{name}", array[:size])
        with self.cond:
            torn = self.generation[:size] != generation
        for name, array in (
            ("leaves", leaves),
            ("generation", generation),
            ("counters", counters),
            ("torn", torn),
        ):
            put(name, array)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`save_state` saved, into this replay's capacity (a replay saved
        with another ``replay_capacity`` keeps its newest items, as many as fit) and without
        its torn items; ValueError if the items' layout differs."""
        cursor, size, added, inserts, samples = (int(x) for x in state["counters"])
        for name, array in self.storage.items():
            saved = state[f"storage/{name}"]
            if saved.shape[1:] != array.shape[1:] or saved.dtype != array.dtype:
                raise ValueError(
                    f"saved replay field {name!r} is {saved.dtype}{list(saved.shape[1:])}, "
                    f"this run stores {array.dtype}{list(array.shape[1:])}"
                )
        torn = np.asarray(state.get("torn", np.zeros(size, dtype=bool)), dtype=bool)
        order = np.arange(size)
        if torn.any() or size > self.capacity or (size < self.capacity and cursor != size):
            # Oldest first from slot 0 (a full ring's oldest item sits at its cursor), the
            # torn ones left out. Laid out as saved, a full ring of a smaller capacity would
            # count slots past it as filled before anything was written there (sampled as
            # all-zero items), and one of a larger capacity would not fit.
            order = (cursor + order) % size
            order = order[~torn[order]][-self.capacity :]
            cursor = len(order)
            if torn.any():
                log.info("replay: %d items written to while it was saved left out", torn.sum())
            if size - int(torn.sum()) > self.capacity:
                log.warning(
                    "the saved replay holds %d items, more than this run's capacity of %d: "
                    "its newest %d are kept",
                    size - int(torn.sum()),
                    self.capacity,
                    self.capacity,
                )
        with self.cond:
            for name, array in self.storage.items():
                array[: len(order)] = state[f"storage/{name}"][order]
            self.tree.update(np.arange(len(order)), state["leaves"][order])
            self.generation[: len(order)] = state["generation"][order]
            self.cursor, self.size, self.added = cursor % self.capacity, len(order), added
            self.limiter.inserts, self.limiter.samples = inserts, samples

    def _scaled(self, priorities: np.ndarray) -> np.ndarray:
        # A zero priority would make a sequence unsampleable for ever; keep a floor.
        return np.maximum(np.asarray(priorities, dtype=np.float64), 1e-6) ** self.alpha


def check_fits(
    needed: int,
    available: int | None,
    *,
    capacity: int,
    items: str,
    each: str,
    fraction: float,
    fraction_key: str | None,
) -> int:
    """``needed`` (bytes of a replay of ``capacity`` ``items``, each an ``each``); a
    ConfigError naming the figures and the capacity that fits when it is more than
    ``fraction`` of ``available``.
    Checked before a byte is allocated: a replay of 1e12 transitions was a 21.8 TiB numpy
    allocation error."""
    if available is None:
        log.warning("cannot read available memory; the replay needs %.2f GiB", needed / 2**30)
        return needed
    budget = fraction * available
    if needed > budget:
        per_item = needed / capacity
        share = f"{fraction_key}={fraction}" if fraction_key else f"{fraction:g}"
        raise ConfigError(
            f"algorithm.replay_capacity={capacity} {items} need {needed / 2**30:.2f} GiB "
            f"({per_item / 2**20:.3g} MiB per {each}), but {share} of the "
            f"{available / 2**30:.2f} GiB available is {budget / 2**30:.2f} GiB; use "
            f"algorithm.replay_capacity={int(budget // per_item)} or less"
        )
    return needed
