"""Learner ranks on other hosts over ssh: ``hardware.learners=N launcher.learner_hosts=[...]``.

Each listed host runs torch's own launcher, ``python -m torch.distributed.run`` (torchrun) with
a static rendezvous: ``--nnodes`` the host count, ``--node-rank`` its place in the list,
``--nproc-per-node`` its equal share of the N ranks, ``--master-addr`` the first host (rank 0's,
where torchrun keeps the rendezvous store) and ``--master-port`` ``launcher.learner_port``.
Every rank runs ``seedq.cli`` with this command line and this run directory; under torchrun it
is a rank, not another launcher.

As for ssh actors (:mod:`seedq.launch.remote_actor`), each host's command is ``ssh HOST sh -s``
fed a script (cd, environment, the command under :mod:`seedq.launch.remote_guard`), with stdin
kept open: if this process or its ssh ends, the guard stops that host's torchrun, which stops
its ranks (rank 0 gets time for a last checkpoint). Each host's output goes to
``RUN_DIR/learners/<host>.log``. When one host's torchrun fails (one of its ranks died), the
others are stopped and the error names the host, its ranks and its log.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import time
from typing import Any

from seedq.launch.remote_actor import remote_script, start_fed
from seedq.launch.ssh import SshHost, resolve_host, ssh_command
from seedq.schema import ConfigError, override

log = logging.getLogger(__name__)

# Seconds a host's ranks get to stop (rank 0 writes a checkpoint) before they are killed.
STOP_GRACE_S = 30.0


class LearnerHostFailed(RuntimeError):
    """A learner host's ranks failed; the message names the host, its ranks and its log."""


def torchrun_argv(
    python: str,
    hosts: int,
    node_rank: int,
    per_host: int,
    master: str,
    port: int,
    log_dir: str,
) -> list[str]:
    """torchrun on one host: its node rank among ``hosts``, ``per_host`` ranks, the static
    rendezvous at ``master:port``; no restarts (a failed rank stops the run). Its own folders
    (a folder per rank and attempt) go under ``log_dir``, not into a new ``torchelastic_*``
    folder in the host's temp dir on every run."""
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={hosts}",
        f"--node-rank={node_rank}",
        f"--nproc-per-node={per_host}",
        f"--master-addr={master}",
        f"--master-port={port}",
        "--max-restarts=0",
        "--monitor-interval=0.5",
        f"--log-dir={log_dir}",
        "-m",
        "seedq.cli",
    ]


def host_script(cfg: Any, argv: list[str], overrides: list[str], run_dir: str) -> str:
    """The ``sh -s`` script of one learner host: torchrun of ``seedq.cli OVERRIDES`` in
    ``run_dir``, under the guard that stops it when its ssh ends."""
    launcher = cfg.launcher
    command = [*argv, *overrides, override("hydra.run.dir", run_dir)]
    guarded = [argv[0], "-m", "seedq.launch.remote_guard", "--grace", str(STOP_GRACE_S), "--"]
    return remote_script([*guarded, *command], workdir=launcher.workdir, env=launcher.env)


class SshLearners:
    """The learner hosts of one run, started over ssh and watched until they all end."""

    def __init__(self, cfg: Any, overrides: list[str]) -> None:
        launcher, learners = cfg.launcher, cfg.hardware.learners
        entries = list(launcher.learner_hosts)
        if learners % len(entries):
            raise ConfigError(
                f"hardware.learners={learners} cannot be shared equally by the "
                f"{len(entries)} launcher.learner_hosts; use a multiple of {len(entries)}"
            )
        self.cfg, self.run_dir = cfg, cfg.run_dir
        self.per_host = learners // len(entries)
        self.hosts: list[SshHost] = [resolve_host(e, launcher.ssh_args) for e in entries]
        # Every rank runs this command line; their count and hosts come from torchrun.
        self.overrides = [
            o
            for o in overrides
            if not o.lstrip("+~").startswith(("launcher.learner_hosts", "hardware.learners"))
            and not o.startswith("hydra.run.dir")
        ]
        self.procs: list[subprocess.Popen] = []

    def log_path(self, index: int) -> str:
        return os.path.join(self.run_dir, "learners", f"{self.hosts[index].label}.log")

    def ranks_of(self, index: int) -> str:
        first = index * self.per_host
        last = first + self.per_host - 1
        return f"rank {first}" if first == last else f"ranks {first}-{last}"

    def start(self) -> None:
        cfg = self.cfg
        python = cfg.launcher.python or sys.executable
        master = self.hosts[0].hostname
        for i, host in enumerate(self.hosts):
            argv = torchrun_argv(
                python,
                len(self.hosts),
                i,
                self.per_host,
                master,
                cfg.launcher.learner_port,
                os.path.join(self.run_dir, "learners", "elastic"),
            )
            script = host_script(cfg, argv, self.overrides, self.run_dir)
            command = ssh_command(cfg.launcher.ssh_args, host.entry, "sh", "-s")
            self.procs.append(start_fed(command, script, self.log_path(i)))
            log.info("learner %s on %s: %s", self.ranks_of(i), host.entry, shlex.join(argv[:7]))

    def wait(self) -> None:
        """Until every host's ranks end; the first failure stops the others and raises."""
        while True:
            codes = [p.poll() for p in self.procs]
            failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                i = failed[0]
                self.stop()
                raise LearnerHostFailed(
                    f"learner {self.ranks_of(i)} on {self.hosts[i].entry} failed (exit code "
                    f"{codes[i]}); the other hosts' ranks were stopped. Its log: "
                    f"{self.log_path(i)}; the newest checkpoint is in {self.run_dir}/checkpoints "
                    f"on {self.hosts[0].entry}"
                )
            if all(code == 0 for code in codes):
                return
            time.sleep(0.5)

    def stop(self) -> None:
        """End every host's ssh: its guard stops torchrun, which stops the ranks."""
        for proc in self.procs:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.close()
        deadline = time.monotonic() + STOP_GRACE_S + 10
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()


def run_on_learner_hosts(cfg: Any, overrides: list[str]) -> None:
    """Start the ranks on ``cfg.launcher.learner_hosts`` and wait for them; Ctrl-C or SIGTERM
    here stop them in order."""
    learners = SshLearners(cfg, overrides)
    learners.start()
    try:
        learners.wait()
    except KeyboardInterrupt:
        log.warning("interrupted; stopping the learner hosts (rank 0 saves a checkpoint)")
        learners.stop()
        raise
