"""The slurm launcher: inside an allocation, each actor is one ``srun`` job step on a node.

``seedq-train launcher=slurm`` runs where it is started (in a batch script: the allocation's
first node) as the learner, and reads its allocation from the environment Slurm sets
(``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST`` expanded by ``scontrol show hostnames``,
``SLURM_NTASKS``/``SLURM_TASKS_PER_NODE``). Outside an allocation it refuses before anything
starts. Each actor is ``srun --nodes=1 --ntasks=1 --nodelist=NODE --overlap ... sh -s`` fed the
same start-up script as an ssh actor (:mod:`seedq.launch.remote_actor`): environment, CURVE
keys, the actor under the guard that stops it at end-of-file. So stopping srun (SIGTERM, which
it forwards to the step) or losing the learner (srun's stdin ends) ends the step, and
``ActorPool`` restarts, backs off and drops nodes exactly as for ssh.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seedq.envs import EnvConfig
from seedq.launch.config import LauncherConfig
from seedq.launch.remote_actor import HostFailures, RemoteLauncher, shipped_keys_dir
from seedq.parallel.ranks import actor_share
from seedq.schema import ConfigError
from seedq.security import is_loopback

if TYPE_CHECKING:
    from seedq.broker.config import BrokerConfig

log = logging.getLogger(__name__)

# One task on one node, sharing the allocation's CPUs with the other actor steps (and with a
# learner that itself runs in a step); no pinning, which would stack the actors on one core.
SRUN_DEFAULTS = ["--nodes=1", "--ntasks=1", "--overlap", "--cpu-bind=none"]
START_HINT = (
    "start the run inside one: `sbatch scripts/slurm/train.sbatch`, or interactively "
    "`salloc -N2 --ntasks-per-node=4 seedq-train launcher=slurm ...`; without Slurm use "
    "launcher=local or launcher=ssh"
)


class NotInAllocation(ConfigError):
    """``launcher=slurm`` outside a Slurm allocation, or without Slurm's commands."""


def tasks_per_node(value: str) -> list[int]:
    """Slurm's compressed per-node counts, ``SLURM_TASKS_PER_NODE`` style: ``2(x3),1`` is
    ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise NotInAllocation(f"cannot read the per-node count {value!r} (expected 2(x3),1)")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def expand_nodelist(nodelist: str) -> list[str]:
    """``cpu[01-03],gpu7`` as node names, by ``scontrol show hostnames``."""
    try:
        result = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError:
        raise NotInAllocation(f"launcher=slurm: scontrol is not on PATH; {START_HINT}") from None
    nodes = result.stdout.split()
    if result.returncode != 0 or not nodes:
        raise NotInAllocation(
            f"scontrol show hostnames {nodelist!r} failed: {result.stderr.strip()}"
        )
    return nodes


@dataclass(frozen=True)
class Allocation:
    """The Slurm job this run is inside: its nodes and, when it asked for tasks, how many
    each node has (``None``: it asked for nodes only)."""

    job_id: str
    nodes: list[str]
    tasks: list[int] | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Allocation:
        """Read the allocation Slurm describes in ``environ``; refuse outside one."""
        job_id = environ.get("SLURM_JOB_ID", "")
        nodelist = environ.get("SLURM_JOB_NODELIST", "")
        if not job_id or not nodelist:
            unset = "SLURM_JOB_ID" if not job_id else "SLURM_JOB_NODELIST"
            raise NotInAllocation(
                f"launcher=slurm runs inside a Slurm allocation, but {unset} is not set; "
                f"{START_HINT}"
            )
        nodes = expand_nodelist(nodelist)
        tasks = None
        if environ.get("SLURM_NTASKS") and environ.get("SLURM_TASKS_PER_NODE"):
            tasks = tasks_per_node(environ["SLURM_TASKS_PER_NODE"])
            if len(tasks) != len(nodes):
                raise NotInAllocation(
                    f"SLURM_TASKS_PER_NODE={environ['SLURM_TASKS_PER_NODE']!r} does not match "
                    f"the {len(nodes)} nodes of SLURM_JOB_NODELIST={nodelist!r}"
                )
        return cls(job_id, nodes, tasks)

    def actor_slots(self, cfg: LauncherConfig, num_actors: int) -> list[tuple[str, int]]:
        """``(node, n)`` for every actor: on ``cfg.hosts`` (all nodes when empty),
        ``cfg.actors_per_host`` each, else the allocation's tasks, else ``num_actors``."""
        unknown = [h for h in cfg.hosts if h not in self.nodes]
        if unknown:
            raise ConfigError(
                f"launcher.hosts {unknown} are not nodes of Slurm job {self.job_id} "
                f"({', '.join(self.nodes)}); leave launcher.hosts empty to use all of them"
            )
        slots = []
        for i, node in enumerate(self.nodes):
            if cfg.hosts and node not in cfg.hosts:
                continue
            count = cfg.actors_per_host or (self.tasks[i] if self.tasks else num_actors)
            slots += [(node, n) for n in range(count)]
        return slots


