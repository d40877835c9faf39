"""``seedq-bench contention``: one copy of a run alone, then N copies at once, side by side.

By default each copy is ``seedq-bench train seconds=S warmup_s=W OVERRIDES`` and its figure is
the ``env_steps_per_s`` of its JSON line. ``command='...'`` times any shell command instead
(Sample Factory from its own venv, say): its figure is ``metric`` of its last JSON line, or,
with ``pattern``, the median of the first group of that regex over its output. A command still
running after ``seconds + warmup_s + grace_s`` gets SIGINT (Sample Factory 2.1.1 ignores its
own time limit), then SIGTERM, then SIGKILL.

``share=true`` gives the N copies ``hardware.runs_at_once=N``, as a Hydra joblib sweep of N
jobs sizes its runs (seedq/launch/sharing.py); the copy alone keeps the whole machine.

``neighbours=K`` adds K CPU burners (one busy Python loop each) during the N-at-once phase:
``copies=1 neighbours=2`` is "one run beside a busy neighbour per core". ``rounds=R`` repeats
the alone / N-at-once pair. Each copy's scheduler counters come from ``wait4``'s rusage (its
whole process tree, start-up included): voluntary switches count waits (a blocking receive, a
lock), involuntary ones count preemptions by a busier thread or neighbour.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from seedq.bench.common import BenchError, print_json, print_table, scratch_dir, split_args

OPTIONS = {
    "copies": 2,
    "seconds": 20.0,
    "warmup_s": 5.0,
    "neighbours": 0,
    "rounds": 1,
    "command": "",
    "metric": "env_steps_per_s",
    "pattern": "",
    "grace_s": 60.0,
    "share": False,
}
BURNER = "while True: pass"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


@dataclass
class CopyResult:
    """One copy's figure and what its process tree cost the scheduler."""

    figure: float
    wall_s: float
    cpu_s: float
    voluntary: int  # context switches while waiting (receive, lock, sleep)
    involuntary: int  # preemptions

    def per_kilo_unit(self, switches: int) -> float:
        """Switches per 1,000 units of the figure (env steps for seedq)."""
        return 1000 * switches / max(self.figure * self.wall_s, 1e-9)

    def switches(self) -> dict[str, float]:
        return {
            "voluntary": round(self.per_kilo_unit(self.voluntary), 2),
            "involuntary": round(self.per_kilo_unit(self.involuntary), 2),
        }


def load_average() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def figure_of(output: str, metric: str, pattern: str) -> float | None:
    """The copy's throughput: the median ``pattern`` match, or ``metric`` of its JSON line."""
    if pattern:
        values = [float(m.group(1)) for m in re.finditer(pattern, output)]
        return statistics.median(values) if values else None
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line).get(metric)
            except json.JSONDecodeError:
                continue
            return None if value is None else float(value)
    return None


def _wait_all(procs: list[subprocess.Popen], start: float, deadline: float) -> list[tuple]:
    """``wait4`` on each of ``procs`` (rusage covers the children it reaped): (exit status,
    rusage, seconds since ``start``) each, in order. Past ``deadline`` the process groups of
    those still running get SIGINT, then SIGTERM and SIGKILL 10 s apart."""
    done: dict[int, tuple] = {}
    sent = 0
    while len(done) < len(procs):
        for i, proc in enumerate(procs):
            if i in done:
                continue
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                done[i] = (proc.returncode, usage, time.monotonic() - start)
        late = time.monotonic() > deadline + 10 * sent and sent < len(STOP_SIGNALS)
        for i, proc in enumerate(procs):
            if late and i not in done:
                os.killpg(proc.pid, STOP_SIGNALS[sent])
        sent += late
        time.sleep(0.05)
    return [done[i] for i in range(len(procs))]


