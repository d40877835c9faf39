"""Every algorithm with its default settings on a fixed set of envs: the defaults table of
benchmarks/RESULTS.md.

    python scripts/defaults_table.py                       # the whole table (about 1.5 h here)
    python scripts/defaults_table.py --only ppo:minatar    # rows whose name contains a string
    python scripts/defaults_table.py --table-only          # re-print the table from runs/defaults

Each row is one plain ``seedq-train algorithm=<alg> env=<family> [env.id=<id>]``: no per-env
flag, only the budget (``total_env_steps`` and ``max_minutes``) and ``stop_at_return`` at the
env's published solve threshold, where one exists, so a run that solves its env ends there. A
combination the algorithm cannot run (R2D2 or V-trace on a continuous env, SAC on a discrete
one) is refused by seedq at start-up: its row shows that refusal.
Runs go one after another into ``runs/defaults/<algorithm>_<env>``; a finished run directory is
kept and not run again (``--rerun`` forces it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from summarize_runs import first_reaching, read_rows, return_keys  # noqa: E402


@dataclass(frozen=True)
class Env:
    name: str
    overrides: tuple[str, ...]
    steps: int
    minutes: float
    threshold: float | None  # the published solve threshold, None where there is none
    source: str


ENVS = (
    Env("CartPole-v1", ("env=cartpole",), 3_000_000, 4, 475.0, "gymnasium reward_threshold"),
    Env(
        "LunarLander-v3",
        ("env=gym", "env.id=LunarLander-v3"),
        3_000_000,
        6,
        200.0,
        "gymnasium reward_threshold",
    ),
    Env(
        "MountainCar-v0",
        ("env=gym", "env.id=MountainCar-v0"),
        2_000_000,
        3,
        -110.0,
        "gymnasium reward_threshold",
    ),
    Env(
        "Acrobot-v1",
        ("env=gym", "env.id=Acrobot-v1"),
        2_000_000,
        3,
        -100.0,
        "gymnasium reward_threshold",
    ),
    Env(
        "Pendulum-v1",
        ("env=gym", "env.id=Pendulum-v1"),
        1_000_000,
        12,  # SAC makes one update per env step: ~100 updates/s on this CPU
        -200.0,
        "none in gymnasium; -200 as commonly used",
    ),
    Env("MinAtar breakout", ("env=minatar", "env.id=breakout"), 5_000_000, 5, None, "none"),
    Env("MinAtar asterix", ("env=minatar", "env.id=asterix"), 5_000_000, 5, None, "none"),
    Env(
        "MinAtar space_invaders",
        ("env=minatar", "env.id=space_invaders"),
        5_000_000,
        5,
        None,
        "none",
    ),
)
ALGORITHMS = ("vtrace", "ppo", "r2d2", "sac")


def run_name(algorithm: str, env: Env) -> str:
    return f"{algorithm}_{env.name.replace('MinAtar ', 'minatar_')}"


def command(algorithm: str, env: Env, run_dir: Path) -> list[str]:
    # seedq-train of this interpreter (a venv's), whatever PATH finds first
    cmd = [sys.executable, "-m", "seedq.cli", f"algorithm={algorithm}", *env.overrides]
    cmd += [f"total_env_steps={env.steps}", f"max_minutes={env.minutes}"]
    if env.threshold is not None:
        cmd.append(f"stop_at_return={env.threshold}")
    return [*cmd, f"hydra.run.dir={run_dir}"]


def run_one(algorithm: str, env: Env, root: Path, rerun: bool) -> None:
    run_dir = root / run_name(algorithm, env)
    if (run_dir / "summary.json").exists() and not rerun:
        print(f"{run_dir}: done before, kept", flush=True)
        return
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a rerun replaces the row (and an earlier refusal)
    cmd = command(algorithm, env, run_dir)
    print(" ".join(cmd), flush=True)
    start = time.monotonic()
    log_path = root / f"{run_dir.name}.log"
    with open(log_path, "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    print(f"  exit {code} after {time.monotonic() - start:.0f} s", flush=True)
    if code != 0 and not (run_dir / "metrics.csv").exists():
        # Refused at start-up (e.g. a discrete-only algorithm on a continuous env): keep
        # seedq's own last error line as the row.
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "refused.txt").write_text((lines[-1] if lines else f"exit {code}") + "\n")


def row(algorithm: str, env: Env, root: Path) -> str | None:
    run_dir = root / run_name(algorithm, env)
    head = f"| {algorithm} | {env.name} |"
    if (run_dir / "refused.txt").exists():
        why = (run_dir / "refused.txt").read_text().strip().replace("|", "/")
        # The log line's time and process prefix: "... ERROR [learner N] seedq: <why>".
        why = why.split(" seedq: ", 1)[-1]
        return f"{head} - | - | - | - | - | refused: {why} | - |"
    if not (run_dir / "metrics.csv").exists():
        return None
    rows = read_rows(run_dir)
    if not rows:
        return f"{head} - | - | - | - | - | no metrics rows | - |"
    ret, _ = return_keys(rows)
    last = rows[-1]
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    speed = last["env_steps"] / last["wall_time"] if last["wall_time"] else 0.0
    best = max((r[ret] for r in rows if ret in r), default=float("nan"))
    if env.threshold is None:
        reached = "no threshold"
    else:
        hit = first_reaching(rows, env.threshold)
        reached = (
            f"{hit['env_steps']:,.0f} steps, {hit['wall_time']:.0f} s"
            if hit
            else f"not reached ({env.threshold:g})"
        )
    return (
        f"{head} {last['env_steps']:,.0f} | {last['wall_time']:.0f} | {speed:,.0f} | "
        f"{last.get(ret, float('nan')):.1f} | {best:.1f} | {reached} | "
        f"{summary.get('stop_reason', 'unfinished')} |"
    )


def table(root: Path, selected: list[tuple[str, Env]]) -> str:
    lines = [
        "| algorithm | env | env steps | wall s | steps/s | final return (100 ep) | best "
        "| to threshold | stop |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for algorithm, env in selected:
        line = row(algorithm, env, root)
        if line is not None:
            lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("runs/defaults"))
    parser.add_argument("--only", action="append", default=[], help="run names containing this")
    parser.add_argument("--rerun", action="store_true", help="run finished rows again")
    parser.add_argument("--table-only", action="store_true", help="print the table, run nothing")
    args = parser.parse_args(argv)
    selected = [
        (algorithm, env)
        for env in ENVS
        for algorithm in ALGORITHMS
        if not args.only or any(part in run_name(algorithm, env) for part in args.only)
    ]
    args.root.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        print(f"{len(selected)} rows into {args.root} (load {os.getloadavg()[0]:.1f})", flush=True)
        for algorithm, env in selected:
            run_one(algorithm, env, args.root, args.rerun)
    print(table(args.root, selected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
