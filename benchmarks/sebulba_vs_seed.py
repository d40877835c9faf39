"""``arch=sebulba`` vs ``arch=seed`` on Pong, same settings, one after the other, and the
machine's compute limit measured beside them.

    python benchmarks/sebulba_vs_seed.py [seconds=60] [warmup_s=15] [key=value ...]

Other ``key=value`` arguments are seedq-train overrides applied to every part (e.g.
``hardware=gpu``). Sebulba gets the SEED run's env layout: one actor thread per env batch
(``actor.num_actors x actor.batches_per_actor`` threads of ``actor.envs_per_batch`` envs).
The limit is ``1 / (1/raw-env + 1/inference + 1/train)`` env steps/s: every step is stepped,
inferred and (V-trace, on-policy) trained on once. Prints one JSON line last.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from seedq.agents.registry import build_agent
from seedq.bench import inference, raw_env, train
from seedq.bench.common import compose, frames_per_step, script_main, split_args
from seedq.core.agent import RunContext
from seedq.core.unroll import Unroll
from seedq.messages import EnvSpec

PONG = ["env=atari", "env.id=ALE/Pong-v5"]
OPTIONS = {"seconds": 60.0, "warmup_s": 15.0}


def train_samples_per_s(overrides: list[str], seconds: float = 10.0) -> float:
    """Forward + backward + optimizer step of the V-trace learner on Pong-shaped batches."""
    cfg = compose([*PONG, *overrides])
    spec = EnvSpec((4, 84, 84), "uint8", 6)
    device = torch.device(cfg.hardware.device)
    ctx = RunContext(cfg, spec, device, threading.Lock(), threading.Event())
    agent = build_agent(ctx)
    alg = cfg.algorithm
    t, b = alg.unroll_length + 1, alg.batch_size
    rng = np.random.default_rng(0)
    batch = Unroll(
        obs=rng.integers(0, 255, (t, b, *spec.obs_shape), dtype=np.uint8),
        reward=np.zeros((t, b), np.float32),
        done=np.zeros((t, b), bool),
        truncated=np.zeros((t, b), bool),
        truncation_value=np.zeros((t, b), np.float32),
        action=rng.integers(0, 6, (t, b)).astype(np.int32),
        behaviour=np.zeros((t, b, 6), np.float32),
        core_state=(),
        env_id=np.arange(b, dtype=np.int64),
    )
    agent.learner.train_step(batch)  # warm-up
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        agent.learner.train_step(batch)
        steps += 1
    return steps * (t - 1) * b / (time.perf_counter() - start)


def sebulba_runner(cfg: Any, run_dir: str) -> Any:
    from seedq.arch.sebulba import SebulbaRun

    actor = cfg.actor
    layout = SimpleNamespace(
        threads=actor.num_actors * actor.batches_per_actor, envs_per_thread=actor.envs_per_batch
    )
    arch = getattr(cfg, "arch", None)
    if arch is not None and hasattr(arch, "sebulba"):
        arch.sebulba.threads, arch.sebulba.envs_per_thread = layout.threads, layout.envs_per_thread
    else:  # before the arch group exists
        cfg.arch = SimpleNamespace(sebulba=layout)
    return SebulbaRun(cfg, run_dir)


def main(argv: list[str]) -> dict[str, Any]:
    options, overrides = split_args(argv, OPTIONS)
    timed = [f"seconds={options['seconds']}", f"warmup_s={options['warmup_s']}"]
    seed = train.run([*PONG, *timed, *overrides])
    sebulba = train.run([*PONG, *timed, *overrides], runner=sebulba_runner)
    raw = raw_env.run([*PONG, "seconds=10", *overrides])
    infer = inference.run([*PONG, "models=nature", "batch_sizes=16,64", "seconds=3", *overrides])
    trained = train_samples_per_s(overrides)
    inferred = max(r["samples_per_s"] for r in infer["results"])
    frames = frames_per_step(compose([*PONG, *overrides]))
    limit = frames / (1.0 / raw["env_steps_per_s"] + 1.0 / inferred + 1.0 / trained)
    figures = {
        "seed_frames_per_s": seed["frames_per_s"],
        "sebulba_frames_per_s": sebulba["frames_per_s"],
        "raw_env_steps_per_s": raw["env_steps_per_s"],
        "inference_samples_per_s": round(inferred, 1),
        "train_samples_per_s": round(trained, 1),
        "limit_frames_per_s": round(limit, 1),
        "seed_share_of_limit": round(seed["frames_per_s"] / limit, 3),
        "sebulba_share_of_limit": round(sebulba["frames_per_s"] / limit, 3),
    }
    print(json.dumps({"bench": "sebulba_vs_seed", **figures}), flush=True)
    return figures


if __name__ == "__main__":
    sys.exit(script_main(main, __doc__, sys.argv[1:]))
