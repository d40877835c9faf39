"""``seedq-bench inference``: the learner's batched forward pass alone.

Times :meth:`InferenceEngine.infer` (the exact call central inference makes: host arrays in,
state rows gathered and scattered, action selection, host arrays out) for each model at each
batch size, with the configured algorithm's own network and selector (the agent builds both)
and the ``hardware`` group's device, AMP, channels_last, pinned memory and compile switch.

Each torso reads its own observation (:data:`OBS`); the actions are the configured env's, as a
training run builds them: a continuous env (``env=mujoco``, ``env=gym env.id=Pendulum-v1``)
gets its Box's length and bounds (SAC, PPO's Gaussian head), a discrete one ``num_actions``.
A torso the algorithm does not build (SAC's are MLPs) is left out of the default ``models``
and refused when named.
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
from seedq.config import ConfigError, validate
from seedq.envs.registry import env_spec
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


def with_torso(cfg: Any, torso: str) -> Any:
    """``cfg`` with ``algorithm.model.torso=torso``."""
    model = dataclasses.replace(cfg.algorithm.model, torso=torso)
    return dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, model=model))


def refusal(cfg: Any, torso: str) -> str:
    """Why the config refuses ``algorithm.model.torso=torso`` ('' where it builds it): SAC's
    network is an MLP whatever the torso, and was timed on frames under the torso's name."""
    try:
        validate(with_torso(cfg, torso))
    except ConfigError as exc:
        return str(exc)
    return ""


def chosen_models(argv: list[str], options: dict[str, Any], cfg: Any) -> list[str]:
    """The torsos to time: those named (each one the algorithm builds), or by default those of
    :data:`OBS` it builds."""
    unknown = [m for m in options["models"] if m not in OBS]
    if unknown:
        raise BenchError(f"models={unknown}: choose from {list(OBS)}")
    reasons = {m: refusal(cfg, m) for m in OBS}
    buildable = [m for m in OBS if not reasons[m]]
    named = any(arg.startswith("models=") for arg in argv)
    models = options["models"] if named else [m for m in options["models"] if m in buildable]
    name = cfg.algorithm.name
    if not models:
        raise BenchError(f"algorithm={name} builds none of models={','.join(OBS)}")
    refused = next((m for m in models if reasons[m]), None)
    if refused is not None:
        raise BenchError(
            f"models={refused}: algorithm={name} cannot build it ({reasons[refused]}); it can "
            f"time models={','.join(buildable)}"
        )
    return models


def action_spec(argv: list[str], options: dict[str, Any], cfg: Any) -> EnvSpec:
    """The configured env's actions (its observation is left to each torso): a continuous
    env's Box as it is, ``num_actions`` of a discrete one."""
    env = env_spec(cfg.env, seed=cfg.seed)
    if not env.continuous:
        return EnvSpec((), "float32", options["num_actions"])
    if any(arg.startswith("num_actions=") for arg in argv):
        raise BenchError(
            f"num_actions={options['num_actions']} sets a discrete action count; "
            f"env.id={cfg.env.id} has continuous actions ({env.num_actions} values, the network's "
            "head takes them from the env): leave num_actions out"
        )
    return env


def run(argv: list[str]) -> dict[str, Any]:
    from seedq.learner.device import AMP_DTYPES, resolve_device

    options, overrides = split_args(argv, OPTIONS)
    cfg = compose(overrides)
    positive_sizes("batch_sizes", options["batch_sizes"], "1,64,256")
    positive_sizes("num_actions", options["num_actions"], "6")
    models = chosen_models(argv, options, cfg)
    actions = action_spec(argv, options, cfg)
    hw, alg = cfg.hardware, cfg.algorithm
    device = resolve_device(hw.device)
    if hw.num_threads:
        torch.set_num_threads(hw.num_threads)
    torch.manual_seed(cfg.seed)
    rows, results = [], []
    for name in models:
        shape, dtype = OBS[name]
        torso_alg = with_torso(cfg, name).algorithm
        agent = agent_class(alg.name)
        spec = dataclasses.replace(actions, obs_shape=shape, obs_dtype=np.dtype(dtype).name)
        model = agent.build_model(spec, torso_alg, channels_last=hw.channels_last).to(device)
        engine = InferenceEngine(
            model,
            device,
            threading.Lock(),
            select=agent.make_selector(alg),
            pin_memory=hw.pin_memory,
            amp_dtype=AMP_DTYPES[hw.amp],
            compile_mode=hw.compile,
        )
        label = name + ("+lstm" if torso_alg.model.use_lstm else "")
        for batch in options["batch_sizes"]:
            timing = time_engine(
                engine, shape, dtype, batch, options["seconds"], agent.default_epsilon(alg)
            )
            rows.append([label, batch, timing["ms_per_batch"], round(timing["samples_per_s"])])
            results.append(
                {"model": label, "batch": batch, **{k: round(v, 4) for k, v in timing.items()}}
            )
    kind = "continuous" if actions.continuous else "discrete"
    shown = f"{kind}[{actions.num_actions}]"
    print_table(
        f"inference: {alg.name} networks, {shown} actions, on {device} (amp {hw.amp}, "
        f"channels_last {hw.channels_last}, compile {hw.compile}, "
        f"{torch.get_num_threads()} threads)",
        ["model", "batch", "ms/batch", "samples/s"],
        rows,
    )
    figures = {
        "algorithm": alg.name,
        "actions": shown,
        "device": str(device),
        "amp": hw.amp,
        "compile": hw.compile,
        "results": results,
    }
    print_json("inference", figures)
    return figures
