"""Atari learning curves in frames: run games for a frame budget (or read finished runs) and
write the frames-to-score table and a plot, beside published anchors.

Frames are agent steps x ``env.frame_skip`` (4 by default), the unit the Atari literature and
Sample Factory report; they do not depend on the hardware, so a curve measured on a 2-core box
says what it would on a GPU machine (only the wall time differs).

    # run Pong, Breakout and BeamRider (CleanRL's three) for 10 M frames each, one after the other
    python scripts/atari_curves.py run --frames 10e6 --out runs/curves
    # extra seedq-train overrides go after --
    python scripts/atari_curves.py run --games Pong --frames 2e6 -- env.repeat_action_probability=0
    # the same command again continues interrupted runs from their newest checkpoints
    # tabulate (and plot) run directories that already exist
    python scripts/atari_curves.py table runs/curves/* --plot curves.png
    # and the value at frame marks: the return, and the policy entropy (nats) around each
    python scripts/atari_curves.py table runs/pong/* --marks 0.4e6 0.6e6 0.8e6 1e6 --scalar entropy
    # published curves with sticky actions at the same frame marks: Dopamine's baselines
    # (baselines/atari/data/GAME.json in github.com/google/dopamine; the first 30 M frames of
    # Pong's, Breakout's and BeamRider's are in docs/results/dopamine_sticky_baselines.csv)
    python scripts/atari_curves.py published docs/results/dopamine_sticky_baselines.csv

The table gives, per run, the 100-episode mean return at the budget, the mean of its last
``--last`` episodes (from the run's ``episodes.csv``; a 100-episode window of a fast learner
still holds episodes from far earlier), its best 100-episode mean (the first time it was
logged, with its frames), its best single game (from ``episodes.csv``), and the frames at
which the 100-episode mean first reached each milestone of its game (``MILESTONES``), beside a
published figure for the game (``ANCHORS``, with its source) where there is one.

With ``--marks`` a second table reads the runs at frame marks: the 100-episode mean last
logged at or before each mark, and for each ``--scalar`` (a metrics.csv column, or
``entropy``: the policy entropy in nats, ``-loss/entropy / entropy_cost``) its mean over the
rows logged in the ``--window`` frames up to the mark. A run that ended before a mark has no
value there ("-"). With ``--midpoint-envs N`` (the run's envs) it also gives the mean return
of the games (from ``episodes.csv``) whose midpoint falls within 125 k frames of each mark,
with their count: a game's midpoint is its end less half its length x N envs x the frame
skip. The 100-episode window reports policies up to a game's length x N envs old (about 1 M
frames for Pong at 112 envs); the midpoint places each game nearer the policy that played it.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from pathlib import Path

import yaml

from seedq.exit_status import EXIT_STOPPED
from seedq.files import unwritable
from seedq.metrics import read_whole_rows, rows_left_out

# Scores worth naming per game: the targets and the usual reading points.
MILESTONES = {
    "Pong": (0.0, 10.0, 18.0, 20.0),
    "Breakout": (10.0, 50.0, 100.0, 200.0, 400.0),
    "SpaceInvaders": (300.0, 500.0, 1000.0),
    "Seaquest": (300.0, 1000.0, 1500.0),
    "BeamRider": (1000.0, 2000.0, 4000.0),
}
DEFAULT_MILESTONES = (0.0, 100.0, 1000.0)

# Published figures to read a run beside, with their source. CleanRL's `ppo_atari.py`
# (docs.cleanrl.dev, "PPO", Atari: 10 M agent steps = 40 M frames, sticky actions off
# (NoFrameskip-v4), the mean episodic return at the end of training over 3 seeds): four times a
# 10 M-frame run's frames, so a ceiling to read the curve against, not a score at its budget.
# Dopamine's (its baselines, sticky actions 0.25, five runs per agent; `published` below reads
# them at any mark): the best agent's mean at 10 M frames, the v5 games' own protocol.
ANCHORS = {
    "Pong": "CleanRL PPO 20.36 ± 0.20 at 40 M; sticky: Dopamine IQN +15.2 at 10 M",
    "Breakout": "CleanRL PPO 414.66 ± 28.09 at 40 M; sticky: Dopamine IQN +102.7 at 10 M",
    "BeamRider": "CleanRL PPO 1915.93 ± 484.58 at 40 M; sticky: Dopamine Rainbow +5983 at 10 M",
}


class Refused(SystemExit):
    """An input the table cannot be made from: said in one line on stderr, exit status 2."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def game_of(env_id: str) -> str:
    """``ALE/Pong-v5`` -> ``Pong``."""
    return env_id.split("/")[-1].split("-")[0]


