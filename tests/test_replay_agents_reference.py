"""R2D2's and SAC's internals end to end against slow NumPy references written from the papers.

R2D2 (Kapturowski et al. 2019): what central inference records becomes a sequence whose replayed
Q-values are the ones the acting network computed (stored state, burn-in, episode ends anywhere),
its insertion priority is the eta-mix of its n-step double-Q TD errors, the replay's importance
weights are (N P(i))^-beta over the batch's largest, and the target network is copied every
``target_update_period`` updates. SAC (Haarnoja et al. 2018): one update's critic, actor and
temperature losses and its Polyak step, from the rows of a replayed transition.
"""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest
import torch

from seedq.agents.common.replay import RateLimiter, SampledSequences, SequenceReplay
from seedq.agents.common.update import Placement
from seedq.agents.r2d2.acting import EpsilonGreedy
from seedq.agents.r2d2.config import QModelConfig, R2D2Config
from seedq.agents.r2d2.learner import R2D2Learner
from seedq.agents.r2d2.network import build_network as build_q_network
from seedq.agents.r2d2.sequences import ReplaySink, insertion_priorities, replay_fields
from seedq.agents.sac.config import SACConfig, SACModelConfig
from seedq.agents.sac.learner import SACLearner
from seedq.agents.sac.network import build_network as build_sac_network
from seedq.core.unroll import Unroll
from seedq.learner.inference import InferenceEngine
from seedq.learner.unroll_store import StepRecord, UnrollStore
from seedq.messages import EnvSpec

CPU = torch.device("cpu")
OBS, ACTIONS, ENVS = 4, 3, 3


def h(x: np.ndarray, eps: float) -> np.ndarray:
    return np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + eps * x


def h_inv(x: np.ndarray, eps: float) -> np.ndarray:
    return np.sign(x) * (((np.sqrt(1 + 4 * eps * (np.abs(x) + 1 + eps)) - 1) / (2 * eps)) ** 2 - 1)


def sequence_td_ref(
    q_online: np.ndarray,
    q_target: np.ndarray,
    rows: dict[str, np.ndarray],
    cfg: R2D2Config,
) -> np.ndarray:
    """TD errors ``[L, B]`` of the trained transitions of sequences of rows ``[R, B]``, one
    (t, b) at a time. ``q_*``: ``[L+1, B, A]`` over rows burn_in .. R-1. Transition t of the
    trained part goes from row burn_in + t to the next; that row's reward (clipped), plus
    gamma V(final obs) if it ends a truncated episode, is its reward, and its done stops the
    return."""
    burn, n, gamma, eps = cfg.burn_in, cfg.n_step, cfg.gamma, cfg.value_rescale_eps
    steps, batch = q_online.shape[0] - 1, q_online.shape[1]
    td = np.zeros((steps, batch))
    for b in range(batch):
        for t in range(steps):
            m = min(n, steps - t)
            total, alive = 0.0, 1.0
            for k in range(m):
                row = burn + t + k + 1
                reward = float(rows["reward"][row, b])
                if cfg.reward_clip == "abs_one":
                    reward = np.clip(reward, -1.0, 1.0)
                if rows["truncated"][row, b]:
                    reward += gamma * float(rows["truncation_value"][row, b])
                total += gamma**k * alive * reward
                alive *= 1.0 - float(rows["done"][row, b])
            best = int(np.argmax(q_online[t + m, b]))
            total += gamma**m * alive * h_inv(q_target[t + m, b, best], eps)
            taken = q_online[t, b, rows["action"][burn + t, b]]
            td[t, b] = h(total, eps) - taken
    return td


def priorities_ref(td: np.ndarray, eta: float) -> np.ndarray:
    return eta * np.abs(td).max(0) + (1 - eta) * np.abs(td).mean(0)


# --- R2D2: sequences, stored state, insertion priorities --------------------------------------


def r2d2_config(**overrides) -> R2D2Config:
    settings = dict(
        burn_in=3,
        sequence_length=5,
        n_step=3,
        gamma=0.9,
        batch_size=2,
        replay_min_size=2,
        grad_clip=1e6,
        model=QModelConfig(hidden_sizes=[8], lstm_size=6, head_size=8),
    )
    settings.update(overrides)
    return R2D2Config(**settings)


