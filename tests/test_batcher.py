"""Tests for the size-or-deadline micro-batcher used by the broker.

Timing is driven by a fake clock, so every timing assertion is deterministic. Times
and deadlines are powers of two so float arithmetic in the checks is exact.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

import pytest

from seedq.broker.batcher import Batcher

DEADLINE = 0.25


class FakeClock:
    """Manually advanced clock; starts away from zero so nothing can assume t=0."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_batcher(
    clock: FakeClock, max_batch: int = 8, deadline_s: float = DEADLINE
) -> Batcher[str]:
    return Batcher(max_batch=max_batch, deadline_s=deadline_s, clock=clock)


# --- Construction and empty behaviour -------------------------------------------------


@pytest.mark.parametrize("max_batch", [0, -1])
def test_non_positive_max_batch_is_rejected(max_batch: int) -> None:
    with pytest.raises(ValueError, match="max_batch"):
        Batcher(max_batch=max_batch, deadline_s=DEADLINE)


def test_negative_deadline_is_rejected() -> None:
    with pytest.raises(ValueError, match="deadline_s"):
        Batcher(max_batch=4, deadline_s=-0.001)


def test_zero_deadline_is_allowed_and_releases_immediately(clock: FakeClock) -> None:
    batcher = make_batcher(clock, deadline_s=0.0)
    batcher.add("a", 1)

    assert batcher.ready()


@pytest.mark.parametrize("size", [0, -3])
def test_non_positive_request_size_is_rejected(clock: FakeClock, size: int) -> None:
    batcher = make_batcher(clock)

    with pytest.raises(ValueError, match="size"):
        batcher.add("a", size)


def test_empty_batcher_is_not_ready(clock: FakeClock) -> None:
    batcher = make_batcher(clock)
    clock.advance(10 * DEADLINE)

    assert not batcher.ready()


def test_empty_batcher_has_no_time_until_ready(clock: FakeClock) -> None:
    batcher = make_batcher(clock)

    assert batcher.time_until_ready() is None


def test_take_on_empty_returns_empty_list(clock: FakeClock) -> None:
    batcher = make_batcher(clock)

    assert batcher.take() == []


def test_take_on_empty_does_not_count_a_batch(clock: FakeClock) -> None:
    batcher = make_batcher(clock)
    batcher.take()

    assert batcher.batches_taken == 0


def test_counts_requests_and_envs(clock: FakeClock) -> None:
    batcher = make_batcher(clock)
    batcher.add("a", 3)
    batcher.add("b", 2)

    assert (len(batcher), batcher.pending_size) == (2, 5)


# --- Size trigger ---------------------------------------------------------------------


def test_full_batch_is_ready_without_waiting(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 3)
    batcher.add("b", 5)

    assert batcher.ready()


def test_full_batch_has_zero_time_until_ready(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 8)

    assert batcher.time_until_ready() == 0.0


