"""Which learner rank this process is, as its launcher says, and what that rank runs.

Three launchers start ranks, and each says so in the environment:

* ``torchrun`` (and seedq itself, through torch's elastic launcher, for ``hardware.learners=N``
  on one machine): ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``;
* an ``srun`` job step of several tasks (``SLURM_STEP_NUM_TASKS`` > 1; a batch script itself has
  no step variables): ``SLURM_PROCID``, ``SLURM_LOCALID``, the step's node list; the rendezvous
  address is the step's first node, the port ``MASTER_PORT`` or one derived from the job id;
* the ssh launcher runs ``torchrun`` on each listed host (the first case).

Each rank runs rank 0's config with a few per-rank changes (:func:`rank_config`): its own
device, seed and broker port. No torch here: configs and launch scripts use this module
without importing torch.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from seedq.envs.config import resumed_seed
from seedq.schema import ConfigError

T = TypeVar("T")

# Seeds of rank k are the run's seed + k * SEED_STRIDE: envs and acting differ across ranks,
# the networks do not (rank 0's are broadcast), and rank 0 keeps the run's own seed.
SEED_STRIDE = 1_000_003
# An srun step's rendezvous port when MASTER_PORT is unset: one per job, above the usual
# ephemeral range's start, so two jobs sharing a node do not collide.
SLURM_PORT_BASE = 20_000
SLURM_PORT_SPAN = 10_000


@dataclass(frozen=True)
class RankInfo:
    """This process's place among the learner ranks and where they meet."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str  # who started the ranks, for messages: torch's launcher (torchrun) or slurm

    @property
    def host(self) -> str:
        return socket.gethostname()

    def environment(self) -> dict[str, str]:
        """The variables torch's ``env://`` rendezvous reads."""
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def _int(environ: Mapping[str, str], key: str, default: int | None = None) -> int:
    value = environ.get(key)
    if value is None or value == "":
        if default is None:
            raise ConfigError(f"the learner ranks' launcher did not set {key}")
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not a number") from None


def from_torchrun(environ: Mapping[str, str]) -> RankInfo | None:
    """The rank torchrun (or torch's elastic launcher) started, or None outside one."""
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    world = _int(environ, "WORLD_SIZE")
    return RankInfo(
        rank=_int(environ, "RANK"),
        world_size=world,
        local_rank=_int(environ, "LOCAL_RANK", 0),
        local_world_size=_int(environ, "LOCAL_WORLD_SIZE", world),
        master_addr=environ.get("MASTER_ADDR", "127.0.0.1"),
        master_port=_int(environ, "MASTER_PORT", 29500),
        launcher="torch's launcher",
    )


def first_node(nodelist: str) -> str:
    """The first host of a Slurm node list (``gpu[01-04]`` -> ``gpu01``), by ``scontrol``."""
    if re.fullmatch(r"[A-Za-z0-9._-]+", nodelist):
        return nodelist
    try:
        result = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60
        )
    except FileNotFoundError:
        raise ConfigError(f"cannot expand the Slurm node list {nodelist!r}: no scontrol") from None
    nodes = result.stdout.split()
    if result.returncode != 0 or not nodes:
        raise ConfigError(f"scontrol show hostnames {nodelist!r} failed: {result.stderr.strip()}")
    return nodes[0]


def tasks_on_this_node(environ: Mapping[str, str]) -> int:
    """How many of the step's tasks run on this node (``SLURM_STEP_TASKS_PER_NODE``, e.g.
    ``4(x2),2``, indexed by ``SLURM_NODEID``)."""
    counts: list[int] = []
    for part in environ.get("SLURM_STEP_TASKS_PER_NODE", "").split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match:
            counts += [int(match[1])] * int(match[2] or 1)
    node = _int(environ, "SLURM_NODEID", 0)
    return counts[node] if node < len(counts) else 1


def from_slurm_step(environ: Mapping[str, str]) -> RankInfo | None:
    """The rank an ``srun`` step of several tasks started, or None outside one."""
    tasks = environ.get("SLURM_STEP_NUM_TASKS", "")
    if not tasks.isdigit() or int(tasks) < 2 or "SLURM_PROCID" not in environ:
        return None
    job = _int(environ, "SLURM_JOB_ID", 0)
    port = _int(environ, "MASTER_PORT", SLURM_PORT_BASE + job % SLURM_PORT_SPAN)
    addr = environ.get("MASTER_ADDR") or first_node(environ.get("SLURM_STEP_NODELIST", ""))
    return RankInfo(
        rank=_int(environ, "SLURM_PROCID"),
        world_size=int(tasks),
        local_rank=_int(environ, "SLURM_LOCALID", 0),
        local_world_size=tasks_on_this_node(environ),
        master_addr=addr,
        master_port=port,
        launcher="slurm",
    )