def run_phase(command: list[str] | str, copies: int, burners: int, options: dict) -> list:
    """Start ``copies`` copies at once beside ``burners`` CPU burners; each copy's result."""
    limit = options["seconds"] + options["warmup_s"] + options["grace_s"]
    procs: list[subprocess.Popen] = []
    burning = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(burners)]
    logs = [tempfile.TemporaryFile("w+") for _ in range(copies)]
    try:
        start = time.monotonic()
        for out in logs:
            procs.append(
                subprocess.Popen(
                    with_run_dir(command),
                    shell=isinstance(command, str),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its whole tree can be interrupted at once
                )
            )
        results = []
        waited = _wait_all(procs, start, start + limit)
        for (code, usage, wall), out in zip(waited, logs, strict=True):
            out.seek(0)
            text = out.read()
            figure = figure_of(text, options["metric"], options["pattern"])
            if figure is None:
                tail = "\n".join(text.strip().splitlines()[-15:])
                raise BenchError(f"a copy (exit {code}) reported no figure; its output:\n{tail}")
            cpu = usage.ru_utime + usage.ru_stime
            results.append(CopyResult(figure, wall, cpu, usage.ru_nvcsw, usage.ru_nivcsw))
        return results
    finally:
        for proc in procs:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for burner in burning:
            burner.kill()
            burner.wait()
        for out in logs:
            out.close()


_runs: list[str] = []


def with_run_dir(command: list[str] | str) -> list[str] | str:
    """A ``seedq-bench train`` copy with a run dir of its own under this bench's scratch dir,
    removed when the bench exits (train keeps the dir it reports: the copies left theirs in
    the TMPDIR). A user's ``command=`` is run as given."""
    if isinstance(command, str):
        return command
    if not _runs:
        _runs.append(scratch_dir("seedq-bench-contention-"))
    return [*command, f"run_dir={tempfile.mkdtemp(dir=_runs[0])}"]


def copy_command(options: dict, overrides: list[str], runs: int = 1) -> list[str] | str:
    if options["command"]:
        return options["command"]
    return [
        sys.executable,
        "-m",
        "seedq.bench.cli",
        "train",
        f"seconds={options['seconds']}",
        f"warmup_s={options['warmup_s']}",
        *overrides,
        *([f"hardware.runs_at_once={runs}"] if options["share"] and runs > 1 else []),
    ]


def run(argv: list[str]) -> dict[str, Any]:
    options, overrides = split_args(argv, OPTIONS)
    if options["copies"] < 1 or options["rounds"] < 1 or options["neighbours"] < 0:
        raise BenchError("copies and rounds must be >= 1, neighbours >= 0")
    if options["command"] and overrides:
        raise BenchError(f"{overrides}: config overrides apply to seedq's own run, not command=")
    n, k = options["copies"], options["neighbours"]
    if options["command"] and options["share"]:
        raise BenchError("share=true sizes seedq's own runs; it does not apply to command=")
    command = copy_command(options, overrides)
    together_command = copy_command(options, overrides, n)
    rows, rounds = [], []
    for r in range(options["rounds"]):
        load_before = load_average()
        alone = run_phase(command, 1, 0, options)[0]
        load_between = load_average()
        together = run_phase(together_command, n, k, options)
        aggregate = sum(c.figure for c in together)
        rounds.append(
            {
                "alone": alone.figure,
                "each": [c.figure for c in together],
                "aggregate": aggregate,
                "ratio": aggregate / alone.figure,
                "switches_per_1k": {
                    "alone": alone.switches(),
                    "together": [c.switches() for c in together],
                },
                "load_before": load_before,
                "load_between": load_between,
                "load_after": load_average(),
            }
        )
        phases = [("alone", 0, alone)] + [(f"{n} at once", i, c) for i, c in enumerate(together)]
        for phase, i, c in phases:
            rows.append(
                [
                    r,
                    phase,
                    i,
                    c.figure,
                    c.cpu_s / c.wall_s,
                    c.per_kilo_unit(c.voluntary),
                    c.per_kilo_unit(c.involuntary),
                ]
            )
    what = options["command"] or f"seedq-bench train {' '.join(overrides)}".strip()
    if options["share"]:
        what += f" (the {n} at once with hardware.runs_at_once={n})"
    print_table(
        f"contention: {what}, alone then {n} at once" + (f" beside {k} CPU burners" if k else ""),
        ["round", "phase", "copy", options["metric"], "cores busy", "vol cs/1k", "invol cs/1k"],
        rows,
    )
    ratios = [x["ratio"] for x in rounds]
    print_table(
        "aggregate vs alone",
        ["round", "alone", "aggregate", "ratio", "load before", "load after"],
        [
            [i, x["alone"], x["aggregate"], x["ratio"], x["load_before"], x["load_after"]]
            for i, x in enumerate(rounds)
        ],
    )
    figures = {
        "command": what,
        "copies": n,
        "neighbours": k,
        "share": options["share"],
        "metric": options["metric"],
        "ratio": statistics.median(ratios),
        "rounds": rounds,
    }
    print_json("contention", figures)
    return figures
