"""UnrollStore: per-actor time-major unrolls with a one-step overlap, and batch assembly."""

import weakref

import numpy as np
import pytest

from seedq.agents.common.batches import BatchAssembler
from seedq.learner.memory import ReusedArrays
from seedq.learner.unroll_store import StepRecord, UnrollStore


def record(t: int, n: int = 3, base: int = 0) -> StepRecord:
    """Step t of an actor with n envs; every field encodes (env, t) so order is visible."""
    env = np.arange(base, base + n)
    return StepRecord(
        obs=np.stack([env, np.full(n, t)], axis=1).astype(np.float32),
        reward=(env * 1000 + t).astype(np.float32),
        done=np.full(n, t == 0),
        truncated=np.zeros(n, bool),
        truncation_value=np.zeros(n, np.float32),
        action=np.full(n, t, np.int32),
        behaviour=np.full((n, 2), t, np.float32),
        core_state=(np.full((n, 4), t, np.float32),),
    )


def collect(unroll_length: int, steps: int, n: int = 3):
    unrolls = []
    store = UnrollStore(unroll_length, unrolls.append)
    store.register("a", np.arange(n))
    for t in range(steps):
        store.append("a", record(t, n))
    return unrolls


def test_unrolls_overlap_by_exactly_one_step():
    unrolls = collect(unroll_length=4, steps=13)
    times = [u.obs[:, 0, 1].astype(int).tolist() for u in unrolls]
    assert times == [[0, 1, 2, 3, 4], [4, 5, 6, 7, 8], [8, 9, 10, 11, 12]]


def test_every_column_keeps_its_own_env():
    (unroll,) = collect(unroll_length=2, steps=3, n=4)
    assert (unroll.obs[:, :, 0] == np.arange(4)).all()


def test_core_state_is_the_state_before_the_first_row():
    unrolls = collect(unroll_length=4, steps=9)
    assert [float(u.core_state[0][0, 0]) for u in unrolls] == [0.0, 4.0]


def test_emitted_unrolls_do_not_alias_the_buffer():
    unrolls = collect(unroll_length=2, steps=5)
    assert unrolls[0].action[:, 0].tolist() == [0, 1, 2]


def test_register_again_drops_the_partial_unroll():
    unrolls = []
    store = UnrollStore(3, unrolls.append)
    store.register("a", np.arange(3))
    for t in range(2):
        store.append("a", record(t))
    store.register("a", np.arange(3))
    for t in range(100, 104):
        store.append("a", record(t))
    assert [u.action[:, 0].tolist() for u in unrolls] == [[100, 101, 102, 103]]


def test_actors_are_tracked_independently():
    unrolls = []
    store = UnrollStore(2, unrolls.append)
    store.register("a", np.arange(3))
    store.register("b", np.arange(3, 5))
    for t in range(3):
        store.append("a", record(t, 3, base=0))
        store.append("b", record(t, 2, base=3))
    assert [u.env_id.tolist() for u in unrolls] == [[0, 1, 2], [3, 4]]


def test_assembler_emits_exact_batches_and_carries_the_rest():
    unrolls = collect(unroll_length=2, steps=3, n=3)
    first = unrolls[0]
    assembler = BatchAssembler(batch_size=4)
    out1 = assembler.add(first)
    out2 = assembler.add(first)
    out3 = assembler.add(first)
    assert [[b.num_columns for b in out] for out in (out1, out2, out3)] == [[], [4], [4]]


def test_assembler_batch_keeps_column_order():
    unrolls = collect(unroll_length=2, steps=3, n=3)
    assembler = BatchAssembler(batch_size=6)
    assembler.add(unrolls[0])
    (batch,) = assembler.add(unrolls[0])
    assert batch.obs[0, :, 0].tolist() == [0, 1, 2, 0, 1, 2]


def test_zero_unroll_length_is_refused():
    with pytest.raises(ValueError, match="unroll_length"):
        UnrollStore(0, lambda u: None)


def test_longer_overlap_repeats_the_last_rows_and_their_states():
    unrolls = []
    store = UnrollStore(5, unrolls.append, overlap=3)  # e.g. burn-in 2 + 1
    store.register("a", np.arange(2))
    for t in range(12):
        store.append("a", record(t, 2))
    times = [u.obs[:, 0, 1].astype(int).tolist() for u in unrolls]
    states = [int(u.core_state[0][0, 0]) for u in unrolls]
    assert (times, states) == (
        [[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8], [6, 7, 8, 9, 10, 11]],
        [0, 3, 6],
    )


def reference_unrolls(unroll_length: int, overlap: int, steps: int) -> list[tuple[list, int]]:
    """Brute force: unroll k covers steps [k*stride, k*stride + L] and starts from the state of
    its first step, stride = L + 1 - overlap."""
    stride = unroll_length + 1 - overlap
    starts = range(0, steps - unroll_length, stride)
    return [(list(range(s, s + unroll_length + 1)), s) for s in starts]


