"""Soak test: a CartPole run with an actor killed every few minutes and a fuzz burst every minute.

    PYTHONPATH=$PWD python scripts/soak.py --minutes 60

Checks, printed at the end: learner RSS growth after the warm-up < 5 %, open fds flat, and env
steps counted by the actors equal to the learner's count within what is in flight plus what
killed actors stepped after their last report (they report every
``seedq.actor.main.REPORT_EVERY_S``; a kill -9 loses the rest of their count, not the steps).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

import seedq
from seedq.actor.main import REPORT_EVERY_S
from seedq.arch.seed import SeedRun
from seedq.bench.fuzz import fire_burst
from seedq.cli import to_config
from seedq.config import register_configs

CONF = str(Path(seedq.__file__).parent / "conf")
register_configs()
# "[actor PID] ...: actors 0,1: N env steps" (periodic) or "... stopped after N env steps".
ACTOR_COUNT = re.compile(r"\[actor (\d+)\] .*actors [\d,]+(?::| stopped after) (\d+) env steps")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def actor_counts(run_dir: str) -> dict[int, int]:
    """The last env-step count each actor process reported, by pid."""
    counts: dict[int, int] = {}
    for log in Path(run_dir).glob("actor_*.log"):
        for match in ACTOR_COUNT.finditer(log.read_text()):
            counts[int(match[1])] = int(match[2])
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--kill-every-s", type=float, default=180.0)
    parser.add_argument("--fuzz-every-s", type=float, default=60.0)
    parser.add_argument("--fuzz-size", type=int, default=1000)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--run-dir", default="")
    args = parser.parse_args()
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="seedq-soak-")
    overrides = [
        f"run_dir={run_dir}",
        f"max_minutes={args.minutes}",
        "total_env_steps=100000000000",
        "stop_at_return=null",
        "log_interval_s=10",
        "actor.restart_backoff_s=1",
        "actor.max_restarts=100",
    ]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    run = SeedRun(to_config(cfg), run_dir)
    samples: list[tuple[float, int, int]] = []
    kills: list[int] = []
    bursts: list[int] = []
    start = time.monotonic()
    random.seed(0)

    def watch() -> None:
        next_kill, next_fuzz = args.kill_every_s, args.fuzz_every_s
        ids = range(cfg.actor.num_actors * cfg.actor.batches_per_actor)
        while not run.stop.wait(1.0):
            t = time.monotonic() - start
            if not samples or t - samples[-1][0] >= 10:
                samples.append((t, rss_bytes(), open_fds()))
            if t >= next_kill and run.actors.pids:
                pid = random.choice(run.actors.pids)
                os.kill(pid, signal.SIGKILL)
                kills.append(pid)
                next_kill += args.kill_every_s
            if t >= next_fuzz:
                fire_burst(run.endpoint, seed=len(bursts), count=args.fuzz_size, actor_ids=ids)
                bursts.append(len(bursts))
                next_fuzz += args.fuzz_every_s

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    summary = run.run()
    watcher.join(timeout=10)

    warm = [s for s in samples if s[0] >= args.warmup_s] or samples
    rss0, fds0 = warm[0][1], warm[0][2]
    rss_growth = (max(s[1] for s in warm) - rss0) / rss0 * 100
    fds_last = warm[-1][2]
    counts = actor_counts(run_dir)
    actors = sum(counts.values())
    learner = summary.env_steps
    in_flight = cfg.actor.num_actors * cfg.actor.batches_per_actor * cfg.actor.envs_per_batch
    unreported = len(kills) * summary.steps_per_s / cfg.actor.num_actors * REPORT_EVERY_S
    gap = learner - actors
    checks = {
        f"learner RSS growth after warm-up {rss_growth:.2f} % < 5 %": rss_growth < 5,
        f"open fds {fds0} -> {fds_last} (flat within 5)": abs(fds_last - fds0) <= 5,
        f"env steps: learner {learner}, actors {actors}, gap {gap} within [0, in flight "
        f"{in_flight} + killed actors' unreported <= {unreported:.0f}]": 0
        <= gap
        <= in_flight + unreported,
        f"run ended by its budget ({summary.stop_reason})": summary.stop_reason == "max_minutes",
    }
    print(
        f"soak {args.minutes:g} min in {run_dir}: {len(kills)} actor kills, {len(bursts)} fuzz "
        f"bursts of {args.fuzz_size}, {summary.env_steps} env steps, "
        f"{summary.steps_per_s:.0f} steps/s, return {summary.return_mean:.1f}"
    )
    print(f"faults: {(Path(run_dir) / 'faults.json').read_text()}")
    for what, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
