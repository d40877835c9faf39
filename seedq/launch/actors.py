"""Starting and watching actor processes (tcp) or actor threads (inproc, for tests)."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import zmq

from seedq.actor.main import actor_command, run_actor_thread
from seedq.envs import EnvConfig

log = logging.getLogger(__name__)


class Spawner(Protocol):
    """Starts actor process ``index`` from its command line (interpreter first).

    The local launcher runs it here; other launchers (ssh, slurm) wrap it to run elsewhere.
    The returned process stands for the actor: its exit is the actor's exit, terminating it
    stops the actor.
    """

    def __call__(self, index: int, cmd: list[str], log_file: str) -> subprocess.Popen: ...


def spawn_local(index: int, cmd: list[str], log_file: str) -> subprocess.Popen:
    # The actor writes its own log file; its stderr duplicates it, so drop that.
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class ActorFailure(RuntimeError):
    """An actor died; the message names its log file and quotes its last lines."""


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class ActorPool:
    """``num_actors`` actor processes (or threads), each running ``batches_per_actor`` batches."""

    endpoint: str
    env: EnvConfig
    num_actors: int
    batches_per_actor: int
    envs_per_batch: int
    seed: int
    run_dir: str
    python: str = ""
    keys_dir: str = ""  # CURVE keys the actors authenticate with ("" when CURVE is off)
    spawn: Spawner = spawn_local
    inproc_context: zmq.Context | None = None
    _procs: list[subprocess.Popen] = field(default_factory=list)
    _logs: list[str] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _thread_errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def actor_ids(self, index: int) -> list[int]:
        return list(range(index * self.batches_per_actor, (index + 1) * self.batches_per_actor))

    def start(self) -> None:
        for i in range(self.num_actors):
            if self.inproc_context is not None:
                thread = threading.Thread(
                    target=run_actor_thread,
                    args=(
                        self.inproc_context,
                        self.endpoint,
                        self.actor_ids(i),
                        self.env,
                        self.envs_per_batch,
                        self.seed,
                        self._stop,
                        self._thread_errors,
                    ),
                    name=f"actor-{i}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)
                continue
            log_file = os.path.join(self.run_dir, f"actor_{i}.log")
            cmd = actor_command(
                self.python,
                self.endpoint,
                self.actor_ids(i),
                self.env,
                self.envs_per_batch,
                self.seed,
                log_file,
                keys_dir=self.keys_dir,
            )
            proc = self.spawn(i, cmd, log_file)
            self._procs.append(proc)
            self._logs.append(log_file)
        log.info(
            "started %d actor %s x %d batches x %d envs",
            self.num_actors,
            "threads" if self.inproc_context is not None else "processes",
            self.batches_per_actor,
            self.envs_per_batch,
        )

    def check(self) -> None:
        """Raise ActorFailure if an actor stopped while the run goes on."""
        if self._thread_errors:
            raise ActorFailure(f"an actor thread failed: {self._thread_errors[0]}")
        for proc, log_file in zip(self._procs, self._logs, strict=True):
            code = proc.poll()
            if code is not None:
                raise ActorFailure(
                    f"actor process {proc.pid} exited with code {code}; its log {log_file} "
                    f"ends with:\n{_tail(log_file)}"
                )

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + timeout_s
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("actor process %d did not stop; killing it", proc.pid)
                proc.kill()
                proc.wait()
        for thread in self._threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