def acted_sequences(cfg: R2D2Config, steps: int = 60, seed: int = 0):
    """A Q network and the sequences central inference cut while it acted greedily for ENVS
    envs whose episodes end (terminated or truncated) at random steps, burn-ins included."""
    torch.manual_seed(seed)
    model = build_q_network((OBS,), ACTIONS, cfg.model, channels_last=False)
    engine = InferenceEngine(
        model, CPU, threading.Lock(), select=EpsilonGreedy(cfg.value_rescale_eps)
    )
    engine.ensure_rows(ENVS)
    sequences: list[Unroll] = []
    store = UnrollStore(
        cfg.burn_in + cfg.sequence_length, sequences.append, overlap=cfg.burn_in + 1
    )
    store.register("actor", np.arange(ENVS))
    rng = np.random.default_rng(seed)
    done = np.ones(ENVS, bool)
    for _ in range(steps):
        obs = rng.normal(size=(ENVS, OBS)).astype(np.float32)
        ended = rng.random(ENVS) < 0.15
        truncated = ended & (rng.random(ENVS) < 0.5) & ~done
        done = done | ended
        index = np.flatnonzero(truncated)
        final_obs = rng.normal(size=(len(index), OBS)).astype(np.float32)
        result = engine.infer(obs, done, np.arange(ENVS), index, final_obs, np.zeros(ENVS))
        store.append(
            "actor",
            StepRecord(
                obs=obs,
                reward=(rng.normal(size=ENVS) * 2).astype(np.float32),
                done=done.copy(),
                truncated=truncated,
                truncation_value=result.truncation_value,
                action=result.actions,
                behaviour=result.behaviour,
                core_state=result.input_state,
            ),
        )
        done = np.zeros(ENVS, bool)
    return model, sequences


def batch_major(unroll: Unroll) -> dict[str, np.ndarray]:
    """The sequences of ``unroll`` as the replay stores and returns them (ReplaySink's layout)."""
    return {
        "obs": np.swapaxes(unroll.obs, 0, 1),
        "action": unroll.action.T,
        "reward": unroll.reward.T,
        "done": unroll.done.T,
        "truncated": unroll.truncated.T,
        "truncation_value": unroll.truncation_value.T,
        "core_state": np.stack(unroll.core_state, axis=1),
    }


def test_the_cut_sequences_hold_episode_ends_in_burn_ins_and_truncations_in_trained_parts():
    cfg = r2d2_config()
    _, sequences = acted_sequences(cfg)
    done = np.concatenate([u.done for u in sequences], axis=1)
    truncated = np.concatenate([u.truncated for u in sequences], axis=1)
    # The cases the tests below rely on are there: an episode starting inside a burn-in, one
    # ending within a trained part, a truncation there, a sequence spanning two episodes.
    assert done[1 : cfg.burn_in].any() and done[cfg.burn_in + 1 :].any()
    assert truncated[cfg.burn_in + 1 :].any()
    assert (done[1:].sum(0) >= 1).any()


