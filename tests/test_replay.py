"""Prioritised sequence replay: sum tree, probabilities and weights, rate limiting, the ring."""

import threading

import numpy as np
import pytest
import torch

from seedq.agents.common.replay import (
    RateLimiter,
    SequenceReplay,
    SumTree,
    importance_weights,
    sampling_probabilities,
)
from seedq.agents.r2d2.exploration import epsilon_ladder


def never():
    return False


def test_sampling_frequencies_match_priorities():
    rng = np.random.default_rng(0)
    priorities = rng.random(37) * np.arange(37)  # includes a zero at leaf 0
    tree = SumTree(37)
    tree.update(np.arange(37), priorities)
    counts = np.bincount(np.concatenate([tree.sample(64, rng) for _ in range(4000)]), minlength=37)
    expected = priorities / priorities.sum() * counts.sum()
    chi2 = ((counts - expected) ** 2 / np.maximum(expected, 1e-9))[expected > 0].sum()
    # 35 degrees of freedom: chi2 above 70 has p < 0.001; stratified sampling gives far less.
    assert (counts[0], chi2 < 70) == (0, True)


def test_tree_total_and_leaves_follow_updates_including_repeats():
    tree = SumTree(5)
    tree.update(np.array([0, 1, 2, 3, 4]), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    tree.update(np.array([1, 1, 4]), np.array([7.0, 0.5, 0.0]))
    assert (tree.total, tree.get(np.arange(5)).tolist()) == (8.5, [1.0, 0.5, 3.0, 4.0, 0.0])


def test_find_maps_cumulative_ranges_to_leaves():
    tree = SumTree(4)
    tree.update(np.arange(4), np.array([1.0, 0.0, 2.0, 1.0]))
    assert tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 3.999])).tolist() == [0, 0, 2, 2, 3, 3]


def test_tree_refuses_bad_priorities_and_indices():
    tree = SumTree(3)
    with pytest.raises(ValueError, match="finite"):
        tree.update(np.array([0]), np.array([np.nan]))
    with pytest.raises(IndexError):
        tree.update(np.array([3]), np.array([1.0]))


def test_sampling_probabilities_and_weights_match_numpy():
    p = np.array([0.5, 1.0, 2.0, 4.0])
    probs = p**0.9 / (p**0.9).sum()
    np.testing.assert_allclose(sampling_probabilities(p, 0.9), probs, rtol=1e-12)
    w = (10 * probs[[0, 3]]) ** -0.6
    np.testing.assert_allclose(importance_weights(probs[[0, 3]], 10, 0.6), w / w.max())
    torch_w = importance_weights(torch.from_numpy(probs), 10, 0.6)
    assert torch_w.dtype == torch.float64 and float(torch_w.max()) == 1.0  # w / w is exactly 1


def test_rate_limiter_bounds_replay_ratio_from_both_sides():
    limiter = RateLimiter(samples_per_insert=2.0, min_size=10, max_credit=8)
    assert limiter.can_insert(10) and not limiter.can_sample(1)
    limiter.inserts = 10
    assert not limiter.can_sample(1)  # nothing inserted beyond the warm-up yet
    limiter.inserts = 14  # credit 8
    assert (limiter.can_sample(8), limiter.can_sample(9), limiter.can_insert(1)) == (
        True,
        False,
        True,
    )
    limiter.inserts = 15  # credit 10: the learner is behind, inserts wait
    assert not limiter.can_insert(1)
    limiter.samples = 4
    assert limiter.can_insert(1)


def replay(capacity=4, **limiter):
    fields = {"obs": ((3, 2), np.uint8), "reward": ((3,), np.float32)}
    limits = {"samples_per_insert": 100.0, "min_size": 1, "max_credit": 1e9, **limiter}
    return SequenceReplay(capacity, fields, alpha=1.0, beta=1.0, limiter=RateLimiter(**limits))


def sequences(first, count):
    ids = np.arange(first, first + count)
    return {
        "obs": np.broadcast_to(ids[:, None, None], (count, 3, 2)).astype(np.uint8),
        "reward": np.broadcast_to(ids[:, None], (count, 3)).astype(np.float32),
    }


def test_ring_wraps_and_overwrites_the_oldest_sequences():
    buffer = replay(capacity=4)
    buffer.insert(sequences(0, 3), np.ones(3), never)
    buffer.insert(sequences(3, 3), np.ones(3), never)
    assert (len(buffer), sorted(buffer.storage["obs"][:, 0, 0].tolist())) == (4, [2, 3, 4, 5])