class RunEnded(Exception):
    """A game's training run ended before its budget: stopped (``EXIT_STOPPED``) or failed."""

    def __init__(self, game: str, run_dir: Path, status: int) -> None:
        self.game, self.run_dir, self.status = game, run_dir, status
        super().__init__(game, run_dir, status)


def run_game(game: str, frames: float, out: Path, overrides: list[str]) -> Path:
    run_dir = out / game
    skips = [o.split("=", 1)[1] for o in overrides if o.startswith("env.frame_skip=")]
    steps = int(frames) // int(skips[-1] if skips else 4)  # frames are agent steps x frame_skip
    cmd = [
        # seedq of this interpreter (a venv's), whatever seedq-train PATH finds first
        sys.executable,
        "-m",
        "seedq.cli",
        "env=atari",
        f"env.id=ALE/{game}-v5",
        f"total_env_steps={steps}",
        "max_minutes=0",
        "log_interval_s=30",
        f"run_dir={run_dir}",
        f"hydra.run.dir={run_dir}",
        # A 10 M-frame run takes hours on a small box: the same command again continues it
        # from its newest checkpoint (or starts it, when it has none).
        "resume=auto",
        *overrides,
    ]
    print("+", " ".join(cmd), flush=True)
    status = launch(cmd)
    if status:
        raise RunEnded(game, run_dir, status)
    return run_dir


def launch(cmd: list[str]) -> int:
    """Run one training command to its end and return its exit status (tests replace this,
    not ``subprocess.run``, which matplotlib's first import on a fresh machine calls to build
    its font cache). Ctrl-C reaches the training run too, which writes a checkpoint and exits
    with ``EXIT_STOPPED``: wait for it."""
    process = subprocess.Popen(cmd)
    try:
        return process.wait()
    except KeyboardInterrupt:
        return process.wait()


def plot_refusal(path: Path) -> str:
    """Why a figure cannot be written to ``path`` ("" if it can): a folder missing or not
    writable, a suffix matplotlib has no writer for. Checked first, so that neither a table
    nor hours of ``run`` end in a traceback at the figure."""
    from matplotlib.backend_bases import FigureCanvasBase

    if not path.parent.is_dir():
        return f"--plot {path}: no folder {path.parent}"
    if why := unwritable(path.parent):
        return f"--plot {path}: cannot write in {path.parent} ({why})"
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        return f"--plot {path}: give a file ending in .{', .'.join(sorted(formats))}"
    return ""


def without_metrics(paths: list[Path]) -> list[Path]:
    """The paths that are neither a metrics CSV nor a run directory holding one."""
    return [p for p in paths if not p.is_file() and not (p / "metrics.csv").exists()]


