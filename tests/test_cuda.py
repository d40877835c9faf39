"""seedq on a CUDA device: every agent under every architecture it runs, autocast, each compile
mode of the inference forward, pinned uploads, and learner ranks over NCCL.

All marked ``cuda``: skipped on machines without a CUDA device (tests/conftest.py);
``scripts/gpu_check.sh`` runs them (``pytest -m cuda``) on a GPU machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from test_arch_agents import ALGORITHM, ARCH, CASES, COMMON, fits

from seedq.agents.registry import agent_class
from seedq.arch import run_class
from seedq.bench.common import compose
from seedq.core.tensors import to_device
from seedq.learner.inference import InferenceEngine
from seedq.messages import EnvSpec

pytestmark = pytest.mark.cuda
CUDA = ["hardware=gpu"]
TREE = str(Path(__file__).resolve().parents[1])


def short_run(tmp_path: Path, *overrides: str):
    cfg = compose([*COMMON, *CUDA, *overrides], run_dir=str(tmp_path))
    run = run_class(cfg.arch.name)(cfg, str(tmp_path))
    return run, run.run()


@pytest.mark.parametrize(("algorithm", "arch"), [c for c in CASES if fits(*c)])
def test_every_agent_trains_on_cuda_under_each_architecture_it_runs(tmp_path, algorithm, arch):
    overrides = [f"algorithm={algorithm}", f"arch={arch}", *ARCH[arch], *ALGORITHM[algorithm]]
    run, summary = short_run(tmp_path, *overrides)
    assert summary.updates > 0, summary
    assert all(p.is_cuda for p in run.agent.model.parameters())


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
@pytest.mark.parametrize("algorithm", ["vtrace", "r2d2"])
def test_autocast_trains_without_skipping_updates(tmp_path, amp, algorithm):
    overrides = [f"algorithm={algorithm}", "arch=seed", *ARCH["seed"], *ALGORITHM[algorithm]]
    run, summary = short_run(tmp_path, *overrides, f"hardware.amp={amp}")
    assert summary.updates > 0
    assert run.agent.stats.skipped_updates <= summary.updates // 10


def engine(mode: str, model: torch.nn.Module, alg) -> InferenceEngine:
    selector = agent_class("vtrace").make_selector(alg, greedy=True)
    return InferenceEngine(
        model, torch.device("cuda"), threading.Lock(), select=selector, compile_mode=mode
    )


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_each_compile_mode_acts_as_the_eager_forward_does(mode):
    alg = compose(["algorithm=vtrace"]).algorithm
    spec = EnvSpec((4,), "float32", 2)
    model = agent_class("vtrace").build_model(spec, alg, channels_last=True).cuda()
    eager, compiled = engine("none", model, alg), engine(mode, model, alg)
    rng = np.random.default_rng(0)
    for batch in (3, 8, 20):  # padded to 8, 8 and 32 rows
        obs = rng.standard_normal((batch, 4)).astype(np.float32)
        args = (np.zeros(batch, bool), np.arange(batch), np.zeros(0, np.int64), obs[:0])
        for e in (eager, compiled):
            e.ensure_rows(batch)
        want, got = eager.infer(obs, *args), compiled.infer(obs, *args)
        np.testing.assert_array_equal(got.actions, want.actions)
        np.testing.assert_allclose(got.behaviour, want.behaviour, rtol=1e-3, atol=1e-4)


def test_pinned_uploads_arrive_whole():
    array = np.arange(4096, dtype=np.float32).reshape(64, 64)
    tensor = to_device(array, torch.device("cuda"), pin_memory=True)
    torch.cuda.synchronize()
    assert tensor.is_cuda and torch.equal(tensor.cpu(), torch.from_numpy(array))


def test_anakin_steps_its_envs_on_the_gpu(tmp_path):
    run, summary = short_run(tmp_path, "arch=anakin", *ARCH["anakin"])
    assert summary.updates > 0
    assert run.device.type == "cuda"
    assert all(p.is_cuda for p in run.agent.model.parameters())


@pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.device_count() < 2, reason="needs 2 or more GPUs"
)
def test_two_learner_ranks_over_nccl_end_with_identical_weights(tmp_path):
    overrides = ["algorithm=vtrace", "arch=sebulba", *ARCH["sebulba"], *ALGORITHM["vtrace"]]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "seedq.cli",
            *COMMON,
            *CUDA,
            *overrides,
            "hardware.learners=2",
            f"hydra.run.dir={tmp_path}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": TREE},
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 learner ranks (nccl, cuda)" in result.stdout
    assert "weights identical on all 2 learner ranks" in result.stdout


def test_a_rank_s_config_names_its_own_gpu():
    from seedq.parallel.ranks import RankInfo, rank_config

    cfg = compose(CUDA)
    info = RankInfo(1, 2, 1, 2, "127.0.0.1", 29500, "test")
    mine = rank_config(cfg, info, torch.cuda.device_count())
    expected = "cuda:0" if torch.cuda.device_count() == 1 else "cuda:1"
    assert mine.hardware.device == expected
