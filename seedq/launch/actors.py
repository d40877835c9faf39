"""Starting and supervising actor processes (tcp) or actor threads (inproc, for tests).

A crashed actor process is restarted with exponential backoff (it joins with a new run id, so
the learner drops its partial unrolls and state); only ``max_restarts`` crashes of one actor
within ``window_s`` end the run, with an :class:`ActorFailure` quoting its log. Restarts go
through the same ``spawn`` hook as the first start, so they work for any launcher.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import zmq

from seedq.actor.loop import Patience
from seedq.actor.main import actor_command, run_actor_thread
from seedq.core.stats import RunFault
from seedq.envs import EnvConfig
from seedq.exit_status import EXIT_ACTOR_TAKEN_OVER

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


def _ask_to_stop(proc: subprocess.Popen) -> None:
    """SIGTERM for a local actor; end-of-file for a command fed its start-up script on stdin
    (``ssh``, ``srun``), whose remote guard then stops the actor: the command ends once the
    actor's last log lines came through, where terminating it cut them off."""
    if proc.stdin is None:
        proc.terminate()
        return
    try:
        proc.stdin.close()
    except OSError:  # the command is gone already (a broken pipe)
        proc.terminate()


class ActorFailure(RunFault):
    """An actor kept dying; the message names it, its log file and quotes its last lines."""


class SpawnRefused(RuntimeError):
    """Raised by a spawn hook that gives an actor's place up (e.g. the ssh launcher dropping a
    host that keeps failing): that actor is not restarted, and the run goes on with the rest."""


@dataclass
class RestartPolicy:
    """When a crashed actor process is started again (``actor.max_restarts`` and friends)."""

    max_restarts: int = 5
    window_s: float = 300.0
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def delay(self, crashes: int) -> float:
        """Seconds before the restart after the ``crashes``-th crash within the window."""
        return min(self.max_backoff_s, self.backoff_s * 2 ** max(0, crashes - 1))


@dataclass
class ActorProcess:
    """One supervised actor process: its command, log and crash history."""

    index: int
    cmd: list[str]
    log_file: str
    proc: subprocess.Popen
    crashes: deque = field(default_factory=deque)  # monotonic times of crashes in the window
    restart_at: float | None = None  # set while it waits out its backoff
    last_code: int | None = None
    dropped: bool = False  # its spawn hook gave its place up


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
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    patience: Patience = field(default_factory=Patience)
    restarts: int = 0  # actor processes restarted after a crash, all actors together
    _procs: list[ActorProcess] = field(default_factory=list)
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
                        self.patience,
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
                patience=self.patience,
                # Only our own children can watch us die through the kernel; actors started
                # through another launcher's hook notice a dead learner by its connection.
                parent_pid=os.getpid() if self.spawn is spawn_local else 0,
            )
            self._procs.append(ActorProcess(i, cmd, log_file, self.spawn(i, cmd, log_file)))
        log.info(
            "started %d actor %s x %d batches x %d envs",
            self.num_actors,
            "threads" if self.inproc_context is not None else "processes",
            self.batches_per_actor,
            self.envs_per_batch,
        )

    @property
    def pids(self) -> list[int]:
        """Pids of the actor processes now running (tests and chaos tools pick victims here)."""
        return [
            a.proc.pid
            for a in self._procs
            if not a.dropped and a.restart_at is None and a.proc.poll() is None
        ]

    def check(self, now: float | None = None) -> None:
        """Restart crashed actor processes when their backoff is over.

        Raises ActorFailure when an actor thread failed, or an actor process crashed more than
        ``restart.max_restarts`` times within ``restart.window_s``.
        """
        if self._thread_errors:
            raise ActorFailure(f"an actor thread failed: {self._thread_errors[0]}")
        now = time.monotonic() if now is None else now
        for actor in self._procs:
            if actor.dropped:
                continue
            if actor.restart_at is not None:
                if now >= actor.restart_at:
                    self._respawn(actor)
                continue
            code = actor.proc.poll()
            if code == EXIT_ACTOR_TAKEN_OVER:
                self._taken_over(actor)
            elif code is not None:
                self._crashed(actor, code, now)

    def _taken_over(self, actor: ActorProcess) -> None:
        # Not a crash: another process (started by hand, or by another launcher) joined the
        # learner with these actor ids and steps them now. Restarting ours would take them back
        # and end that one, and the two would take turns.
        actor.dropped = True
        ids = self.actor_ids(actor.index)
        left = sum(not a.dropped for a in self._procs)
        log.warning(
            "actor process %d (actor ids %d..%d) ended: another process joined the learner with "
            "its actor ids and steps them now; it is not restarted (%d left). Give each actor "
            "process its own --actor-ids",
            actor.index,
            ids[0],
            ids[-1],
            left,
        )

    def _crashed(self, actor: ActorProcess, code: int, now: float) -> None:
        actor.last_code = code
        actor.crashes.append(now)
        while actor.crashes and now - actor.crashes[0] > self.restart.window_s:
            actor.crashes.popleft()
        crashes = len(actor.crashes)
        ids = self.actor_ids(actor.index)
        if crashes > self.restart.max_restarts:
            raise ActorFailure(
                f"actor process {actor.index} (actor ids {ids[0]}..{ids[-1]}, pid "
                f"{actor.proc.pid}) exited with code {code}: {crashes} crashes within "
                f"{self.restart.window_s:g} s, more than actor.max_restarts="
                f"{self.restart.max_restarts} (actor.restart_window_s={self.restart.window_s:g}); "
                f"its log {actor.log_file} ends with:\n{_tail(actor.log_file)}"
            )
        delay = self.restart.delay(crashes)
        actor.restart_at = now + delay
        log.warning(
            "actor process %d (pid %d) exited with code %d; restarting it in %.1f s "
            "(crash %d of at most %d within %.0f s)",
            actor.index,
            actor.proc.pid,
            code,
            delay,
            crashes,
            self.restart.max_restarts,
            self.restart.window_s,
        )

    def _respawn(self, actor: ActorProcess) -> None:
        actor.restart_at = None
        if self._stop.is_set():
            return
        try:
            actor.proc = self.spawn(actor.index, actor.cmd, actor.log_file)
        except SpawnRefused as exc:
            actor.dropped = True
            left = sum(not a.dropped for a in self._procs)
            log.warning("actor process %d is not restarted: %s; %d left", actor.index, exc, left)
            if not left:
                raise ActorFailure(f"no actor is left to run: {exc}") from None
            return
        self.restarts += 1
        log.info("restarted actor process %d as pid %d", actor.index, actor.proc.pid)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        procs = [actor.proc for actor in self._procs]
        for proc in procs:
            if proc.poll() is None:
                _ask_to_stop(proc)
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("actor process %d did not stop; killing it", proc.pid)
                proc.kill()
                proc.wait()
        for thread in self._threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
