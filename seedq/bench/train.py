"""``seedq-bench train``: the real training loop (actors, broker, inference, learner) for S s.

Any ``seedq-train`` override applies (``env=atari algorithm=r2d2 hardware=gpu ...``). Figures
come from the run's own metrics rows after the first ``warmup_s`` seconds (process start-up,
first unrolls), so they describe the steady state.
"""

from __future__ import annotations

import csv
import logging
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from seedq.agents.registry import agent_class
from seedq.bench.common import (
    BenchError,
    check_not_stopped,
    compose,
    frames_per_step,
    kept_dir,
    print_json,
    print_table,
    split_args,
)
from seedq.bench.threads import ThreadSampler

OPTIONS = {"seconds": 20.0, "warmup_s": 5.0, "run_dir": ""}


def _mean(rows: list[dict], key: str) -> float | None:
    values = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    values = [v for v in values if math.isfinite(v)]
    return float(np.mean(values)) if values else None


def run(argv: list[str], runner: Callable[[Any, str], Any] | None = None) -> dict[str, Any]:
    """``runner(cfg, run_dir)``: the run to time (default ``SeedRun``; benchmarks/
    sebulba_vs_seed.py passes ``SebulbaRun``)."""
    from seedq.arch.seed import SeedRun

    options, overrides = split_args(argv, OPTIONS)
    with kept_dir(options["run_dir"], "seedq-bench-train-") as run_dir:
        figures = _train(options, overrides, run_dir, runner or SeedRun)
    print_json("train", figures)
    return figures


def _train(
    options: dict[str, Any], overrides: list[str], run_dir: str, runner: Callable[[Any, str], Any]
) -> dict[str, Any]:
    seconds, warmup_s = options["seconds"], options["warmup_s"]
    cfg = compose(
        [
            f"max_minutes={(seconds + warmup_s) / 60}",
            "total_env_steps=1000000000000",
            "log_interval_s=1",
            "checkpoint.every_minutes=0",
            *overrides,
        ],
        run_dir=run_dir,
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    run = runner(cfg, run_dir)
    # The run's clock starts as run() starts its roles, within a few ms of the sampler's.
    with ThreadSampler() as sampler:
        summary = run.run()
    check_not_stopped(run)
    if summary.stop_reason != "max_minutes" or summary.wall_time_s < seconds + warmup_s - 1:
        # An override that stops the run early (total_env_steps, stop_at_return, a shorter
        # max_minutes): a RuntimeError traceback without a row after the warm-up, or figures
        # of whatever rows were left, labelled "0 s after a 1 s warm-up".
        raise BenchError(
            f"the run stopped ({summary.stop_reason}) after {summary.wall_time_s:.1f} s and "
            f"{summary.env_steps} env steps, before its {warmup_s:g} s warm-up and {seconds:g} s "
            "measured were over; drop the override that stopped it (seedq-bench train sets "
            "total_env_steps and max_minutes itself)"
        )
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = [r for r in csv.DictReader(f) if float(r["wall_time"]) > warmup_s]
    if not rows:
        raise BenchError(f"the run wrote no metrics row after the {warmup_s:g} s warm-up")
    first, last = rows[0], rows[-1]
    dt = float(last["wall_time"]) - float(first["wall_time"])
    steps = (
        (int(last["env_steps"]) - int(first["env_steps"])) / dt
        if dt > 0
        else _mean(rows, "steps_per_s")
    )
    updates = (
        (float(last["train/updates"]) - float(first["train/updates"])) / dt
        if dt > 0
        else _mean(rows, "train/updates_per_s")
    )
    frames = frames_per_step(cfg)
    alg = cfg.algorithm
    samples_per_update = agent_class(alg.name).samples_per_update(alg)
    figures = {
        "algorithm": alg.name,
        "env": cfg.env.id,
        "device": cfg.hardware.device,
        "actor_envs": cfg.actor.num_actors * cfg.actor.batches_per_actor * cfg.actor.envs_per_batch,
        "seconds": round(dt, 1),
        "env_steps_per_s": round(steps, 1),
        "frames_per_s": round(steps * frames, 1),
        "updates_per_s": round(updates, 3),
        "trained_samples_per_s": round(updates * samples_per_update, 1),
        "batch_fill": _mean(rows, "perf/batch_fill"),
        "learner_wait_frac": _mean(rows, "perf/learner_wait_frac"),
        "return_mean": summary.return_mean,
        "run_dir": run_dir,
    }
    # The learner process's cores by thread over the same window (the actors are processes
    # of their own, or Sebulba's threads here).
    cores = sampler.cores_between(float(first["wall_time"]), float(last["wall_time"]))
    figures.update({f"cpu_{name}": value for name, value in cores.items()})
    print_table(
        f"train: {alg.name} on {cfg.env.id} ({cfg.hardware.device}), {figures['actor_envs']} "
        f"actor envs, {dt:.3g} s after a {warmup_s:g} s warm-up",
        ["env steps/s", "frames/s", "updates/s", "batch fill", "learner waits"],
        [
            [
                figures["env_steps_per_s"],
                figures["frames_per_s"],
                figures["updates_per_s"],
                figures["batch_fill"],
                figures["learner_wait_frac"],
            ]
        ],
    )
    if cores:
        print_table(
            "learner process: CPU by thread (cores; native = torch's, ZeroMQ's, the driver's)",
            list(cores),
            [list(cores.values())],
        )
    return figures
