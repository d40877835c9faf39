"""Run the standard seedq-bench suite and write its tables to benchmarks/RESULTS.md.

    python scripts/bench_seedq.py                 # every case (about 6 minutes on 2 cores)
    python scripts/bench_seedq.py --only pipeline # the cases of one subcommand
    python scripts/bench_seedq.py --no-football   # skip the cases that need gfootball

Each case is one ``seedq-bench`` command; its table goes into the ``seedq-bench`` section of
``benchmarks/RESULTS.md`` (between markers, the rest of the file is kept) with the command,
the date and the machine, and the JSON lines go to ``benchmarks/seedq_bench.jsonl``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
JSONL = ROOT / "benchmarks" / "seedq_bench.jsonl"
BEGIN, END = "<!-- seedq-bench:begin -->", "<!-- seedq-bench:end -->"

CASES: list[tuple[str, str]] = [
    ("raw-env", "raw-env seconds=10"),
    ("raw-env", "raw-env env=atari seconds=10"),
    ("raw-env", "raw-env env=football actor.envs_per_batch=8 seconds=10"),
    (
        "raw-env",
        "raw-env env=football env.scenario=academy_3_vs_1_with_keeper actor.envs_per_batch=8 "
        "seconds=10",
    ),
    (
        "pipeline",
        "pipeline seconds=10 actor.num_actors=1 actor.envs_per_batch=8 broker.max_batch=16",
    ),
    ("pipeline", "pipeline seconds=10 actor.envs_per_batch=16 broker.max_batch=64"),
    ("pipeline", "pipeline seconds=10 actor.envs_per_batch=64 broker.max_batch=256"),
    ("pipeline", "pipeline seconds=10 obs_shape=4,84,84 obs_dtype=uint8"),
    ("inference", "inference seconds=1"),
    ("inference", "inference algorithm=r2d2 seconds=1"),
    ("train", "train seconds=30"),
    ("train", "train env=atari hardware.num_threads=2 seconds=60 warmup_s=15"),
    ("train", "train env=football actor.envs_per_batch=8 seconds=40 warmup_s=20"),
]


def run_case(args: str) -> tuple[str, dict]:
    cmd = [sys.executable, "-m", "seedq.bench.cli", *shlex.split(args)]
    print(f"$ seedq-bench {args}", flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"seedq-bench {args} failed:\n{out.stdout}\n{out.stderr}")
    lines = out.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    table = "\n".join(lines[:-1]).strip()
    print(table, flush=True)
    return table, figures


def replace_section(text: str, section: str) -> str:
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + section + rest.split(END, 1)[1]
    return text.rstrip() + "\n\n" + section + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Only the subcommands that have cases: another (--only learner, a typo) selected none,
    # and the section was rewritten with no table at all ("Machine: None").
    kinds = list(dict.fromkeys(kind for kind, _ in CASES))
    parser.add_argument("--only", choices=kinds, help="the cases of one subcommand")
    parser.add_argument("--no-football", action="store_true", help="skip env=football cases")
    args = parser.parse_args(argv)
    football = importlib.util.find_spec("gfootball") is not None and not args.no_football
    cases = [
        c for c in CASES if (args.only in (None, c[0])) and (football or "env=football" not in c[1])
    ]
    blocks, records = [], []
    for _, case in cases:
        table, figures = run_case(case)
        blocks.append(f"```\n$ seedq-bench {case}\n{table}\n```")
        records.append(figures)
    machine = records[0]["machine"] if records else {}
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = "\n\n".join(
        [
            BEGIN,
            "## seedq-bench",
            f"{when}, `python scripts/bench_seedq.py`"
            + (f" `{' '.join(argv)}`" if argv else "")
            + f". Machine: {machine.get('cpu')}, {machine.get('cores')} cores, torch "
            f"{machine.get('torch')}"
            + (f", GPU {machine['gpu']}" if "gpu" in machine else "")
            + ". Each block is one command as a user runs it; the JSON lines are in "
            "`benchmarks/seedq_bench.jsonl`.",
            *blocks,
            END,
        ]
    )
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmarks\n"
    RESULTS.write_text(replace_section(text, section))
    with open(JSONL, "a") as f:
        for record in records:
            f.write(json.dumps({"date": when, **record}) + "\n")
    print(f"wrote {RESULTS} and {JSONL}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
