"""A Sample Factory run's learning curve as a CSV and a frames-to-score line, for putting its
runs beside seedq's (docs/results.md).

Run it with the Python of Sample Factory's venv (it reads TensorBoard event files), on the
experiment directory of a run started with ``--summaries_use_frameskip=False`` (env steps are
agent steps, as seedq counts them):

    ~/.cache/seedq/sf-venv/bin/python scripts/sf_curve.py TRAIN_DIR/EXPERIMENT \\
        --log SF_STDOUT --csv curve.csv

The curve is ``policy_stats/avg_RecordEpisodeStatistics_reward``: the mean unclipped return of
the last 100 whole games (what ``return_mean`` is in seedq's ``metrics.csv``), which Sample
Factory 2.1.1 starts writing late (on Pong at ~1 M frames). ``--log SF_STDOUT`` reads the curve
from its console instead (``Avg episode reward`` after each ``Total num frames``), which starts
with the first games: the mean of its own ``reward`` statistic over the last 100 episodes, the
sum of the clipped rewards of each (on Pong, whose rewards are +-1, the game's score).
``bash scripts/bench_vs_sample_factory.sh --build-sf-venv`` builds that venv.

``--scalar TAG`` (repeatable) adds a line per TensorBoard tag beside the curve, e.g. the policy's
entropy and its change per batch (``--scalar train/entropy --scalar train/kl_divergence``): the
mean of the tag's points logged between one mark and the one before it.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_vs_sample_factory import read_scalars  # noqa: E402

RETURN_TAG = "policy_stats/avg_RecordEpisodeStatistics_reward"


def scalars(experiment_dir: Path, tag: str) -> list[tuple[int, float]]:
    """``[(agent steps, value)]`` of one TensorBoard tag of policy 0, in logging order."""
    summary = experiment_dir / ".summary" / "0"
    if not summary.is_dir():
        raise SystemExit(f"no Sample Factory summaries in {summary}")
    found = read_scalars(summary)
    if tag != RETURN_TAG and tag not in found:
        raise SystemExit(f"no scalar {tag!r} in {summary}; it has: {', '.join(sorted(found))}")
    return [(step, value) for _, step, value in found.get(tag, [])]


def curve(experiment_dir: Path) -> list[tuple[int, float]]:
    """``[(agent steps, 100-game mean return)]`` in logging order."""
    return scalars(experiment_dir, RETURN_TAG)


def window_means(
    points: list[tuple[int, float]], frame_skip: int, marks: list[float]
) -> list[float | None]:
    """The mean of the points in each window (previous mark, mark] of frames; None where the
    window has none."""
    means: list[float | None] = []
    low = -1.0
    for mark in marks:
        inside = [v for s, v in points if low < s * frame_skip <= mark]
        means.append(sum(inside) / len(inside) if inside else None)
        low = mark
    return means


FRAMES = re.compile(r"Total num frames: (\d+)")
AVG_REWARD = re.compile(r"Avg episode reward: \[\(0, '([-+0-9.e]+)'\)\]")


def curve_from_log(text: str) -> list[tuple[int, float]]:
    """``[(agent steps, mean return)]`` from Sample Factory's console: each ``Avg episode
    reward`` at the step count of the ``Total num frames`` line before it (agent steps with
    ``--summaries_use_frameskip=False``)."""
    points: list[tuple[int, float]] = []
    steps = None
    for line in text.splitlines():
        if (match := FRAMES.search(line)) is not None:
            steps = int(match.group(1))
        elif (match := AVG_REWARD.search(line)) is not None and steps is not None:
            if not points or points[-1][0] != steps:
                points.append((steps, float(match.group(1))))
    return points


def report(points: list[tuple[int, float]], frame_skip: int, marks: list[float]) -> str:
    lines = []
    cells = []
    end = points[-1][0] * frame_skip if points else 0
    for mark in (m for m in marks if m <= end):
        before = [v for s, v in points if s * frame_skip <= mark]
        cells.append(
            f"{mark / 1e6:.1f} M: {before[-1]:+.1f}" if before else f"{mark / 1e6:.1f} M: -"
        )
    if cells:  # none when the curve ends before the first mark
        lines.append(" | ".join(cells))
    for score in (0.0, 10.0, 18.0):
        first = next((s * frame_skip for s, v in points if v >= score), None)
        lines.append(
            f"first >= {score:g}: "
            + ("not reached" if first is None else f"{first / 1e6:.2f} M frames")
        )
    if points:
        steps, value = points[-1]
        lines.append(f"last point: {steps * frame_skip / 1e6:.2f} M frames, {value:+.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment_dir", type=Path)
    parser.add_argument("--csv", type=Path, help="write env_steps,frames,return_mean here")
    parser.add_argument("--log", type=Path, help="read the curve from this console log instead")
    parser.add_argument("--frame-skip", type=int, default=4)
    parser.add_argument(
        "--marks", type=float, nargs="+", default=[0.4e6 + 0.2e6 * i for i in range(11)]
    )
    parser.add_argument(
        "--scalar",
        action="append",
        default=[],
        metavar="TAG",
        help="also print this TensorBoard tag's mean between marks (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.csv is not None and not args.csv.parent.is_dir():
        parser.error(f"--csv {args.csv}: no folder {args.csv.parent}")
    if args.log is not None:
        try:
            text = args.log.read_text(errors="replace")
        except OSError as exc:
            parser.error(f"--log {args.log}: {exc.strerror or exc}")
        points = curve_from_log(text)
        if not points:
            parser.error(
                f"--log {args.log}: no 'Avg episode reward' after a 'Total num frames' line "
                "(not Sample Factory's console, or no game has ended yet)"
            )
    else:
        points = curve(args.experiment_dir)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["env_steps", "frames", "return_mean"])
            for steps, value in points:
                writer.writerow([steps, steps * args.frame_skip, f"{value:.3f}"])
    print(report(points, args.frame_skip, args.marks))
    for tag in args.scalar:
        means = window_means(scalars(args.experiment_dir, tag), args.frame_skip, args.marks)
        cells = [
            f"{mark / 1e6:.1f} M: " + ("-" if mean is None else f"{mean:.4g}")
            for mark, mean in zip(args.marks, means, strict=True)
        ]
        print(f"{tag}: " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
