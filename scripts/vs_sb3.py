"""seedq's defaults beside Stable-Baselines3's, side by side, on any gymnasium id.

    pip install -e '.[bench]'                       # stable-baselines3 (keeps the torch you have)
    python scripts/vs_sb3.py                        # the standard list, 2 seeds (hours)
    python scripts/vs_sb3.py --env Taxi-v4 --env FrozenLake-v1 --seeds 0 1 2 --budget 60
    python scripts/vs_sb3.py --env MyPackage/MyEnv-v0 --threshold 100   # any registered id
    python scripts/vs_sb3.py --table-only           # re-print the table from --out

For each env and seed the runs go one after another, alternating seedq and SB3, each with the
same wall-time budget, so both see the same load on a shared machine (``uptime``'s load is
recorded at the start and end of every run). Algorithms are chosen as a user would: discrete
actions, seedq's V-trace and PPO against SB3's PPO; continuous actions, seedq's SAC and PPO
against SB3's SAC and PPO. Every algorithm keeps its library's defaults:
``seedq-train algorithm=<alg> <env group> env.id=<id> max_minutes=<budget>`` (the env groups'
own presets apply, as they do for a user) and ``PPO("MlpPolicy", env)`` / ``SAC(...)``
(``scripts/vs_sb3_worker.py``), with one torch thread like seedq's learner (``--sb3-threads``).

Per run: time and env steps until the 100-episode mean return first reached the threshold
(gymnasium's ``reward_threshold``, or the one stated in :data:`CASES`), the 100-episode mean at
the budget, env steps/s. Results go to ``<out>/results.jsonl`` (one JSON line per run, also
printed) and the table to ``<out>/table.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / "vs_sb3_worker.py"
DEFAULT_BUDGET_S = 60.0


@dataclass(frozen=True)
class Case:
    """One env of the table: how each library makes it, the bar, the budget."""

    name: str
    gym_id: str  # what SB3 makes (gymnasium id)
    seedq_env: tuple[str, ...]  # seedq's env overrides
    threshold: float | None = None
    source: str = "gymnasium reward_threshold"
    budget_s: float = DEFAULT_BUDGET_S
    max_episode_steps: int | None = None  # for envs without a time limit of their own
    continuous: bool | None = None  # None: read from the env's action space


def gym_case(env_id: str, **fields: Any) -> Case:
    return Case(env_id, env_id, ("env=gym", f"env.id={env_id}"), **fields)


def mujoco_case(env_id: str, **fields: Any) -> Case:
    return Case(env_id, env_id, ("env=mujoco", f"env.id={env_id}"), **fields)


def minatar_case(game: str, gym_name: str, **fields: Any) -> Case:
    return Case(
        f"MinAtar {game}",
        f"MinAtar/{gym_name}-v1",
        ("env=minatar", f"env.id={game}"),
        source="none (MinAtar publishes curves, not a bar)",
        max_episode_steps=10_000,  # seedq's MinAtar time limit, given to SB3's env too
        continuous=False,
        **fields,
    )


CASES = (
    # CartPole-v1 is seedq-train's own default env group (gymnasium's native vector env).
    Case("CartPole-v1", "CartPole-v1", ("env=cartpole",), 475.0, budget_s=30.0),
    gym_case("Acrobot-v1", threshold=-100.0, budget_s=45.0),
    gym_case("MountainCar-v0", threshold=-110.0, budget_s=45.0),
    gym_case("LunarLander-v3", threshold=200.0, budget_s=90.0),
    gym_case("FrozenLake-v1", threshold=0.7),
    gym_case(
        "CliffWalking-v1",
        threshold=-20.0,
        source="stated: the safe path pays -17, the shortest -13; no time limit in gymnasium, "
        "episodes cut at 200 steps",
        max_episode_steps=200,
    ),
    gym_case("Taxi-v4", threshold=8.0, budget_s=120.0),
    gym_case("Pendulum-v1", threshold=-200.0, source="stated (gymnasium has none)"),
    gym_case("MountainCarContinuous-v0", threshold=90.0),
    mujoco_case("Hopper-v5", threshold=3800.0, budget_s=120.0),
    mujoco_case("HalfCheetah-v5", threshold=4800.0, budget_s=90.0),
    minatar_case("breakout", "Breakout"),
    minatar_case("space_invaders", "SpaceInvaders"),
)


def find_case(env_id: str) -> Case:
    """The listed case of ``env_id`` (by name or gymnasium id), else a generic gym one."""
    for case in CASES:
        if env_id in (case.name, case.gym_id):
            return case
    import gymnasium as gym

    threshold = gym.spec(env_id).reward_threshold
    return gym_case(env_id, threshold=None if threshold is None else float(threshold))


def is_continuous(case: Case) -> bool:
    if case.continuous is not None:
        return case.continuous
    import gymnasium as gym

    env = gym.make(case.gym_id)
    try:
        return isinstance(env.action_space, gym.spaces.Box)
    finally:
        env.close()


def pairs(continuous: bool) -> list[tuple[str, str]]:
    """(framework, algorithm) in the order they run: seedq and SB3 alternate."""
    if continuous:
        return [("seedq", "sac"), ("sb3", "sac"), ("seedq", "ppo"), ("sb3", "ppo")]
    return [("seedq", "vtrace"), ("sb3", "ppo"), ("seedq", "ppo")]


# ---------------------------------------------------------------------------- seedq runs


def seedq_command(case: Case, algorithm: str, seed: int, budget_s: float, run_dir: Path) -> list:
    cmd = [sys.executable, "-m", "seedq.cli", f"algorithm={algorithm}", *case.seedq_env]
    if case.max_episode_steps is not None and "env=minatar" not in case.seedq_env:
        cmd.append(f"env.max_episode_steps={case.max_episode_steps}")
    # log_interval_s=1: the threshold crossing is read off the metrics rows; SB3's worker
    # checks at every episode end, so this side's crossing times are late by up to a second.
    return [
        *cmd,
        f"seed={seed}",
        f"max_minutes={budget_s / 60:.6g}",
        "log_interval_s=1",
        f"hydra.run.dir={run_dir}",
    ]


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with open(path) as f:
        return [
            {k: float(v) for k, v in row.items() if v not in ("", None)}
            for row in csv.DictReader(f)
        ]


def seedq_result(rows: list[dict[str, float]], threshold: float | None) -> dict[str, Any]:
    """Curve and threshold crossing from seedq's metrics rows (as the run's stop rule reads
    them: at least 100 finished episodes)."""
    curve = [
        [r["wall_time"], r["env_steps"], r.get("return_mean"), r.get("episode/count", 0)]
        for r in rows
    ]
    hit = None
    if threshold is not None:
        hit = next(
            (
                r
                for r in rows
                if r.get("episode/count", 0) >= 100 and r.get("return_mean", -1e300) >= threshold
            ),
            None,
        )
    last = rows[-1] if rows else {}
    wall = last.get("wall_time", 0.0)
    return {
        "wall_s": wall,
        "env_steps": last.get("env_steps", 0),
        "steps_per_s": last.get("env_steps", 0) / wall if wall else 0.0,
        "final_return": last.get("return_mean"),
        "episodes": last.get("episode/count", 0),
        "time_to_threshold_s": hit["wall_time"] if hit else None,
        "steps_to_threshold": hit["env_steps"] if hit else None,
        "updates": last.get("train/updates"),
        "curve": curve,
    }


def run_seedq(case: Case, algorithm: str, seed: int, budget_s: float, out: Path) -> dict:
    run_dir = out / "runs" / f"{slug(case.name)}_seedq_{algorithm}_{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd = seedq_command(case, algorithm, seed, budget_s, run_dir)
    load_start, start = os.getloadavg()[0], time.monotonic()
    run_dir.mkdir(parents=True)
    with open(run_dir.with_suffix(".log"), "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    result = seedq_result(read_metrics(run_dir), case.threshold)
    result.update(
        framework="seedq",
        algorithm=algorithm,
        seed=seed,
        budget_s=budget_s,
        exit_code=code,
        process_s=round(time.monotonic() - start, 2),
        load_start=load_start,
        load_end=os.getloadavg()[0],
        command=" ".join(cmd[3:]),
    )
    return result


def run_sb3(
    case: Case, algorithm: str, seed: int, budget_s: float, out: Path, threads: int = 1
) -> dict:
    path = out / "runs" / f"{slug(case.name)}_sb3_{algorithm}_{seed}.json"
    cmd = [sys.executable, str(WORKER), "--env-id", case.gym_id, "--algo", algorithm]
    cmd += ["--threads", str(threads)]
    cmd += ["--seconds", str(budget_s), "--seed", str(seed), "--out", str(path)]
    if case.threshold is not None:
        cmd += ["--threshold", str(case.threshold)]
    if case.max_episode_steps is not None:
        cmd += ["--max-episode-steps", str(case.max_episode_steps)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with open(path.with_suffix(".log"), "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0 or not path.exists():
        tail = path.with_suffix(".log").read_text().strip().splitlines()[-1:]
        return {
            "framework": "sb3",
            "algorithm": algorithm,
            "seed": seed,
            "exit_code": code,
            "error": tail[0] if tail else f"exit {code}",
            "budget_s": budget_s,
        }
    result = json.loads(path.read_text())
    result.update(exit_code=code, command=f"{algorithm.upper()}('MlpPolicy', {case.gym_id})")
    return result


def slug(name: str) -> str:
    return name.replace("/", "_").replace(" ", "_")


# ---------------------------------------------------------------------------- the table


def steady_speed(curve: list[list[float]]) -> float | None:
    """Env steps/s over the second half of a run's wall time: past start-up and the random
    steps before the first update (SAC's ``learning_starts``), the rate training holds."""
    if len(curve) < 2:
        return None
    end_t, end_steps = curve[-1][0], curve[-1][1]
    mid = next(row for row in curve if row[0] >= end_t / 2)
    return (end_steps - mid[1]) / (end_t - mid[0]) if end_t > mid[0] else None


def fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def summarise(results: list[dict]) -> dict[str, Any]:
    """Seeds of one (env, framework, algorithm) folded into the table's cells."""
    reached = [r for r in results if r.get("time_to_threshold_s") is not None]
    finals = [r["final_return"] for r in results if r.get("final_return") is not None]
    speeds = [r["steps_per_s"] for r in results if r.get("steps_per_s")]
    steady = [v for v in (steady_speed(r.get("curve", [])) for r in results) if v is not None]
    return {
        "seeds": len(results),
        "reached": len(reached),
        "time": statistics.median(r["time_to_threshold_s"] for r in reached) if reached else None,
        "steps": statistics.median(r["steps_to_threshold"] for r in reached) if reached else None,
        "final": statistics.mean(finals) if finals else None,
        "final_min": min(finals) if finals else None,
        "final_max": max(finals) if finals else None,
        "speed": statistics.mean(speeds) if speeds else None,
        "steady": statistics.mean(steady) if steady else None,
    }


def beats(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """seedq's row wins: it reached the threshold in at least as many seeds and, where SB3
    reached it too, no later (median); or, where neither reached it, a higher mean return."""
    if theirs["reached"]:
        return ours["reached"] >= theirs["reached"] and ours["time"] <= theirs["time"]
    if ours["reached"]:
        return True
    return (ours["final"] or -float("inf")) > (theirs["final"] or -float("inf"))


def table(results: list[dict]) -> str:
    lines = [
        "| env (threshold) | run | reached | time to threshold (s, median) | env steps to "
        "threshold | return at budget (mean, min..max) | env steps/s (2nd half) | budget s "
        "| seedq wins? |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    envs = list(dict.fromkeys(r["env"] for r in results))
    for env in envs:
        runs = [r for r in results if r["env"] == env and "error" not in r]
        groups: dict[tuple[str, str], list[dict]] = {}
        for r in runs:
            groups.setdefault((r["framework"], r["algorithm"]), []).append(r)
        sums = {key: summarise(rs) for key, rs in groups.items()}
        threshold = next((r.get("threshold") for r in runs if r.get("threshold") is not None), None)
        for (framework, algorithm), s in sums.items():
            verdict = ""
            if framework == "seedq":
                rivals = [
                    k
                    for k in sums
                    if k[0] == "sb3" and (k[1] == algorithm or algorithm == "vtrace")
                ]
                verdict = ", ".join(
                    f"{'yes' if beats(s, sums[k]) else 'no'} vs SB3 {k[1].upper()}" for k in rivals
                )
            label = f"{env} ({fmt(threshold, 'g')})"
            budget = groups[(framework, algorithm)][0]["budget_s"]
            lines.append(
                f"| {label} | {framework} {algorithm.upper()} | {s['reached']}/{s['seeds']} | "
                f"{fmt(s['time'], '.0f')} | {fmt(s['steps'])} | {fmt(s['final'], '.1f')} "
                f"({fmt(s['final_min'], '.1f')}..{fmt(s['final_max'], '.1f')}) | "
                f"{fmt(s['speed'])} ({fmt(s['steady'])}) | {fmt(budget, 'g')} | {verdict} |"
            )
    for r in results:
        if "error" in r:
            lines.append(
                f"| {r['env']} | {r['framework']} {r['algorithm'].upper()} | failed: "
                f"{r['error'][:120]} | | | | | | |"
            )
    return "\n".join(lines)


def load_results(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", default=[], help="env id or case name")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--budget", type=float, default=None, help="seconds per run (all envs)")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="x each case's budget")
    parser.add_argument("--threshold", type=float, default=None, help="override the bar")
    parser.add_argument(
        "--only", action="append", default=[], help="framework:algorithm, e.g. seedq:ppo"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/vs_sb3"))
    parser.add_argument(
        "--sb3-threads", type=int, default=1, help="SB3's torch threads (0: torch's default)"
    )
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        cases = [find_case(e) for e in args.env] if args.env else list(CASES)
        for case in cases:
            if args.threshold is not None:
                case = replace(case, threshold=args.threshold, source="stated on the command line")
            budget = args.budget or case.budget_s * args.budget_scale
            order = pairs(is_continuous(case))
            if args.only:
                order = [p for p in order if ":".join(p) in args.only]
            for seed in args.seeds:
                for framework, algorithm in order:
                    if framework == "seedq":
                        result = run_seedq(case, algorithm, seed, budget, args.out)
                    else:
                        result = run_sb3(case, algorithm, seed, budget, args.out, args.sb3_threads)
                    result.update(env=case.name, threshold=case.threshold, source=case.source)
                    line = json.dumps({k: v for k, v in result.items() if k != "curve"})
                    print(line, flush=True)
                    with open(args.out / "results.jsonl", "a") as f:
                        f.write(json.dumps(result) + "\n")
    text = table(load_results(args.out))
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
