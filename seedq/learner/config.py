"""The learner's sections: where it computes (``hardware``) and what it saves (``checkpoint``)."""

from __future__ import annotations

from dataclasses import dataclass

from seedq.schema import ConfigError, check_positive, choice, setting

AMP_MODES = ("none", "bf16", "fp16")
# torch.compile modes of the inference forward ("none": eager).
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")
GRAPH_SETTINGS = ("auto", "true", "false")
# The most torch threads a thread count may ask for: more cores than any one machine seedq runs
# on has; far above it torch's thread pool crashes the process (hardware.num_threads=1e6 is a
# segmentation fault, not an error).
MAX_THREADS = 1024
# Python keeps its thread switch interval in whole microseconds (less reads back as 0), and a
# second or more lets one thread hold the GIL while the broker and trainer wait.
GIL_SWITCH_RANGE_S = (1e-6, 1.0)
# hardware.keep_freed_mb at most 1 TiB: freed memory kept for reuse beyond any host's memory
# is a typo, and glibc's setting is a C int (seedq.learner.memory caps what it is given).
MAX_KEEP_FREED_MB = 1 << 20


@dataclass
class HardwareConfig:
    device: str = setting("cpu", "where inference and training run: cpu, cuda or cuda:N")
    num_threads: int = setting(
        1,
        "torch intra-op threads of the learner's threads but the training thread: broker and "
        "central inference, Sebulba's env threads, Anakin's loop (0: torch's default, one per "
        "core); the training thread takes hardware.train_threads",
    )
    train_threads: int = setting(
        0,
        "torch intra-op threads of the training thread (the update's forward and backward). 0: "
        "sized at start: on the CPU the run's cores (its share when several runs share the "
        "machine), as the update's convolutions are a CPU learner's largest cost (Pong on 2 "
        "cores: 1.4-1.6x the env steps/s of one thread); on CUDA hardware.num_threads",
    )
    pin_memory: bool = setting(
        False, "stage host batches in page-locked memory for asynchronous copies (CUDA)"
    )
    channels_last: bool = setting(
        True, "run image torsos in NHWC memory format (faster convolutions on CPU and cuDNN)"
    )
    amp: str = setting(
        "none", "autocast for inference and the training forward: none, bf16 or fp16"
    )
    compile: str = setting(
        "none",
        "torch.compile of the inference forward: none, default, reduce-overhead (CUDA graphs) "
        "or max-autotune; batches are padded to power-of-two sizes so few graphs are built",
    )
    cuda_graphs: str = setting(
        "auto",
        "CUDA graphs of V-trace's minibatch updates (forward, loss, backward, clip), recorded at "
        "start for the minibatch shapes and replayed: a few copies and one launch per update on "
        "the host instead of ~360 small ops (Pong on one H200: 1.9x the env steps/s). auto: "
        "where they apply (CUDA, V-trace's shuffled minibatches of a feed-forward model, "
        "batch_size > 0, amp none or bf16, one learner rank, arch seed or sebulba); true: "
        "refused on CPU, fp16, several ranks or another algorithm, and a warning where the "
        "model or batches cannot be recorded; false: eager updates. The optimizer step stays "
        "outside, under the weights lock",
    )
    runs_at_once: int = setting(
        0,
        "seedq runs sharing this machine's cores (0: a Hydra joblib sweep's n_jobs, else 1); "
        "above 1, actor.num_actors and hardware.num_threads not set on the command line are "
        "capped at cores // runs_at_once, and actor.batches_per_actor raised to keep the env "
        "batches (seedq/launch/sharing.py)",
    )
    gil_switch_interval_s: float = setting(
        0.0002,
        "Python's thread switch interval: short keeps the broker and training threads moving",
    )
    keep_freed_mb: int = setting(
        1024,
        "MB of freed memory the learner process keeps for reuse instead of handing it back to "
        "the kernel, so each new batch is not written into freshly faulted-in pages: glibc "
        "(Linux) keeps blocks up to 32 MB, taken from the heap, not mapped one by one; the "
        "unroll store reuses larger training batches (e.g. 128-step Atari unrolls) once the "
        "learner has let go of them; 0: neither",
    )
    learners: int = setting(
        1,
        "learner ranks of one data-parallel run (torch.distributed: NCCL on CUDA, gloo on CPU), "
        "each with its own device (cuda:LOCAL_RANK), actors or env threads and data; gradients "
        "averaged every update. Above 1 a plain seedq-train starts the ranks on this machine (at "
        "most one per usable core); under torchrun or an srun step of several tasks, the "
        "launcher's ranks are used (docs/distributed.md)",
    )
    learner_timeout_s: float = setting(
        300.0,
        "hardware.learners > 1: seconds a collective may wait for the other ranks before the "
        "run stops with an error (a rank that dies is noticed within seconds; this bounds a hung "
        "one)",
    )