@pytest.mark.parametrize(
    ("unroll_length", "overlap"), [(4, 1), (4, 2), (4, 3), (4, 4), (5, 3), (5, 5), (8, 7), (1, 1)]
)
def test_unrolls_and_their_states_match_a_brute_force_reference(unroll_length, overlap):
    unrolls = []
    store = UnrollStore(unroll_length, unrolls.append, overlap=overlap)
    store.register("a", np.arange(2))
    steps = 6 * unroll_length + 3
    for t in range(steps):
        store.append("a", record(t, 2))
    got = [(u.obs[:, 0, 1].astype(int).tolist(), int(u.core_state[0][0, 0])) for u in unrolls]
    assert got == reference_unrolls(unroll_length, overlap, steps)


def test_overlap_beyond_half_an_unroll_keeps_the_state_of_each_first_row():
    unrolls = []
    store = UnrollStore(4, unrolls.append, overlap=3)
    store.register("a", np.arange(2))
    for t in range(13):
        store.append("a", record(t, 2))
    assert [int(u.core_state[0][0, 0]) for u in unrolls] == [0, 2, 4, 6, 8]


def interleaved(store: UnrollStore, steps: int, sizes=(3, 2, 4), seed: int = 0) -> None:
    """Actors of ``sizes`` envs whose steps arrive in shuffled order (each in its own order)."""
    rng = np.random.default_rng(seed)
    bases = np.cumsum([0, *sizes[:-1]])
    for key, (n, base) in enumerate(zip(sizes, bases, strict=True)):
        store.register(key, np.arange(base, base + n))
    order = [key for key in range(len(sizes)) for _ in range(steps)]
    rng.shuffle(order)
    clocks = [0] * len(sizes)
    for key in order:
        store.append(key, record(clocks[key], sizes[key], base=bases[key]))
        clocks[key] += 1


def _by_column(unrolls) -> dict[tuple[int, int], dict[str, np.ndarray]]:
    """Every column of ``unrolls`` by (env, time of its first row): its fields."""
    columns = {}
    for unroll in unrolls:
        for c, env in enumerate(unroll.env_id.tolist()):
            key = (env, int(unroll.obs[0, c, 1]))
            assert key not in columns, f"env {env}'s unroll from t={key[1]} emitted twice"
            fields = ("obs", "reward", "action", "behaviour")
            columns[key] = {name: getattr(unroll, name)[:, c] for name in fields}
            columns[key]["core_state"] = unroll.core_state[0][c]
    return columns


@pytest.mark.parametrize("columns", [2, 4, 9, 11])
def test_joined_batches_hold_the_lone_unrolls_columns_each_once_in_time_order(columns):
    alone, joined = [], []
    interleaved(UnrollStore(3, alone.append, overlap=2), 14)
    interleaved(UnrollStore(3, joined.append, overlap=2, columns=columns), 14)
    lone, got = _by_column(alone), _by_column(joined)
    assert joined and all(u.num_columns == columns for u in joined)
    assert all(u.obs.flags.c_contiguous for u in joined)  # the learner's tensor, no copy
    for key, fields in got.items():
        for name, array in fields.items():
            np.testing.assert_array_equal(array, lone[key][name])
    # What is not out yet waits at the end of each env's stream (none skipped), fewer than two
    # batches' worth of it.
    for env in {env for env, _ in lone}:
        starts = sorted(t for e, t in lone if e == env)
        out = sorted(t for e, t in got if e == env)
        assert out == starts[: len(out)]
    assert len(lone) - len(got) < 2 * columns


def _complete(store: UnrollStore, key: str, base: int, unrolls: int, clock: dict) -> None:
    """Append ``unrolls`` whole unrolls (length 2) of actor ``key`` (2 envs from ``base``)."""
    for _ in range(2 * unrolls + (clock.get(key) is None)):
        t = clock.get(key, -1) + 1
        store.append(key, record(t, 2, base=base))
        clock[key] = t


def _four_actors(columns: int = 8) -> tuple[UnrollStore, list, dict]:
    unrolls, clock = [], {}
    store = UnrollStore(2, unrolls.append, columns=columns)
    for i, key in enumerate("abcd"):
        store.register(key, np.arange(2 * i, 2 * i + 2))
    return store, unrolls, clock


