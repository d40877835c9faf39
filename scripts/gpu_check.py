"""The steps of scripts/gpu_check.sh: prove seedq's CUDA path on this machine, write one report.

    python scripts/gpu_check.py [--cpu] [--out DIR] [--only a,b] [--skip a,b] [--pong-minutes M]

Each step runs seedq as a user would (``python -m seedq.cli``, ``python -m seedq.bench.cli``,
``pytest -m cuda``) in a subprocess with a time limit, and is judged by what the run wrote
(``summary.json``, the learner ranks' logs, the bench's JSON line), not by its output's look.
``--cpu`` runs every step briefly on the CPU instead (GPU-only steps are reported as skipped):
the report and the step logic are tested that way on machines without a GPU.

The comparison a user of a GPU machine wants comes with it: ``raw_env`` (the envs alone: the
ceiling), ``pong_share`` (Pong training frames/s as a share of that ceiling, and the GPU's
utilisation meanwhile, sampled by ``nvidia-smi``), ``pong_share_eager`` (the same with eager
updates, ``hardware.cuda_graphs=false``), ``pong_share_shards`` (with ``broker.shards=2``:
message handling in processes of its own; each share step also reports the learner process's
CPU by thread, ``cpu_broker`` and ``cpu_train``), ``sample_factory`` (Sample Factory 2.1.1's
fastest Pong configuration on the same machine, when its wheels were carried in: see
``scripts/fetch_gpu_wheels.sh --sample-factory``), and ``pong_bf16`` runs Pong to a return of 18
within its minutes (time to 18 in the report).

The report is ``DIR/gpu_check.json`` and ``DIR/gpu_check.md``, with every step's output in
``DIR/gpu_check.log`` (three files: machines that hand back few files take them all). Exit
status 0 when no step failed. Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
PONG = ["env=atari", "env.id=ALE/Pong-v5"]
# Sample Factory's Pong (PongNoFrameskip-v4: no sticky actions), whose 260 s to 18 on one H100
# the time to 18 is read beside.
NO_STICKY = "env.repeat_action_probability=0"
BENCH_LINE = re.compile(r"^\{.*\}$")
PONG_TARGET = 18
# The Pong training steps whose frames/s compare() reads against raw_env's and Sample Factory's.
SHARE_STEPS = ("pong_share", "pong_share_eager", "pong_share_shards")
# Sample Factory 2.1.1's fastest Pong configuration on the H100 machine (docs: DESIGN numbers).
SF_WORKERS, SF_ENVS, SF_BATCH = 16, 32, 2048
# "Fps is (10 sec: 35123.4, 60 sec: ..., 300 sec: ...)": Sample Factory's progress line.
SF_FPS = re.compile(r"Fps is \(10 sec: ([0-9.]+|nan)")


@dataclass
class Step:
    name: str
    what: str
    argv: list[str]
    timeout_s: float
    judge: str = "exit"  # exit | target | ran | ranks | bench | pytest | sample_factory
    skip: str = ""  # why it does not run here ("" when it does)
    gpu_util: bool = False  # sample the GPU's utilisation while it runs (nvidia-smi)
    env: dict[str, str] | None = None  # the environment it runs in (None: this one)


@dataclass
class Result:
    name: str
    what: str
    command: str
    status: str  # pass | fail | skip
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def python() -> list[str]:
    return [sys.executable]


def train(run_dir: Path, *overrides: str) -> list[str]:
    return [*python(), "-m", "seedq.cli", f"hydra.run.dir={run_dir}", *overrides]


def bench(*args: str) -> list[str]:
    return [*python(), "-m", "seedq.bench.cli", *args]


def sample_factory_step(cpu: bool, runs: Path, site: str | None, seconds: float) -> Step:
    """Sample Factory 2.1.1 APPO on Pong (its fastest configuration here), stopped after
    ``seconds``: its 2.1.1 ignores --train_for_seconds, so the time limit ends it and the step
    is judged by the progress lines it printed. Runs from ``site`` (its own folder of wheels:
    its gymnasium and numpy clash with seedq's) and only where that folder exists."""
    workers, envs, batch = (2, 4, 256) if cpu else (SF_WORKERS, SF_ENVS, SF_BATCH)
    argv = [
        *python(),
        "-m",
        "sf_examples.atari.train_atari",
        "--env=atari_pong",
        "--experiment=sf_pong",
        f"--train_dir={runs / 'sample_factory'}",
        f"--num_workers={workers}",
        f"--num_envs_per_worker={envs}",
        f"--batch_size={batch}",
        "--async_rl=True",
        "--decorrelate_envs_on_one_worker=False",
        f"--device={'cpu' if cpu else 'gpu'}",
        "--with_wandb=False",
    ]
    skip = ""
    if not site or not (Path(site) / "sample_factory").is_dir():
        skip = (
            "no Sample Factory here (scripts/fetch_gpu_wheels.sh --sample-factory, carried in; "
            "or SEEDQ_SF_SITE=<folder with sample_factory>)"
        )
    return Step(
        "sample_factory",
        f"Sample Factory 2.1.1 APPO on Pong, {workers} workers x {envs} envs, batch {batch}",
        argv,
        seconds,
        judge="sample_factory",
        skip=skip,
        gpu_util=True,
        env={**os.environ, "PYTHONPATH": site or ""},
    )


def plan(
    cpu: bool,
    gpus: int,
    runs: Path,
    pong_minutes: float,
    sf_site: str | None = None,
    scale: float = 1.0,
    pong_overrides: tuple[str, ...] = (),
) -> list[Step]:
    """Every step, sized for a GPU machine, or shrunk to seconds on the CPU (``cpu``).
    ``scale`` shortens (or lengthens) every timed step on the GPU: training minutes, bench
    seconds and Sample Factory's time, each above a floor that still gives a steady figure.
    ``pong_overrides`` go to every Pong step of seedq's but Sebulba's (the time to 18, the
    compile modes, raw_env and pong_share), so one lease can measure a variant throughout."""
    hw = "hardware=cpu" if cpu else "hardware=gpu"
    # On the CPU each training step gets a twentieth of its minutes (at least 9 s) and an
    # easy target: the dry run checks the steps and the report, not the learning.
    scale = 0.05 if cpu else scale
    target = 30 if cpu else 475
    cpu_skip = "GPU only (--cpu)" if cpu else ""

    def minutes(m: float, floor: float = 0.15) -> str:
        return f"max_minutes={max(floor, m * scale):g}"

    def seconds_(gpu_s: float, cpu_s: float, floor: float = 10) -> str:
        return f"seconds={cpu_s:g}" if cpu else f"seconds={max(floor, gpu_s * scale):g}"

    # The CPU's stand-ins for what only a GPU does quickly: fewer tensor envs, CartPole for
    # Sebulba's threads, and time enough to reach the easy target.
    anakin_envs = ["arch.anakin.num_envs=256"] if cpu else []
    sebulba_env = [] if cpu else PONG
    pong = [*PONG, *pong_overrides]
    to_target = 0.5

    steps = [
        Step(
            "cuda_tests",
            "the test suite's CUDA-marked tests",
            [*python(), "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "tests"],
            900,
            judge="pytest",
        ),
        Step(
            "cartpole_475",
            f"V-trace CartPole to a 100-episode mean of {target}",
            train(runs / "cartpole", hw, f"stop_at_return={target}", minutes(5, to_target)),
            420,
            judge="target",
        ),
        Step(
            "pong_bf16",
            f"V-trace Pong (no sticky actions) to {PONG_TARGET}, at most {pong_minutes:g} "
            "minutes, bf16 autocast",
            train(
                runs / "pong",
                hw,
                *pong,
                NO_STICKY,
                "hardware.amp=bf16",
                f"stop_at_return={PONG_TARGET}",
                minutes(pong_minutes),
            ),
            pong_minutes * 60 * scale + 240,
            judge="ran",
            gpu_util=True,
        ),
    ]
    for mode in COMPILE_MODES:
        steps.append(
            Step(
                f"pong_compile_{mode}",
                f"Pong, bf16, hardware.compile={mode}",
                train(
                    runs / f"pong-{mode}",
                    hw,
                    *pong,
                    "hardware.amp=bf16",
                    f"hardware.compile={mode}",
                    minutes(1.5),
                ),
                420,
                judge="ran",
                skip=cpu_skip,
            )
        )
    seconds = seconds_(30, 5)
    steps += [
        Step(
            "raw_env",
            "seedq-bench raw-env Pong: the envs alone, the ceiling",
            bench("raw-env", hw, *pong, seconds_(30, 3)),
            300,
            "bench",
        ),
        Step(
            "pong_share",
            "seedq-bench train Pong, bf16: frames/s as a share of raw_env's",
            # bf16 convolutions crawl on a CPU: the dry run trains in fp32.
            bench(
                "train",
                hw,
                *pong,
                "hardware.amp=none" if cpu else "hardware.amp=bf16",
                seconds_(120, 5, floor=30),
                "warmup_s=10" if cpu else f"warmup_s={max(10, 20 * scale):g}",
            ),
            400,
            "bench",
            gpu_util=True,
        ),
        Step(
            "pong_share_eager",
            "pong_share with hardware.cuda_graphs=false (eager updates, where the defaults replay "
            "each minibatch update from a CUDA graph)",
            bench(
                "train",
                hw,
                *pong,
                "hardware.amp=bf16",
                "hardware.cuda_graphs=false",
                seconds_(120, 5, floor=30),
                f"warmup_s={max(10, 20 * scale):g}",
            ),
            400,
            "bench",
            skip=cpu_skip,
            gpu_util=True,
        ),
        Step(
            "pong_share_shards",
            "pong_share with broker.shards=2: receiving, batching and replying in two broker "
            "processes, the learner process left with inference and training (its threads share "
            "one GIL: pong_share's cpu_broker + cpu_train near 1 says that is its limit)",
            bench(
                "train",
                hw,
                *pong,
                "hardware.amp=none" if cpu else "hardware.amp=bf16",
                "broker.shards=2",
                seconds_(120, 5, floor=30),
                "warmup_s=10" if cpu else f"warmup_s={max(10, 20 * scale):g}",
            ),
            400,
            "bench",
            gpu_util=True,
        ),
        sample_factory_step(cpu, runs, sf_site, 60 if cpu else max(90, 240 * scale)),
        Step("bench_inference", "seedq-bench inference", bench("inference", hw), 600, "bench"),
        Step(
            "bench_train",
            "seedq-bench train (" + ("CartPole" if cpu else "Pong") + ")",
            bench("train", hw, *sebulba_env, seconds, "warmup_s=5"),
            300,
            "bench",
        ),
        Step(
            "bench_pipeline",
            "seedq-bench pipeline",
            bench("pipeline", hw, seconds_(10, 2, floor=5)),
            300,
            "bench",
        ),
        Step(
            "anakin",
            f"arch=anakin CartPole to {target}",
            train(
                runs / "anakin",
                hw,
                "arch=anakin",
                *anakin_envs,
                f"stop_at_return={target}",
                minutes(3, to_target),
            ),
            300,
            judge="target",
        ),
        Step(
            "sebulba",
            "arch=sebulba " + ("CartPole" if cpu else "Pong"),
            train(
                runs / "sebulba",
                hw,
                "arch=sebulba",
                *sebulba_env,
                "hardware.amp=bf16",
                minutes(1.5),
            ),
            300,
            judge="ran",
        ),
    ]
    learners = 2 if cpu else gpus
    steps.append(
        Step(
            "learners",
            f"hardware.learners={learners} CartPole to {target} ("
            + ("gloo, CPU" if cpu else "NCCL")
            + ")",
            train(
                runs / "learners",
                hw,
                f"hardware.learners={learners}",
                f"stop_at_return={target}",
                minutes(5, to_target),
            ),
            480,
            judge="ranks",
            skip="" if cpu or gpus >= 2 else f"needs 2 or more GPUs; this machine has {gpus}",
        )
    )
    return steps


def run_dir_of(argv: list[str]) -> Path | None:
    for arg in argv:
        if arg.startswith("hydra.run.dir="):
            return Path(arg.split("=", 1)[1])
    return None


def judge(step: Step, code: int, output: str) -> tuple[str, dict[str, Any], str]:
    """``(status, figures, note)`` of a finished step."""
    if step.judge == "pytest":
        counts = dict(
            (kind, int(n))
            for n, kind in re.findall(r"(\d+) (passed|failed|skipped|deselected|error)", output)
        )
        if code == 0 and counts.get("passed"):
            return "pass", counts, ""
        if code in (0, 5) and not counts.get("passed") and not counts.get("failed"):
            return "skip", counts, "no CUDA-marked test ran (no CUDA device)"
        return "fail", counts, f"pytest exit {code}"
    if step.judge == "sample_factory":
        fps = [float(v) for v in SF_FPS.findall(output) if v != "nan"]
        if not fps or max(fps) <= 0:
            return "fail", {}, f"exit {code}, no frames/s reported"
        # Its own figure (env frames, frame skip included), over its last 10 s; the first
        # lines are the start-up's.
        figures = {"frames_per_s_max": max(fps), "frames_per_s_last": fps[-1], "lines": len(fps)}
        return "pass", figures, "stopped by the time limit (its --train_for_seconds does nothing)"
    if step.judge == "bench":
        lines = [json.loads(line) for line in output.splitlines() if BENCH_LINE.match(line)]
        if code != 0 or not lines:
            return "fail", {}, f"exit {code}, {len(lines)} JSON lines"
        figures = lines[-1]
        if figures.get("env_steps_per_s", 1) <= 0:
            return "fail", figures, "no env step was timed"
        return "pass", figures, ""
    run_dir = run_dir_of(step.argv)
    summary_file = run_dir / "summary.json" if run_dir else None
    summary = json.loads(summary_file.read_text()) if summary_file and summary_file.exists() else {}
    figures = {
        k: summary.get(k)
        for k in (
            "env_steps",
            "steps_per_s",
            "return_mean",
            "updates",
            "time_to_target_s",
            "return_at_target",
        )
        if k in summary
    }
    figures["stop_reason"] = summary.get("stop_reason")
    if code != 0 or not summary:
        return "fail", figures, f"exit {code}" + ("" if summary else ", no summary.json")
    if step.judge == "target" and summary.get("stop_reason") != "target_return":
        return "fail", figures, f"stopped by {summary.get('stop_reason')} before the target"
    if not summary.get("updates"):
        return "fail", figures, "no update was taken"
    if step.judge == "ranks":
        if "weights identical on all" not in output:
            return "fail", figures, "the ranks did not report identical weights"
        if summary.get("stop_reason") != "target_return":
            return "fail", figures, f"stopped by {summary.get('stop_reason')} before the target"
    return "pass", figures, ""


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def run_bounded(step: Step) -> tuple[int, str]:
    """``(exit code, output)`` of ``step``; -1 when its time ran out. At the limit its whole
    process group gets SIGINT (Sample Factory saves and exits on it; seedq stops with a
    checkpoint), then SIGKILL 30 s later."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            step.argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=step.env,
            start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=step.timeout_s)
        except subprocess.TimeoutExpired:
            code = -1
            _stop_group(proc)
        except KeyboardInterrupt:  # its own session: Ctrl-C here does not reach it
            _stop_group(proc)
            raise
        out.seek(0)
        output = out.read()
    if code == -1:
        output += f"\n(time limit: {step.timeout_s:.0f} s)"
    return code, output


class GpuUtilisation:
    """``nvidia-smi``'s utilisation of every GPU, once a second, while a step runs."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 "-lms", "1000"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip

    def stop(self) -> dict[str, float]:
        if self.proc is None:
            return {}
        self.proc.terminate()
        text, _ = self.proc.communicate(timeout=10)
        values = [float(v) for v in text.split() if v.replace(".", "", 1).isdigit()]
        if not values:
            return {}
        return {
            "gpu_util_mean_pct": round(sum(values) / len(values), 1),
            "gpu_util_max_pct": max(values),
        }


def run_step(step: Step, log) -> Result:  # noqa: ANN001 - a text file
    command = shlex.join(step.argv)
    if step.skip:
        return Result(step.name, step.what, command, "skip", note=step.skip)
    log.write(f"\n===== {step.name}: {command}\n")
    log.flush()
    start = time.monotonic()
    sampler = GpuUtilisation() if step.gpu_util else None
    code, output = run_bounded(step)
    utilisation = sampler.stop() if sampler else {}
    seconds = time.monotonic() - start
    log.write(output[-20000:])
    log.flush()
    status, figures, note = judge(step, code, output)
    if code == -1 and step.judge != "sample_factory":
        status, note = "fail", f"timed out after {step.timeout_s:.0f} s"
    figures.update(utilisation)
    return Result(step.name, step.what, command, status, round(seconds, 1), figures, note)


def compare(results: list[Result]) -> None:
    """Pong training's frames/s (pong_share's, and pong_share_eager's) as a share of
    raw_env's and as a multiple of Sample Factory's, written into that step's figures once
    the steps it needs have passed."""
    by_name = {r.name: r for r in results if r.status == "pass"}
    raw, sf = by_name.get("raw_env"), by_name.get("sample_factory")
    for name in SHARE_STEPS:
        share = by_name.get(name)
        if share is None or not share.figures.get("frames_per_s"):
            continue
        frames, found = share.figures["frames_per_s"], {}
        if raw is not None and raw.figures.get("frames_per_s"):
            found["share_of_raw_env"] = round(frames / raw.figures["frames_per_s"], 3)
        if sf is not None and sf.figures.get("frames_per_s_max"):
            found["x_sample_factory"] = round(frames / sf.figures["frames_per_s_max"], 2)
        # First, so the report's figures column shows them before it is cut.
        share.figures = {**found, "frames_per_s": frames, **share.figures}


def machine(cpu: bool) -> dict[str, Any]:
    probe = (
        "import json, torch; c = torch.cuda.is_available(); print(json.dumps({"
        "'torch': torch.__version__, 'cuda': torch.version.cuda, 'gpus': "
        "torch.cuda.device_count() if c else 0, 'gpu': torch.cuda.get_device_name(0) if c else "
        "None, 'nccl': torch.distributed.is_nccl_available()}))"
    )
    info: dict[str, Any] = {"python": platform.python_version(), "host": platform.node()}
    info["cores"] = os.cpu_count()
    try:
        out = subprocess.run([*python(), "-c", probe], capture_output=True, text=True, timeout=120)
        info.update(json.loads(out.stdout.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, ValueError, IndexError):
        info["torch"] = "not importable"
        info["gpus"] = 0
    info["mode"] = "cpu (dry run)" if cpu else "gpu"
    return info


def write_report(out: Path, info: dict[str, Any], results: list[Result]) -> bool:
    ok = all(r.status != "fail" for r in results)
    report = {"ok": ok, "machine": info, "steps": [dataclasses.asdict(r) for r in results]}
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# seedq GPU check",
        "",
        f"{'All steps passed or were skipped.' if ok else 'Some steps FAILED.'} Mode: "
        f"{info['mode']}; host {info.get('host')}, {info.get('gpus', 0)} GPU(s) "
        f"({info.get('gpu') or 'none'}), {info.get('cores')} cores, Python {info['python']}, "
        f"torch {info.get('torch')} (CUDA {info.get('cuda')}).",
        "",
        "| step | what | status | seconds | figures | note |",
        "|---|---|---|---:|---|---|",
    ]
    for r in results:
        figures = ", ".join(f"{k}={v}" for k, v in r.figures.items() if v is not None)
        lines.append(
            f"| {r.name} | {r.what} | {r.status.upper()} | {r.seconds:g} | {figures[:300]} "
            f"| {r.note} |"
        )
    lines += ["", "Commands:", ""]
    lines += [f"- `{r.name}`: `{r.command}`" for r in results]
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="every step briefly on the CPU")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu_check", help="report dir")
    parser.add_argument("--only", default="", help="comma-separated steps to run")
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out")
    parser.add_argument("--pong-minutes", type=float, default=10.0)
    parser.add_argument(
        "--pong-overrides",
        default="",
        help="space-separated seedq overrides for the Pong steps (not Sebulba's), e.g. "
        "'actor.batches_per_actor=4 algorithm.minibatch_size=256'",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every timed step's length on the GPU (0.5: a check in about half the time)",
    )
    parser.add_argument(
        "--sf-site",
        default=os.environ.get("SEEDQ_SF_SITE") or "",
        help="folder holding Sample Factory 2.1.1 and its dependencies (gpu_check.sh sets it)",
    )
    parser.add_argument(
        "--merge", nargs="*", default=[], help="earlier gpu_check.json files to include"
    )
    parser.add_argument(
        "--keep-runs",
        action="store_true",
        help="keep the steps' run dirs (checkpoints, logs) after a check that passed; they are "
        "always kept after a failed step",
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = machine(args.cpu)
    runs = Path(tempfile.mkdtemp(prefix="seedq-gpu-check-"))
    ok = False
    try:
        ok = _run_steps(parser, args, out, info, runs)
    finally:
        if (args.keep_runs or not ok) and runs.exists() and any(runs.iterdir()):
            print(f"gpu_check: the steps' run dirs are in {runs}")
        else:
            shutil.rmtree(runs, ignore_errors=True)
    return 0 if ok else 1


def _run_steps(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    out: Path,
    info: dict[str, Any],
    runs: Path,
) -> bool:
    steps = plan(
        args.cpu,
        int(info.get("gpus") or 0),
        runs,
        args.pong_minutes,
        args.sf_site,
        args.scale,
        tuple(shlex.split(args.pong_overrides)),
    )
    only = {s for s in args.only.split(",") if s}
    skip = {s for s in args.skip.split(",") if s}
    unknown = (only | skip) - {s.name for s in steps}
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}; steps: {[s.name for s in steps]}")
    if not args.cpu and not info.get("gpus"):
        print("gpu_check: no CUDA device here; use --cpu for a dry run", file=sys.stderr)
    results = []
    for earlier in args.merge:
        results += [Result(**r) for r in json.loads(Path(earlier).read_text())["steps"]]
    with open(out / "gpu_check.log", "a") as log:
        for step in steps:
            if (only and step.name not in only) or step.name in skip:
                continue
            result = run_step(step, log)
            results.append(result)
            compare(results)
            print(f"gpu_check: {result.name}: {result.status} ({result.seconds:g} s) {result.note}")
            write_report(out, info, results)  # after each step: a cut-off run keeps its report
    ok = write_report(out, info, results)
    verdict = "ok" if ok else "FAILED"
    print(f"gpu_check: report in {out}/gpu_check.md and gpu_check.json ({verdict})")
    return ok


if __name__ == "__main__":
    sys.exit(main())
