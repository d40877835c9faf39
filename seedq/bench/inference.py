"""``seedq-bench inference``: the learner's batched forward pass alone.

Times :meth:`InferenceEngine.infer` (the exact call central inference makes: host arrays in,
state rows gathered and scattered, action selection, host arrays out) for each model at each
batch size, with the configured algorithm's own network and selector (the agent builds both)
and the ``hardware`` group's device, AMP, channels_last, pinned memory and compile switch.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import numpy as np
import torch

from seedq.agents.registry import agent_class
from seedq.bench.common import (
    BenchError,
    compose,
    positive_sizes,
    print_json,
    print_table,
    split_args,
)
from seedq.learner.inference import InferenceEngine
from seedq.messages import EnvSpec

OPTIONS = {
    "models": ["mlp", "nature", "impala"],
    "batch_sizes": [1, 16, 64, 256],
    "seconds": 1.0,  # per (model, batch size)
    "num_actions": 6,
}
# The observation each torso is benchmarked on: CartPole's vector, Atari's stacked frames.
OBS = {
    "mlp": ((4,), np.float32),
    "nature": ((4, 84, 84), np.uint8),
    "impala": ((4, 84, 84), np.uint8),
}


def time_engine(
    engine: InferenceEngine,
    obs_shape: tuple[int, ...],
    dtype: type,
    batch: int,
    seconds: float,
    epsilon: float | None = None,
) -> dict[str, float]:
    """Batches per second of ``engine.infer``; ``epsilon``: the per-env exploration rate for
    agents that act by one (None: they don't)."""
    rng = np.random.default_rng(0)
    if np.dtype(dtype) == np.uint8:
        obs = rng.integers(0, 255, (batch, *obs_shape), dtype=np.uint8)
    else:
        obs = rng.standard_normal((batch, *obs_shape)).astype(dtype)
    done = np.zeros(batch, bool)
    done[::7] = True
    rows = np.arange(batch, dtype=np.int64)
    engine.ensure_rows(batch)
    no_trunc = np.zeros(0, np.int64)
    no_final = obs[:0]
    eps = None if epsilon is None else np.full(batch, epsilon, np.float32)

    def call() -> None:
        engine.infer(obs, done, rows, no_trunc, no_final, eps)

    for _ in range(3):  # warm-up: allocator, cuDNN autotuning, compilation
        call()
    calls, start = 0, time.perf_counter()
    while True:
        call()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= 3:
            break
    return {"ms_per_batch": 1e3 * elapsed / calls, "samples_per_s": batch * calls / elapsed}


def run(argv: list[str]) -> dict[str, Any]:
    from seedq.learner.device import AMP_DTYPES, resolve_device

    options, overrides = split_args(argv, OPTIONS)
    cfg = compose(overrides)
    unknown = [m for m in options["models"] if m not in OBS]
    if unknown:
        raise BenchError(f"models={unknown}: choose from {list(OBS)}")
    positive_sizes("batch_sizes", options["batch_sizes"], "1,64,256")
    positive_sizes("num_actions", options["num_actions"], "6")
    hw, alg = cfg.hardware, cfg.algorithm
    device = resolve_device(hw.device)
    if hw.num_threads:
        torch.set_num_threads(hw.num_threads)
    torch.manual_seed(cfg.seed)
    rows, results = [], []
    for name in options["models"]:
        shape, dtype = OBS[name]
        model_cfg = dataclasses.replace(alg.model, torso=name)
        agent = agent_class(alg.name)
        spec = EnvSpec(shape, np.dtype(dtype).name, options["num_actions"])
        model = agent.build_model(
            spec, dataclasses.replace(alg, model=model_cfg), channels_last=hw.channels_last
        ).to(device)
        engine = InferenceEngine(
            model,
            device,
            threading.Lock(),
            select=agent.make_selector(alg),
            pin_memory=hw.pin_memory,
            amp_dtype=AMP_DTYPES[hw.amp],
            compile_mode=hw.compile,
        )
        label = name + ("+lstm" if model_cfg.use_lstm else "")
        for batch in options["batch_sizes"]:
            timing = time_engine(
                engine, shape, dtype, batch, options["seconds"], agent.default_epsilon(alg)
            )
            rows.append([label, batch, timing["ms_per_batch"], round(timing["samples_per_s"])])
            results.append(
                {"model": label, "batch": batch, **{k: round(v, 4) for k, v in timing.items()}}
            )
    print_table(
        f"inference: {alg.name} networks on {device} (amp {hw.amp}, channels_last "
        f"{hw.channels_last}, compile {hw.compile}, {torch.get_num_threads()} threads)",
        ["model", "batch", "ms/batch", "samples/s"],
        rows,
    )
    figures = {
        "algorithm": alg.name,
        "device": str(device),
        "amp": hw.amp,
        "compile": hw.compile,
        "results": results,
    }
    print_json("inference", figures)
    return figures
