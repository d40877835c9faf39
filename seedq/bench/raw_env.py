"""``seedq-bench raw-env``: the environment's own ceiling, with the actors' vectorisation.

``actor.num_actors`` processes each step ``actor.batches_per_actor`` batches of
``actor.envs_per_batch`` envs (exactly what a training run's actors build) with random actions
and nothing else: no sockets, no model. Training can approach this figure, never pass it.
A continuous env's random actions are float32 vectors drawn within its Box's bounds.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from seedq.bench.common import (
    BenchError,
    compose,
    frames_per_step,
    gather,
    print_json,
    print_table,
    split_args,
)
from seedq.envs import env_config
from seedq.envs.base import env_spec_of
from seedq.messages import EnvSpec

OPTIONS = {"seconds": 5.0, "warmup_s": 1.0}
# How long an env process waits for the others to build their envs (ROMs, gfootball's engine).
READY_TIMEOUT_S = 300.0


def random_actions(spec: EnvSpec, num_envs: int, rng: np.random.Generator) -> np.ndarray:
    """One random action per env, as ``spec``'s envs take them: int64 indices ``[num_envs]``,
    or float32 vectors ``[num_envs, D]`` drawn uniformly within the Box's bounds. An unbounded
    side is taken 2 from the other (``[-1, 1]`` where both are): any value is valid there."""
    if not spec.continuous:
        return rng.integers(0, spec.num_actions, num_envs, dtype=np.int64)
    low, high = (np.array(b, np.float64) for b in (spec.action_low, spec.action_high))
    low = np.where(np.isfinite(low), low, np.where(np.isfinite(high), high - 2.0, -1.0))
    high = np.where(np.isfinite(high), high, low + 2.0)
    return rng.uniform(low, high, (num_envs, spec.num_actions)).astype(np.float32)


def step_batches(
    env_cfg: dict,
    num_batches: int,
    envs_per_batch: int,
    seed: int,
    first_batch: int,
    seconds: float,
    warmup_s: float,
    ready: Any = None,
) -> dict[str, float]:
    """Step ``num_batches`` env batches round-robin for ``seconds`` after a warm-up.

    ``ready``: a barrier the env processes wait at with their envs built and reset, so they
    warm up and measure over the same seconds. Without it each window began when its own
    process had started (0.2-0.5 s apart on a loaded 2-core box), and the rates the total
    sums were partly measured with fewer processes stepping at once: too high.
    """
    from seedq.envs import make_env_batch

    cfg = env_config(env_cfg)
    envs = [
        make_env_batch(cfg, envs_per_batch, seed=seed + 1000 * b, env_offset=b * envs_per_batch)
        for b in range(first_batch, first_batch + num_batches)
    ]
    try:
        rng = np.random.default_rng(seed)
        # A pool of random action arrays, so drawing actions costs nothing measurable.
        spec = env_spec_of(envs[0])
        pool = [random_actions(spec, envs_per_batch, rng) for _ in range(64)]
        for env in envs:
            env.reset(seed=seed)
        if ready is not None:
            ready.wait(timeout=READY_TIMEOUT_S)
        steps, i = 0, 0
        start = time.perf_counter()
        measured_from, measured_steps = None, 0
        while True:
            now = time.perf_counter()
            if measured_from is None and now - start >= warmup_s:
                measured_from, measured_steps = now, steps
            if measured_from is not None and now - measured_from >= seconds:
                break
            for env in envs:
                env.step(pool[i % len(pool)])
                i += 1
            steps += num_batches * envs_per_batch
        return {"env_steps": steps - measured_steps, "seconds": now - measured_from}
    finally:
        for env in envs:
            env.close()


def _worker(args: tuple, results: Any) -> None:
    try:
        results.put(("ok", args[4], step_batches(*args)))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        results.put(("error", args[4], f"{type(exc).__name__}: {exc}"))
        args[-1].abort()  # the others, waiting at the barrier, fail after this report


def run(argv: list[str]) -> dict[str, Any]:
    options, overrides = split_args(argv, OPTIONS)
    cfg = compose(overrides)
    actor = cfg.actor
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    ready = ctx.Barrier(actor.num_actors)
    procs = []
    for p in range(actor.num_actors):
        args = (
            asdict(cfg.env),
            actor.batches_per_actor,
            actor.envs_per_batch,
            cfg.seed,
            p * actor.batches_per_actor,
            options["seconds"],
            options["warmup_s"],
            ready,
        )
        proc = ctx.Process(target=_worker, args=(args, results), daemon=True)
        proc.start()
        procs.append(proc)
    outcomes = None
    try:
        limit = READY_TIMEOUT_S + options["seconds"] + options["warmup_s"] + 120
        outcomes = gather(results, procs, limit, "an env process")
    finally:
        for proc in procs:
            if outcomes is None:  # Ctrl-C, SIGTERM: the others would step on to their end
                proc.terminate()
            proc.join(timeout=10)
    errors = [message for status, _, message in outcomes if status == "error"]
    if errors:
        raise BenchError(f"an env process failed: {errors[0]}")
    per_process = [figures for _, _, figures in sorted(outcomes, key=lambda o: o[1])]
    frames = frames_per_step(cfg)
    rates = [f["env_steps"] / f["seconds"] for f in per_process]
    rows = [[f"process {i}", round(r), round(r * frames)] for i, r in enumerate(rates)]
    total = float(sum(rates))
    rows.append(["total", round(total), round(total * frames)])
    layout = (
        f"{actor.num_actors} processes x {actor.batches_per_actor} batches x "
        f"{actor.envs_per_batch} envs"
    )
    print_table(
        f"raw-env: {cfg.env.kind} {cfg.env.id}, {layout}, random actions, {options['seconds']:g} s",
        ["", "env steps/s", "frames/s"],
        rows,
    )
    figures = {
        "env": cfg.env.id,
        "kind": cfg.env.kind,
        "num_actors": actor.num_actors,
        "batches_per_actor": actor.batches_per_actor,
        "envs_per_batch": actor.envs_per_batch,
        "env_steps_per_s": round(total, 1),
        "frames_per_s": round(total * frames, 1),
        "per_process_steps_per_s": [round(r, 1) for r in rates],
    }
    print_json("raw-env", figures)
    return figures