def test_take_returns_requests_in_arrival_order(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    for name, size in [("a", 2), ("b", 3), ("c", 1), ("d", 2)]:
        batcher.add(name, size)

    assert batcher.take() == ["a", "b", "c", "d"]


def test_take_empties_the_batcher_when_everything_fits(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 3)
    batcher.add("b", 5)
    batcher.take()

    assert (len(batcher), batcher.pending_size) == (0, 0)


def test_full_batch_is_counted_as_size_triggered(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 8)
    batcher.take()

    assert (batcher.size_triggered, batcher.deadline_triggered) == (1, 0)


# --- Deadline trigger -----------------------------------------------------------------


def test_small_request_is_not_ready_before_its_deadline(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 1)
    clock.advance(DEADLINE - 0.125)

    assert not batcher.ready()


def test_small_request_is_ready_exactly_at_its_deadline(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 1)
    clock.advance(DEADLINE)

    assert batcher.ready()


def test_time_until_ready_counts_down_with_the_clock(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 1)
    readings = []
    for _ in range(3):
        readings.append(batcher.time_until_ready())
        clock.advance(0.0625)

    assert readings == [0.25, 0.1875, 0.125]


def test_time_until_ready_is_zero_past_the_deadline(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 1)
    clock.advance(3 * DEADLINE)

    assert batcher.time_until_ready() == 0.0


def test_deadline_follows_the_oldest_request(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("old", 1)
    clock.advance(0.125)
    batcher.add("new", 1)

    assert batcher.time_until_ready() == DEADLINE - 0.125


def test_partial_batch_is_counted_as_deadline_triggered(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 1)
    clock.advance(DEADLINE)
    batcher.take()

    assert (batcher.size_triggered, batcher.deadline_triggered) == (0, 1)


# --- take() respects max_batch --------------------------------------------------------


def test_take_stops_before_exceeding_max_batch(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    for name, size in [("a", 3), ("b", 4), ("c", 2)]:
        batcher.add(name, size)

    assert batcher.take() == ["a", "b"]


def test_take_does_not_skip_ahead_to_a_request_that_would_fit(clock: FakeClock) -> None:
    # "c" would fit after "a", but taking it would reorder the queue past "b".
    batcher = make_batcher(clock, max_batch=8)
    for name, size in [("a", 4), ("b", 6), ("c", 1)]:
        batcher.add(name, size)

    assert batcher.take() == ["a"]


def test_leftover_keeps_its_original_deadline(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 6)
    batcher.add("b", 4)  # arrives at t0, due at t0 + 0.25
    clock.advance(0.125)  # the broker is busy for a while before it takes
    batcher.take()  # takes "a" only; "b" is left behind
    clock.advance(0.125)  # now t0 + 0.25: b's original deadline

    assert batcher.ready()


def test_leftover_counts_down_from_its_original_arrival(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 6)
    batcher.add("b", 4)
    clock.advance(0.125)
    batcher.take()
    clock.advance(0.0625)

    assert batcher.time_until_ready() == DEADLINE - 0.125 - 0.0625


def test_oversize_request_goes_alone(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("huge", 20)
    batcher.add("small", 1)

    assert batcher.take() == ["huge"]


def test_oversize_request_behind_others_waits_its_turn(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("small", 1)
    batcher.add("huge", 20)

    assert [batcher.take(), batcher.take()] == [["small"], ["huge"]]


def test_take_all_drains_everything_in_order(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    for name, size in [("a", 5), ("b", 20), ("c", 5)]:
        batcher.add(name, size)

    assert (batcher.take_all(), len(batcher), batcher.pending_size) == (["a", "b", "c"], 0, 0)


def test_fill_ratio_is_envs_over_capacity_of_batches_taken(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_batch=8)
    batcher.add("a", 8)
    batcher.take()
    batcher.add("b", 2)
    clock.advance(DEADLINE)
    batcher.take()

    assert batcher.fill_ratio == (8 + 2) / (2 * 8)


# --- Many actors: seeded simulation ---------------------------------------------------

SIM_MAX_BATCH = 16
SIM_NUM_ACTORS = 20
SIM_ITERATIONS = 5000


@dataclass
class SimulationLog:
    """Everything the simulation observed, checked by the tests below."""

    submitted: list[tuple[int, int]] = field(default_factory=list)  # (actor, seq)
    taken: list[tuple[int, int]] = field(default_factory=list)
    batches: list[list[int]] = field(default_factory=list)  # request sizes per batch
    # Polls where some request was past its deadline but ready() said False.
    missed_deadlines: list[float] = field(default_factory=list)
    # Requests still past their deadline after the driver drained all ready batches.
    stale_after_drain: list[tuple[int, int]] = field(default_factory=list)


def run_simulation(seed: int) -> SimulationLog:
    """Drive a batcher the way the broker does, with many actors, for thousands of steps.

    Each actor keeps exactly one request in flight, like a real actor waiting for its
    actions, and may think for a random while before re-submitting once answered.
    The driver drains every ready batch at each poll, and each batch's inference
    advances the clock, so requests left behind age between takes.
    """
    rng = random.Random(seed)
    clock = FakeClock()
    batcher: Batcher[tuple[int, int]] = Batcher(SIM_MAX_BATCH, DEADLINE, clock)
    log = SimulationLog()
    seq = [0] * SIM_NUM_ACTORS
    idle = set(range(SIM_NUM_ACTORS))
    in_flight: dict[tuple[int, int], tuple[int, float]] = {}  # request -> (size, arrival)

    for _ in range(SIM_ITERATIONS):
        # Steps are multiples of 1/64 s, so some polls land exactly on a deadline.
        clock.advance(rng.choice([0.0, 1 / 64, 1 / 16, 1 / 8, 1 / 4]))

        for actor in sorted(idle):
            if rng.random() < 0.3:
                request = (actor, seq[actor])
                seq[actor] += 1
                size = rng.choice([1, 1, 2, 4, 8, 24])  # 24 > max_batch: oversize
                batcher.add(request, size)
                in_flight[request] = (size, clock())
                log.submitted.append(request)
                idle.discard(actor)

        while True:
            overdue = any(clock() >= arrival + DEADLINE for _, arrival in in_flight.values())
            is_ready = batcher.ready()
            if overdue and not is_ready:
                log.missed_deadlines.append(clock())
            if not is_ready:
                break
            batch = batcher.take()
            assert batch, "ready() was True but take() returned nothing"
            log.batches.append([in_flight[request][0] for request in batch])
            for request in batch:
                in_flight.pop(request)
                log.taken.append(request)
                idle.add(request[0])
            # Inference takes time, so requests left behind age before the next take.
            clock.advance(rng.choice([0.0, 0.0, 1 / 64, 1 / 16, 1 / 8]))

        log.stale_after_drain.extend(
            request for request, (_, arrival) in in_flight.items() if clock() >= arrival + DEADLINE
        )

    # Shutdown: whatever is still waiting is drained and counts as answered.
    log.taken.extend(batcher.take_all())
    return log


@pytest.fixture(scope="module")
def simulation() -> SimulationLog:
    return run_simulation(seed=1234)


def test_simulation_submits_plenty_of_requests(simulation: SimulationLog) -> None:
    # Guards the other simulation tests against passing vacuously.
    assert len(simulation.submitted) > 5000


def test_simulation_takes_every_request_exactly_once(simulation: SimulationLog) -> None:
    assert sorted(simulation.taken) == sorted(simulation.submitted)


def test_simulation_batches_never_exceed_max_batch_unless_single_oversize(
    simulation: SimulationLog,
) -> None:
    bad = [b for b in simulation.batches if sum(b) > SIM_MAX_BATCH and len(b) > 1]

    assert bad == []


def test_simulation_exercises_oversize_requests(simulation: SimulationLog) -> None:
    assert any(b[0] > SIM_MAX_BATCH for b in simulation.batches)


def test_simulation_is_always_ready_once_a_deadline_has_passed(
    simulation: SimulationLog,
) -> None:
    assert simulation.missed_deadlines == []


def test_simulation_leaves_no_overdue_request_after_draining(simulation: SimulationLog) -> None:
    assert simulation.stale_after_drain == []


def test_simulation_preserves_per_actor_order(simulation: SimulationLog) -> None:
    per_actor: dict[int, list[int]] = {}
    for actor, seq in simulation.taken:
        per_actor.setdefault(actor, []).append(seq)

    assert all(seqs == sorted(seqs) for seqs in per_actor.values())


# --- Threads: the batcher behind a lock -----------------------------------------------


def test_threaded_producers_and_consumer_answer_every_request_once() -> None:
    """Several producer threads feed one consumer; the batcher is guarded by a lock.

    The batcher is not thread-safe by design (the broker uses it from a single
    thread), so every call here goes through one Condition's lock. The consumer
    waits on the condition for at most ``time_until_ready()``, which mirrors the
    broker polling its socket with that timeout. Real time is used, but nothing
    asserts on it: only that each request is answered exactly once.
    """
    num_producers, per_producer = 6, 300
    batcher: Batcher[tuple[int, int]] = Batcher(max_batch=16, deadline_s=0.001)
    cond = threading.Condition()
    answered: list[tuple[int, int]] = []
    producers_done = threading.Event()

    def produce(producer: int) -> None:
        rng = random.Random(producer)
        for i in range(per_producer):
            with cond:
                batcher.add((producer, i), rng.randint(1, 6))
                cond.notify()

    def consume() -> None:
        while True:
            with cond:
                if batcher.ready():
                    answered.extend(batcher.take())
                    continue
                if producers_done.is_set() and len(batcher) == 0:
                    return
                # None means empty: wake up periodically to notice shutdown.
                timeout = batcher.time_until_ready()
                cond.wait(timeout=0.01 if timeout is None else timeout)

    producers = [threading.Thread(target=produce, args=(p,)) for p in range(num_producers)]
    consumer = threading.Thread(target=consume)
    consumer.start()
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join(timeout=30)
    producers_done.set()
    consumer.join(timeout=30)
    expected = [(p, i) for p in range(num_producers) for i in range(per_producer)]

    assert sorted(answered) == expected


def test_default_clock_is_real_monotonic_time() -> None:
    batcher: Batcher[str] = Batcher(max_batch=8, deadline_s=60.0)
    batcher.add("a", 1)

    assert 0.0 < batcher.time_until_ready() <= 60.0
