"""The learner's device and numeric switches, resolved from the ``hardware`` section."""

from __future__ import annotations

import logging
import sys
from typing import Any

import torch

from seedq.cores import share_of_cores
from seedq.learner.memory import keep_freed_memory
from seedq.schema import ConfigError

log = logging.getLogger(__name__)

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"hardware.device={name!r} but this machine has no usable CUDA device "
            f"(torch {torch.__version__}, cuda build: {torch.version.cuda}); "
            "use hardware=cpu, or install a CUDA build of torch on a GPU machine"
        )
    return torch.device(name)


def prepare_learner_process(cfg: Any) -> torch.device:
    """Device, thread settings and torch seed of a learner process; its device."""
    hw = cfg.hardware
    device = resolve_device(hw.device)
    # Several threads share the GIL (broker or actor threads and the trainer); torch releases
    # it inside ops, and at the default 5 ms switch interval the trainer then waits up to 5 ms
    # to get it back, many times per update. A short interval keeps the threads moving.
    sys.setswitchinterval(hw.gil_switch_interval_s)
    keep_freed_memory(hw.keep_freed_mb)
    prepare_learner_thread(hw)
    torch.manual_seed(cfg.seed)
    return device


def training_threads(hw: Any) -> int:
    """The torch threads of the training thread: ``hardware.train_threads``, or when 0, on the
    CPU this run's share of the usable cores (over ``hardware.runs_at_once``), on CUDA
    ``hardware.num_threads`` (0 there: torch's default)."""
    if hw.train_threads:
        return int(hw.train_threads)
    if not str(hw.device).startswith("cpu"):
        return int(hw.num_threads)
    return share_of_cores(int(hw.runs_at_once))


def prepare_learner_thread(hw: Any, *, training: bool = False) -> None:
    """Every learner thread that runs torch ops calls this first; ``training``: the thread
    that runs the updates, which takes :func:`training_threads`.

    torch's thread count reaches MKL's OpenMP calls (``log``, ``exp``, softmax on a few hundred
    values) only in the thread that set it: in any other thread they run on a team of one
    OpenMP thread per core, whose idle workers spin on a barrier. Measured in the broker thread
    on 2 cores: a worker spinning ~0.45 core beside ~0.45 core of inference, and one run at a
    fifth of its speed; a neighbouring process loses that core too (benchmarks/RESULTS.md,
    "Sharing the machine").
    """
    threads = training_threads(hw) if training else hw.num_threads
    if training and not hw.train_threads and threads:
        log.info(
            "the training thread runs torch ops on %d thread%s (hardware.train_threads=0: %s; "
            "set it to choose)",
            threads,
            "" if threads == 1 else "s",
            "the run's cores" if str(hw.device).startswith("cpu") else "hardware.num_threads",
        )
    if threads:
        torch.set_num_threads(threads)