def test_replayed_q_values_are_the_ones_inference_acted_with():
    """Burn-in from the stored state reaches the acting network's state, across episode ends."""
    cfg = r2d2_config()
    model, sequences = acted_sequences(cfg)
    learner = R2D2Learner(model, cfg, Placement.cpu())
    for unroll in sequences:
        with torch.no_grad():
            _, q_taken = learner.td_errors(batch_major(unroll))
        acted = unroll.behaviour[cfg.burn_in : -1]
        actions = unroll.action[cfg.burn_in : -1]
        expected = np.take_along_axis(acted, actions[..., None].astype(np.int64), -1)[..., 0]
        np.testing.assert_allclose(q_taken.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reward_clip", ["none", "abs_one"])
def test_insertion_priorities_are_the_eta_mix_of_the_acting_networks_td_errors(reward_clip):
    cfg = r2d2_config(reward_clip=reward_clip, priority_eta=0.7)
    _, sequences = acted_sequences(cfg)
    for unroll in sequences:
        q = unroll.behaviour[cfg.burn_in :].astype(np.float64)
        rows = {name: getattr(unroll, name) for name in ("reward", "done", "truncated")}
        rows["truncation_value"] = unroll.truncation_value
        rows["action"] = unroll.action
        want = priorities_ref(sequence_td_ref(q, q, rows, cfg), cfg.priority_eta)
        np.testing.assert_allclose(insertion_priorities(unroll, cfg), want, rtol=1e-9, atol=1e-9)


def test_the_learners_td_errors_bootstrap_from_the_target_network_as_the_reference_does():
    cfg = r2d2_config()
    model, sequences = acted_sequences(cfg)
    learner = R2D2Learner(model, cfg, Placement.cpu())
    torch.manual_seed(7)
    learner.target.load_state_dict(
        build_q_network((OBS,), ACTIONS, cfg.model, channels_last=False).state_dict()
    )
    unroll = sequences[-1]
    data = batch_major(unroll)
    with torch.no_grad():
        td, _ = learner.td_errors(data)
        obs = torch.from_numpy(unroll.obs)
        done = torch.from_numpy(unroll.done)
        state = tuple(torch.from_numpy(s) for s in unroll.core_state)
        # Both networks step one row at a time from the stored state, as inference would.
        q = {}
        for name, net in (("online", learner.model), ("target", learner.target)):
            s, out = state, []
            for t in range(obs.shape[0]):
                step, s = net(obs[t : t + 1], done[t : t + 1], s)
                out.append(step.q[0].double().numpy())
            q[name] = np.stack(out)[cfg.burn_in :]
    rows = {name: getattr(unroll, name) for name in ("reward", "done", "truncated", "action")}
    rows["truncation_value"] = unroll.truncation_value
    want = sequence_td_ref(q["online"], q["target"], rows, cfg)
    np.testing.assert_allclose(td.numpy(), want, rtol=1e-5, atol=1e-5)


def test_the_target_network_is_copied_every_target_update_period_updates():
    cfg = r2d2_config(target_update_period=3, lr=1e-2)
    model, sequences = acted_sequences(cfg)
    learner = R2D2Learner(model, cfg, Placement.cpu())
    data = batch_major(sequences[0])
    sample = SampledSequences(
        np.arange(ENVS), np.ones(ENVS, np.int64), np.ones(ENVS, np.float32), data
    )

    def target_is_online() -> bool:
        online, target = learner.model.state_dict(), learner.target.state_dict()
        return all(torch.equal(online[k], target[k]) for k in online)

    copies = []
    for _ in range(7):
        learner.train_step(sample)
        copies.append(target_is_online())
    # Copied right after updates 3 and 6, then the online network moves on without it.
    assert copies == [False, False, True, False, False, True, False]


# --- the replay: importance weights, zero priorities, a replay smaller than its batch ----------


def test_sampled_weights_are_n_p_to_the_minus_beta_over_the_batchs_largest():
    alpha, beta = 0.9, 0.6
    priorities = np.array([0.0, 0.5, 1.0, 2.0, 8.0])
    fields = {"x": ((), np.dtype(np.int64))}
    replay = SequenceReplay(
        8, fields, alpha=alpha, beta=beta, limiter=RateLimiter(100.0, 1, 1e9), seed=3
    )
    replay.insert({"x": np.arange(5)}, priorities, lambda: False)
    # A zero priority keeps the floor (1e-6): rarely drawn, never unsampleable.
    scaled = np.maximum(priorities, 1e-6) ** alpha
    probs = scaled / scaled.sum()
    for _ in range(20):
        sample = replay.sample(16, lambda: False)  # more than the replay holds: with replacement
        w = (5 * probs[sample.indices]) ** -beta
        np.testing.assert_allclose(sample.weights, w / w.max(), rtol=1e-6)
        np.testing.assert_array_equal(sample.data["x"], sample.indices)
        assert sample.indices.max() < 5  # the empty slots are never drawn


# --- SAC: one update from the rows of replayed transitions ------------------------------------

SPEC = EnvSpec((3,), "float32", 2, "continuous", (-2.0, 0.0), (2.0, 1.0))


def sac_rows(batch: int, seed: int = 1) -> dict[str, np.ndarray]:
    """Transitions ``[B, 2, ...]``: transition 1 terminates, transition 2 is truncated with
    V(final obs) = 3."""
    rng = np.random.default_rng(seed)
    low, high = np.array(SPEC.action_low), np.array(SPEC.action_high)
    rows = {
        "obs": rng.normal(size=(batch, 2, 3)).astype(np.float32),
        "action": rng.uniform(low, high, size=(batch, 2, 2)).astype(np.float32),
        "reward": rng.normal(size=(batch, 2)).astype(np.float32),
        "done": np.zeros((batch, 2), bool),
        "truncated": np.zeros((batch, 2), bool),
        "truncation_value": np.zeros((batch, 2), np.float32),
    }
    rows["done"][1, 1] = True
    rows["done"][2, 1] = rows["truncated"][2, 1] = True
    rows["truncation_value"][2, 1] = 3.0
    return rows


def squashed_sample_ref(model, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tanh(u), u ~ N(mean, std), and its log-prob in [-1, 1]^D: log N(u) - sum log(1 - a^2)."""
    features = model.actor_torso(x)
    mean = model.policy_head.out(features)
    log_std = model.policy_head.log_std_layer(features).clamp(-5.0, 2.0)
    u = mean + torch.randn_like(mean) * log_std.exp()
    a = torch.tanh(u)
    gaussian = torch.distributions.Normal(mean.double(), log_std.exp().double())
    log_prob = gaussian.log_prob(u.double()) - torch.log1p(-a.double().pow(2))
    return a, log_prob.sum(-1)


def test_one_sac_update_is_the_papers_algorithm_on_the_replayed_rows():
    gamma, alpha, batch = 0.9, 0.5, 8
    cfg = SACConfig(
        gamma=gamma, init_temperature=alpha, model=SACModelConfig(hidden_sizes=[16, 16])
    )
    torch.manual_seed(0)
    model = build_sac_network(SPEC, cfg)
    learner = SACLearner(model, cfg, Placement.cpu())
    with torch.no_grad():  # target critics unlike the online ones, so each is told apart
        for p in learner.target_critics.parameters():
            p.add_(0.1 * torch.randn_like(p))
    before, targets_before = copy.deepcopy(model), copy.deepcopy(learner.target_critics)
    rows = sac_rows(batch)
    torch.manual_seed(5)
    sample = SampledSequences(
        np.arange(batch), np.ones(batch, np.int64), np.ones(batch, np.float32), rows
    )
    stats = learner.train_step(sample)

    torch.manual_seed(5)  # the same noise, drawn in the same order: s' first, then s
    obs = torch.from_numpy(rows["obs"])
    with torch.no_grad():
        next_a, next_log_prob = squashed_sample_ref(before, obs[:, 1])
        next_q = torch.stack([c(obs[:, 1], next_a) for c in targets_before]).min(0).values
        reward = (
            rows["reward"][:, 1] + gamma * rows["truncation_value"][:, 1] * rows["truncated"][:, 1]
        )
        discount = gamma * ~rows["done"][:, 1]
        y = reward + discount * (next_q.double().numpy() - alpha * next_log_prob.numpy())
        low, high = np.array(SPEC.action_low), np.array(SPEC.action_high)
        unit = (rows["action"][:, 0] - (high + low) / 2) / ((high - low) / 2)
        q = torch.stack(
            [c(obs[:, 0], torch.from_numpy(unit).float()) for c in before.critics]
        ).double()
        critic = 0.5 * ((q[0].numpy() - y) ** 2).mean() + 0.5 * ((q[1].numpy() - y) ** 2).mean()
        # The actor's loss sees the critics after their step; its sample is the next noise.
        a, log_prob = squashed_sample_ref(before, obs[:, 0])
        q_pi = torch.stack([c(obs[:, 0], a) for c in model.critics]).min(0).values.double()
        actor = (alpha * log_prob - q_pi).mean().item()
        temperature = -(alpha * (log_prob + -2.0)).mean().item()  # target entropy -|A|
    assert stats["loss/critic"] == pytest.approx(critic, rel=1e-5)
    assert stats["loss/actor"] == pytest.approx(actor, rel=1e-4, abs=1e-5)
    assert stats["loss/temperature"] == pytest.approx(temperature, rel=1e-5)
    # Polyak: target <- (1 - tau) target + tau online, towards the critics after their step.
    for t, t0, o in zip(
        learner.target_critics.parameters(),
        targets_before.parameters(),
        model.critics.parameters(),
        strict=True,
    ):
        torch.testing.assert_close(t, (1 - cfg.tau) * t0 + cfg.tau * o)
    # The temperature moved against the entropy's gap to its target.
    entropy = -log_prob.mean().item()
    moved = model.log_alpha.item() - before.log_alpha.item()
    assert np.sign(moved) == np.sign(-2.0 - entropy)


# --- priorities that are not finite ------------------------------------------------------------


def test_a_refused_insert_leaves_the_replay_as_it_was():
    """A NaN priority used to be refused by the sum tree after the sequences had been written:
    the ring's oldest slots held the refused batch (under the priorities of the sequences it
    replaced) while size, cursor and counters said nothing had been inserted."""
    fields = {"x": ((), np.dtype(np.int64))}
    replay = SequenceReplay(4, fields, alpha=0.9, beta=0.6, limiter=RateLimiter(1.0, 1, 1e9))
    replay.insert({"x": np.arange(4)}, np.ones(4), lambda: False)
    before = {name: array.copy() for name, array in replay.storage.items()}
    generation, leaves = replay.generation.copy(), replay.tree.get(np.arange(4))
    with pytest.raises(ValueError, match="finite"):
        replay.insert({"x": np.array([7, 8])}, np.array([1.0, np.nan]), lambda: False)
    np.testing.assert_array_equal(replay.storage["x"], before["x"])
    np.testing.assert_array_equal(replay.generation, generation)
    np.testing.assert_array_equal(replay.tree.get(np.arange(4)), leaves)
    assert (replay.cursor, len(replay), replay.added, replay.limiter.inserts) == (0, 4, 4, 4)


def test_a_sequence_whose_q_values_are_not_finite_is_left_out_and_the_others_stored(caplog):
    cfg = r2d2_config()
    _, sequences = acted_sequences(cfg)
    unroll = sequences[-1]
    unroll.behaviour[cfg.burn_in + 1, 1] = np.inf  # column 1: inference's Q overflowed
    fields = replay_fields(cfg, EnvSpec((OBS,), "float32", ACTIONS), (6, 6))
    replay = SequenceReplay(
        16, fields, alpha=0.9, beta=0.6, limiter=RateLimiter(1.0, 1, 1e9), seed=0
    )
    ReplaySink(replay, cfg, threading.Event())(unroll)
    assert len(replay) == ENVS - 1
    np.testing.assert_array_equal(replay.storage["env_id"][: ENVS - 1], unroll.env_id[[0, 2]])
    np.testing.assert_array_equal(
        replay.storage["obs"][: ENVS - 1], np.swapaxes(unroll.obs, 0, 1)[[0, 2]]
    )
    assert np.isfinite(replay.tree.get(np.arange(ENVS - 1))).all()
    assert "1 sequence" in caplog.text and "not finite" in caplog.text


def test_a_truncated_episode_bootstraps_from_max_q_of_its_final_obs_in_the_old_episodes_state():
    cfg = r2d2_config()
    torch.manual_seed(0)
    model = build_q_network((OBS,), ACTIONS, cfg.model, channels_last=False)
    engine = InferenceEngine(
        model, CPU, threading.Lock(), select=EpsilonGreedy(cfg.value_rescale_eps)
    )
    engine.ensure_rows(ENVS)
    rng = np.random.default_rng(0)
    first, final, second = (rng.normal(size=(ENVS, OBS)).astype(np.float32) for _ in range(3))
    none = np.zeros(0, np.int64), np.zeros((0, OBS), np.float32)
    engine.infer(first, np.ones(ENVS, bool), np.arange(ENVS), *none, np.zeros(ENVS))
    # Env 1 hits its time limit: its true last observation is `final[1]`, and `second[1]`
    # starts its next episode; env 2 terminates (no final observation, no bootstrap).
    done = np.array([False, True, True])
    result = engine.infer(second, done, np.arange(ENVS), np.array([1]), final[1:2], np.zeros(3))
    with torch.no_grad():
        zeros = tuple(torch.zeros(ENVS, 6) for _ in range(2))
        _, state = model(
            torch.from_numpy(first)[None], torch.ones(1, ENVS, dtype=torch.bool), zeros
        )
        out, _ = model(torch.from_numpy(final)[None], torch.zeros(1, ENVS, dtype=torch.bool), state)
    best = out.q[0, 1].double().numpy().max()
    expected = [0.0, h_inv(best, cfg.value_rescale_eps), 0.0]
    np.testing.assert_allclose(result.truncation_value, expected, rtol=1e-5, atol=1e-7)
