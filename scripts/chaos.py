"""Inject each fault into a real training run and print what it cost.

    PYTHONPATH=$PWD python scripts/chaos.py
    PYTHONPATH=$PWD python scripts/chaos.py --task "env=gym env.id=Acrobot-v1 stop_at_return=-100"
    PYTHONPATH=$PWD python scripts/chaos.py --only learner-kills --learner-kill-every-s 90

One short run per fault (tcp actors, real processes and sockets); a table row per fault:
injections, crashes (runs that failed; must be 0), recovered, seconds to recover, whether the
run still reached its target (``--task``'s return, or the fake env's step budget), and env steps
lost (an upper bound: messages refused or in flight at a kill, times the envs per message).
The task must take long enough for the faults to land (a kill every 5 s; three fuzz bursts 3 s
apart): by default V-trace on MinAtar Space Invaders to a return of 20, a minute or two here;
CartPole is solved in seconds now. The NaN fault runs the fake env (``env.nan_every``): no real
env has a NaN switch; so does the env crash (``env.crash_every``: each env batch raises at its
200th step since it was built, is built again by its actor and rejoins) and the env hang
(``env.hang_every``: at its 400th step a batch sleeps for an hour; its actor process exits after
``actor.env_timeout_s=2`` and is restarted).

``learner-kills``: ``seedq-train supervise=true`` on a longer task (``--learner-task``: MinAtar
Space Invaders to a return of 50 by default, several minutes here) with its learner killed
(``kill -9``) every ``--learner-kill-every-s``; the supervisor restarts it with resume=auto each
time. Seconds to recover: from the kill until the restarted learner has trained past its
checkpoint; env steps lost: the last metrics row before each kill minus the checkpoint the next
learner resumed from. The run's metrics must come out as one curve (env steps never going
back).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose, initialize_config_dir

import seedq
from seedq.arch.resume import read_steps
from seedq.arch.seed import SeedRun
from seedq.bench.fuzz import fire_burst
from seedq.cli import to_config
from seedq.config import register_configs

CONF = str(Path(seedq.__file__).parent / "conf")
TARGETS = ("target_return", "total_env_steps")  # the budgets that mean "reached"
FAULTS = "actor-kill,actor-stop,fuzz,nan,env-crash,env-hang,full-disk,learner-resume,learner-kills"
register_configs()


@dataclass
class Row:
    fault: str
    injections: int = 0
    crashes: int = 0
    recovered: int = 0
    recover_s: list[float] = field(default_factory=list)
    target_reached: bool = False
    steps_lost: int = 0


def make_run(run_dir: str, overrides: list[str]) -> SeedRun:
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"run_dir={run_dir}", *overrides])
    return SeedRun(to_config(cfg), run_dir)


def wait(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_ids(run: SeedRun) -> dict[int, str]:
    return {i: slot.hello.run_id for i, slot in list(run.broker.actors.items())}


def rejoined(run: SeedRun, before: dict[int, str], ids: list[int]):
    """True once every actor id in ``ids`` runs under a new run id."""
    return lambda: all(run_ids(run).get(i, before.get(i)) != before.get(i) for i in ids)


def in_process(row: Row, run_dir: str, overrides: list[str], inject) -> dict:
    """Run with ``inject(run, row)`` in a thread; the row gets the outcome."""
    run = make_run(run_dir, overrides)
    thread = threading.Thread(target=inject, args=(run, row), daemon=True)
    try:
        thread.start()
        summary = run.run()
        row.target_reached = summary.stop_reason in TARGETS
    except Exception as exc:  # noqa: BLE001 - a crash is what this table counts
        print(f"{row.fault}: run failed: {exc}", file=sys.stderr)
        row.crashes += 1
    thread.join(timeout=30)
    return json.loads((Path(run_dir) / "faults.json").read_text())


def kill_actors(every_s: float):
    def inject(run: SeedRun, row: Row) -> None:
        per_kill = run.cfg.actor.batches_per_actor * run.cfg.actor.envs_per_batch
        while not run.stop.wait(every_s):
            pids = run.actors.pids
            if not pids:
                continue
            index = random.randrange(len(pids))
            ids = run.actors.actor_ids(index)
            before = run_ids(run)
            os.kill(pids[index], signal.SIGKILL)
            killed = time.monotonic()
            row.injections += 1
            row.steps_lost += per_kill
            if wait(rejoined(run, before, ids), 60):
                row.recovered += 1
                row.recover_s.append(time.monotonic() - killed)

    return inject


def stop_actor(pause_s: float):
    def inject(run: SeedRun, row: Row) -> None:
        if not wait(lambda: run.broker.stats.env_steps > 2000, 120):
            return
        pid = run.actors.pids[0]
        ids = run.actors.actor_ids(0)
        before = run_ids(run)
        os.kill(pid, signal.SIGSTOP)
        row.injections += 1
        time.sleep(pause_s)
        os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        if wait(rejoined(run, before, ids), 60):
            row.recovered += 1
            row.recover_s.append(time.monotonic() - resumed)

    return inject


def fuzz(bursts: int, size: int):
    def inject(run: SeedRun, row: Row) -> None:
        ids = range(run.cfg.actor.num_actors * run.cfg.actor.batches_per_actor)
        for burst in range(bursts):
            if run.stop.wait(3.0):
                return
            steps = run.broker.stats.env_steps
            fire_burst(run.endpoint, seed=burst, count=size, actor_ids=ids)
            row.injections += 1
            start = time.monotonic()
            if wait(lambda s=steps: run.broker.stats.env_steps > s + 1000, 60):
                row.recovered += 1
                row.recover_s.append(time.monotonic() - start)

    return inject


def nothing(run: SeedRun, row: Row) -> None:
    return


def learner_kill_and_resume(row: Row, run_dir: str, common: list[str]) -> None:
    """kill -9 the learner (a seedq-train process) after its first checkpoint; resume it."""
    cmd = [sys.executable, "-m", "seedq.cli", *common, f"hydra.run.dir={run_dir}"]
    learner = subprocess.Popen(
        [*cmd, "checkpoint.every_minutes=0.1"],  # the first checkpoint after 6 s
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpts = Path(run_dir) / "checkpoints"
    if not wait(lambda: list(ckpts.glob("ckpt-*.pt")), 300):
        learner.kill()
        row.crashes += 1
        return
    time.sleep(2)
    learner.kill()
    learner.wait()
    row.injections += 1
    killed = time.monotonic()
    pattern = f"actor.main.*{run_dir}"
    gone = wait(
        lambda: not subprocess.run(["pgrep", "-f", pattern], capture_output=True).stdout, 60
    )
    actors_gone_s = time.monotonic() - killed
    saved = int(max(ckpts.glob("ckpt-*.pt")).name[5:-3])
    with open(Path(run_dir) / "metrics.csv") as f:
        at_kill = int(list(csv.DictReader(f))[-1]["env_steps"])
    result = subprocess.run(
        [sys.executable, "-m", "seedq.cli", f"resume={run_dir}"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    if result.returncode != 0 or not gone:
        row.crashes += 1
        return
    row.recovered += 1
    row.recover_s.append(actors_gone_s)  # until the dead learner's actors all exited
    row.target_reached = summary["stop_reason"] in TARGETS
    # Steps taken after the last checkpoint (as of the last metrics row) die with the learner.
    row.steps_lost = max(0, at_kill - saved)


RESUMED = re.compile(r"resumed at (\d+) env steps")
LEARNER_PID = re.compile(r"supervising the learner, pid (\d+)")


def learner_kills(row: Row, run_dir: str, overrides: list[str], every_s: float) -> None:
    """A supervised run whose learner is killed every ``every_s`` until the run ends."""
    # Every death is a restart here (no limit), after 1 s: the column measures the restart,
    # not the supervisor's backoff (5 s by default, doubling per death within an hour).
    own = ["supervisor.max_restarts=100000", "supervisor.backoff_s=1"]
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", "supervise=true", f"run_dir={run_dir}", *own]
        + overrides,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    log, metrics = Path(run_dir) / "cli.log", Path(run_dir) / "metrics.csv"
    lost: list[int] = []  # env steps each kill cost

    def text() -> str:
        return log.read_text() if log.exists() else ""

    while not wait(lambda: supervisor.poll() is not None, every_s):
        pids = LEARNER_PID.findall(text())
        steps = read_steps(metrics) if metrics.exists() else []
        if not pids or not steps:
            continue
        resumes = len(RESUMED.findall(text()))
        try:
            os.kill(int(pids[-1]), signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed = time.monotonic()
        row.injections += 1

        def trained_again(before: int = resumes) -> bool:
            found = RESUMED.findall(text())
            if len(found) <= before or not metrics.exists():
                return supervisor.poll() is not None
            now = read_steps(metrics)
            return bool(now) and now[-1] > int(found[-1])

        if wait(trained_again, 600) and supervisor.poll() is None:
            row.recovered += 1
            row.recover_s.append(time.monotonic() - killed)
            lost.append(max(0, steps[-1] - int(RESUMED.findall(text())[-1])))
            row.steps_lost += lost[-1]
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    curve = read_steps(metrics)
    per_minute = 60 * summary["env_steps"] / summary["wall_time_s"]
    row.crashes += supervisor.returncode != 0 or curve != sorted(curve)
    row.target_reached = summary["stop_reason"] in TARGETS
    print(
        f"learner kills: {summary['env_steps']} env steps in {summary['wall_time_s']} s of "
        f"training, return {summary['return_mean']}, stop {summary['stop_reason']}, "
        f"metrics one curve: {curve == sorted(curve)}; env steps lost per kill {lost} (a "
        f"minute at the run's mean speed: {per_minute:.0f})",
        file=sys.stderr,
    )


def full_disk(base: str, common: list[str]) -> list[Row]:
    """Checkpoints onto a 32 KiB tmpfs: every write fails; the run must go on (needs root)."""
    disk = os.path.join(base, "full_disk")
    os.makedirs(os.path.join(disk, "checkpoints"))
    mount = ["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", os.path.join(disk, "checkpoints")]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        print("full disk: cannot mount a tmpfs here (not root?); skipped", file=sys.stderr)
        return []
    row = Row("full disk at checkpoint")
    faults = in_process(row, disk, [*common, "checkpoint.every_minutes=0.05"], nothing)
    row.injections = faults["checkpoint_failures"]
    row.recovered = row.injections if row.target_reached else 0
    subprocess.run(["umount", os.path.join(disk, "checkpoints")], check=False)
    return [row]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--task",
        default="env=minatar env.id=space_invaders stop_at_return=20",
        help="the runs' overrides: an env and the return that ends the run",
    )
    parser.add_argument("--max-minutes", type=float, default=4.0, help="cap per run")
    parser.add_argument("--steps", type=int, default=150_000, help="env steps of the fake-env run")
    parser.add_argument("--kill-every-s", type=float, default=5.0)
    parser.add_argument("--fuzz-size", type=int, default=1000, help="messages per burst")
    parser.add_argument(
        "--learner-kill-every-s", type=float, default=90.0, help="learner-kills: kill period"
    )
    parser.add_argument(
        "--learner-task",
        default="env=minatar env.id=space_invaders stop_at_return=50 max_minutes=30",
        help="learner-kills: the run's overrides (its target and budget)",
    )
    parser.add_argument(
        "--only", default="", help="comma-separated faults to run (default all): " + FAULTS
    )
    parser.add_argument("--out", default="", help="also write the rows as JSON here")
    args = parser.parse_args()
    random.seed(0)
    common = [
        *args.task.split(),
        "total_env_steps=1000000000",
        f"max_minutes={args.max_minutes}",
        "log_interval_s=2",
    ]
    fast_restart = ["actor.restart_backoff_s=0.5", "actor.max_restarts=100"]
    rows: list[Row] = []
    base = tempfile.mkdtemp(prefix="seedq-chaos-")

    def scenario(name: str, overrides: list[str], inject, count) -> None:
        row = Row(name)
        run_dir = os.path.join(base, re.sub(r"[^a-z0-9]+", "_", name.lower()))
        # A scenario's own value for a key replaces the common one (Hydra refuses duplicates).
        merged = {o.split("=", 1)[0]: o for o in [*common, *overrides]}
        if "env=fake" in overrides:  # the task's env keys are not the fake env's
            merged = {k: o for k, o in merged.items() if not k.startswith("env.") or o in overrides}
        faults = in_process(row, run_dir, list(merged.values()), inject)
        count(row, faults, run_dir)
        rows.append(row)

    only = set(args.only.split(",")) - {""}
    unknown = only - set(FAULTS.split(","))
    if unknown:
        parser.error(f"--only: unknown faults {sorted(unknown)}; choose from {FAULTS}")

    def wanted(fault: str) -> bool:
        return not only or fault in only

    if wanted("actor-kill"):
        scenario("actor kill -9", fast_restart, kill_actors(args.kill_every_s), lambda *_: None)
    if wanted("actor-stop"):
        stop = stop_actor(4.0)
        scenario("actor SIGSTOP", ["broker.silent_timeout_s=2"], stop, lambda *_: None)

    def count_fuzz(row: Row, faults: dict, run_dir: str) -> None:
        row.steps_lost = 0  # fuzz costs only the fuzzer's own messages and rejoins
        print(f"fuzz: {faults['bad_messages']} messages refused", file=sys.stderr)

    if wanted("fuzz"):
        scenario("fuzz burst", [], fuzz(3, args.fuzz_size), count_fuzz)

    def count_nan(row: Row, faults: dict, run_dir: str) -> None:
        row.injections = row.recovered = faults["non_finite_messages"]
        row.steps_lost = faults["non_finite_messages"] * 64  # the fake env's envs per batch

    fake = ["env=fake", "env.nan_every=50", f"total_env_steps={args.steps}"]
    # Not the task's target; CartPole's batches (tuning/vtrace_cartpole.yaml), which steps_lost
    # counts in.
    fake += ["stop_at_return=null", "actor.envs_per_batch=64", "broker.max_batch=256"]
    if wanted("nan"):
        scenario("NaN env (fake)", fake, nothing, count_nan)

    def count_crashes(row: Row, faults: dict, run_dir: str) -> None:
        # The actors log each failure of their envs, and whether they started over.
        logs = "".join(p.read_text() for p in Path(run_dir).glob("actor_*.log"))
        row.injections = logs.count("its envs raised")
        row.recovered = logs.count("starting over with")
        row.steps_lost = row.injections * 64  # the crashed step of each of its 64 envs
        if faults["actor_restarts"]:
            print(f"env crash: {faults['actor_restarts']} actor restarts", file=sys.stderr)

    crash = [o.replace("env.nan_every=50", "env.crash_every=200") for o in fake]
    if wanted("env-crash"):
        scenario("env crash (fake)", crash, nothing, count_crashes)

    def count_hangs(row: Row, faults: dict, run_dir: str) -> None:
        # Each hang ends its actor process (after actor.env_timeout_s), which is restarted.
        logs = "".join(p.read_text() for p in Path(run_dir).glob("actor_*.log"))
        row.injections = logs.count("the env hangs; exiting")
        row.recovered = faults["actor_restarts"]
        row.steps_lost = row.injections * 2 * 64  # both batches' steps in flight at the exit

    hang = [o.replace("env.nan_every=50", "env.hang_every=400") for o in fake]
    hang += ["actor.env_timeout_s=2", *fast_restart]
    if wanted("env-hang"):
        scenario("env hang (fake)", hang, nothing, count_hangs)
    if wanted("full-disk"):
        rows.extend(full_disk(base, common))
    if wanted("learner-resume"):
        row = Row("learner kill -9 + resume")
        learner_kill_and_resume(row, os.path.join(base, "learner"), common)
        rows.append(row)
    if wanted("learner-kills"):
        row = Row(f"learner kill -9 every {args.learner_kill_every_s:g} s (supervised)")
        task = args.learner_task.split()
        merged = {o.split("=", 1)[0]: o for o in [*common, *task]}
        run_dir = os.path.join(base, "learner_kills")
        learner_kills(row, run_dir, list(merged.values()), args.learner_kill_every_s)
        rows.append(row)

    print(
        "| fault | injections | crashes | recovered | s to recover (mean/max) | target reached "
        "| env steps lost (bound) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        rec = (
            f"{sum(r.recover_s) / len(r.recover_s):.1f} / {max(r.recover_s):.1f}"
            if r.recover_s
            else "-"
        )
        print(
            f"| {r.fault} | {r.injections} | {r.crashes} | {r.recovered} | {rec} | "
            f"{'yes' if r.target_reached else 'NO'} | {r.steps_lost} |"
        )
    if args.out:
        Path(args.out).write_text(json.dumps([r.__dict__ for r in rows], indent=2))


if __name__ == "__main__":
    main()
