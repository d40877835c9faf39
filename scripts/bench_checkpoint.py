"""What a checkpoint costs a run, and so how often one can be taken.

    PYTHONPATH=$PWD python scripts/bench_checkpoint.py snapshot          # ~1 minute
    PYTHONPATH=$PWD python scripts/bench_checkpoint.py throughput        # ~15 minutes
    PYTHONPATH=$PWD python scripts/bench_checkpoint.py stress --preset vtrace-atari  # ~3 minutes

``snapshot``: for each preset's agent (model, target networks, optimizer state filled by one
Adam step), the pause of the run (``copy_tensors`` of the state, what happens under the weights
lock), the background write (``torch.save``, fsync, rename) and the checkpoint's size; from
them, the share of a core a checkpoint every minute or every 15 s costs.

``throughput``: the default CartPole V-trace run, side by side with ``checkpoint.every_minutes``
10, 1 and 0.25 (rounds interleaved, so a neighbour's load falls on all of them alike): env
steps/s after the warm-up, each relative to the 10-minute run of its round, with the time
spent under the lock for checkpoints. One JSON line per run, then a Markdown table. On a
shared box separate runs differ by more than a checkpoint costs; ``stress`` resolves it.

``stress``: one run of the preset, alternating windows of ``--window-s`` without checkpoints
and with one every ``--every-s`` (1 s: 60 times the default rate), taken by a side thread as
the run loop takes them; env steps/s of each window with checkpoints against the window just
before it, so neighbouring load falls on both alike. A checkpoint every minute costs
``every_s / 60`` of the measured difference.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import threading
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

import seedq
from seedq.agents.registry import build_agent
from seedq.arch.seed import SeedRun
from seedq.bench.common import scratch_dir
from seedq.cli import to_config
from seedq.config import register_configs
from seedq.core.agent import RunContext
from seedq.envs import env_spec
from seedq.learner.checkpoint import copy_tensors, save_checkpoint
from seedq.learner.device import prepare_learner_thread

CONF = str(Path(seedq.__file__).parent / "conf")
register_configs()
PRESETS = {
    "vtrace-cartpole": [],
    "vtrace-atari": ["env=atari", "env.id=ALE/Pong-v5"],
    "r2d2-atari": ["algorithm=r2d2", "env=atari", "env.id=ALE/Pong-v5"],
}


def config(run_dir: str, overrides: list[str]):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"run_dir={run_dir}", *overrides])
    return to_config(cfg)


def trained_agent(overrides: list[str]):
    """The preset's agent with its optimizer state filled (as after the first update)."""
    cfg = config(scratch_dir("seedq-ckpt-bench-"), overrides)
    spec = env_spec(cfg.env, seed=0)
    context = RunContext(cfg, spec, torch.device("cpu"), threading.Lock(), threading.Event())
    agent = build_agent(context)
    optimizers = getattr(agent.learner, "optimizers", None) or {"": agent.learner.optimizer}
    for optimizer in optimizers.values():
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = torch.zeros_like(param)
        optimizer.step()
    return agent


