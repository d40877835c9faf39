"""Learner-side recurrent state: central inference over interleaved envs equals per-env unrolls.

Each env's requests arrive mixed with other envs' in batches of changing order and size; the
engine must give every env the outputs the model would give on that env's sequence alone
(state reset where an episode starts), and report the state it used, which training stores.
"""

import threading

import numpy as np
import pytest
import torch

from seedq.agents.vtrace.acting import SampleFromPolicy
from seedq.agents.vtrace.network import ActorCriticNet
from seedq.learner.inference import InferenceEngine

OBS_DIM, ACTIONS, ENVS, STEPS = 3, 4, 5, 12


def lstm_engine():
    torch.manual_seed(0)
    model = ActorCriticNet((OBS_DIM,), ACTIONS, hidden_sizes=(8,), use_lstm=True, lstm_size=6)
    model.eval()
    engine = InferenceEngine(
        model, torch.device("cpu"), threading.Lock(), select=SampleFromPolicy(), seed=0
    )
    engine.ensure_rows(ENVS)
    return model, engine


def episode_streams(seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(STEPS, ENVS, OBS_DIM)).astype(np.float32)
    done = rng.random((STEPS, ENVS)) < 0.25
    done[0] = True
    return obs, done


def run_interleaved(engine, obs, done, seed=1):
    """Step all envs through the engine in shuffled, split batches; outputs per (t, env)."""
    rng = np.random.default_rng(seed)
    logits = np.zeros((STEPS, ENVS, ACTIONS), np.float32)
    states = np.zeros((STEPS, ENVS, 2, 6), np.float32)
    for t in range(STEPS):
        order = rng.permutation(ENVS)
        for part in np.array_split(order, rng.integers(1, 4)):
            result = engine.infer(
                obs[t, part], done[t, part], part, np.zeros(0, np.int64), obs[t, :0]
            )
            logits[t, part] = result.behaviour
            states[t, part] = np.stack(result.input_state, axis=1)
    return logits, states


def test_interleaved_inference_matches_each_env_unrolled_alone():
    model, engine = lstm_engine()
    obs, done = episode_streams()
    logits, _ = run_interleaved(engine, obs, done)
    for env in range(ENVS):
        with torch.no_grad():
            out, _ = model(
                torch.from_numpy(obs[:, env : env + 1]),
                torch.from_numpy(done[:, env : env + 1]),
                model.initial_state(1),
            )
        np.testing.assert_allclose(logits[:, env], out.logits[:, 0].numpy(), atol=1e-5)


def test_reported_state_is_the_state_before_each_step():
    model, engine = lstm_engine()
    obs, done = episode_streams()
    _, states = run_interleaved(engine, obs, done)
    for env in range(ENVS):
        state = model.initial_state(1)
        for t in range(STEPS):
            np.testing.assert_allclose(
                states[t, env], torch.cat(state).numpy(), atol=1e-6, err_msg=f"t={t}"
            )
            with torch.no_grad():
                _, state = model(
                    torch.from_numpy(obs[t : t + 1, env : env + 1]),
                    torch.from_numpy(done[t : t + 1, env : env + 1]),
                    state,
                )


def test_state_resets_at_episode_start_and_when_rows_are_reset():
    model, engine = lstm_engine()
    obs, done = episode_streams()
    done[:] = False
    done[0] = True
    done[6, 2] = True
    _, states = run_interleaved(engine, obs, done)
    with torch.no_grad():
        _, fresh = model(
            torch.from_numpy(obs[6:7, 2:3]),
            torch.ones(1, 1, dtype=torch.bool),
            model.initial_state(1),
        )
    # Env 2 carried its state into step 6 and restarted from zero there.
    assert np.abs(states[6, 2]).sum() > 0
    np.testing.assert_allclose(states[7, 2], torch.cat(fresh).numpy(), atol=1e-6)
    engine.reset_rows(np.array([3]))
    after = engine.infer(
        obs[0, :4], np.zeros(4, bool), np.arange(4), np.zeros(0, np.int64), obs[0, :0]
    )
    assert np.abs(after.input_state[0][3]).sum() == 0
    assert np.abs(after.input_state[0][:3]).sum(axis=1).min() > 0


def test_truncation_value_continues_the_old_episode_with_its_state():
    model, engine = lstm_engine()
    obs, done = episode_streams()
    done[:] = False
    done[0] = True
    for t in range(4):
        engine.infer(obs[t], done[t], np.arange(ENVS), np.zeros(0, np.int64), obs[t, :0])
    # Env 1 was truncated at step 4: its final obs obs[4, 1] and the reset obs obs[5, 1].
    reset_obs = obs[5].copy()
    starts = np.zeros(ENVS, bool)
    starts[1] = True
    result = engine.infer(reset_obs, starts, np.arange(ENVS), np.array([1]), obs[4, 1:2])
    with torch.no_grad():
        out, _ = model(
            torch.from_numpy(obs[:5, 1:2]), torch.from_numpy(done[:5, 1:2]), model.initial_state(1)
        )
    assert result.truncation_value[1] == pytest.approx(float(out.baseline[4, 0]), abs=1e-6)
    assert np.count_nonzero(result.truncation_value) == 1


@pytest.mark.parametrize("batch", [3, 8, 11])
def test_compiled_forward_pads_batches_and_matches_eager(batch):
    """hardware.compile pads to power-of-two buckets; callers see exactly the eager results."""
    torch.manual_seed(0)
    model = ActorCriticNet((OBS_DIM,), ACTIONS, hidden_sizes=(8,), use_lstm=True, lstm_size=6)
    model.eval()
    eager = InferenceEngine(
        model, torch.device("cpu"), threading.Lock(), select=SampleFromPolicy(), seed=0
    )
    compiled = InferenceEngine(
        model,
        torch.device("cpu"),
        threading.Lock(),
        select=SampleFromPolicy(),
        seed=0,
        compile_mode="default",
    )
    rng = np.random.default_rng(batch)
    rows = rng.permutation(16)[:batch]
    trunc = np.array([0, batch - 1])
    for engine in (eager, compiled):
        engine.ensure_rows(16)
    for t in range(3):
        obs = rng.normal(size=(batch, OBS_DIM)).astype(np.float32)
        done = rng.random(batch) < 0.3
        final = rng.normal(size=(2, OBS_DIM)).astype(np.float32)
        a = eager.infer(obs, done, rows, trunc, final)
        b = compiled.infer(obs, done, rows, trunc, final)
        np.testing.assert_allclose(b.behaviour, a.behaviour, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(b.truncation_value, a.truncation_value, rtol=1e-5, atol=1e-5)
        for sa, sb in zip(a.input_state, b.input_state, strict=True):
            np.testing.assert_allclose(sb, sa, rtol=1e-5, atol=1e-5)
        assert b.actions.shape == (batch,), t
