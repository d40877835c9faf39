"""seedq (V-trace) against Sample Factory 2.1.1 (APPO): one env, one machine, one invocation.

    bash scripts/bench_vs_sample_factory.sh --env cartpole --steps 3000000
    bash scripts/bench_vs_sample_factory.sh --env pong --minutes 10 --threshold -15

Sample Factory needs gymnasium 0.29 and numpy < 2, which clash with seedq's environment, so it
lives in its own virtual environment (``--venv``, default ``~/.cache/seedq/sf-venv``), built on
first use and reused while its pinned requirements are unchanged. torch goes in first, pinned to
the version seedq runs, so pip takes the same CPU build instead of resolving a bare ``torch`` to
a multi-GB CUDA one.

The two systems run one after the other, never together, each with the same env-step budget
(``--steps``), at most ``--minutes`` of training, as many env-stepping processes as there are
cores (``--workers``) and the same network. Every ``--interval`` seconds each logs its env steps
and the mean return of its last 100 episodes with a wall time (seedq: ``metrics.csv`` and its
TensorBoard copy; Sample Factory: TensorBoard scalars). From those the script computes
throughput, the time from launching the command to the first 100-episode mean return at or
above ``--threshold``, and the final return, and writes them as one section of
``benchmarks/RESULTS.md``, replacing that env's previous section and keeping the others.

Internal mode (the script runs it under the Sample Factory venv for Atari):
``python bench_vs_sample_factory.py --sf-train-atari [--sticky=P] SF_ARGS...`` (``--sticky``:
ALE's sticky actions, as the ALE/*-v5 ids have them). ``--build-sf-venv`` alone
builds (or reuses) the Sample Factory venv and prints its Python, for runs outside the bench.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import functools
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_PATH = REPO_ROOT / "benchmarks" / "RESULTS.md"
SF_ATARI_MODE = "--sf-train-atari"
# ``python bench_vs_sample_factory.py --build-sf-venv``: build (or reuse) the venv, print its
# Python and exit, for runs of Sample Factory outside the bench (docs/results.md).
BUILD_VENV_MODE = "--build-sf-venv"
# ``--sf-train-atari --sticky=0.25 ...``: the game with ALE/*-v5's sticky actions.
STICKY_ARG = "--sticky="
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "seedq/sf-venv"
SF_VERSION = "2.1.1"
# ale-py 0.9.1 is the newest that still runs on gymnasium 0.29 and ships the ROMs in its wheel.
SF_VENV_PACKAGES = (
    f"sample-factory=={SF_VERSION}",
    "gymnasium==0.29.1",
    "numpy<2",
    "ale-py==0.9.1",
)
STAMP_NAME = "seedq-bench-requirements.txt"
# Past its own cap a system gets this long to save, flush and exit before it is stopped.
GRACE_S = 180.0
# On CartPole seedq runs each actor as `envs_per_batch` x `batches_per_actor` envs (64 x 2, the
# vtrace_cartpole preset); Sample Factory's double-buffered workers (`--worker_num_splits=2`) are
# the same two halves.
SEEDQ_ENVS_PER_ACTOR = 128


@dataclass(frozen=True)
class EnvPreset:
    """What the two systems run for one ``--env`` choice."""

    title: str
    default_steps: int
    default_minutes: float
    default_threshold: float | None
    interval_s: int  # seconds between logged points, for both systems
    frame_skip: int
    sf_return_tag: str  # Sample Factory's TensorBoard tag with the 100-episode mean return
    sf_atari: bool  # Sample Factory trains through sf_train_atari (ale-py in every process)
    seedq_overrides: tuple[str, ...]
    sf_args: tuple[str, ...]
    network: str
    notes: tuple[str, ...] = field(default=())


PRESETS = {
    "cartpole": EnvPreset(
        title="CartPole-v1",
        default_steps=3_000_000,
        default_minutes=10.0,
        default_threshold=475.0,
        interval_s=2,
        frame_skip=1,
        sf_return_tag="reward/reward",
        sf_atari=False,
        seedq_overrides=(),
        # sf_examples/train_gym_env.py's documented CartPole command, with the network sized to
        # seedq's MLP [64, 64] + ReLU and the envs laid out as seedq's actors.
        sf_args=(
            "--env=CartPole-v1",
            "--algo=APPO",
            "--use_rnn=False",
            "--recurrence=1",
            "--with_vtrace=False",
            f"--num_envs_per_worker={SEEDQ_ENVS_PER_ACTOR}",
            "--worker_num_splits=2",
            "--policy_workers_per_policy=1",
            "--batch_size=512",
            "--reward_scale=0.1",
            "--encoder_mlp_layers",
            "64",
            "64",
            "--nonlinearity=relu",
        ),
        network="MLP 4-64-64 (ReLU), linear policy and value heads, no RNN",
        notes=(
            "Sample Factory: its CartPole example (APPO, async, PPO clip, GAE, 1 epoch, batch "
            "512, reward scale 0.1) with `--encoder_mlp_layers 64 64 --nonlinearity=relu` and "
            "128 envs per worker in 2 halves, as a seedq actor steps them; it also normalises "
            "observations (`--normalize_input`, on by default), seedq does not.",
            "seedq: `seedq-train` defaults (V-trace, unroll 20, batch 32, Adam 1e-3, 2 actors x "
            "2 batches x 64 envs, inference batches of up to 256 envs, 1 torch thread).",
        ),
    ),
    "pong": EnvPreset(
        title="Pong",
        default_steps=100_000_000,
        default_minutes=10.0,
        default_threshold=None,
        interval_s=10,
        frame_skip=4,
        # Sample Factory's own `reward` is the sum of clipped rewards since the sampler began the
        # episode, which it does mid-game at start-up; gymnasium's RecordEpisodeStatistics
        # (wrapped first in sf_examples.atari) sees whole games, unclipped, as seedq reports.
        sf_return_tag="policy_stats/avg_RecordEpisodeStatistics_reward",
        sf_atari=True,
        # Sample Factory's Atari envs are the NoFrameskip-v4 ids (no sticky actions); seedq is
        # set to the same dynamics instead of v5's repeat_action_probability 0.25.
        seedq_overrides=(
            "env=atari",
            "env.id=ALE/Pong-v5",
            "env.repeat_action_probability=0.0",
            "hardware.num_threads=2",
        ),
        # sf_examples.atari defaults (its published Atari recipe) with 2 workers x 4 envs: in its
        # synchronous mode a rollout of all envs (2 x 4 x 128) must equal a training iteration
        # (batch 256 x 4 minibatches). Env steps are counted as agent steps, as seedq does.
        sf_args=(
            "--env=atari_pong",
            "--num_envs_per_worker=4",
            "--worker_num_splits=2",
            "--summaries_use_frameskip=False",
        ),
        network="Nature CNN (32 8x8/4, 64 4x4/2, 64 3x3/1, fc 512, ReLU), no RNN",
        notes=(
            "Both see PongNoFrameskip-style games: no sticky actions, 4-frame skip with a max "
            "over the last 2, up to 30 no-ops and FIRE at reset, 84x84 grey, 4 stacked, at "
            "most 108,000 frames a game, rewards clipped to [-1, 1] for training (unclipped "
            "in the returns reported). Sample Factory also normalises observations and "
            "returns.",
            "Sample Factory: `sf_examples.atari` defaults (APPO, synchronous, rollout 128, "
            "batch 256 x 4 minibatches x 4 epochs, PPO clip 0.1, Adam 2.5e-4 decaying "
            "linearly) with 2 workers x 4 envs, the largest env count its synchronous mode "
            "accepts without changing the recipe; learner and inference use 1 torch thread "
            "each (fixed by Sample Factory).",
            "seedq: the `env=atari` preset (V-trace, unroll 20, batch 32, Adam 3e-4, 2 actors "
            "x 2 batches x 16 envs) with `hardware.num_threads=2` (learner and inference share "
            "one process).",
        ),
    ),
}


# --------------------------------------------------------------------------------------------
# The Sample Factory environment


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def sf_venv_requirements(torch_version: str) -> list[str]:
    """The venv's pinned requirements, torch first; the local label (``+cpu``) is dropped so pip
    may pick the matching local wheel or the index's build of the same version."""
    return [f"torch=={torch_version.split('+')[0]}", *SF_VENV_PACKAGES]