def read_run(run_dir: Path, frame_skip: int = 4, entropy_cost: float = 0.01) -> dict:
    """A run directory as seedq-train leaves it, or a bare ``*_metrics.csv`` (as
    docs/results keeps them, beside their ``*_episodes.csv``), which has no config: its game
    is read from its name, and ``frame_skip`` and ``entropy_cost`` are taken as given. A run
    directory's own ``metrics.csv`` reads as the directory (its config names the game)."""
    if run_dir.name == "metrics.csv" and (run_dir.parent / ".hydra" / "config.yaml").exists():
        run_dir = run_dir.parent
    if run_dir.is_file():
        label = run_dir.name.removesuffix(".csv").removesuffix("_metrics")
        games = [g for g in (*MILESTONES, *ANCHORS) if g.lower() in label.lower()]
        episodes = run_dir.with_name(f"{label}_episodes.csv")
        return {
            **read_logs(run_dir, episodes, frame_skip),
            "dir": run_dir,
            "label": label,
            "game": games[0] if games else label,
            "algorithm": "-",
            "sticky": None,
            "overrides": [],
            "entropy_cost": entropy_cost,
        }
    if not (run_dir / ".hydra" / "config.yaml").is_file():
        raise Refused(
            f"{run_dir}: no .hydra/config.yaml to read its game and frame skip from (not a "
            "folder seedq-train wrote); give its metrics.csv, copied as GAME_metrics.csv, "
            "with --frame-skip"
        )
    config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
    env = config["env"]
    # Atari's frame skip (4) and sticky actions (0.25) are its family's defaults; another
    # family's run (CartPole, MinAtar) steps one frame per env step and has no sticky actions
    # unless its config says so.
    atari = env.get("kind", "atari") == "atari"
    skip = int(env.get("frame_skip", 4 if atari else 1))
    sticky = env.get("repeat_action_probability", 0.25 if atari else None)
    return {
        **read_logs(run_dir / "metrics.csv", run_dir / "episodes.csv", skip),
        "dir": run_dir,
        "game": game_of(env["id"]),
        "algorithm": config["algorithm"]["name"],
        "sticky": None if sticky is None else float(sticky),
        "overrides": [line[2:] for line in overrides.splitlines() if line.startswith("- ")],
        "entropy_cost": config["algorithm"].get("entropy_cost"),
    }


def read_logs(metrics: Path, episodes: Path, frame_skip: int) -> dict:
    """A run's curve from its metrics log (every row, and the rows with a 100-episode mean
    as frames / returns) and its episode log (None for runs from before it). A curve another
    system wrote (``scripts/sf_curve.py --csv``: env_steps, frames, return_mean) reads the
    same."""
    columns, whole, torn = read_whole_rows(metrics)
    if not {"env_steps", "return_mean"} <= set(columns):
        raise Refused(
            f"{metrics}: not a curve (no env_steps/return_mean columns): give a seedq "
            "metrics.csv or the CSV of scripts/sf_curve.py --csv"
        )
    every_row = [r for r in whole if numbers(r, "env_steps") and numbers(r, "return_mean", "")]
    if len(whole) > len(every_row) or torn:
        print(f"{metrics}: {rows_left_out(len(whole) - len(every_row), torn)}", file=sys.stderr)
    # A mean over fewer than 100 episodes is no 100-episode mean (summarize_runs.py skips it
    # too); a curve without an episodes column (sf_curve.py's) has only such means.
    rows = [
        r
        for r in every_row
        if r["return_mean"] != "" and (not numbers(r, "episodes") or float(r["episodes"]) >= 100)
    ]
    games = None
    if episodes.exists():
        _, whole, torn = read_whole_rows(episodes)
        games = [g for g in whole if all(numbers(g, k) for k in ("env_steps", "length", "return"))]
        if len(whole) > len(games) or torn:
            print(f"{episodes}: {rows_left_out(len(whole) - len(games), torn)}", file=sys.stderr)
    return {
        "frames": [int(float(r["env_steps"])) * frame_skip for r in rows],
        "returns": [float(r["return_mean"]) for r in rows],
        "episode_returns": None if games is None else [float(g["return"]) for g in games],
        # (end frames, length in agent steps, return) of each game.
        "games": None
        if games is None
        else [
            (int(float(g["env_steps"])) * frame_skip, int(float(g["length"])), float(g["return"]))
            for g in games
        ],
        "rows": every_row,
        "frame_skip": frame_skip,
    }


def numbers(row: dict[str, str], column: str, *allowed: str) -> bool:
    """Whether the row's ``column`` reads as a number (or is one of ``allowed``)."""
    value = row.get(column, "")
    if value in allowed:
        return True
    try:
        float(value)
    except ValueError:
        return False
    return True


def first_frames(run: dict, score: float) -> int | None:
    for frames, value in zip(run["frames"], run["returns"], strict=True):
        if value >= score:
            return frames
    return None


