"""``seedq-bench anakin``: arch=anakin's act-and-learn loop, env steps/s while learning per
``num_envs``, and (``mode=time-to-target``) the wall time to a 100-episode mean return per seed.

    seedq-bench anakin num_envs=256,1024,4096,16384 seconds=5
    seedq-bench anakin mode=time-to-target seeds=0,1,2 target=475 max_minutes=2

Throughput rows time whole iterations (T steps of every env, then the unroll's updates) after
one warm-up iteration. Time to target is the run's own ``time_to_target_s``: from the start of
training (env and model built) to the first metrics row whose 100-episode mean reaches it.
Any ``seedq-train`` override applies (``hardware=gpu``, ``algorithm.lr=...``).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from seedq.bench.common import (
    BenchError,
    check_not_stopped,
    compose,
    kept_dir,
    one_of,
    only_in_mode,
    positive_sizes,
    print_json,
    print_table,
    scratch_dir,
    split_args,
)

OPTIONS = {
    "num_envs": [256, 1024, 4096, 16384],
    "seconds": 5.0,
    "seeds": [0],
    "target": 475.0,
    "max_minutes": 2.0,
    "mode": "throughput",
}
MODES = ("throughput", "time-to-target")


def _throughput(num_envs: int, seconds: float, overrides: list[str]) -> dict[str, Any]:
    from seedq.arch.anakin import AnakinRun

    run_dir = scratch_dir("seedq-bench-anakin-")
    cfg = compose(["arch=anakin", f"arch.anakin.num_envs={num_envs}", *overrides], run_dir)
    run = AnakinRun(cfg, run_dir)
    run.train_iteration()  # warm-up: first allocations (and compilation)
    stats = run.agent.stats
    steps0, updates0, wait0, busy0 = run.stats.env_steps, stats.updates, stats.wait_s, stats.busy_s
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        run.train_iteration()
    dt = time.monotonic() - start
    acting, training = stats.wait_s - wait0, stats.busy_s - busy0
    return {
        "num_envs": num_envs,
        "unroll_length": run.unroll_length,
        "minibatches": cfg.arch.anakin.minibatches,
        "env_steps_per_s": round((run.stats.env_steps - steps0) / dt, 1),
        "updates_per_s": round((stats.updates - updates0) / dt, 2),
        "acting_frac": round(acting / (acting + training), 3),
    }


def _time_to_target(seed: int, options: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    from seedq.arch.anakin import AnakinRun

    with kept_dir("", "seedq-bench-anakin-") as run_dir:
        cfg = compose(
            [
                "arch=anakin",
                f"seed={seed}",
                f"stop_at_return={options['target']}",
                f"max_minutes={options['max_minutes']}",
                "total_env_steps=1000000000000",
                "log_interval_s=0.5",
                "checkpoint.every_minutes=0",
                *overrides,
            ],
            run_dir,
        )
        run = AnakinRun(cfg, run_dir)
        summary = run.run()
        check_not_stopped(run)  # the next seed would start; and kept_dir drops this run's dir
    return {
        "seed": seed,
        "time_to_target_s": summary.time_to_target_s,
        "env_steps": summary.env_steps,
        "updates": summary.updates,
        "env_steps_per_s": summary.steps_per_s,
        "return_mean": summary.return_mean,
        "run_dir": run_dir,
    }


def run(argv: list[str]) -> dict[str, Any]:
    options, overrides = split_args(argv, OPTIONS)
    one_of("mode", options["mode"], MODES)
    only_in_mode(
        argv,
        "mode",
        options["mode"],
        {
            "throughput": ("num_envs", "seconds"),
            "time-to-target": ("seeds", "target", "max_minutes"),
        },
    )
    # An empty list measured nothing and ended in a TypeError of the table.
    positive_sizes("num_envs", options["num_envs"], "256,1024")
    if not math.isfinite(options["target"]):
        # It goes on as stop_at_return=, and was refused by that name, a key never typed.
        raise BenchError(
            f"target={options['target']}: give the 100-episode mean return to reach as a "
            "number, e.g. target=475"
        )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if options["mode"] == "time-to-target":
        rows = [_time_to_target(seed, options, overrides) for seed in options["seeds"]]
        columns = {
            "seed": "seed",
            "time to target (s)": "time_to_target_s",
            "env steps": "env_steps",
            "updates": "updates",
            "env steps/s": "env_steps_per_s",
            "return": "return_mean",
        }
        title = f"anakin: wall time to a 100-episode mean of {options['target']:g}"
        figures = {"mode": "time-to-target", "target": options["target"], "runs": rows}
    else:
        rows = [_throughput(n, options["seconds"], overrides) for n in options["num_envs"]]
        columns = {
            "num_envs": "num_envs",
            "T": "unroll_length",
            "updates/unroll": "minibatches",
            "env steps/s": "env_steps_per_s",
            "updates/s": "updates_per_s",
            "acting share": "acting_frac",
        }
        title = f"anakin: env steps/s while learning, {options['seconds']:g} s per row"
        figures = {"mode": "throughput", "rows": rows}
    print_table(title, list(columns), [[row[key] for key in columns.values()] for row in rows])
    print_json("anakin", figures)
    return figures