def ensure_sf_venv(venv: Path, torch_version: str) -> float:
    """Build the Sample Factory venv unless one with the same requirements exists.

    Returns the seconds spent installing (0.0 when the cached venv was reused).
    """
    requirements = sf_venv_requirements(torch_version)
    stamp = venv / STAMP_NAME
    wanted = "\n".join(requirements) + "\n"
    if stamp.exists() and stamp.read_text() == wanted and venv_python(venv).exists():
        print(f"[bench] Sample Factory venv: {venv} (cached)", flush=True)
        return 0.0
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log_path = venv.parent / "sf-venv-install.log"
    print(f"[bench] building the Sample Factory venv in {venv} (log: {log_path})", flush=True)
    start = time.monotonic()
    pip = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        # torch alone first: resolved together with sample-factory, pip would fetch the default
        # (CUDA) build of a bare `torch` requirement.
        [*pip, requirements[0]],
        [*pip, *requirements],
    ]
    with open(log_path, "w") as log:
        for cmd in steps:
            log.write(f"$ {shlex.join(cmd)}\n")
            log.flush()
            result = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
            if result.returncode != 0:
                raise SystemExit(
                    f"installing Sample Factory failed (exit {result.returncode}) at: "
                    f"{shlex.join(cmd)}\nsee {log_path}"
                )
    stamp.write_text(wanted)
    seconds = time.monotonic() - start
    print(f"[bench] Sample Factory venv ready in {seconds:.0f} s", flush=True)
    return seconds


