"""Run the standard seedq-bench suite and write its tables to benchmarks/RESULTS.md.

    python scripts/bench_seedq.py                 # every case (about 6 minutes on 2 cores)
    python scripts/bench_seedq.py --only pipeline # the cases of one subcommand
    python scripts/bench_seedq.py --no-football   # skip the cases that need gfootball

Each case is one ``seedq-bench`` command; its table goes into the ``seedq-bench`` section of
``benchmarks/RESULTS.md`` (between markers, the rest of the file is kept) with the command,
the date and the machine, and the JSON lines go to ``benchmarks/seedq_bench.jsonl``. With
``--only`` the section keeps the other subcommands' tables and notes which were run again.
SIGTERM (or Ctrl-C) stops the running case, as ``seedq-bench`` stops, and writes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from seedq.bench.common import stop_on_sigterm, stopped_status
from seedq.files import replace_text

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
JSONL = ROOT / "benchmarks" / "seedq_bench.jsonl"
BEGIN, END = "<!-- seedq-bench:begin -->", "<!-- seedq-bench:end -->"
# One case's table in the section: its command, then what it printed.
BLOCK = re.compile(r"^```\n\$ seedq-bench (\S+)([^\n]*)\n.*?^```$", re.MULTILINE | re.DOTALL)
RERUN = "Run again with `--only "

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
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=900)
        except BaseException:
            # SIGTERM or Ctrl-C here: the case stops as seedq-bench does, its own processes
            # with it (subprocess.run's SIGKILL left them running, and SIGTERM's default
            # action the whole case).
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
    if proc.returncode != 0:
        raise SystemExit(f"seedq-bench {args} failed:\n{stdout}\n{stderr}")
    lines = stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    table = "\n".join(lines[:-1]).strip()
    print(table, flush=True)
    return table, figures


def old_section(text: str) -> tuple[list[str], dict[str, str]]:
    """The paragraphs before the first table of ``text``'s seedq-bench section (the run's
    line, the notes of ``--only`` runs) and its tables by command; nothing without one."""
    if BEGIN not in text or END not in text:
        return [], {}
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    first = BLOCK.search(body)
    head = body[: first.start() if first else len(body)]
    notes = [p.strip() for p in head.split("\n\n") if p.strip() and not p.startswith("## ")]
    tables = {m.group(1) + m.group(2): m.group(0) for m in BLOCK.finditer(body)}
    return notes, tables


def merged_tables(run: dict[str, str], kept: dict[str, str]) -> list[str]:
    """The tables of an ``--only`` run in the cases' order: those ``run`` again, and every
    other ``kept`` from the section (another subcommand's, a case not run this time)."""
    order = [case for _, case in CASES]
    commands = [c for c in order if c in run or c in kept] + [c for c in kept if c not in order]
    return [run.get(command) or kept[command] for command in commands]


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
    stop_on_sigterm()
    blocks, records = {}, []
    try:
        for _, case in cases:
            table, figures = run_case(case)
            blocks[case] = f"```\n$ seedq-bench {case}\n{table}\n```"
            records.append(figures)
    except KeyboardInterrupt as exc:
        return stopped_status("bench_seedq.py", exc)
    machine = records[0]["machine"] if records else {}
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    ran = (
        f"{when}, `python scripts/bench_seedq.py`"
        + (f" `{' '.join(argv)}`" if argv else "")
        + f". Machine: {machine.get('cpu')}, {machine.get('cores')} cores, torch "
        f"{machine.get('torch')}" + (f", GPU {machine['gpu']}" if "gpu" in machine else "") + "."
    )
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmarks\n"
    notes, kept = old_section(text)
    if args.only and (notes or kept):
        # The section's own line stays that of the run its other tables came from; this run's
        # line replaces an earlier one of the same subcommand's.
        mine = f"{RERUN}{args.only}`"
        notes = [n for n in notes if not n.startswith(mine)]
        notes.append(f"{mine} ({args.only}'s tables): {ran}")
        tables = merged_tables(blocks, kept)
    else:
        notes = [
            f"{ran} Each block is one command as a user runs it; the JSON lines are in "
            "`benchmarks/seedq_bench.jsonl`."
        ]
        tables = list(blocks.values())
    section = "\n\n".join([BEGIN, "## seedq-bench", *notes, *tables, END])
    replace_text(str(RESULTS), replace_section(text, section))
    with open(JSONL, "a") as f:
        for record in records:
            f.write(json.dumps({"date": when, **record}) + "\n")
    print(f"wrote {RESULTS} and {JSONL}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