def launched_rank(environ: Mapping[str, str] | None = None) -> RankInfo | None:
    """This process's rank when a launcher started several (torchrun first, then an srun
    step), else None. A torchrun of one process is no group either."""
    environ = os.environ if environ is None else environ
    info = from_torchrun(environ) or from_slurm_step(environ)
    if info is None or info.world_size < 2:
        return None
    if not 0 <= info.rank < info.world_size or not 0 <= info.local_rank < info.local_world_size:
        raise ConfigError(
            f"{info.launcher} gave rank {info.rank} of {info.world_size} (local "
            f"{info.local_rank} of {info.local_world_size}): out of range"
        )
    return info


def check_learners(learners: int, info: RankInfo) -> None:
    """Refuse ``hardware.learners`` set to another count than the launcher started (1, the
    default, leaves the count to the launcher)."""
    if learners not in (1, info.world_size):
        raise ConfigError(
            f"hardware.learners={learners} but {info.launcher} started {info.world_size} ranks; "
            f"leave hardware.learners unset (or set it to {info.world_size}) under {info.launcher}"
        )


def check_ranks_fit(learners: int, cores: int) -> None:
    """Refuse more learner ranks on this machine than it has ``cores`` (``seedq.cores``): each
    rank is a whole learner (inference and training threads, its actors or env threads) whose
    every update waits for all the others, so ranks that share a core only take turns; 64 ranks
    on 2 cores started and made no progress in 100 s."""
    if learners > cores:
        raise ConfigError(
            f"hardware.learners={learners} would start {learners} learner ranks on this "
            f"machine's {cores} usable core{'' if cores == 1 else 's'}: each rank needs a core "
            "of its own at least (every update waits for all ranks); set hardware.learners="
            f"{cores} or fewer here, or spread the ranks over machines "
            "(launcher.learner_hosts, torchrun, srun; docs/distributed.md)"
        )


def rank_share(items: Sequence[T], rank: int, world_size: int) -> list[T]:
    """Rank ``rank``'s share of ``items`` (actor slots, hosts): every ``world_size``-th one,
    so shares differ in size by one at most and each host's slots spread over the ranks."""
    return list(items[rank::world_size])


def actor_share(slots: Sequence[T], where: str) -> list[T]:
    """This learner rank's share of a launcher's actor ``slots`` (all of them outside a group of
    ranks); ``where`` names the setting that makes the slots, for the refusal of an empty
    share."""
    info = launched_rank()
    if info is None:
        return list(slots)
    share = rank_share(slots, info.rank, info.world_size)
    if not share:
        raise ConfigError(
            f"{where} give {len(slots)} actor slot(s) for {info.world_size} learner ranks; each "
            "rank needs at least one (more hosts or launcher.actors_per_host)"
        )
    return share


def rank_device(device: str, local_rank: int, cuda_devices: int) -> str:
    """The device of local rank ``local_rank``: ``cuda:<local_rank>`` when ``device`` names
    CUDA (``cuda`` or ``cuda:N`` alike), or ``cuda:0`` when the launcher gave each rank one GPU
    (Slurm's ``--gpus-per-task=1``); the CPU stays the CPU."""
    if not device.startswith("cuda"):
        return device
    if cuda_devices == 1:
        return "cuda:0"
    if local_rank >= cuda_devices:
        raise ConfigError(
            f"learner rank with local rank {local_rank} needs a GPU of its own, but this node "
            f"shows {cuda_devices}; start at most {cuda_devices} ranks per node"
        )
    return f"cuda:{local_rank}"


def rank_config(cfg: Any, info: RankInfo, cuda_devices: int, resumed_at: int = 0) -> Any:
    """``cfg`` as rank ``info.rank`` runs it: its device, its seed, its broker ports (a fixed
    port plus local rank x ``broker.shards``: each rank's shards take ``broker.shards``
    consecutive ports, so ranks on one host do not collide) and ``hardware.learners`` set to
    the group's size. ``resumed_at``: the env steps of the checkpoint this start resumes (0:
    a fresh run)."""
    hardware = dataclasses.replace(
        cfg.hardware,
        device=rank_device(cfg.hardware.device, info.local_rank, cuda_devices),
        learners=info.world_size,
    )
    broker = cfg.broker
    if broker.port:
        broker = dataclasses.replace(broker, port=broker.port + info.local_rank * broker.shards)
    seed = cfg.seed
    if info.rank and resumed_at:
        # Rank 0 restores the checkpoint's counters and seeds its envs from them
        # (resumed_seed); the other ranks count from 0, so with the run's seed they would
        # replay their first start's episode starts and action samples at every resume.
        seed = resumed_seed(seed, resumed_at)
    return dataclasses.replace(
        cfg, hardware=hardware, broker=broker, seed=seed + info.rank * SEED_STRIDE
    )