def sf_venv_versions(venv: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({p: m.version(p) for p in "
        "('sample-factory', 'torch', 'gymnasium', 'numpy', 'ale-py')}))"
    )
    out = subprocess.run(
        [str(venv_python(venv)), "-c", code], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def _make_atari_env(env_name, cfg, env_config, render_mode=None, sticky=0.0):
    """Sample Factory's Atari env factory, with ale-py imported first.

    ale-py >= 0.9 registers the ALE ids with gymnasium only when it is imported, and Sample
    Factory's spawned workers never import it; the workers unpickle this function as
    ``__main__._make_atari_env``, which re-imports this file (spawn start method).

    ``sticky`` > 0 gives the NoFrameskip-v4 game ALE's sticky actions (each emulator frame
    repeats the previous action with that probability, as ALE/*-v5's 0.25 does): Sample
    Factory's factory has no key for it, so the id's registered kwargs carry it, in this
    process only.
    """
    import ale_py  # noqa: F401
    import gymnasium as gym
    from sf_examples.atari.atari_utils import atari_env_by_name, make_atari_env

    if sticky:
        gym.spec(atari_env_by_name(env_name).env_id).kwargs["repeat_action_probability"] = sticky
    return make_atari_env(env_name, cfg, env_config, render_mode=render_mode)


def split_sticky(sf_args: Sequence[str]) -> tuple[float, list[str]]:
    """Our ``--sticky=P`` (ALE's sticky actions) out of Sample Factory's own arguments."""
    sticky, rest = 0.0, []
    for arg in sf_args:
        if not arg.startswith(STICKY_ARG):
            rest.append(arg)
            continue
        try:
            sticky = float(arg[len(STICKY_ARG) :])
        except ValueError:
            sticky = math.nan
        if not 0.0 <= sticky < 1.0:
            raise SystemExit(f"{arg}: the sticky-action probability is a number in [0, 1)")
    return sticky, rest


def sf_train_atari(sf_args: Sequence[str]) -> int:
    """``python -m sf_examples.atari.train_atari SF_ARGS`` with ale-py importable in workers."""
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import run_rl
    from sf_examples.atari.atari_utils import ATARI_ENVS
    from sf_examples.atari.train_atari import parse_atari_args

    sticky, rest = split_sticky(sf_args)
    factory = functools.partial(_make_atari_env, sticky=sticky) if sticky else _make_atari_env
    for spec in ATARI_ENVS:
        register_env(spec.name, factory)
    return run_rl(parse_atari_args(rest))


# --------------------------------------------------------------------------------------------
# Commands


@dataclass(frozen=True)
class Budget:
    steps: int
    minutes: float
    seed: int
    workers: int
    interval_s: int


def seedq_command(
    preset: EnvPreset, budget: Budget, run_dir: Path, extra: Sequence[str]
) -> list[str]:
    return [
        # seedq-train of this interpreter (a venv's), whatever PATH finds first
        sys.executable,
        "-m",
        "seedq.cli",
        *preset.seedq_overrides,
        f"seed={budget.seed}",
        f"total_env_steps={budget.steps}",
        f"max_minutes={budget.minutes:g}",
        f"log_interval_s={budget.interval_s}",
        f"actor.num_actors={budget.workers}",
        f"run_dir={run_dir}",
        *extra,
    ]


def sf_command(
    preset: EnvPreset, budget: Budget, python: Path, train_dir: Path, extra: Sequence[str]
) -> list[str]:
    if preset.sf_atari:
        entry = [str(python), str(Path(__file__).resolve()), SF_ATARI_MODE]
    else:
        entry = [str(python), "-m", "sf_examples.train_gym_env"]
    return [
        *entry,
        *preset.sf_args,
        "--experiment=sf",
        f"--train_dir={train_dir}",
        "--device=cpu",
        f"--num_workers={budget.workers}",
        f"--seed={budget.seed}",
        f"--train_for_env_steps={budget.steps}",
        f"--experiment_summaries_interval={budget.interval_s}",
        # seedq checkpoints every 10 minutes and at the end; so does this.
        "--save_every_sec=600",
        "--keep_checkpoints=1",
        "--with_wandb=False",
        *extra,
    ]


@dataclass
class Launch:
    """One system's process: when it started and ended (``time.time()``) and how."""

    returncode: int
    started: float
    ended: float
    stopped_at_cap: bool  # the bench stopped it (SIGINT) when its wall-clock cap ran out
    others_cpu: float | None  # share of the machine's CPU time used by other processes

    @property
    def wall_s(self) -> float:
        return self.ended - self.started


def launch(cmd: Sequence[str], log_path: Path, cap_s: float, start_marker: str = "") -> Launch:
    """Run ``cmd`` with its output in ``log_path``; stop its process group ``cap_s`` seconds
    after launch, or after ``start_marker`` first appears in the log when one is given.

    The child gets its own session so that the cap, or Ctrl-C here, reaches every process it
    spawned: SIGINT first (both systems treat it as Ctrl-C: save a checkpoint and exit), SIGKILL
    if the group is still there 60 s later.
    """
    machine_before = machine_cpu_seconds()
    own_before = children_cpu_seconds()
    print(f"[bench] $ {shlex.join(cmd)}\n[bench]   log: {log_path}", flush=True)
    with open(log_path, "w") as log:
        started = time.time()
        proc = subprocess.Popen(
            list(cmd), stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True
        )
        clock_from = None if start_marker else started
        stopped = False
        try:
            while proc.poll() is None:
                if clock_from is None and start_marker in log_path.read_text(errors="replace"):
                    clock_from = time.time()
                # Without its marker a run still gets the cap plus the start-up grace.
                deadline = (clock_from or started + GRACE_S) + cap_s
                if time.time() >= deadline:
                    print(f"[bench]   {cap_s / 60:g} min are up: stopping it (SIGINT)", flush=True)
                    stopped = True
                    _stop_group(proc)
                    break
                time.sleep(1.0)
        except KeyboardInterrupt:
            _stop_group(proc)
            raise
        ended = time.time()
    others = others_cpu_share(
        machine_before, machine_cpu_seconds(), children_cpu_seconds() - own_before
    )
    return Launch(proc.returncode, started, ended, stopped, others)


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGINT, 60.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def machine_cpu_seconds() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of all cores since boot, from the first line of /proc/stat."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle + iowait; guest time is already inside user
    return (sum(fields) - idle) / tick, sum(fields) / tick


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished children and the descendants they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def others_cpu_share(
    before: tuple[float, float] | None, after: tuple[float, float] | None, own_s: float
) -> float | None:
    """The share of all cores' time over a run that went to processes other than the run.

    The machine's busy time minus the run's own CPU time, over the machine's total: 0 on an
    otherwise idle machine, 0.5 when another process kept one of two cores busy throughout.
    """
    if before is None or after is None or after[1] <= before[1]:
        return None
    others = (after[0] - before[0]) - own_s
    return min(1.0, max(0.0, others / (after[1] - before[1])))


# --------------------------------------------------------------------------------------------
# Reading the results


@dataclass(frozen=True)
class Point:
    t: float  # seconds since the command was launched
    steps: int  # env (agent) steps
    value: float


@dataclass
class Curve:
    """What one run logged, on the launch clock.

    ``progress``: (t, env steps) of every logged point (``value`` unused); ``returns``: the
    100-episode mean return at each point that had 100 finished episodes.
    """

    progress: list[Point]
    returns: list[Point]
    final_steps: int
    stop_reason: str


@dataclass(frozen=True)
class Summary:
    env_steps: int
    wall_s: float
    steps_per_s_training: float | None
    time_to_threshold_s: float | None
    steps_to_threshold: int | None
    final_return: float | None
    stop_reason: str


def read_scalars(tb_dir: Path) -> dict[str, list[tuple[float, int, float]]]:
    """All scalars under ``tb_dir``: tag -> [(wall time, step, value)] in logging order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(e.wall_time, e.step, e.value) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def progress_points(scalars: dict[str, list[tuple[float, int, float]]], t0: float) -> list[Point]:
    """One point per distinct (wall time, step) over all tags, sorted by time."""
    seen = sorted({(wall, step) for events in scalars.values() for wall, step, _ in events})
    return [Point(wall - t0, step, math.nan) for wall, step in seen]


def seedq_curve(run_dir: Path, started: float) -> Curve:
    """seedq's ``metrics.csv`` on the launch clock.

    Its ``wall_time`` column counts from when training starts; the TensorBoard copy of that
    column carries the absolute time each row was written, which gives the start-up offset.
    """
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    scalars = read_scalars(run_dir / "tb")
    offsets = sorted(wall - value for wall, _, value in scalars.get("wall_time", []))
    offset = offsets[len(offsets) // 2] - started if offsets else 0.0
    progress, returns = [], []
    for row in rows:
        t = float(row["wall_time"]) + offset
        steps = int(float(row["env_steps"]))
        progress.append(Point(t, steps, math.nan))
        if (
            row.get("return_mean")
            and float(row.get("episode/count") or row.get("episodes") or 0) >= 100
        ):
            returns.append(Point(t, steps, float(row["return_mean"])))
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    final_steps = int(summary.get("env_steps", progress[-1].steps if progress else 0))
    return Curve(progress, returns, final_steps, summary.get("stop_reason", "?"))


# The runner's first periodic report ("Fps is (10 sec: nan, ...") comes as its main loop starts.
SF_TRAINING_STARTED = "Fps is ("
SF_COLLECTED = re.compile(r"Collected \{0: (\d+)\}")


def sf_curve(experiment_dir: Path, started: float, log_text: str, return_tag: str) -> Curve:
    """Sample Factory's ``.summary/0`` TensorBoard scalars on the launch clock.

    ``return_tag`` holds the mean return of the last ``--stats_avg`` (100) episodes. Sample
    Factory 2.1.1 writes it only once 100 episodes have finished: its other condition (10
    episodes after 300 s of training) reads a training clock it never advances. Its env steps
    count the samples the learner has received, here in agent steps
    (``--summaries_use_frameskip=False``).
    """
    scalars = read_scalars(experiment_dir / ".summary" / "0")
    progress = progress_points(scalars, started)
    returns = [Point(w - started, s, v) for w, s, v in scalars.get(return_tag, [])]
    collected = [int(n) for n in SF_COLLECTED.findall(log_text)]
    final_steps = max([p.steps for p in progress] + collected + [0])
    return Curve(progress, returns, final_steps, stop_reason="")


def first_reaching(returns: Sequence[Point], threshold: float) -> Point | None:
    """The earliest point whose 100-episode mean return is at or above ``threshold``."""
    for point in sorted(returns, key=lambda p: p.t):
        if point.value >= threshold:
            return point
    return None


def training_rate(progress: Sequence[Point]) -> float | None:
    """Env steps/s between the first and the last logged point (start-up excluded)."""
    if len(progress) < 2 or progress[-1].t <= progress[0].t:
        return None
    first, last = progress[0], progress[-1]
    return (last.steps - first.steps) / (last.t - first.t)


SEEDQ_STOP_REASONS = {"total_env_steps": "env-step budget", "max_minutes": "wall-clock cap"}


def summarize(curve: Curve, run: Launch, threshold: float | None, budget_steps: int) -> Summary:
    hit = first_reaching(curve.returns, threshold) if threshold is not None else None
    if run.returncode != 0 and not run.stopped_at_cap:
        reason = f"exit status {run.returncode}"
    elif curve.final_steps >= budget_steps:
        reason = "env-step budget"
    elif run.stopped_at_cap:
        reason = "wall-clock cap (SIGINT from the bench)"
    else:
        reason = SEEDQ_STOP_REASONS.get(curve.stop_reason, curve.stop_reason or "?")
    return Summary(
        env_steps=curve.final_steps,
        wall_s=run.wall_s,
        steps_per_s_training=training_rate(curve.progress),
        time_to_threshold_s=hit.t if hit else None,
        steps_to_threshold=hit.steps if hit else None,
        final_return=curve.returns[-1].value if curve.returns else None,
        stop_reason=reason,
    )


# --------------------------------------------------------------------------------------------
# The machine and the Markdown


def machine_description(sf_versions: dict[str, str]) -> dict[str, str]:
    cpu = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "?"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        match = re.search(r"MemTotal:\s+(\d+) kB", meminfo.read_text())
        if match:
            ram = f"{int(match.group(1)) / 2**20:.1f} GiB"
    os_name = platform.platform()
    os_release = Path("/etc/os-release")
    if os_release.exists():
        match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', os_release.read_text(), re.MULTILINE)
        if match:
            os_name = f"{match.group(1)}, Linux {platform.release()}"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "CPU": cpu,
        "cores": f"{usable} usable of {os.cpu_count()} logical",
        "RAM": ram,
        "OS": os_name,
        "Python": platform.python_version(),
        "torch (seedq / Sample Factory venv)": f"{_version('torch')} / {sf_versions['torch']}",
        "seedq": f"{_version('seedq')} at {_git_revision()}",
        "Sample Factory": (
            f"{sf_versions['sample-factory']} (gymnasium {sf_versions['gymnasium']}, numpy "
            f"{sf_versions['numpy']}, ale-py {sf_versions['ale-py']})"
        ),
    }


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git_revision() -> str:
    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True
        )
        return result.stdout.strip() if result.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    return f"{commit} + uncommitted changes" if git("status", "--porcelain") else commit


def format_minutes(seconds: float | None) -> str:
    if seconds is None:
        return "not reached"
    return f"{seconds / 60:.1f} min ({seconds:.0f} s)"


def format_count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def results_table(
    rows: Sequence[tuple[str, Summary]], threshold: float | None, frame_skip: int
) -> str:
    target = f"{threshold:g}" if threshold is not None else "a threshold"
    frames = frame_skip > 1
    header = ["system", "env steps"]
    header += ["frames"] if frames else []
    header += [
        "env steps/s (training)",
        "env steps/s (launch to exit)",
        f"time to {target}",
        f"env steps to {target}",
        "final return (100 ep)",
        "wall time (launch to exit)",
        "stopped by",
    ]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 2) + "---|"]
    for name, s in rows:
        cells = [name, format_count(s.env_steps)]
        cells += [f"{s.env_steps * frame_skip / 1e6:.1f} M"] if frames else []
        cells += [
            format_count(s.steps_per_s_training),
            format_count(s.env_steps / s.wall_s if s.wall_s > 0 else None),
            format_minutes(s.time_to_threshold_s) if threshold is not None else "-",
            format_count(s.steps_to_threshold) if threshold is not None else "-",
            "-" if s.final_return is None else f"{s.final_return:.1f}",
            f"{s.wall_s / 60:.1f} min",
            s.stop_reason,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def section_markers(env: str) -> tuple[str, str]:
    return (
        f"<!-- bench_vs_sample_factory:{env}:begin -->",
        f"<!-- bench_vs_sample_factory:{env}:end -->",
    )


RESULTS_HEADER = """# Benchmarks

Measured results written by the scripts in `scripts/`. Each script replaces only its own
sections when it runs again; the commands that made them are in each section.
"""


def replace_section(text: str, env: str, section: str) -> str:
    """``text`` with this env's section replaced by ``section`` (appended if it has none)."""
    begin, end = section_markers(env)
    block = f"{begin}\n{section.strip()}\n{end}\n"
    if not text.strip():
        return RESULTS_HEADER + "\n" + block
    start = text.find(begin)
    if start < 0:
        return text.rstrip("\n") + "\n\n" + block
    stop = text.find(end, start)
    if stop < 0:
        raise SystemExit(f"{RESULTS_PATH}: {begin} has no matching {end}; fix the file by hand")
    after = text[stop + len(end) :].lstrip("\n")
    return text[:start] + block + ("\n" + after if after else "")


@dataclass(frozen=True)
class Report:
    env: str
    preset: EnvPreset
    budget: Budget
    threshold: float | None
    date: str
    machine: dict[str, str]
    rows: list[tuple[str, Summary]]
    others_cpu: list[tuple[str, float | None]]
    invocation: str
    commands: list[tuple[str, str]]
    out_dir: str


# Above this share of the machine's CPU going to other processes during a run, the figures
# measure a shared machine and the section says so.
BUSY_WARNING = 0.10


def busy_warning(others_cpu: Sequence[tuple[str, float | None]]) -> list[str]:
    """A warning paragraph (as lines) when other processes used the CPU during a run."""
    loaded = [(name, share) for name, share in others_cpu if share and share > BUSY_WARNING]
    if not loaded:
        return []
    shares = ", ".join(f"{share:.0%} during {name}" for name, share in loaded)
    return [
        f"**Not a clean measurement: other processes used the CPU ({shares}).**",
        "",
    ]


def render_section(report: Report) -> str:
    p, b = report.preset, report.budget
    lines = [
        f"## seedq vs Sample Factory {SF_VERSION}: {p.title}",
        "",
        f"{report.date}. Both systems: {p.network}; {b.steps:,} env steps or {b.minutes:g} min "
        f"of training, whichever comes first; {b.workers} env-stepping processes; CPU "
        f"only; seed {b.seed}; one after the other, with no early stop at the threshold.",
        "",
        *busy_warning(report.others_cpu),
        results_table(report.rows, report.threshold, p.frame_skip),
        "",
        "- Env steps are agent steps (one action each)"
        + (
            f"; frames = env steps x {p.frame_skip} (frame skip), for both systems."
            if p.frame_skip > 1
            else "."
        ),
        "- Times count from launching the command (imports, process start-up and env creation "
        "included); *training* steps/s is between the first and the last logged point, *launch "
        "to exit* divides all env steps by the whole wall time.",
        "- Returns are the mean of the last 100 finished episodes (whole episodes, unclipped), "
        f"logged every {b.interval_s} s by each system; time to a threshold is the first logged "
        "point at or above it. seedq: the `return_mean` column of `metrics.csv`, from 100 "
        f"episodes on; Sample Factory: its `{p.sf_return_tag}` TensorBoard scalar, the mean "
        "over its last `--stats_avg` (default 100) episodes, written from that many on.",
        "- The wall-clock cap counts from each system's training start: seedq's `max_minutes`, "
        "and for Sample Factory, whose 2.1.1 ignores `--train_for_seconds`, a SIGINT from the "
        "bench that many minutes after its first progress line (it saves and exits as on "
        "Ctrl-C).",
        *[f"- {note}" for note in p.notes],
        "- Share of the machine's CPU time used by other processes during each run (0 % is "
        "an otherwise idle machine): "
        + ", ".join(
            f"{name} {'?' if share is None else f'{share:.0%}'}"
            for name, share in report.others_cpu
        )
        + ".",
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in report.machine.items()) + ".",
        "",
        f"Commands (run from the repository root; logs and run directories in `{report.out_dir}`):",
        "",
        "```bash",
        report.invocation,
        *[f"# {name}:\n{cmd}" for name, cmd in report.commands],
        "```",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bash scripts/bench_vs_sample_factory.sh",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--env", choices=sorted(PRESETS), required=True)
    parser.add_argument("--steps", type=int, help="env-step budget (cartpole 3 M, pong 100 M)")
    parser.add_argument(
        "--minutes", type=float, help="most minutes of training for each system (default 10)"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        help="100-episode mean return to time (cartpole 475; pong: none unless given, e.g. -15)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2,
        help="env-stepping processes for each system (default: the usable cores)",
    )
    parser.add_argument(
        "--interval", type=int, help="seconds between logged points (cartpole 2, pong 10)"
    )
    parser.add_argument(
        "--venv",
        type=Path,
        default=DEFAULT_VENV,
        help="where the Sample Factory virtual environment is kept",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "runs" / "bench_vs_sf", help="logs and run dirs"
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS_PATH, help="the Markdown file to update"
    )
    parser.add_argument(
        "--seedq-arg", action="append", default=[], help="extra seedq-train override (repeatable)"
    )
    parser.add_argument(
        "--sf-arg",
        action="append",
        default=[],
        help="extra Sample Factory flag, e.g. --sf-arg=--async_rl=True (repeatable)",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print the section instead of writing it"
    )
    args = parser.parse_args(argv)
    for name in ("steps", "minutes", "workers", "interval"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name} must be positive, got {value}")
    return args


def display_path(path: Path | str) -> str:
    """A path as a reader can retype it: relative to the repo root, or with ``~``."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        home = str(Path.home())
        return "~" + str(path)[len(home) :] if str(path).startswith(home + "/") else str(path)


def display_command(cmd: Sequence[str], paths: Sequence[Path]) -> str:
    text = shlex.join(cmd)
    for path in sorted(paths, key=lambda p: -len(str(p))):
        text = text.replace(str(path), display_path(path))
    return text


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == SF_ATARI_MODE:
        return sf_train_atari(argv[1:])
    if argv and argv[0] == BUILD_VENV_MODE:
        ensure_sf_venv(DEFAULT_VENV, _version("torch"))
        print(venv_python(DEFAULT_VENV))
        return 0
    args = parse_args(argv)
    preset = PRESETS[args.env]
    budget = Budget(
        steps=args.steps or preset.default_steps,
        minutes=args.minutes or preset.default_minutes,
        seed=args.seed,
        workers=args.workers,
        interval_s=args.interval or preset.interval_s,
    )
    threshold = args.threshold if args.threshold is not None else preset.default_threshold
    if importlib.util.find_spec("seedq") is None:
        raise SystemExit(f"seedq is not installed for {sys.executable}: pip install -e .")

    install_s = ensure_sf_venv(args.venv.expanduser(), _version("torch"))
    venv = args.venv.expanduser()
    sf_versions = sf_venv_versions(venv)

    stamp = dt.datetime.now(dt.UTC)
    out_dir = (args.out / f"{stamp:%Y-%m-%d_%H-%M-%S}_{args.env}").resolve()
    out_dir.mkdir(parents=True)
    cap_s = budget.minutes * 60
    seedq_dir, sf_dir = out_dir / "seedq", out_dir / "sf"
    seedq_cmd = seedq_command(preset, budget, seedq_dir, args.seedq_arg)
    sf_cmd = sf_command(preset, budget, venv_python(venv), sf_dir, args.sf_arg)

    try:
        # seedq stops itself (max_minutes, from its training start); it is stopped only if it
        # overruns by more than the grace. Sample Factory 2.1.1 ignores --train_for_seconds, so
        # its cap is counted here from its first progress line, when training starts.
        seedq_run = launch(seedq_cmd, out_dir / "seedq.log", cap_s + GRACE_S)
        sf_run = launch(sf_cmd, out_dir / "sf.log", cap_s, start_marker=SF_TRAINING_STARTED)
    except KeyboardInterrupt:
        print(f"[bench] interrupted; nothing written (logs in {display_path(out_dir)})")
        return 130

    try:
        seedq_summary = summarize(
            seedq_curve(seedq_dir, seedq_run.started), seedq_run, threshold, budget.steps
        )
        sf_log = (out_dir / "sf.log").read_text(errors="replace")
        sf_curve_ = sf_curve(sf_dir / "sf", sf_run.started, sf_log, preset.sf_return_tag)
        sf_summary = summarize(sf_curve_, sf_run, threshold, budget.steps)
    except (OSError, KeyError, ValueError) as exc:
        raise SystemExit(
            f"could not read a run's results ({exc}); logs: {out_dir}/seedq.log, {out_dir}/sf.log"
        ) from exc

    rows = [("seedq V-trace", seedq_summary), (f"Sample Factory {SF_VERSION} APPO", sf_summary)]
    paths = [venv, out_dir, REPO_ROOT / "scripts"]
    report = Report(
        env=args.env,
        preset=preset,
        budget=budget,
        threshold=threshold,
        date=f"{stamp:%Y-%m-%d %H:%M} UTC",
        machine=machine_description(sf_versions),
        rows=rows,
        others_cpu=[("seedq", seedq_run.others_cpu), ("Sample Factory", sf_run.others_cpu)],
        invocation="bash scripts/bench_vs_sample_factory.sh " + shlex.join(argv),
        commands=[
            ("seedq", display_command(seedq_cmd, paths)),
            ("Sample Factory", display_command(sf_cmd, paths)),
        ],
        out_dir=display_path(out_dir),
    )
    section = render_section(report)
    if install_s:
        print(f"[bench] (the Sample Factory venv took {install_s:.0f} s to install)")
    for line in busy_warning(report.others_cpu)[:1]:
        print(f"[bench] warning: {line.strip('*')}")
    failed = [
        name
        for name, run in (("seedq", seedq_run), ("Sample Factory", sf_run))
        if run.returncode != 0 and not run.stopped_at_cap
    ]
    if failed or args.no_write:
        print(section)
    if failed:
        # A crashed run is no result: keep the section that is there.
        print(
            f"[bench] {' and '.join(failed)} exited with an error, so {display_path(args.results)}"
            f" is unchanged; see the logs in {display_path(out_dir)}"
        )
        return 1
    if not args.no_write:
        results = args.results
        results.parent.mkdir(parents=True, exist_ok=True)
        text = results.read_text() if results.exists() else ""
        results.write_text(replace_section(text, args.env, section))
        print(f"[bench] wrote the {preset.title} section of {display_path(results)}:\n")
        print(results_table(rows, threshold, preset.frame_skip))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