def test_samples_carry_their_data_and_priority_updates_skip_overwritten_slots():
    buffer = replay(capacity=2)
    buffer.insert(sequences(0, 2), np.array([1.0, 1.0]), never)
    sample = buffer.sample(2, never)
    assert all(sample.data["obs"][i, 0, 0] == sample.indices[i] for i in range(2))
    buffer.insert(sequences(7, 1), np.array([5.0]), never)  # overwrites slot 0
    buffer.update_priorities(sample.indices, sample.generations, np.array([9.0, 9.0]))
    assert buffer.tree.get(np.arange(2)).tolist() == [5.0, 9.0]  # alpha = 1: stored as given


def test_learner_waits_for_data_instead_of_over_sampling():
    buffer = replay(samples_per_insert=1.0, min_size=2, max_credit=4)
    buffer.insert(sequences(0, 3), np.ones(3), never)  # credit 1
    got = []
    thread = threading.Thread(target=lambda: got.append(buffer.sample(2, never)))
    thread.start()
    thread.join(timeout=0.3)
    waiting = thread.is_alive()
    buffer.insert(sequences(3, 1), np.ones(1), never)  # credit 2: one batch may go
    thread.join(timeout=5)
    assert (waiting, got[0].indices.shape, buffer.limiter.replay_ratio()) == (True, (2,), 0.5)


def test_stopped_waits_return_without_touching_the_replay():
    buffer = replay(samples_per_insert=1.0, min_size=2, max_credit=1)
    assert buffer.sample(1, lambda: True) is None
    buffer.insert(sequences(0, 4), np.ones(4), never)  # credit 2 > max_credit
    assert (buffer.insert(sequences(4, 1), np.ones(1), lambda: True), buffer.added) == (False, 4)


def test_memory_estimate_counts_every_field_at_its_dtype():
    fields = {"obs": ((121, 4, 84, 84), np.uint8), "action": ((121,), np.int32)}
    per_sequence = 121 * 4 * 84 * 84 + 121 * 4 + 8
    assert SequenceReplay.bytes_needed(1000, fields) == 1000 * per_sequence + 2 * 1024 * 8


def test_epsilon_ladder_follows_the_ape_x_formula():
    n = 8
    want = 0.4 ** (1 + 7 * np.arange(n) / (n - 1))
    np.testing.assert_allclose(epsilon_ladder(n), want, rtol=1e-12)
    assert epsilon_ladder(1).tolist() == [0.4]  # the base itself, no arithmetic: exact
    # Powers of 0.5 are exact in binary, but a vectorised pow need not return them exactly.
    assert epsilon_ladder(3, base=0.5, alpha=2.0).tolist() == pytest.approx(
        [0.5, 0.25, 0.125], rel=1e-12
    )


def test_replay_state_round_trips_contents_priorities_and_counters():
    buffer = replay(capacity=4)
    buffer.insert(sequences(0, 3), np.array([1.0, 2.0, 3.0]), never)
    buffer.insert(sequences(3, 2), np.array([4.0, 5.0]), never)  # wraps: slot 0 overwritten
    restored = replay(capacity=4)
    restored.load_state_dict(buffer.state_dict())
    assert (
        restored.storage["obs"][:, 0, 0].tolist(),
        restored.tree.get(np.arange(4)).tolist(),
        (restored.cursor, restored.size, restored.added, restored.limiter.inserts),
    ) == ([4, 1, 2, 3], [5.0, 2.0, 3.0, 4.0], (1, 4, 5, 5))


def test_a_full_ring_restored_into_a_larger_capacity_holds_only_what_was_stored():
    saved = replay(capacity=4)
    saved.insert(sequences(1, 4), np.arange(1.0, 5.0), never)
    saved.insert(sequences(5, 2), np.array([5.0, 6.0]), never)  # wraps: 3, 4, 5, 6 kept
    larger = replay(capacity=8)
    larger.load_state_dict(saved.state_dict())
    larger.insert(sequences(7, 2), np.array([7.0, 8.0]), never)
    # Oldest first, then the new ones. Laid out as saved, the new ones overwrote 3 and 4 and
    # two slots never written counted as filled: all-zero items SAC's uniform draw sampled.
    assert (
        larger.storage["obs"][: len(larger), 0, 0].tolist(),
        larger.tree.get(np.arange(len(larger))).tolist(),
    ) == ([3, 4, 5, 6, 7, 8], [3.0, 4.0, 5.0, 6.0, 7.0, 8.0])


