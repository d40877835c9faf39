"""Running seedq's command line as a user does, from the tests."""

import subprocess
import sys


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m seedq.cli ARGS``; stdout holds everything printed (Hydra logs to stdout)."""
    return subprocess.run(
        [sys.executable, "-m", "seedq.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
