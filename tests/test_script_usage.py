"""The scripts' usage texts: ``--help`` answers with the script's arguments, as the docs promise."""

import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bench_ssh_launcher_help_names_its_seconds_and_overrides():
    """It read ``sys.argv[1]`` as the seconds: ``--help`` ended in a ValueError traceback."""
    result = script("bench_ssh_launcher.py", "--help")
    assert (result.returncode, "seconds [overrides ...]" in result.stdout) == (0, True)


def test_defaults_table_help_gives_its_whole_first_sentence():
    """The description was the docstring's first line, cut off at "the defaults table of"."""
    result = script("defaults_table.py", "--help")
    assert "the defaults\ntable of benchmarks/RESULTS.md." in result.stdout
