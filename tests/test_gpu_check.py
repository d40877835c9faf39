"""scripts/gpu_check.sh without a GPU: its plan, how it judges each step, its report, and a real
dry run on the CPU (``--cpu``; the whole dry run is marked slow, one step runs in CI)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TREE = Path(__file__).resolve().parents[1]
SCRIPT = TREE / "scripts" / "gpu_check.sh"
spec = importlib.util.spec_from_file_location("gpu_check", TREE / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gpu_check  # its dataclasses look their module up while built
spec.loader.exec_module(gpu_check)

EVERY_STEP = [
    "cuda_tests",
    "cartpole_475",
    "pong_bf16",
    "pong_compile_default",
    "pong_compile_reduce-overhead",
    "pong_compile_max-autotune",
    "raw_env",
    "pong_share",
    "pong_share_eager",
    "pong_share_shards",
    "sample_factory",
    "bench_inference",
    "bench_train",
    "bench_pipeline",
    "anakin",
    "sebulba",
    "learners",
]


def test_the_gpu_plan_covers_every_step_and_skips_nccl_on_one_gpu(tmp_path):
    steps = {s.name: s for s in gpu_check.plan(False, 1, tmp_path, 10)}
    assert list(steps) == EVERY_STEP
    assert all("hardware=gpu" in s.argv for s in steps.values() if "seedq.cli" in s.argv)
    # Sample Factory's env (no sticky actions), whose time to 18 it is read beside.
    pong = {"max_minutes=10", "stop_at_return=18", "env.repeat_action_probability=0"}
    assert pong <= set(steps["pong_bf16"].argv)
    assert "no Sample Factory here" in steps["sample_factory"].skip
    assert "hardware.compile=max-autotune" in steps["pong_compile_max-autotune"].argv
    assert "needs 2 or more GPUs" in steps["learners"].skip
    assert "broker.shards=2" in steps["pong_share_shards"].argv
    eight = {s.name: s for s in gpu_check.plan(False, 8, tmp_path, 10)}
    assert "hardware.learners=8" in eight["learners"].argv and not eight["learners"].skip


def test_pong_overrides_reach_every_pong_step_but_sebulbas(tmp_path):
    extra = ("actor.batches_per_actor=4", "algorithm.minibatch_size=256")
    steps = {s.name: s for s in gpu_check.plan(False, 1, tmp_path, 10, pong_overrides=extra)}
    pong = ["pong_bf16", "raw_env", *(n for n in steps if "compile" in n or "share" in n)]
    assert all(set(extra) <= set(steps[name].argv) for name in pong)
    others = [s for name, s in steps.items() if name not in pong]
    assert not any(set(extra) & set(s.argv) for s in others)


def test_the_cpu_plan_runs_everything_but_the_compile_modes_on_the_cpu(tmp_path):
    steps = gpu_check.plan(True, 0, tmp_path, 10)
    skipped = [
        n for n in EVERY_STEP if "compile" in n or n in ("sample_factory", "pong_share_eager")
    ]
    assert [s.name for s in steps if s.skip] == skipped
    assert not any("hardware=gpu" in s.argv for s in steps)


def test_sample_factory_runs_its_fastest_pong_setup_from_its_own_folder(tmp_path):
    (tmp_path / "sample_factory").mkdir()
    steps = {s.name: s for s in gpu_check.plan(False, 1, tmp_path, 10, str(tmp_path))}
    sf = steps["sample_factory"]
    assert not sf.skip and sf.env["PYTHONPATH"] == str(tmp_path)
    assert {"--num_workers=16", "--num_envs_per_worker=32", "--batch_size=2048"} <= set(sf.argv)


def test_sample_factory_is_judged_by_its_progress_lines_and_compared_with_seedq():
    sf = gpu_check.Step("sample_factory", "sf", ["sf"], 1, judge="sample_factory")
    lines = "Fps is (10 sec: nan, 60 sec: nan)\nFps is (10 sec: 30000.0, ...)\n"
    lines += "Fps is (10 sec: 40000.5, 60 sec: 35000)\n"
    status, figures, _ = gpu_check.judge(sf, -1, lines)
    assert (status, figures["frames_per_s_max"]) == ("pass", 40000.5)
    assert gpu_check.judge(sf, 1, "Traceback ...")[0] == "fail"
    results = [
        gpu_check.Result("raw_env", "", "", "pass", figures={"frames_per_s": 100000.0}),
        gpu_check.Result("sample_factory", "", "", "pass", figures=figures),
        gpu_check.Result("pong_share", "", "", "pass", figures={"frames_per_s": 80000.0}),
        gpu_check.Result("pong_share_eager", "", "", "pass", figures={"frames_per_s": 90000.0}),
        gpu_check.Result("pong_share_shards", "", "", "pass", figures={"frames_per_s": 60000.0}),
    ]
    gpu_check.compare(results)
    assert results[2].figures["share_of_raw_env"] == 0.8
    assert results[2].figures["x_sample_factory"] == 2.0
    assert results[3].figures["share_of_raw_env"] == 0.9
    assert results[4].figures["x_sample_factory"] == 1.5


def test_a_step_past_its_time_limit_is_interrupted_and_its_output_kept():
    # The step inherits SIGINT blocked and unblocks it inside its try: on a loaded box the
    # limit's SIGINT may come before its interpreter has started, and then waits for it. It
    # sets Ctrl-C's handler itself, as an ignored SIGINT (SIG_IGN) is inherited too.
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\ntry:\n"
        "    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])\n"
        "    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('saved')"
    )
    step = gpu_check.Step("slow", "slow", [sys.executable, "-c", code], 1)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    try:
        code, output = gpu_check.run_bounded(step)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    assert code == -1 and "saved" in output and "time limit" in output


def finished(tmp_path: Path, name: str, judge: str, summary: dict | None) -> gpu_check.Step:
    run_dir = tmp_path / name
    run_dir.mkdir()
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return gpu_check.Step(name, name, ["x", f"hydra.run.dir={run_dir}"], 1, judge=judge)


def test_a_training_step_is_judged_by_the_summary_its_run_wrote(tmp_path):
    reached = {
        "stop_reason": "target_return",
        "updates": 9,
        "env_steps": 100,
        "return_mean": 470.0,
        "return_at_target": 476.0,
    }
    timed_out = {"stop_reason": "max_minutes", "updates": 9}
    status, figures, _ = gpu_check.judge(finished(tmp_path, "a", "target", reached), 0, "")
    # The report carries the mean that met the target beside the final window's.
    assert status == "pass" and figures["return_at_target"] == 476.0
    assert figures["return_mean"] == 470.0
    status, _, note = gpu_check.judge(finished(tmp_path, "b", "target", timed_out), 0, "")
    assert status == "fail" and "max_minutes" in note
    assert gpu_check.judge(finished(tmp_path, "c", "ran", {"updates": 0}), 0, "")[0] == "fail"
    assert gpu_check.judge(finished(tmp_path, "d", "ran", None), 0, "")[2].endswith("summary.json")
    ranks = finished(tmp_path, "e", "ranks", reached)
    assert gpu_check.judge(ranks, 0, "weights identical on all 2 learner ranks")[0] == "pass"
    assert gpu_check.judge(ranks, 0, "learner ranks ended with different weights")[0] == "fail"


def test_pytest_and_bench_steps_are_judged_by_their_counts_and_json_line():
    tests = gpu_check.Step("t", "t", ["pytest"], 1, judge="pytest")
    assert gpu_check.judge(tests, 0, "21 passed, 3 deselected in 9s")[0] == "pass"
    assert gpu_check.judge(tests, 0, "21 skipped, 977 deselected")[0] == "skip"
    assert gpu_check.judge(tests, 1, "1 failed, 20 passed")[0] == "fail"
    bench = gpu_check.Step("b", "b", ["bench"], 1, judge="bench")
    assert gpu_check.judge(bench, 0, 'table\n{"env_steps_per_s": 5.0}')[0] == "pass"
    assert gpu_check.judge(bench, 0, '{"env_steps_per_s": 0.0}')[0] == "fail"
    assert gpu_check.judge(bench, 2, "seedq-bench: bad option")[0] == "fail"


def test_the_report_is_markdown_and_json_and_fails_on_any_failed_step(tmp_path):
    info = {"mode": "gpu", "python": "3.12", "gpus": 1, "gpu": "H100", "torch": "2.11"}
    results = [
        gpu_check.Result("a", "first", "cmd a", "pass", 1.0, {"steps_per_s": 5}),
        gpu_check.Result("b", "second", "cmd b", "skip", note="GPU only"),
    ]
    assert gpu_check.write_report(tmp_path, info, results)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["ok"] and [s["status"] for s in report["steps"]] == ["pass", "skip"]
    assert "| a | first | PASS | 1 | steps_per_s=5 |" in (tmp_path / "gpu_check.md").read_text()
    failed = [*results, gpu_check.Result("c", "third", "cmd c", "fail", note="exit 1")]
    assert not gpu_check.write_report(tmp_path, info, failed)


def dry_run(
    out: Path, *args: str, timeout: float, tmp: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), "--cpu", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        # No carried wheels: a checkout's .whl/ holds CPython 3.12 wheels for the GPU machine.
        # PYTHON: the script's interpreter is this one (a venv's, activated or not), not the
        # first python3 on PATH.
        env={
            **os.environ,
            "PYTHON": sys.executable,
            "PYTHONPATH": str(TREE),
            "SEEDQ_WHEELS": str(out / "no-wheels"),
            **({"TMPDIR": str(tmp)} if tmp else {}),
        },
        cwd=TREE,
    )


def test_one_step_of_the_dry_run_writes_the_three_report_files(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "out"
    result = dry_run(out, "--only", "bench_pipeline", timeout=300, tmp=scratch)
    assert result.returncode == 0, result.stdout + result.stderr
    # A check that passed leaves no run dirs (torch may keep its caches there).
    assert [p.name for p in scratch.iterdir() if p.name.startswith("seedq")] == []
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_check.json",
        "gpu_check.log",
        "gpu_check.md",
    ]
    report = json.loads((out / "gpu_check.json").read_text())
    assert [(s["name"], s["status"]) for s in report["steps"]] == [("bench_pipeline", "pass")]
    assert report["machine"]["mode"] == "cpu (dry run)"


@pytest.mark.slow
def test_the_whole_dry_run_passes_on_the_cpu(tmp_path):
    result = dry_run(tmp_path, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    statuses = {s["name"]: s["status"] for s in report["steps"]}
    assert list(statuses) == EVERY_STEP
    assert {n for n, s in statuses.items() if s == "skip"} == {
        "cuda_tests",
        "sample_factory",
        "pong_share_eager",
        *(n for n in EVERY_STEP if "compile" in n),
    }


@pytest.mark.parametrize(
    "passed, keep, kept",
    [(True, False, False), (False, False, True), (True, True, True)],
)
def test_the_steps_run_dirs_go_after_a_pass_and_stay_after_a_failure(
    tmp_path, monkeypatch, capsys, passed, keep, kept
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(gpu_check.tempfile, "tempdir", str(scratch))

    def steps(parser, args, out, info, runs):
        (runs / "pong").mkdir()
        (runs / "pong" / "cli.log").write_text("a step's log\n")
        return passed

    monkeypatch.setattr(gpu_check, "_run_steps", steps)
    argv = ["--cpu", "--out", str(tmp_path / "out"), *(["--keep-runs"] if keep else [])]
    assert gpu_check.main(argv) == (0 if passed else 1)
    left = list(scratch.glob("seedq-gpu-check-*"))
    assert (len(left), "the steps' run dirs are in" in capsys.readouterr().out) == (kept, kept)
    if kept:
        assert (left[0] / "pong" / "cli.log").is_file()
