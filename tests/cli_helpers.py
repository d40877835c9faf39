"""Running seedq's command line as a user does, from the tests."""

import subprocess
import sys
from pathlib import Path


def run_cli(
    *args: str, timeout: float = 120, cwd: Path | str | None = None, apart: bool = False
) -> subprocess.CompletedProcess:
    """``python -m seedq.cli ARGS`` (in ``cwd``); stdout holds everything printed (Hydra logs
    to stdout), or with ``apart`` stderr its own (seedq-train's one-line refusals)."""
    return subprocess.run(
        [sys.executable, "-m", "seedq.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if apart else subprocess.STDOUT,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
