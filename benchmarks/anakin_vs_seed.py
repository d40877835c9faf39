"""``arch=anakin`` vs ``arch=seed`` with each one's defaults, on every env that has a tensor
implementation and every algorithm Anakin runs, one after the other with the same wall budget.

    python benchmarks/anakin_vs_seed.py [seconds=60] [seeds=0,1] [key=value ...]

For each (env id, algorithm, seed) it runs what a user would type, ``seedq-train env=gym
env.id=X algorithm=A`` and the same with ``arch=anakin``, until the env's target (gymnasium's
``reward_threshold``; ``target=`` overrides) or the budget, and prints the time and env steps to
the target, the 100-episode mean at the end and env steps/s. The env ids and algorithms come from
the registries (nothing is named here), so a new tensor env or algorithm is measured the day it
is registered. Other ``key=value`` arguments are seedq-train overrides for both runs. Prints one
JSON line last.
"""

from __future__ import annotations

import logging
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from seedq.agents.registry import AGENTS, config_class
from seedq.arch import run_class
from seedq.arch.config import ARCH_NEEDS
from seedq.bench.common import (
    BenchError,
    compose,
    print_json,
    print_table,
    script_main,
    split_args,
)

OPTIONS = {"seconds": 60.0, "seeds": [0], "target": None, "envs": [], "algorithms": []}


def target_of(raw: str | None) -> float | None:
    """``target=``'s return as a number (None: each env's own): a word went on as
    ``stop_at_return=abc`` and was refused by that name, a key the user never typed."""
    if raw is None:
        return None
    try:
        target = float(raw)
    except ValueError:
        target = math.nan
    if not math.isfinite(target):
        raise BenchError(
            f"target={raw}: give the 100-episode mean return to reach as a number, e.g. "
            "target=475 (leave it out for each env's gymnasium reward_threshold)"
        )
    return target


def reward_threshold(env_id: str) -> float | None:
    import gymnasium

    return gymnasium.spec(env_id).reward_threshold


def env_overrides(env_id: str) -> list[str]:
    """What a user types for ``env_id``: the env group whose default id it is (``env=cartpole``
    for CartPole-v1, so its presets apply), else ``env=gym env.id=...``."""
    import seedq.conf

    groups = sorted(p.stem for p in (Path(seedq.conf.__file__).parent / "env").glob("*.yaml"))
    for group in groups:
        try:
            if compose([f"env={group}"]).env.id == env_id:
                return [f"env={group}"]
        except Exception:  # noqa: BLE001 - a group that needs an optional package
            continue
    return ["env=gym", f"env.id={env_id}"]


def one_run(arch: str, env_id: str, algorithm: str, seed: int, target: float, options: dict,
            overrides: list[str]) -> dict[str, Any]:  # fmt: skip
    run_dir = tempfile.mkdtemp(prefix=f"seedq-{arch}-")
    cfg = compose(
        [
            f"arch={arch}",
            *env_overrides(env_id),
            f"algorithm={algorithm}",
            f"seed={seed}",
            f"stop_at_return={target}",
            f"max_minutes={options['seconds'] / 60}",
            "total_env_steps=1000000000000",
            "log_interval_s=1",
            "checkpoint.every_minutes=0",
            *overrides,
        ],
        run_dir,
    )
    summary = run_class(arch)(cfg, run_dir).run()
    return {
        "arch": arch,
        "env": env_id,
        "algorithm": algorithm,
        "seed": seed,
        "target": target,
        "time_to_target_s": summary.time_to_target_s,
        "env_steps": summary.env_steps,
        "return_mean": None if summary.return_mean is None else round(summary.return_mean, 1),
        "env_steps_per_s": summary.steps_per_s,
        "run_dir": run_dir,
    }


def main(argv: list[str]) -> None:
    from seedq.envs.tensor import tensor_env_ids

    options, overrides = split_args(argv, OPTIONS)
    options["target"] = target_of(options["target"])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    envs = options["envs"] or tensor_env_ids()
    algorithms = options["algorithms"] or [
        name for name in AGENTS if not set(ARCH_NEEDS["anakin"]) & set(config_class(name).cannot)
    ]
    rows = []
    for env_id in envs:
        target = options["target"] if options["target"] is not None else reward_threshold(env_id)
        for algorithm in algorithms:
            for seed in options["seeds"]:
                for arch in ("seed", "anakin"):
                    rows.append(one_run(arch, env_id, algorithm, seed, target, options, overrides))
                    print(rows[-1], file=sys.stderr, flush=True)
    print_table(
        f"arch=anakin vs arch=seed, defaults, {options['seconds']:g} s budget each",
        ["env", "algorithm", "seed", "arch", "target", "time to target (s)", "env steps",
         "return at end", "env steps/s"],
        [[r["env"], r["algorithm"], r["seed"], r["arch"], r["target"], r["time_to_target_s"],
          r["env_steps"], r["return_mean"], r["env_steps_per_s"]] for r in rows],
    )  # fmt: skip
    print_json("anakin_vs_seed", {"seconds": options["seconds"], "rows": rows})


if __name__ == "__main__":
    sys.exit(script_main(main, __doc__, sys.argv[1:]))