def best(run: dict) -> tuple[str, str]:
    """The run's best 100-episode mean with the frames it was logged at, and its best game
    ("-" without an episode log)."""
    if run["returns"]:
        at = max(range(len(run["returns"])), key=lambda i: (run["returns"][i], -i))
        mean = f"{run['returns'][at]:.1f} at {run['frames'][at] / 1e6:.2f} M"
    else:
        mean = "-"
    game = f"{max(run['episode_returns']):g}" if run["episode_returns"] else "-"
    return mean, game


def last_mean(run: dict, last: int) -> str:
    """The mean return of the run's last ``last`` episodes, or "-" without an episode log."""
    episodes = run["episode_returns"]
    if not episodes:
        return "-"
    return f"{sum(episodes[-last:]) / len(episodes[-last:]):.1f}"


# Overrides that say where or how long a run ran, not what it learned with.
_PLACE_KEYS = (
    "run_dir",
    "resume",
    "log_interval_s",
    "max_minutes",
    "stop_at_return",
    "hardware.num_threads",
)


def differences(runs: list[dict]) -> list[list[str]]:
    """For each run, its overrides that not every run of its game shares (what tells two
    curves of one game apart), leaving out where and how long each ran."""

    def kept(run: dict) -> list[str]:
        return [o for o in run["overrides"] if o.split("=", 1)[0].lstrip("+~") not in _PLACE_KEYS]

    out = []
    for run in runs:
        same_game = [kept(r) for r in runs if r["game"] == run["game"]]
        out.append([o for o in kept(run) if not all(o in other for other in same_game)])
    return out


def names(runs: list[dict]) -> list[str]:
    """Each run's game and the overrides that tell it from the other runs of its game (a bare
    metrics CSV's own name)."""
    return [
        run.get("label") or " ".join([run["game"], *differs])
        for run, differs in zip(runs, differences(runs), strict=True)
    ]


def series(run: dict, tag: str) -> list[tuple[int, float]]:
    """``[(frames, value)]`` of one metrics.csv column, rows without a value left out;
    ``entropy`` is the policy's entropy in nats, read from ``loss/entropy`` (the entropy
    bonus, ``-entropy_cost x entropy``)."""
    column = "loss/entropy" if tag == "entropy" else tag
    if run["rows"] and column not in run["rows"][0]:
        raise Refused(f"{run['dir']}: metrics.csv has no column {column!r}")
    scale = 1.0
    if tag == "entropy":
        cost = run["entropy_cost"]
        if not cost:
            raise Refused(f"{run['dir']}: entropy_cost is {cost!r}; read loss/entropy instead")
        scale = -1.0 / float(cost)
    return [
        (int(float(r["env_steps"])) * run["frame_skip"], float(r[column]) * scale)
        for r in run["rows"]
        if r.get(column, "") != "" and numbers(r, column)
    ]


# Half the width of the frames around a mark whose games' midpoints count (--midpoint-envs).
MIDPOINT_HALF_WIDTH = 125_000


def games_around(run: dict, mark: float, envs: int) -> str:
    """The mean return of the run's games whose midpoint (end - length x envs x frame skip / 2)
    is within :data:`MIDPOINT_HALF_WIDTH` of ``mark``, with their count; "-" without any."""
    if not run["games"]:
        return "-"
    returns = [
        ret
        for end, length, ret in run["games"]
        if abs(end - length * envs * run["frame_skip"] / 2 - mark) <= MIDPOINT_HALF_WIDTH
    ]
    return f"{sum(returns) / len(returns):+.1f} ({len(returns)})" if returns else "-"