@dataclass
class CheckpointConfig:
    every_minutes: float = setting(
        1.0,
        "minutes between checkpoints (0: only at the end and on a stop signal); each copies the "
        "state under the weights lock and is written in the background",
    )
    keep: int = setting(3, "newest checkpoints kept in <run dir>/checkpoints")
    replay: bool = setting(
        False,
        "R2D2, SAC: also save the replay beside the checkpoints (replay.npz, can be GBs); without "
        "it a resumed run refills its replay before training goes on",
    )
    replay_every_minutes: float = setting(
        10.0,
        "with checkpoint.replay: minutes between replay saves (0: only at the end and on a stop "
        "signal); the replay is written by the run loop, not in the background",
    )


def validate_hardware(hw: HardwareConfig) -> None:
    choice("hardware.amp", hw.amp, AMP_MODES)
    choice("hardware.compile", hw.compile, COMPILE_MODES)
    check_positive(
        hw,
        "hardware",
        ["num_threads", "train_threads", "runs_at_once", "keep_freed_mb"],
        zero_ok=True,
    )
    check_positive(hw, "hardware", ["learners", "learner_timeout_s"])
    for key in ("num_threads", "train_threads"):
        if getattr(hw, key) > MAX_THREADS:
            raise ConfigError(
                f"hardware.{key}={getattr(hw, key)} is out of range; at most {MAX_THREADS} "
                "torch threads (more than any machine's cores; 0 sizes it to this one's)"
            )
    low, high = GIL_SWITCH_RANGE_S
    if not low <= hw.gil_switch_interval_s <= high:
        raise ConfigError(
            f"hardware.gil_switch_interval_s={hw.gil_switch_interval_s!r} is out of range; it "
            f"must be in [{low:g}, {high:g}] seconds (Python's own is 0.005)"
        )
    if hw.keep_freed_mb > MAX_KEEP_FREED_MB:
        raise ConfigError(
            f"hardware.keep_freed_mb={hw.keep_freed_mb} is out of range; at most "
            f"{MAX_KEEP_FREED_MB} (1 TiB), or 0 to keep none"
        )
    device = str(hw.device)
    if not (device in ("cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ConfigError(f"hardware.device={hw.device!r} is not allowed; use cpu, cuda or cuda:N")
    if graphs_setting(hw.cuda_graphs) == "true":
        if not device.startswith("cuda"):
            raise ConfigError(
                f"hardware.cuda_graphs=true needs a CUDA device (hardware.device={device}): use "
                "hardware=gpu, or drop the key"
            )
        if hw.amp == "fp16":
            raise ConfigError(
                "hardware.cuda_graphs=true does not run with hardware.amp=fp16 (its grad scaler "
                "reads the gradients on the host each update): use hardware.amp=bf16 or none"
            )
        if hw.learners > 1:
            raise ConfigError(
                f"hardware.cuda_graphs=true records one rank's update; with hardware.learners="
                f"{hw.learners} each update waits on the others' gradients: drop one of the keys"
            )


def graphs_setting(value: object) -> str:
    """``hardware.cuda_graphs`` as one of auto, true, false (Hydra reads ``true`` as a bool)."""
    text = str(value).strip().lower()
    if text not in GRAPH_SETTINGS:
        raise ConfigError(
            f"hardware.cuda_graphs={value!r} is not allowed; use one of {', '.join(GRAPH_SETTINGS)}"
        )
    return text


def validate_checkpoint(ckpt: CheckpointConfig) -> None:
    check_positive(ckpt, "checkpoint", ["keep"])
    check_positive(ckpt, "checkpoint", ["every_minutes", "replay_every_minutes"], zero_ok=True)
