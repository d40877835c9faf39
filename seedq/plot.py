"""seedq-plot: return curves of run directories, against env steps and against wall time.

    seedq-plot runs/2026-11-23/10-00-00_CartPole-v1 runs/multirun/2026-11-23/11-00-00 -o out.png

Each argument is a run directory (it holds ``metrics.csv``) or a folder searched for them (a
Hydra multirun directory). Runs whose overrides differ only in ``seed`` form one group, drawn
as the mean with the min-max band of its seeds; other runs get a line each. R2D2 runs are drawn
with their eval-episode return, V-trace runs with the return of all episodes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seedq.metrics import read_whole_rows, rows_left_out

# Keys that do not change what is learned: runs differing only in these share a group.
IGNORED_OVERRIDES = (
    "seed=",
    "hydra.",
    "run_dir=",
    "resume=",
    "max_minutes=",
    "total_env_steps=",
    "stop_at_return=",
    "log_interval_s=",
    "checkpoint.",
)


@dataclass
class RunCurve:
    path: Path
    name: str
    group: str
    env_steps: np.ndarray
    minutes: np.ndarray
    returns: np.ndarray


def find_runs(paths: Sequence[Path]) -> list[Path]:
    runs: list[Path] = []
    for path in paths:
        if (path / "metrics.csv").exists():
            runs.append(path)
        elif path.is_dir():
            found = sorted(p.parent for p in path.rglob("metrics.csv"))
            runs.extend(found)
            # A sweep's job that never wrote a row (refused, failed, killed at its start) was
            # left out without a word, its group drawn as one seed fewer.
            for job in sorted(p.parent for p in path.glob("*/.hydra")):
                if job not in found:
                    print(
                        f"seedq-plot: {job}: no metrics.csv (see its cli.log); left out",
                        file=sys.stderr,
                    )
        else:
            raise FileNotFoundError(f"{path}: not a run directory or a folder of runs")
    if not runs:
        raise FileNotFoundError(f"no metrics.csv under {', '.join(map(str, paths))}")
    # A run named twice (`seedq-plot runs/a runs/a`, or a folder and a run inside it) is one
    # run: counted twice, it was averaged with itself as "2 runs".
    seen: set[Path] = set()
    return [run for run in runs if not (run.resolve() in seen or seen.add(run.resolve()))]


def group_key(run_dir: Path) -> str:
    """The run's overrides without seed, budgets and Hydra's keys: seeds of a config share it."""
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return run_dir.name
    overrides = [
        line.strip().lstrip("- ").strip()
        for line in path.read_text().splitlines()
        if line.strip().startswith("-")
    ]
    kept = sorted(o for o in overrides if not o.startswith(IGNORED_OVERRIDES))
    return " ".join(kept) or "defaults"


def read_curve(run_dir: Path) -> RunCurve:
    """The run's return curve. Rows cut short (the last line of a writer killed or still
    writing) and rows that do not read as numbers (a damaged file) are left out and counted on
    stderr; a file without seedq's
    columns, or whose env steps go back (the rows of two runs), is a ValueError naming it."""
    path = run_dir / "metrics.csv"
    columns, rows, torn = read_whole_rows(path)
    header = set(columns)
    # R2D2 runs are judged by their eval episodes ("eval_return_mean" in runs before 0.2).
    evals = [k for k in ("eval/return_mean", "eval_return_mean") if k in header]
    key = evals[0] if evals else "return_mean"
    missing = [k for k in ("wall_time", "env_steps", key) if k not in header]
    if columns and missing:
        raise ValueError(f"{path} has no {', '.join(missing)} column: not a seedq metrics file")
    points, skipped = [], 0
    for row in rows:
        if row.get(key) in ("", None):
            continue  # no episode had ended yet
        try:
            points.append(tuple(float(row[k]) for k in ("env_steps", "wall_time", key)))
        except (TypeError, ValueError):
            skipped += 1
    if skipped or torn:
        print(f"seedq-plot: {path}: {rows_left_out(skipped, torn)}", file=sys.stderr)
    table = np.array(points, dtype=float).reshape(-1, 3)  # env steps, seconds, return
    steps, seconds, returns = table.T
    back = np.flatnonzero(np.diff(steps) < 0)
    if len(back):
        # Two runs' rows in one file (appended, or concatenated): drawn as one, the curve
        # zigzagged between them and a seed band interpolated over the mix.
        at = back[0]
        raise ValueError(
            f"{path}: env_steps goes back from {steps[at]:.0f} to {steps[at + 1]:.0f}, so it "
            "holds the rows of more than one run; give each run a metrics.csv of its own"
        )
    return RunCurve(
        path=run_dir,
        name=run_dir.name,
        group=group_key(run_dir),
        env_steps=steps,
        minutes=seconds / 60,
        returns=returns,
    )


def band(curves: list[RunCurve], axis: str, points: int = 200) -> tuple[np.ndarray, ...] | None:
    """Mean, min and max of the curves on a common grid over the range all of them cover, from
    the latest first point to the earliest last one (None when no range is common to all: a
    mean there would be drawn from no data)."""
    xs = [getattr(c, axis) for c in curves]
    start, end = max(x[0] for x in xs), min(x[-1] for x in xs)
    if start > end:
        return None
    grid = np.linspace(start, end, points)
    ys = np.stack([np.interp(grid, x, c.returns) for x, c in zip(xs, curves, strict=True)])
    return grid, ys.mean(0), ys.min(0), ys.max(0)


def cut_short(curves: list[RunCurve]) -> list[str]:
    """A note for each group whose mean is drawn over much less than its runs hold: a seed
    stopped early (a sweep's killed or failed job) ends the common range there, silently
    leaving the other seeds' rest undrawn."""
    groups: dict[str, list[RunCurve]] = {}
    for curve in curves:
        if len(curve.returns):
            groups.setdefault(curve.group, []).append(curve)
    notes = []
    for label, members in groups.items():
        shortest = min(members, key=lambda c: c.env_steps[-1])
        longest = max(c.env_steps[-1] for c in members)
        if len(members) < 2 or shortest.env_steps[-1] >= 0.9 * longest:
            continue
        if band(members, "env_steps") is None:
            # Each seed is drawn whole (the legend says so): no mean is cut.
            notes.append(
                f"{label}: no env steps common to all its runs ({shortest.path} ends at "
                f"{shortest.env_steps[-1]:,.0f}); each is drawn as a line, with no mean"
            )
        else:
            notes.append(
                f"{label}: its mean is drawn to {shortest.env_steps[-1]:,.0f} env steps, where "
                f"{shortest.path} ends; the others go on to {longest:,.0f} (plot that run "
                "apart, or leave it out, to see them)"
            )
    return notes


def _points(x: np.ndarray) -> dict[str, str]:
    """Markers for a curve of one x (a run whose rows all share one env step or minute: one
    row, or its last two at the run's end), which a line alone draws as nothing."""
    return {"marker": "o"} if len(x) and np.ptp(x) == 0 else {}


def plot(curves: list[RunCurve], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        raise SystemExit("seedq-plot needs matplotlib: pip install 'seedq[plot]'") from None
    groups: dict[str, list[RunCurve]] = {}
    for curve in curves:
        if len(curve.returns):
            groups.setdefault(curve.group, []).append(curve)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (label, members), color in zip(groups.items(), plt.cm.tab10.colors * 10, strict=False):
        for ax, axis in zip(axes, ("env_steps", "minutes"), strict=True):
            if len(members) == 1:
                x = getattr(members[0], axis)
                ax.plot(x, members[0].returns, color=color, label=label, **_points(x))
                continue
            common = band(members, axis)
            if common is None:
                for i, member in enumerate(members):
                    note = f"{label} ({len(members)} seeds, no range common to all)"
                    x = getattr(member, axis)
                    label_i = None if i else note
                    ax.plot(x, member.returns, color=color, alpha=0.7, label=label_i, **_points(x))
                continue
            grid, mean, low, high = common
            seeds = f"{label} ({len(members)} seeds)"
            ax.plot(grid, mean, color=color, label=seeds, **_points(grid))
            ax.fill_between(grid, low, high, color=color, alpha=0.2)
    axes[0].set_xlabel("env steps")
    # 200k, 1.5M: matplotlib's default prints every digit, and the labels run together.
    axes[0].xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))
    axes[1].set_xlabel("wall time (minutes)")
    for ax in axes:
        ax.set_ylabel("mean return (last 100 episodes)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=1, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * len(labels), 1, 1))
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seedq-plot", description="Plot return curves of seedq runs."
    )
    parser.add_argument("paths", nargs="+", type=Path, help="run directories or multirun dirs")
    parser.add_argument("-o", "--out", type=Path, default=Path("returns.png"))
    args = parser.parse_args(argv)
    if args.out.is_dir():
        args.out = args.out / "returns.png"
    elif not args.out.suffix:
        args.out = args.out.with_suffix(".png")  # what the figure is written as: say so
    try:
        runs = find_runs(args.paths)
    except FileNotFoundError as exc:
        print(f"seedq-plot: {exc}", file=sys.stderr)
        return 2
    try:
        curves = [read_curve(r) for r in runs]
    except (OSError, ValueError) as exc:
        print(f"seedq-plot: {exc}", file=sys.stderr)
        return 2
    empty = [c.name for c in curves if not len(c.returns)]
    if len(empty) == len(curves):
        print(f"seedq-plot: no returns to plot yet in {', '.join(empty)}", file=sys.stderr)
        return 2
    if empty:
        print(f"seedq-plot: no returns yet in {', '.join(empty)}; left out", file=sys.stderr)
    for note in cut_short(curves):
        print(f"seedq-plot: {note}", file=sys.stderr)
    try:
        plot(curves, args.out)
    except (OSError, ValueError) as exc:
        # An unwritable folder, or a suffix matplotlib has no writer for (it names those).
        print(f"seedq-plot: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({len(curves) - len(empty)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
