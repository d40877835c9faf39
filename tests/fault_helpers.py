"""Helpers of the fault tests: runs built from the shipped config, polling, processes by parent."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

import seedq
from seedq.arch.seed import SeedRun
from seedq.cli import to_config
from seedq.config import register_configs

CONF_DIR = str(Path(seedq.__file__).parent / "conf")
# A fake-env run that needs no download and steps fast; tests add their own budget.
FAKE = ["env=fake", "actor.envs_per_batch=8", "log_interval_s=0.5"]
# seedq-train (the learner is its process) on a disk that fills once the run has started:
# every checkpoint write fails with ENOSPC. A checkpoints folder that cannot be written at all
# is refused at start instead.
FULL_DISK_TRAIN = [
    sys.executable,
    "-c",
    "import errno, sys, torch\n"
    "def full(*args, **kwargs):\n"
    "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
    "torch.save = full\n"
    "from seedq.cli import train_main\n"
    "train_main()\n",
]


def train_on_a_full_disk(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """:data:`FULL_DISK_TRAIN` run to its end; stdout holds everything printed."""
    return subprocess.run(
        [*FULL_DISK_TRAIN, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


register_configs()


def make_run(tmp_path, *overrides: str) -> SeedRun:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"run_dir={tmp_path}", *overrides])
    return SeedRun(to_config(cfg), str(tmp_path))


def capture_batches(run) -> list:
    """The training batches ``run`` will take, in order, instead of training on them."""
    batches, lock = [], threading.Lock()

    def capture(batch):
        with lock:
            batches.append(batch)
        return {}

    run.agent.learner.train_batch = capture
    return batches


def wait_for(condition, timeout: float = 60.0, what: str = "condition") -> None:
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def in_background(body) -> tuple[threading.Thread, list[BaseException]]:
    """Run ``body`` in a thread; its exception lands in the returned list."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def fake_learner(*overrides: str) -> subprocess.Popen:
    """``seedq-train`` of :data:`FAKE` with one local actor process and ``overrides``, its
    output discarded (tests read its run dir)."""
    return subprocess.Popen(
        [sys.executable, "-m", "seedq.cli", *FAKE, "actor.num_actors=1", *overrides],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def actor_argv(port: int, env_config: str, *args: str) -> list[str]:
    """``seedq-actor`` as a launcher elsewhere would start it: actor id 50, 8 envs, dialling
    a learner on this machine's ``port``."""
    return [
        sys.executable,
        "-m",
        "seedq.actor.main",
        f"--endpoint=tcp://127.0.0.1:{port}",
        "--actor-ids=50",
        "--envs-per-batch=8",
        f"--env-config={env_config}",
        *args,
    ]
