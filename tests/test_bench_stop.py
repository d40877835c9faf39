"""seedq-bench stopped by SIGTERM (a scheduler, `kill`, a timeout) ends in one line with its
processes gone: the env, actor and generator processes it spawned and a contention copy's run
(in a session of its own), none left running to the end of its `seconds`."""

import os
import signal
import subprocess
import sys
import time

import pytest


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (from /proc: no psutil here)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def start_bench(*args: str) -> subprocess.Popen:
    """``seedq-bench ARGS`` in a session of its own (its processes a group to look through)."""
    return subprocess.Popen(
        [sys.executable, "-m", "seedq.bench.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("args", "worker"),
    [
        (["raw-env", "seconds=600", "actor.num_actors=1"], "spawn_main"),
        (["pipeline", "seconds=600", "actor.num_actors=1"], "spawn_main"),
        (["contention", "command=sleep 600", "metric=x", "seconds=600"], "sleep 600"),
    ],
)
def test_sigterm_ends_the_bench_in_one_line_with_its_processes(args, worker):
    bench = start_bench(*args)
    spawned: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while not any(worker in command_of(p) for p in descendants(bench.pid)):
            assert bench.poll() is None and time.monotonic() < deadline, bench.communicate()
            time.sleep(0.2)
        spawned = descendants(bench.pid)
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=60)
        deadline = time.monotonic() + 30
        while any(running(p) for p in spawned) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [command_of(p) for p in spawned if running(p)]
        assert (bench.returncode, err.strip().count("\n"), left) == (143, 0, []), err
        assert f"seedq-bench {args[0]}: stopped by SIGTERM" in err
    finally:
        for pid in {bench.pid, *spawned, *descendants(bench.pid)}:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        bench.wait()


@pytest.mark.parametrize("subcommand", ["raw-env", "pipeline"])
def test_a_worker_killed_mid_run_is_named_at_once(subcommand):
    # The bench waited out its seconds and two minutes more for the dead process's figures,
    # then ended in a queue.Empty traceback.
    bench = start_bench(subcommand, "seconds=600", "actor.num_actors=2")
    spawned: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while (
            len(workers := [p for p in descendants(bench.pid) if "spawn_main" in command_of(p)]) < 2
        ):
            assert bench.poll() is None and time.monotonic() < deadline, bench.communicate()
            time.sleep(0.2)
        spawned = descendants(bench.pid)
        os.kill(workers[0], signal.SIGKILL)
        _, err = bench.communicate(timeout=90)
        assert bench.returncode == 2 and err.strip().count("\n") == 0, err
        assert "process was killed by SIGKILL before it" in err
    finally:
        for pid in {bench.pid, *spawned, *descendants(bench.pid)}:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        bench.wait()
