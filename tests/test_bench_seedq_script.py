"""scripts/bench_seedq.py: a subcommand it has no case of is refused before anything is run
or written (the seedq-bench section of RESULTS.md was rewritten with no table in it); --only
replaces that subcommand's tables and keeps the others; SIGTERM ends the running case too."""

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_seedq.py"


@pytest.mark.parametrize("only", ["learner", "pipelin"])
def test_only_a_subcommand_without_cases_is_refused_and_the_results_kept(tmp_path, only):
    # The script writes beside itself: a copy in a tree of its own leaves the repository's be.
    (tmp_path / "scripts").mkdir()
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts")
    results = tmp_path / "benchmarks" / "RESULTS.md"
    text = "# Benchmarks\n\n<!-- seedq-bench:begin -->\nthe tables\n<!-- seedq-bench:end -->\n"
    results.write_text(text)
    run = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "bench_seedq.py"), "--only", only],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (run.returncode, f"invalid choice: '{only}'" in run.stderr) == (2, True), run.stderr
    assert results.read_text() == text
    assert not (tmp_path / "benchmarks" / "seedq_bench.jsonl").exists()


def load_script(monkeypatch, tmp_path):
    """The script as a module, writing its RESULTS.md and JSON lines under ``tmp_path``, each
    case answered at once with a table that names it."""
    spec = importlib.util.spec_from_file_location("bench_seedq_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RESULTS", tmp_path / "RESULTS.md")
    monkeypatch.setattr(module, "JSONL", tmp_path / "seedq_bench.jsonl")
    machine = {"cpu": "cpu", "cores": 2, "torch": "2"}
    monkeypatch.setattr(
        module, "run_case", lambda case, run=0: (f"table of {case} #{run}", {"machine": machine})
    )
    return module


def blocks(text: str) -> list[str]:
    return re.findall(r"^\$ seedq-bench (.*)\ntable of \1 #\d+$", text, re.MULTILINE)


def test_only_one_subcommand_replaces_its_tables_and_keeps_the_others(monkeypatch, tmp_path):
    module = load_script(monkeypatch, tmp_path)
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmarks\n\nbefore\n")
    assert module.main(["--no-football"]) == 0
    everything = blocks(results.read_text())
    assert len(everything) == len([c for c in module.CASES if "football" not in c[1]])
    monkeypatch.setattr(module, "run_case", lambda case: (f"table of {case} #2", {"machine": {}}))
    assert module.main(["--only", "inference", "--no-football"]) == 0
    text = results.read_text()
    # Every table is still there, in the same order, and only inference's were run again (the
    # section held inference's tables alone).
    assert blocks(text) == everything
    rerun = re.findall(r"^\$ seedq-bench (\S+).*\ntable of .* #2$", text, re.MULTILINE)
    assert rerun == ["inference", "inference"]
    assert text.startswith("# Benchmarks\n\nbefore\n") and "--only inference" in text
    assert not list(tmp_path.glob(".RESULTS.md*"))  # written through a temporary file


def test_sigterm_stops_the_running_case_and_its_child(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts")
    results = tmp_path / "benchmarks" / "RESULTS.md"
    results.write_text("# Benchmarks\n")
    script = subprocess.Popen(
        [sys.executable, str(tmp_path / "scripts" / "bench_seedq.py"), "--only", "inference"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children = Path(f"/proc/{script.pid}/task/{script.pid}/children")
    deadline = time.monotonic() + 120
    child = ""
    while not child and time.monotonic() < deadline:
        time.sleep(0.2)
        child = children.read_text().strip()
    assert child, "the script started no case"
    time.sleep(3)  # the case is under way (its SIGTERM handler in place)
    script.send_signal(signal.SIGTERM)
    try:
        out, err = script.communicate(timeout=120)
        # The case measures for 12 s or more: a child that SIGTERM did not reach is still
        # running when the script has exited.
        assert not Path(f"/proc/{child}").exists(), "the case's child was left running"
        assert script.returncode == 143 and "stopped by SIGTERM" in err, err
        assert results.read_text() == "# Benchmarks\n"
    finally:
        for pid in child.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