def snapshot(repeats: int) -> list[dict]:
    # As in the learner's run loop, where checkpoints are copied (hardware.num_threads=1): an
    # OpenMP team on a busy 2-core box makes the copy several times slower.
    torch.set_num_threads(1)
    rows = []
    for name, overrides in PRESETS.items():
        agent = trained_agent(overrides)
        run_dir = scratch_dir("seedq-ckpt-bench-")
        fresh_s, reused_s, write_s, written = [], [], [], None
        for i in range(repeats):
            # Side by side: a copy into new memory, and (as a run does) into the tensors of the
            # checkpoint written before.
            begin = time.perf_counter()
            copy_tensors(agent.state_dict())
            fresh_s.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            state = copy_tensors(agent.state_dict(), into=written)
            reused_s.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            path = save_checkpoint(run_dir, {**state, "env_steps": i, "updates": i}, keep=2)
            write_s.append(time.perf_counter() - begin)
            written = state
        lock_ms = 1000 * statistics.median(reused_s)
        write_ms = 1000 * statistics.median(write_s)
        row = {
            "bench": "checkpoint_snapshot",
            "preset": name,
            "mbytes": round(Path(path).stat().st_size / 2**20, 2),
            "lock_ms_fresh_memory": round(1000 * statistics.median(fresh_s), 3),
            "lock_ms": round(lock_ms, 3),
            "write_ms": round(write_ms, 1),
            # A run pauses lock_ms per checkpoint and the writer thread takes write_ms of CPU.
            "pause_pct_every_1min": round(100 * lock_ms / 60_000, 4),
            "writer_cpu_pct_every_1min": round(100 * write_ms / 60_000, 3),
            "pause_pct_every_15s": round(100 * lock_ms / 15_000, 4),
            "writer_cpu_pct_every_15s": round(100 * write_ms / 15_000, 3),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(
        "\n| preset | checkpoint MB | under the lock, ms (new memory / reused) | background "
        "write, ms | pause at 1/min | writer CPU at 1/min | pause at 4/min | writer CPU at "
        "4/min |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['preset']} | {r['mbytes']} | {r['lock_ms_fresh_memory']} / {r['lock_ms']} "
            f"| {r['write_ms']} | {r['pause_pct_every_1min']} % "
            f"| {r['writer_cpu_pct_every_1min']} % | {r['pause_pct_every_15s']} % "
            f"| {r['writer_cpu_pct_every_15s']} % |"
        )
    return rows


def one_run(every_minutes: float, seconds: float, warmup_s: float) -> dict:
    run_dir = scratch_dir("seedq-ckpt-bench-")
    overrides = [
        f"checkpoint.every_minutes={every_minutes}",
        f"max_minutes={seconds / 60}",
        "total_env_steps=100000000000",
        "log_interval_s=1",
    ]
    run = SeedRun(config(run_dir, overrides), run_dir)
    run.run()
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        rows = [(float(r["wall_time"]), int(r["env_steps"])) for r in csv.DictReader(f)]
    steady = [(t, s) for t, s in rows if t >= warmup_s]
    (t0, s0), (t1, s1) = steady[0], steady[-2]  # the last row is the stop's, after the budget
    timing = run.checkpoint_timing()
    return {
        "bench": "checkpoint_throughput",
        "every_minutes": every_minutes,
        "steps_per_s": round((s1 - s0) / (t1 - t0), 1),
        "checkpoints": timing["written"],
        "lock_ms_mean": round(timing["lock_ms_mean"], 3),
        "lock_ms_max": round(timing["lock_ms_max"], 3),
        "write_ms_last": round(timing["write_ms_last"], 1),
    }


def throughput(intervals: list[float], rounds: int, seconds: float, warmup_s: float) -> None:
    results: dict[float, list[dict]] = {every: [] for every in intervals}
    for round_ in range(rounds):
        # Rotate the order each round so no interval always runs first (or after another).
        order = intervals[round_ % len(intervals) :] + intervals[: round_ % len(intervals)]
        for every in order:
            row = {**one_run(every, seconds, warmup_s), "round": round_}
            print(json.dumps(row), flush=True)
            results[every].append(row)
    base = intervals[0]
    print(
        f"\n| checkpoint every | env steps/s (median of {rounds}) | vs every {base:g} min "
        "(per round, median) | checkpoints per run | under the lock per checkpoint, ms "
        "(mean / max) |"
    )
    print("|---|---|---|---|---|")
    for every in intervals:
        rows = results[every]
        pairs = zip(rows, results[base], strict=True)
        ratios = [r["steps_per_s"] / b["steps_per_s"] for r, b in pairs]
        print(
            f"| {every:g} min | {statistics.median(r['steps_per_s'] for r in rows):,.0f} "
            f"| {100 * (statistics.median(ratios) - 1):+.1f} % "
            f"({', '.join(f'{100 * (x - 1):+.1f}' for x in ratios)}) "
            f"| {statistics.median(r['checkpoints'] for r in rows):.0f} "
            f"| {statistics.mean(r['lock_ms_mean'] for r in rows):.2f} / "
            f"{max(r['lock_ms_max'] for r in rows):.2f} |"
        )


def stress(preset: str, seconds: float, window_s: float, every_s: float, warmup_s: float):
    run_dir = scratch_dir("seedq-ckpt-bench-")
    overrides = [
        *PRESETS[preset],
        "checkpoint.every_minutes=0",
        f"max_minutes={seconds / 60}",
        "total_env_steps=100000000000",
        "log_interval_s=5",
    ]
    run = SeedRun(config(run_dir, overrides), run_dir)
    pairs: list[tuple[float, float]] = []

    def window(checkpoints: bool) -> float:
        begin, steps = time.monotonic(), run.stats.env_steps
        while time.monotonic() - begin < window_s and not run.stop.is_set():
            if checkpoints:
                run.save(time.monotonic())
            run.stop.wait(every_s if checkpoints else 0.1)
        return (run.stats.env_steps - steps) / (time.monotonic() - begin)

    def side() -> None:
        prepare_learner_thread(run.cfg.hardware)  # copies as the run loop's thread does
        if run.stop.wait(warmup_s):
            return
        while not run.stop.is_set():
            without = window(False)
            with_checkpoints = window(True)
            if not run.stop.is_set():
                pairs.append((without, with_checkpoints))

    thread = threading.Thread(target=side, daemon=True)
    thread.start()
    run.run()
    thread.join()
    ratios = [w / o for o, w in pairs]
    cost = 1 - statistics.median(ratios)
    timing = run.checkpoint_timing()
    row = {
        "bench": "checkpoint_stress",
        "preset": preset,
        "every_s": every_s,
        "window_s": window_s,
        "pairs": len(pairs),
        "steps_per_s_without": round(statistics.median(o for o, _ in pairs), 1),
        "steps_per_s_with": round(statistics.median(w for _, w in pairs), 1),
        "cost_pct": round(100 * cost, 2),
        "cost_pct_per_pair": [round(100 * (1 - r), 1) for r in ratios],
        "cost_pct_every_1min": round(100 * cost * every_s / 60, 3),
        "checkpoints": timing["snapshots"],
        "lock_ms_mean": round(timing["lock_ms_mean"], 2),
        "lock_ms_max": round(timing["lock_ms_max"], 2),
        "write_ms_last": round(timing["write_ms_last"], 1),
    }
    print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["snapshot", "throughput", "stress"])
    parser.add_argument("--preset", default="vtrace-cartpole", choices=list(PRESETS))
    parser.add_argument("--window-s", type=float, default=10.0, help="stress: window length")
    parser.add_argument("--every-s", type=float, default=1.0, help="stress: checkpoint period")
    parser.add_argument("--repeats", type=int, default=20, help="snapshot: checkpoints timed")
    parser.add_argument("--intervals", default="10,1,0.25", help="throughput: minutes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=100.0, help="run length")
    parser.add_argument("--warmup-s", type=float, default=15.0)
    args = parser.parse_args()
    if args.part == "snapshot":
        snapshot(args.repeats)
    elif args.part == "stress":
        stress(args.preset, args.seconds, args.window_s, args.every_s, args.warmup_s)
    else:
        intervals = [float(x) for x in args.intervals.split(",")]
        throughput(intervals, args.rounds, args.seconds, args.warmup_s)


if __name__ == "__main__":
    main()