def test_a_batch_takes_each_actors_oldest_unroll_before_a_fast_actors_second():
    """First come, first joined, a and b's second unrolls took c and d's places."""
    store, unrolls, clock = _four_actors()
    _complete(store, "a", 0, 2, clock)
    _complete(store, "b", 2, 2, clock)
    _complete(store, "c", 4, 1, clock)
    assert unrolls == []  # 10 columns wait, but d's is not among them yet
    _complete(store, "d", 6, 1, clock)

    (batch,) = unrolls
    assert batch.env_id.tolist() == list(range(8))
    assert batch.obs[0, :, 1].tolist() == [0] * 8  # each actor's first unroll
    _complete(store, "c", 4, 1, clock)
    _complete(store, "d", 6, 1, clock)
    assert [u.obs[0, :, 1].tolist() for u in unrolls[1:]] == [[2] * 8]


def test_a_batch_does_not_wait_for_an_actor_that_stopped():
    """d stops before its first unroll (not evicted yet): once a second batch's worth waits,
    the batch is filled in arrival order, and the run trains on."""
    store, unrolls, clock = _four_actors()
    _complete(store, "a", 0, 1, clock)
    for _ in range(3):
        _complete(store, "b", 2, 1, clock)
        _complete(store, "c", 4, 1, clock)
    assert unrolls == []  # 14 columns, none of them d's
    _complete(store, "a", 0, 1, clock)

    assert [u.env_id.tolist() for u in unrolls] == [[0, 1, 2, 3, 4, 5, 2, 3]]
    assert unrolls[0].obs[0, :, 1].tolist() == [0, 0, 0, 0, 0, 0, 2, 2]


def test_a_batch_wider_than_the_actors_is_filled_in_arrival_order():
    unrolls, clock = [], {}
    store = UnrollStore(2, unrolls.append, columns=6)
    store.register("a", np.arange(2))
    store.register("b", np.arange(2, 4))
    _complete(store, "a", 0, 2, clock)
    _complete(store, "b", 2, 1, clock)

    assert [u.env_id.tolist() for u in unrolls] == [[0, 1, 0, 1, 2, 3]]


def test_emitted_unrolls_own_their_arrays():
    unrolls = []
    store = UnrollStore(1, unrolls.append)
    store.register("a", np.arange(3))
    records = [record(t) for t in range(2)]
    for r in records:
        store.append("a", r)
    records[1].obs[:] = -1  # the caller reuses its arrays once the unroll is out
    assert unrolls[0].obs[1, :, 1].tolist() == [1, 1, 1]


def test_a_dropped_actors_complete_unrolls_are_still_emitted_its_partial_one_is_not():
    unrolls = []
    store = UnrollStore(2, unrolls.append, columns=4)
    store.register("a", np.arange(3))
    store.register("b", np.arange(3, 6))
    for t in range(4):
        store.append("a", record(t))  # one complete unroll and a partial one
    store.drop("a")
    for t in range(3):
        store.append("b", record(t, base=3))
    assert [u.env_id.tolist() for u in unrolls] == [[0, 1, 2, 3]]


def test_a_hand_off_that_raises_leaves_no_consumed_unroll_waiting():
    """The batch is settled before it is handed on: the next batch is whole, from the next
    unrolls, whatever the first hand-off did."""
    unrolls, clock = [], {}

    def hand_off(unroll) -> None:  # noqa: ANN001
        if not unrolls:
            unrolls.append(None)
            raise RuntimeError("the training queue refused it")
        unrolls.append(unroll)

    store = UnrollStore(2, hand_off, columns=4)
    store.register("a", np.arange(2))
    store.register("b", np.arange(2, 4))
    _complete(store, "a", 0, 1, clock)
    with pytest.raises(RuntimeError, match="refused"):
        _complete(store, "b", 2, 1, clock)
    _complete(store, "a", 0, 2, clock)  # a runs ahead: its second unroll must wait for b's
    _complete(store, "b", 2, 1, clock)

    assert unrolls[1].env_id.tolist() == [0, 1, 2, 3]
    assert unrolls[1].obs[0, :, 1].tolist() == [2, 2, 2, 2]


def test_reused_unroll_arrays_never_overwrite_an_unroll_still_held():
    """With reuse, an unroll the learner let go of lends its arrays to the next one, and one it
    still holds keeps its values (as the learner's queue or replay hold them)."""
    unrolls = []
    # This test's arrays are small; the learner's pool takes them from 32 MB.
    store = UnrollStore(2, unrolls.append, arrays=ReusedArrays(1 << 20, min_bytes=1))
    store.register("a", np.arange(3))
    for t in range(5):
        store.append("a", record(t))
    held, let_go = unrolls
    let_go_obs = weakref.ref(let_go.obs)
    unrolls.clear()
    del let_go
    for t in range(5, 7):
        store.append("a", record(t))
    (reused,) = unrolls
    assert reused.obs is let_go_obs()
    assert held.obs[:, 0, 1].tolist() == [0, 1, 2]
    assert reused.obs[:, 0, 1].tolist() == [4, 5, 6]