def test_a_replay_restored_into_a_smaller_capacity_keeps_its_newest_items():
    saved = replay(capacity=8)
    saved.insert(sequences(1, 6), np.arange(1.0, 7.0), never)
    smaller = replay(capacity=4)
    smaller.load_state_dict(saved.state_dict())
    smaller.insert(sequences(7, 1), np.array([7.0]), never)  # replaces the oldest kept, 3
    assert sorted(smaller.storage["obs"][:, 0, 0].tolist()) == [4, 5, 6, 7]


def test_an_item_written_to_while_the_replay_is_saved_is_left_out_of_the_restore():
    buffer = replay(capacity=4)
    buffer.insert(sequences(1, 4), np.arange(1.0, 5.0), never)
    saved = {}

    def put(name, array):
        saved[name] = np.array(array)
        if name == "storage/obs":  # an insert lands between two fields' writes
            buffer.insert(sequences(5, 1), np.array([5.0]), never)

    buffer.save_state(put)
    restored = replay(capacity=4)
    restored.load_state_dict(saved)
    # Slot 0 went to disk with sequence 1's obs and sequence 5's reward: it is left out, and
    # what is restored is whole (it was restored as saved, one field of each sequence).
    obs = restored.storage["obs"][: len(restored), 0, 0].tolist()
    rewards = restored.storage["reward"][: len(restored), 0].tolist()
    assert (obs, rewards) == ([2, 3, 4], [2.0, 3.0, 4.0])


def test_a_replay_saved_with_other_fields_is_refused():
    state = replay(capacity=4).state_dict()
    state["storage/obs"] = np.zeros((0, 5, 2), np.uint8)
    with pytest.raises(ValueError, match="'obs' is uint8"):
        replay(capacity=4).load_state_dict(state)


class SlowCopyReplay(SequenceReplay):
    """The first batch copy waits for ``release`` after saying ``copying``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.copying, self.release = threading.Event(), threading.Event()

    def _gather(self, indices):
        if not self.copying.is_set():
            self.copying.set()
            assert self.release.wait(timeout=10)
        return super()._gather(indices)


def test_inserts_proceed_while_a_sample_is_copied_and_overwritten_rows_are_refreshed():
    limits = {"samples_per_insert": 100.0, "min_size": 1, "max_credit": 1e9}
    fields = {"obs": ((3, 2), np.uint8), "reward": ((3,), np.float32)}
    buffer = SlowCopyReplay(2, fields, alpha=1.0, beta=1.0, limiter=RateLimiter(**limits))
    buffer.insert(sequences(0, 2), np.ones(2), never)
    got = []
    sampler = threading.Thread(target=lambda: got.append(buffer.sample(2, never)))
    sampler.start()
    assert buffer.copying.wait(timeout=10)
    inserter = threading.Thread(target=buffer.insert, args=(sequences(7, 1), np.ones(1), never))
    inserter.start()
    inserter.join(timeout=10)
    inserted_during_copy = not inserter.is_alive()
    buffer.release.set()
    sampler.join(timeout=10)
    sample = got[0]
    current = buffer.storage["obs"][sample.indices, 0, 0].tolist()
    assert (
        inserted_during_copy,
        sample.data["obs"][:, 0, 0].tolist() == current,
        sample.data["reward"][:, 0].tolist() == [float(x) for x in current],
        (sample.generations == buffer.generation[sample.indices]).all(),
        7 in current,
    ) == (True, True, True, True, True)


def test_a_uniform_replay_draws_stored_slots_with_unit_weights():
    fields = {"obs": ((3, 2), np.uint8), "reward": ((3,), np.float32)}
    limiter = RateLimiter(samples_per_insert=100.0, min_size=1, max_credit=1e9)
    buffer = SequenceReplay(8, fields, alpha=0.0, beta=0.0, limiter=limiter)
    buffer.insert(sequences(0, 5), np.ones(5), never)

    sample = buffer.sample(400, never)

    assert set(sample.indices.tolist()) == {0, 1, 2, 3, 4}  # only filled slots, all of them
    assert (sample.weights == 1).all() and (sample.data["obs"][:, 0, 0] == sample.indices).all()
