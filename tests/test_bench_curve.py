"""scripts/bench_curve.py: a failed training benchmark is reported with its own error."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_curve.py"


def test_a_failed_train_run_says_why_instead_of_a_traceback():
    spec = importlib.util.spec_from_file_location("bench_curve", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as raised:
        module.train_steps_per_s(1, ["algorithm.lr=-1"])
    message = str(raised.value)
    assert "exited with status 2" in message
    assert "algorithm.lr=-1.0 is out of range" in message