def srun_command(
    job_id: str, node: str, name: str, srun_args: list[str], *command: str
) -> list[str]:
    """One job step of ``job_id``: ``command`` as one task on ``node``."""
    return [
        "srun",
        f"--jobid={job_id}",
        *SRUN_DEFAULTS,
        f"--nodelist={node}",
        f"--job-name={name}",
        *srun_args,
        *command,
    ]


def advertise_host(broker_host: str, advertise: str, nodes: list[str], here: str) -> str:
    """The address actors dial: ``advertise`` if set, else ``broker_host`` unless it is a
    wildcard (then ``here``, the learner's host name); a loopback ``broker_host`` only serves
    nodes that are this machine."""
    if advertise:
        return advertise
    if broker_host in ("*", "0.0.0.0", "::", ""):
        return here
    if is_loopback(broker_host):
        away = [n for n in nodes if n not in (here, here.split(".")[0]) and not is_loopback(n)]
        if away:
            raise ConfigError(
                f"broker.host={broker_host!r} is loopback but actor nodes {away} are other "
                "machines: bind an address they reach (broker.host=0.0.0.0), with "
                "security.keys_dir from seedq-keys"
            )
    return broker_host


@dataclass
class SlurmLauncher(RemoteLauncher):
    """The allocation's actor slots, their node checks, and ``ActorPool``'s spawner."""

    cfg: LauncherConfig
    run_dir: str
    allocation: Allocation
    slots: list[tuple[str, int]]
    _failures: HostFailures = field(init=False)
    _spawned: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._failures = HostFailures(self.cfg.max_host_failures)

    @classmethod
    def for_run(
        cls, cfg: Any, run_dir: str, environ: Mapping[str, str] = os.environ
    ) -> SlurmLauncher:
        """Read the allocation and check every actor node; raises before anything starts."""
        if cfg.actor.transport != "tcp":
            raise ConfigError("launcher=slurm needs actor.transport=tcp")
        allocation = Allocation.from_env(environ)
        # Of several learner ranks, each places its own share of the slots.
        slots = actor_share(
            allocation.actor_slots(cfg.launcher, cfg.actor.num_actors),
            f"the nodes of Slurm job {allocation.job_id}",
        )
        here = socket.gethostname()
        if here.split(".")[0] not in allocation.nodes and here not in allocation.nodes:
            log.warning(
                "the learner runs on %s, not on a node of Slurm job %s (%s): actors dial it "
                "there; run seedq-train from a batch script to put it on the first node",
                here,
                allocation.job_id,
                ",".join(allocation.nodes),
            )
        launcher = cls(cfg.launcher, run_dir, allocation, slots)
        log.info(
            "Slurm job %s: %d actors as job steps on %s",
            allocation.job_id,
            len(slots),
            ", ".join(launcher.nodes),
        )
        python = cfg.launcher.python or sys.executable
        launcher.check_nodes(cfg.env, python, shipped_keys_dir(cfg))
        launcher.dialled_host(cfg.broker)  # before the learner is built, as the checks
        return launcher

    @property
    def nodes(self) -> list[str]:
        return list(dict.fromkeys(node for node, _ in self.slots))

    def dialled_host(self, broker: BrokerConfig) -> str:
        here = socket.gethostname()
        return advertise_host(broker.host, broker.advertise_host, self.nodes, here)

    def srun(self, node: str, name: str, *command: str) -> list[str]:
        return srun_command(self.allocation.job_id, node, name, self.cfg.srun_args, *command)

    def place(self, index: int) -> tuple[str, str]:
        node, n = self.slots[index]
        return node, f"{node}-{n}.log"

    def command(self, host: str, name: str) -> list[str]:
        return self.srun(host, name, "sh", "-s")

    def check_nodes(self, env: EnvConfig, python: str, keys_dir: str = "") -> None:
        """The host check as one job step on every actor node at once."""
        self.check(self.nodes, env, python, keys_dir)
