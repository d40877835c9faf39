"""scripts/bench_seedq.py: a subcommand it has no case of is refused before anything is run
or written (the seedq-bench section of RESULTS.md was rewritten with no table in it)."""

import shutil
import subprocess
import sys
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
