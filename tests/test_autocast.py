"""Recurrent state under autocast, tested on the CPU (issue 34).

CUDA's autocast runs ``lstm_cell`` in the autocast dtype, so an LSTM core hands back its state
in bf16 or fp16; CPU autocast leaves ``lstm_cell`` in fp32, so a plain CPU run never sees a
low-precision state. :class:`CudaLikeLSTMCell` does on the CPU what CUDA's autocast does to the
cell's outputs, and with it these tests catch on any machine what only a GPU showed before:
R2D2 with ``hardware.amp=bf16`` crashed at its first inference storing that state.
"""

import threading

import numpy as np
import pytest
import torch
from test_learner_glue import ACTIONS, OBS, r2d2_config, r2d2_sample

from seedq.agents.common.update import Placement
from seedq.agents.r2d2.acting import EpsilonGreedy
from seedq.agents.r2d2.learner import R2D2Learner
from seedq.agents.r2d2.network import RecurrentQNet
from seedq.learner.inference import InferenceEngine

ENVS, LSTM = 5, 6
CPU = torch.device("cpu")
AMP = [torch.bfloat16, torch.float16]


class CudaLikeLSTMCell(torch.nn.LSTMCell):
    """``nn.LSTMCell`` whose outputs come out in the autocast dtype, as on CUDA."""

    def forward(self, x, hx):  # noqa: ANN001, ANN201
        h, c = super().forward(x, hx)
        if torch.is_autocast_enabled("cpu"):
            dtype = torch.get_autocast_dtype("cpu")
            return h.to(dtype), c.to(dtype)
        return h, c


def cuda_like_q_net(lstm: int = LSTM, seed: int = 0) -> RecurrentQNet:
    torch.manual_seed(seed)
    model = RecurrentQNet(
        (OBS,), ACTIONS, hidden_sizes=(8,), use_lstm=True, lstm_size=lstm, head_size=8
    )
    cell = CudaLikeLSTMCell(model.core.input_size, lstm)
    cell.load_state_dict(model.core.state_dict())
    model.core = cell
    return model


def engine_for(model: torch.nn.Module, amp: torch.dtype) -> InferenceEngine:
    engine = InferenceEngine(
        model, CPU, threading.Lock(), select=EpsilonGreedy(1e-3), seed=0, amp_dtype=amp
    )
    engine.ensure_rows(ENVS)
    return engine


def test_the_stand_in_cell_gives_a_low_precision_state_as_cuda_does():
    model = cuda_like_q_net()
    obs = torch.zeros(1, ENVS, OBS)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, (h, c) = model(obs, torch.zeros(1, ENVS, dtype=torch.bool), model.initial_state(ENVS))
    assert h.dtype == c.dtype == torch.bfloat16


@pytest.mark.parametrize("amp", AMP)
def test_inference_under_autocast_keeps_the_state_in_the_models_dtype(amp):
    model = cuda_like_q_net()
    engine = engine_for(model, amp)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, ENVS, OBS)).astype(np.float32)
    done = np.zeros((4, ENVS), bool)
    done[0] = True
    rows, none = np.arange(ENVS), np.zeros(0, np.int64)
    eps = np.zeros(ENVS, np.float32)
    results = [engine.infer(obs[t], done[t], rows, none, obs[t, :0], eps) for t in range(3)]
    # Env 2 is truncated at the last step: its final observation goes through the model too.
    results.append(engine.infer(obs[3], done[3], rows, np.array([2]), obs[3, 2:3], eps))

    with torch.no_grad(), torch.autocast("cpu", dtype=amp):
        state = model.initial_state(ENVS)
        for t in range(3):
            _, state = model(
                torch.from_numpy(obs[t : t + 1]), torch.from_numpy(done[t : t + 1]), state
            )
    stored = results[3].input_state
    assert all(s.dtype == np.float32 for s in stored)
    for got, want in zip(stored, state, strict=True):
        # The table carries the state at fp32 between steps, the model's own loop in the
        # autocast dtype: equal to that dtype's precision.
        np.testing.assert_allclose(got, want.float().numpy(), atol=1e-2)
    assert results[3].truncation_value[2] != 0


@pytest.mark.parametrize("amp", AMP)
def test_r2d2_burn_in_under_autocast_trains_from_a_low_precision_state(amp):
    cfg = r2d2_config()
    model = cuda_like_q_net(lstm=cfg.model.lstm_size)
    learner = R2D2Learner(model, cfg, Placement(CPU, threading.Lock(), amp_dtype=amp))
    before = [p.detach().clone() for p in model.parameters()]
    priorities = learner.train_step(r2d2_sample())
    assert priorities is not None and np.isfinite(priorities).all()
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