def at_marks(
    runs: list[dict],
    marks: list[float],
    scalars: list[str] = (),
    window: float = 1e5,
    midpoint_envs: int = 0,
) -> str:
    """Markdown: each run's 100-episode mean at each frame mark (the last logged at or before
    it), per scalar its mean over the rows in (mark - window, mark], and with
    ``midpoint_envs`` the games played around each mark (:func:`games_around`)."""
    lines = [
        "| run | " + " | ".join(f"{m / 1e6:g} M" for m in marks) + " |",
        "|---|" + "---:|" * len(marks),
    ]
    for run, name in zip(runs, names(runs), strict=True):
        ran = max((int(float(r["env_steps"])) * run["frame_skip"] for r in run["rows"]), default=0)
        cells = []
        for mark in marks:
            before = [v for f, v in zip(run["frames"], run["returns"], strict=True) if f <= mark]
            cells.append(f"{before[-1]:+.1f}" if before and mark <= ran else "-")
        lines.append(f"| {name}: return | " + " | ".join(cells) + " |")
        for tag in scalars:
            points = series(run, tag)
            cells = []
            for mark in marks:
                inside = [v for f, v in points if mark - window < f <= mark]
                cells.append(f"{sum(inside) / len(inside):.3g}" if inside and mark <= ran else "-")
            lines.append(f"| {name}: {tag} | " + " | ".join(cells) + " |")
        if midpoint_envs:
            cells = [games_around(run, mark, midpoint_envs) for mark in marks]
            lines.append(f"| {name}: games around (midpoint) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(runs: list[dict], last: int = 20) -> str:
    lines = [
        "| game | algorithm | sticky | frames run | return at the end | last "
        f"{last} episodes | best mean | best game | frames to each score | published |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for run, name in zip(runs, names(runs), strict=True):
        marks = []
        for score in MILESTONES.get(run["game"], DEFAULT_MILESTONES):
            at = first_frames(run, score)
            marks.append(f"{score:g}: {'-' if at is None else f'{at / 1e6:.2f} M'}")
        end = run["returns"][-1] if run["returns"] else float("nan")
        done = run["frames"][-1] if run["frames"] else 0
        sticky = "-" if run["sticky"] is None else f"{run['sticky']:g}"
        best_mean, best_game = best(run)
        lines.append(
            f"| {name} | {run['algorithm']} | {sticky} | {done / 1e6:.2f} M "
            f"| {end:.1f} | {last_mean(run, last)} | {best_mean} | {best_game} "
            f"| {', '.join(marks)} "
            f"| {ANCHORS.get(run['game'], '-')} |"
        )
    return "\n".join(lines)


def plot(runs: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = sorted({r["game"] for r in runs})
    fig, axes = plt.subplots(1, len(games), figsize=(5.5 * len(games), 4), squeeze=False)
    labels = differences(runs)
    for ax, game in zip(axes[0], games, strict=True):
        for run, differs in zip(runs, labels, strict=True):
            if run["game"] != game:
                continue
            if "label" in run:  # a bare metrics CSV: its name says what it is
                label = run["label"]
            else:
                sticky = [] if run["sticky"] is None else [f"sticky {run['sticky']:g}"]
                label = ", ".join([f"{run['dir'].name}: {run['algorithm']}", *sticky, *differs])
            ax.plot([f / 1e6 for f in run["frames"]], run["returns"], label=label)
        ax.set_title(game)
        ax.set_xlabel("frames (M)")
        ax.set_ylabel("mean return (last 100 episodes)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


# Dopamine's published baselines (github.com/google/dopamine, baselines/atari/data/GAME.json,
# Apache 2.0): five runs of each agent with sticky actions (0.25, Machado et al.'s protocol, as
# ALE/*-v5 has them), each value the mean return of the training episodes of one iteration of
# 250 k agent steps = 1 M frames. Iteration i covers frames [i, i + 1) M and is read at its end.
DOPAMINE_FRAMES_PER_ITERATION = 1_000_000
DOPAMINE_CSV_HEADER = ["game", "agent", "run", "iteration", "frames", "return"]


def read_dopamine(path: Path) -> list[dict]:
    """The runs of a Dopamine baseline file (its JSON, or the CSV ``published --csv`` wrote):
    one dict per run with its game, agent, run index and ``{iteration: return}``.

    In the JSON each agent's runs follow one another; a run starts where the iteration does
    not rise.
    """
    runs: list[dict] = []
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                key = (row["game"], row["agent"], int(row["run"]))
                if not runs or (runs[-1]["game"], runs[-1]["agent"], runs[-1]["run"]) != key:
                    runs.append({"game": key[0], "agent": key[1], "run": key[2], "returns": {}})
                runs[-1]["returns"][int(row["iteration"])] = float(row["return"])
        return runs
    import json

    game = game_name(path.stem)
    last: dict[str, tuple[dict, int]] = {}  # each agent's run being read, its last iteration
    for row in json.loads(path.read_text()):
        agent, iteration = str(row["Agent"]), int(row["Iteration"])
        current, previous = last.get(agent, (None, -1))
        if current is None or iteration <= previous:
            run = 0 if current is None else current["run"] + 1
            current = {"game": game, "agent": agent, "run": run, "returns": {}}
            runs.append(current)
        current["returns"][iteration] = float(row["Value"])
        last[agent] = current, iteration
    return runs


def game_name(stem: str) -> str:
    """Dopamine's file stem (``pong``, ``beam_rider``) as ALE's game name (``Pong``,
    ``BeamRider``) where a milestone table knows it."""
    flat = stem.replace("_", "").lower()
    known = {name.lower(): name for name in MILESTONES}
    return known.get(flat, stem)


def dopamine_at(run: dict, frames: float) -> float | None:
    """The run's return at the last iteration that ended at or before ``frames``."""
    ended = int(frames // DOPAMINE_FRAMES_PER_ITERATION) - 1
    done = [i for i in run["returns"] if i <= ended]
    return run["returns"][max(done)] if done else None


def dopamine_first(run: dict, score: float) -> int | None:
    """The frames at the end of the first iteration whose return reached ``score``."""
    for i in sorted(run["returns"]):
        if run["returns"][i] >= score:
            return (i + 1) * DOPAMINE_FRAMES_PER_ITERATION
    return None


def published_table(runs: list[dict], marks: list[float]) -> str:
    """Per game and agent: the runs' mean (min to max) at each mark, and for each milestone of
    the game how many runs reached it by the last mark, with the frames of each that did."""
    by_key: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        by_key.setdefault((run["game"], run["agent"]), []).append(run)
    budget = max(marks)
    head = ["game", "agent", "runs", *(f"{m / 1e6:g} M" for m in marks), f"by {budget / 1e6:g} M"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * len(marks) + "---|"]
    for (game, agent), group in by_key.items():
        cells = []
        for mark in marks:
            values = [v for r in group if (v := dopamine_at(r, mark)) is not None]
            cells.append(
                f"{sum(values) / len(values):+.1f} ({min(values):+.1f} to {max(values):+.1f})"
                if values
                else "-"
            )
        reached = []
        for score in MILESTONES.get(game, DEFAULT_MILESTONES):
            firsts = sorted(f for r in group if (f := dopamine_first(r, score)) is not None)
            within = [f for f in firsts if f <= budget]
            later = f"; next {firsts[len(within)] / 1e6:g} M" if len(firsts) > len(within) else ""
            at = ", ".join(f"{f / 1e6:g}" for f in within)
            reached.append(
                f"{score:g}: {len(within)}/{len(group)}" + (f" ({at} M)" if at else "") + later
            )
        lines.append(
            f"| {game} | {agent} | {len(group)} | "
            + " | ".join(cells)
            + " | "
            + "; ".join(reached)
            + " |"
        )
    return "\n".join(lines)


def plot_published(published: list[dict], beside: list[dict], out: Path, frames: float) -> None:
    """Per game: each published agent's mean over its runs, its runs' range shaded, up to
    ``frames``, with the ``beside`` runs (seedq's) of the same game drawn over them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = list(dict.fromkeys(r["game"] for r in published))
    fig, axes = plt.subplots(1, len(games), figsize=(6 * len(games), 4.2), squeeze=False)
    for ax, game in zip(axes[0], games, strict=True):
        agents: dict[str, list[dict]] = {}
        for run in published:
            if run["game"] == game:
                agents.setdefault(run["agent"], []).append(run)
        for agent, group in agents.items():
            ends = sorted({i for r in group for i in r["returns"]})
            ends = [i for i in ends if (i + 1) * DOPAMINE_FRAMES_PER_ITERATION <= frames]
            columns = [[r["returns"][i] for r in group if i in r["returns"]] for i in ends]
            xs = [(i + 1) * DOPAMINE_FRAMES_PER_ITERATION / 1e6 for i in ends]
            (line,) = ax.plot(
                xs, [sum(c) / len(c) for c in columns], lw=1, ls="--", label=f"Dopamine {agent}"
            )
            ax.fill_between(
                xs,
                [min(c) for c in columns],
                [max(c) for c in columns],
                color=line.get_color(),
                alpha=0.12,
            )
        for run in beside:
            if run["game"] != game:
                continue
            points = [(f / 1e6, v) for f, v in zip(run["frames"], run["returns"], strict=True)]
            points = [(x, v) for x, v in points if x <= frames / 1e6]
            label = run.get("label") or run["dir"].name
            ax.plot([x for x, _ in points], [v for _, v in points], lw=2, label=f"seedq {label}")
        ax.set_title(f"{game}, sticky actions 0.25")
        ax.set_xlabel("frames (M)")
        ax.set_ylabel("mean return (Dopamine: each 1 M frames; seedq: 100 episodes)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def write_dopamine_csv(runs: list[dict], out: Path, iterations: int) -> None:
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(DOPAMINE_CSV_HEADER)
        for run in runs:
            for i in sorted(run["returns"]):
                if i < iterations:
                    frames = (i + 1) * DOPAMINE_FRAMES_PER_ITERATION
                    writer.writerow(
                        [run["game"], run["agent"], run["run"], i, frames, run["returns"][i]]
                    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train each game for a frame budget, then tabulate")
    run.add_argument("--games", nargs="+", default=["Pong", "Breakout", "BeamRider"])
    run.add_argument("--frames", type=float, default=10e6)
    run.add_argument("--out", type=Path, default=Path("runs/atari_curves"))
    run.add_argument("--plot", type=Path, default=None)
    run.add_argument("overrides", nargs="*", help="seedq-train overrides (after --)")
    run.set_defaults(frame_skip=4, entropy_cost=0.01)  # its runs are directories: theirs
    tab = sub.add_parser("table", help="tabulate finished run directories (or metrics CSVs)")
    tab.add_argument("runs", nargs="+", type=Path)
    tab.add_argument("--plot", type=Path, default=None)
    tab.add_argument(
        "--frame-skip", type=int, default=4, help="of bare metrics CSVs (run directories: theirs)"
    )
    tab.add_argument(
        "--entropy-cost",
        type=float,
        default=0.01,
        help="of bare metrics CSVs, to read 'entropy' (run directories: theirs; presets: 0.01)",
    )
    pub = sub.add_parser(
        "published",
        help="read Dopamine's published sticky-action curves (its baselines/atari/data/GAME.json)",
    )
    pub.add_argument("files", nargs="+", type=Path, help="Dopamine JSON files, or a --csv of them")
    pub.add_argument(
        "--marks", type=float, nargs="+", default=[2e6, 4e6, 6e6, 8e6, 10e6], help="frames"
    )
    pub.add_argument(
        "--csv", type=Path, default=None, help="also write the runs' first --iterations rows here"
    )
    pub.add_argument("--iterations", type=int, default=30)
    pub.add_argument("--plot", type=Path, default=None, help="draw the curves to the marks' end")
    pub.add_argument(
        "--beside",
        nargs="+",
        type=Path,
        default=[],
        metavar="RUN",
        help="seedq runs (directories or metrics CSVs) to draw over the published curves",
    )
    pub.add_argument("--agents", nargs="+", default=None, help="only these agents")
    for sub_parser in (run, tab):
        sub_parser.add_argument(
            "--last", type=int, default=20, help="episodes in the last-episodes column"
        )
        sub_parser.add_argument(
            "--marks", type=float, nargs="+", default=[], help="frames to read each run at"
        )
        sub_parser.add_argument(
            "--scalar",
            action="append",
            default=[],
            metavar="COLUMN",
            help="also read this metrics.csv column (or 'entropy', in nats) at the marks",
        )
        sub_parser.add_argument(
            "--window", type=float, default=1e5, help="frames each scalar is averaged over"
        )
        sub_parser.add_argument(
            "--midpoint-envs",
            type=int,
            default=0,
            metavar="N",
            help="the runs' envs: also give the games played around each mark",
        )
    args = parser.parse_args(argv)
    if args.command == "published":
        return published(args, parser)
    if args.scalar and not args.marks:
        parser.error("--scalar needs --marks")
    if args.window <= 0:
        parser.error(f"--window must be > 0 frames, not {args.window:g}")
    if args.midpoint_envs and not args.marks:
        parser.error("--midpoint-envs needs --marks")
    if args.midpoint_envs < 0:
        parser.error(f"--midpoint-envs must be a number of envs, not {args.midpoint_envs}")
    if args.plot is not None and (why := plot_refusal(args.plot)):
        parser.error(why)

    if args.command == "run":
        try:
            dirs = [run_game(g, args.frames, args.out, args.overrides) for g in args.games]
        except RunEnded as ended:
            if ended.status == EXIT_STOPPED:
                print(
                    f"{ended.game}: stopped with a checkpoint in {ended.run_dir}; the same "
                    "command continues it (and then the games after it)",
                    file=sys.stderr,
                )
            else:
                print(
                    f"{ended.game}: training exited with status {ended.status} (its log: "
                    f"{ended.run_dir}/cli.log); the same command resumes from the newest "
                    "checkpoint",
                    file=sys.stderr,
                )
            return ended.status
        plot_path = args.plot or args.out / "curves.png"
    else:
        dirs, plot_path = args.runs, args.plot
    missing = without_metrics(dirs)
    if missing:
        print(f"no metrics.csv in {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    runs = [read_run(d, args.frame_skip, args.entropy_cost) for d in dirs]
    print(table(runs, args.last))
    if args.marks:
        print()
        print(at_marks(runs, sorted(args.marks), args.scalar, args.window, args.midpoint_envs))
    if plot_path is not None:
        plot(runs, plot_path)
        print(f"wrote {plot_path}")
    return 0


def published(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    missing = [str(f) for f in args.files if not f.is_file()]
    if missing:
        parser.error(
            f"no such file: {', '.join(missing)} (Dopamine's curves are "
            "baselines/atari/data/GAME.json in github.com/google/dopamine)"
        )
    if args.iterations < 1:
        parser.error(f"--iterations must be 1 or more, not {args.iterations}")
    if any(m < DOPAMINE_FRAMES_PER_ITERATION for m in args.marks):
        parser.error("--marks: Dopamine's first iteration ends at 1 M frames")
    runs = []
    for path in args.files:
        try:
            runs += read_dopamine(path)
        except (ValueError, KeyError, TypeError) as err:
            parser.error(f"{path}: not a Dopamine baseline file nor its --csv ({err!r})")
    if args.agents is not None:
        unknown = sorted(set(args.agents) - {r["agent"] for r in runs})
        if unknown:
            known = sorted({r["agent"] for r in runs})
            parser.error(f"--agents: no runs of {unknown}; the files have {known}")
        runs = [r for r in runs if r["agent"] in args.agents]
    if not runs:
        parser.error("no runs in " + ", ".join(map(str, args.files)))
    if args.beside and args.plot is None:
        parser.error("--beside needs --plot")
    if args.plot is not None and (why := plot_refusal(args.plot)):
        parser.error(why)
    missing = without_metrics(args.beside)
    if missing:
        parser.error(f"--beside: no metrics.csv in {', '.join(map(str, missing))}")
    print(published_table(runs, sorted(args.marks)))
    if args.csv is not None:
        write_dopamine_csv(runs, args.csv, args.iterations)
        print(f"wrote {args.csv}")
    if args.plot is not None:
        plot_published(runs, [read_run(b) for b in args.beside], args.plot, max(args.marks))
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Refused as refused:
        print(refused, file=sys.stderr)
        sys.exit(2)
