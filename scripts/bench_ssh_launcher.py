"""Side by side in one run: the same training with actors started locally and over ssh.

    PYTHONPATH=$PWD python scripts/bench_ssh_launcher.py SECONDS [env=cartpole ...]

Starts two throw-away sshd "hosts" on 127.0.0.1 (tests/ssh_hosts.py), runs seedq-train with
launcher=local and then launcher=ssh (one actor per host, so the same two actors), each for
SECONDS, and prints env steps/s, time to target (if reached) and the CPU seconds used by the
ssh clients and the sshd sessions (sampled from /proc every 0.5 s while the run lasts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TREE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TREE / "tests"))

from ssh_hosts import SshdHost, client_config, user_key  # noqa: E402

from seedq.bench.common import scratch_dir  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1.0
    return (int(fields[11]) + int(fields[12])) / TICK


def ssh_pids(config: str, sshd_dirs: list[Path]) -> list[int]:
    """ssh clients using ``config`` and sshd processes of our sshd instances (not listeners)."""
    found = []
    markers = [str(d / "sshd_config") for d in sshd_dirs]
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if line.startswith("ssh ") and config in line and " -G " not in line:
            found.append(int(entry.name))
        elif comm == "sshd" and not any(m in line for m in markers):
            found.append(int(entry.name))
    return found


def run(label: str, args: list[str], run_dir: Path, config: str, sshd_dirs: list[Path]) -> dict:
    process = subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", *args, f"hydra.run.dir={run_dir}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(TREE)},
    )
    seen: dict[int, float] = {}
    while process.poll() is None:
        for pid in ssh_pids(config, sshd_dirs):
            seen[pid] = max(seen.get(pid, 0.0), cpu_seconds(pid))
        time.sleep(0.5)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "launcher": label,
        "env_steps_per_s": summary["steps_per_s"],
        "return_mean": summary["return_mean"],
        "time_to_target_s": summary["time_to_target_s"],
        "wall_time_s": summary["wall_time_s"],
        "ssh_cpu_s": round(sum(seen.values()), 2),
        "ssh_cpu_pct_of_wall": round(100 * sum(seen.values()) / summary["wall_time_s"], 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seconds", type=float, help="training seconds of each run")
    parser.add_argument("overrides", nargs="*", help="seedq-train overrides for both runs")
    args = parser.parse_args(argv)
    seconds = args.seconds
    overrides = [*args.overrides, f"max_minutes={seconds / 60}", "log_interval_s=5"]
    tmp = Path(scratch_dir("seedq-bench-ssh-"))  # keys, sshd dirs, run dirs: gone at exit
    key = user_key(tmp)
    hosts = [SshdHost(tmp / "a", key), SshdHost(tmp / "b", key)]
    config = str(client_config(tmp, key, {"a": hosts[0], "b": hosts[1]}))
    ssh = [
        "launcher=ssh",
        "launcher.hosts=[a,b]",
        "launcher.actors_per_host=1",
        f"launcher.ssh_args=[-F,{config}]",
        f"+launcher.env={{PYTHONPATH:'{TREE}'}}",
    ]
    try:
        results = [
            run("local", ["actor.num_actors=2", *overrides], tmp / "local", config, []),
            run("ssh", [*ssh, *overrides], tmp / "ssh", config, [h.dir for h in hosts]),
        ]
    finally:
        for host in hosts:
            host.kill()
    for row in results:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
