"""Summarise seedq run directories as Markdown: a results table and, optionally, a return curve.

    python scripts/summarize_runs.py runs/a runs/b --target 475
    python scripts/summarize_runs.py runs/multirun/2026-11-25/09-00-00 --target 475
    python scripts/summarize_runs.py runs/pong --curve-every-min 5

(``seedq-plot`` draws the curves.)

Each argument is a run directory (it holds ``metrics.csv``) or a folder searched for them (a
sweep's directory); a sweep's job is named by its folder and overrides. A path that holds no run
(a job refused or killed before its first metrics row, the sweep's ``multirun.yaml``) is left
out and named on stderr. Reads each run's ``metrics.csv`` (one row per logging interval) and
``summary.json``. The time to target is the wall time of the first logging row whose
100-episode mean return reached ``--target`` (rows before 100 finished episodes do not count,
as in the run's stop rule).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from seedq.metrics import read_whole_rows, rows_left_out


def read_rows(run_dir: Path) -> list[dict[str, float]]:
    """The run's metrics rows; a row cut short (the last line of a writer killed or still
    writing) or that does not read as numbers is left out and counted on stderr."""
    path = run_dir / "metrics.csv"
    if not path.exists():
        raise SystemExit(f"{run_dir}: no metrics.csv; is this a seedq run directory?")
    rows, skipped = [], 0
    _, whole, torn = read_whole_rows(path)
    for row in whole:
        try:
            rows.append({key: float(value) for key, value in row.items() if value != ""})
        except ValueError:
            skipped += 1
    if skipped or torn:
        print(f"{path}: {rows_left_out(skipped, torn)}", file=sys.stderr)
    return rows


def find_runs(paths: list[Path]) -> list[Path]:
    """The run directories among ``paths`` and under the folders among them (a sweep's);
    what holds none is named on stderr, never a reason to summarise nothing."""
    runs: list[Path] = []
    for path in paths:
        if (path / "metrics.csv").exists():
            runs.append(path)
            continue
        found = sorted({p.parent for p in path.rglob("metrics.csv")}) if path.is_dir() else []
        runs.extend(found)
        # A run's or sweep job's folder without metrics: refused, failed or killed before its
        # first row.
        jobs = sorted(p.parent for p in path.glob("*/.hydra")) if path.is_dir() else []
        jobs = [path] if (path / ".hydra").is_dir() else jobs
        without = [job for job in jobs if job not in found]
        for job in without:
            print(f"{job}: no metrics.csv (see its cli.log); left out", file=sys.stderr)
        if not found and not without:
            print(f"{path}: no metrics.csv here or below; left out", file=sys.stderr)
    return runs


def run_name(run_dir: Path) -> str:
    """A sweep's job (a numbered folder) with its overrides, else the folder's name."""
    overrides = run_dir / ".hydra" / "overrides.yaml"
    if not run_dir.name.isdigit() or not overrides.exists():
        return run_dir.name
    given = [
        line.strip().lstrip("- ").strip()
        for line in overrides.read_text().splitlines()
        if line.strip().startswith("-")
    ]
    shown = [o for o in given if not o.startswith(("hydra.", "run_dir="))]
    return f"{run_dir.name}: {' '.join(shown)}" if shown else run_dir.name


def return_keys(rows: list[dict[str, float]]) -> tuple[str, str]:
    """R2D2 runs are judged by their eval episodes (epsilon 0.001), V-trace by all episodes."""
    # Column names of seedq >= 0.2 first, then those of older runs.
    for ret, episodes in (
        ("eval/return_mean", "eval/episodes"),
        ("eval_return_mean", "eval_episodes"),
    ):
        if any(ret in row for row in rows):
            return ret, episodes
    if any("episode/count" in row for row in rows):
        return "return_mean", "episode/count"
    return "return_mean", "episodes"


def first_reaching(rows: list[dict[str, float]], target: float) -> dict[str, float] | None:
    ret, episodes = return_keys(rows)
    for row in rows:
        if row.get(episodes, 0) >= 100 and row.get(ret, float("-inf")) >= target:
            return row
    return None


def results_table(run_dirs: list[Path], target: float) -> str:
    lines = [
        f"| run | env steps/s (mean) | minutes to {target:g} | env steps to {target:g} "
        "| final return (100 ep) | replay ratio | stop reason |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for run_dir in run_dirs:
        rows = read_rows(run_dir)
        if not rows:
            lines.append(f"| {run_name(run_dir)} | no rows | | | | | |")
            continue
        last = rows[-1]
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        hit = first_reaching(rows, target)
        speed = last["env_steps"] / last["wall_time"] if last["wall_time"] else 0.0
        reached = (
            f"{hit['wall_time'] / 60:.1f} | {hit['env_steps']:,.0f}" if hit else "not reached | -"
        )
        final = last.get(return_keys(rows)[0], float("nan"))
        ratio = f"{last['replay_ratio']:.2f}" if "replay_ratio" in last else "-"
        lines.append(
            f"| {run_name(run_dir)} | {speed:,.0f} | {reached} | {final:.1f} | {ratio} | "
            f"{summary.get('stop_reason', '?')} |"
        )
    return "\n".join(lines)


def curve_table(run_dir: Path, every_min: float) -> str:
    rows = read_rows(run_dir)
    lines = [
        "| minutes | env steps | frames (x frame skip) | env steps/s | return (100 ep) "
        "| episodes |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    next_mark = every_min * 60
    picked = []
    for row in rows:
        if row["wall_time"] >= next_mark:
            picked.append(row)
            next_mark += every_min * 60
    if rows and (not picked or picked[-1] is not rows[-1]):
        picked.append(rows[-1])
    skip = frame_skip(run_dir)
    ret, episodes = return_keys(rows)
    for row in picked:
        lines.append(
            f"| {row['wall_time'] / 60:.1f} | {row['env_steps']:,.0f} | "
            f"{row['env_steps'] * skip:,.0f} | {row.get('steps_per_s', 0):,.0f} | "
            f"{row.get(ret, float('nan')):.1f} | {row.get(episodes, 0):,.0f} |"
        )
    return "\n".join(lines)


def frame_skip(run_dir: Path) -> int:
    """Frames per env step: the Atari frame skip, 1 for everything else."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.exists():
        return 1
    from omegaconf import OmegaConf

    env = OmegaConf.load(path).get("env", {})
    return int(env.get("frame_skip", 1)) if env.get("kind") == "atari" else 1


def env_id(run_dir: Path) -> str | None:
    """The env the run trained on (None for a folder without its Hydra config)."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.exists():
        return None
    from omegaconf import OmegaConf

    env = OmegaConf.load(path).get("env", {})
    return str(env.get("id")) if env.get("id") is not None else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "run_dirs", nargs="+", type=Path, help="run directories, or folders of them (a sweep's)"
    )
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument(
        "--curve-every-min",
        type=float,
        default=None,
        help="also print each run's return curve, one row per N minutes",
    )
    args = parser.parse_args(argv)
    run_dirs = find_runs(args.run_dirs)
    if not run_dirs:
        print("no seedq run (metrics.csv) in the paths given", file=sys.stderr)
        return 2
    envs = sorted({e for e in map(env_id, run_dirs) if e is not None})
    if len(envs) > 1:
        # One --target read against every env: "not reached" or "0.1 minutes" on an env whose
        # scores are on another scale says nothing.
        print(
            f"runs of {', '.join(envs)} share one --target ({args.target:g}): summarise each "
            "env's runs apart, each with its own target",
            file=sys.stderr,
        )
        return 2
    print(results_table(run_dirs, args.target))
    if args.curve_every_min:
        for run_dir in run_dirs:
            print(f"\n{run_name(run_dir)}\n")
            print(curve_table(run_dir, args.curve_every_min))
    return 0


if __name__ == "__main__":
    sys.exit(main())
