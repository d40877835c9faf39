"""The scripts' usage texts: ``--help`` answers with the script's arguments, as the docs promise."""

import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def run_file(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(path), *args], capture_output=True, text=True, timeout=120
    )


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    return run_file(SCRIPTS / name, *args)


def test_bench_ssh_launcher_help_names_its_seconds_and_overrides():
    """It read ``sys.argv[1]`` as the seconds: ``--help`` ended in a ValueError traceback."""
    result = script("bench_ssh_launcher.py", "--help")
    assert (result.returncode, "seconds [overrides ...]" in result.stdout) == (0, True)


def test_defaults_table_help_gives_its_whole_first_sentence():
    """The description was the docstring's first line, cut off at "the defaults table of"."""
    result = script("defaults_table.py", "--help")
    assert "the defaults\ntable of benchmarks/RESULTS.md." in result.stdout


BENCHMARKS = SCRIPTS.parent / "benchmarks"


def benchmark(name: str, *args: str) -> subprocess.CompletedProcess:
    return run_file(BENCHMARKS / name, *args)


def test_every_benchmark_answers_help_with_its_usage_and_runs_nothing():
    """Five crashed on ``--help`` (an int() or a key=value parse of it);
    learner_update_parts.py ran a benchmark with "--help" for its model."""
    for path in sorted(BENCHMARKS.glob("*.py")):
        result = benchmark(path.name, "--help")
        first = (path.read_text().split('"""')[1].split()[0]).strip("`")
        assert (result.returncode, result.stderr) == (0, ""), (path.name, result.stderr[-500:])
        assert first in result.stdout, (path.name, result.stdout[:300])


def test_a_benchmarks_bad_argument_is_one_line_exit_2():
    assert [
        (r.returncode, len(r.stderr.strip().splitlines()), "Traceback" in r.stderr)
        for r in (
            benchmark("frame_gather.py", "many"),
            benchmark("anakin_vs_seed.py", "seconds=abc"),
            benchmark("learner_update_parts.py", "big"),
        )
    ] == [(2, 2, False), (2, 1, False), (2, 2, False)]


def test_anakin_vs_seeds_target_is_refused_by_its_own_name():
    """``target=abc`` was "Error merging override stop_at_return=abc", a key the user never
    typed (and target=nan "stop_at_return=nan is not a number")."""
    for value in ("abc", "nan"):
        result = benchmark("anakin_vs_seed.py", f"target={value}", "seconds=1")
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"anakin_vs_seed.py: target={value}: "), result.stderr
        assert "stop_at_return" not in result.stderr, result.stderr
