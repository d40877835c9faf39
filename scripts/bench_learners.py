"""1 vs N learner ranks side by side: time to a target return and throughput, one session.

    python scripts/bench_learners.py [--ranks 1,2] [--seeds 0,1,2] [--target 475]
        [--minutes 4] [--throughput-s 45] [-- seedq overrides...]

For each seed, each rank count runs ``seedq-train`` to ``--target`` (alternating, so a busy
neighbour hurts both alike), then each runs ``--throughput-s`` seconds without a target. Prints
a table and one JSON line per run (``summary.json`` plus the wall time including start-up).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def train(run_dir: Path, ranks: int, overrides: list[str]) -> dict:
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "seedq.cli",
            f"hardware.learners={ranks}",
            f"hydra.run.dir={run_dir}",
            "checkpoint.every_minutes=0",
            *overrides,
        ],
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    summary = json.loads((run_dir / "summary.json").read_text()) if done.returncode == 0 else {}
    return {"ranks": ranks, "exit": done.returncode, "wall_s": round(wall, 1), **summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--target", type=float, default=475)
    parser.add_argument("--minutes", type=float, default=4)
    parser.add_argument("--throughput-s", type=float, default=45)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    root = Path(tempfile.mkdtemp(prefix="seedq-bench-learners-"))
    rows = []
    for seed in args.seeds.split(","):
        for n in ranks:
            overrides = [
                f"seed={seed}",
                f"stop_at_return={args.target}",
                f"max_minutes={args.minutes}",
                *args.overrides,
            ]
            rows.append(
                {"kind": "to_target", "seed": int(seed)}
                | train(root / f"target-{seed}-{n}", n, overrides)
            )
            print(json.dumps(rows[-1]), flush=True)
    for n in ranks:
        overrides = [
            "total_env_steps=1000000000",
            f"max_minutes={args.throughput_s / 60}",
            *args.overrides,
        ]
        rows.append({"kind": "throughput"} | train(root / f"throughput-{n}", n, overrides))
        print(json.dumps(rows[-1]), flush=True)
    print(
        f"\n{'kind':<11} {'ranks':>5} {'seed':>4} {'to target s':>11} {'wall s':>7} "
        f"{'env steps':>10} {'steps/s':>9} {'updates':>8} {'return':>7}"
    )
    for r in rows:
        target = r.get("time_to_target_s")
        print(
            f"{r['kind']:<11} {r['ranks']:>5} {r.get('seed', ''):>4} "
            f"{'-' if target is None else target:>11} {r['wall_s']:>7} "
            f"{r.get('env_steps', 0):>10} {r.get('steps_per_s', 0):>9} {r.get('updates', 0):>8} "
            f"{r.get('return_mean') or 0:>7.1f}"
        )


if __name__ == "__main__":
    main()
