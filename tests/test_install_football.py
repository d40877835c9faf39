"""scripts/install_football.sh: the interpreter it builds with, its up-front checks, and (slow)
a whole install into a fresh venv that is never activated."""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install_football.sh"


def run_script(*args: str, python: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, "PYTHON": python, **env},
        capture_output=True,
        text=True,
        timeout=3600,
    )


def prefix_of(python: str | Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import sys; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.fixture
def bare_venv(tmp_path: Path) -> Path:
    """A venv without pip (fast to make); returns its python."""
    venv.create(tmp_path / "venv", with_pip=False)
    return tmp_path / "venv" / "bin" / "python"


def test_shim_runs_the_venv_of_python(tmp_path: Path, bare_venv: Path) -> None:
    result = run_script("--make-shim", str(tmp_path / "shim"), python=str(bare_venv))
    assert result.returncode == 0, result.stderr

    shim = tmp_path / "shim" / "python3"
    assert not shim.is_symlink()
    assert prefix_of(shim) == prefix_of(bare_venv) == str(tmp_path / "venv")


def test_shim_runs_the_interpreter_running_the_tests(tmp_path: Path) -> None:
    result = run_script("--make-shim", str(tmp_path / "shim"), python=sys.executable)
    assert result.returncode == 0, result.stderr

    assert prefix_of(tmp_path / "shim" / "python3") == sys.prefix


def test_missing_python_fails_in_one_line(tmp_path: Path) -> None:
    result = run_script(python=str(tmp_path / "no-such-python"))

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"[install_football] error: PYTHON={tmp_path / 'no-such-python'} does not run; "
        "set PYTHON to the interpreter seedq is installed in."
    ]


def test_venv_without_pip_fails_before_installing_anything(bare_venv: Path) -> None:
    result = run_script(python=str(bare_venv))

    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("[install_football] error: no pip in")
    assert "-m ensurepip --upgrade" in line


def test_unknown_argument_is_refused(bare_venv: Path) -> None:
    result = run_script("--bogus", python=str(bare_venv))

    assert result.returncode == 1
    assert "unknown argument '--bogus'" in result.stderr


@pytest.mark.slow
def test_installs_into_a_fresh_venv_named_by_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First install builds the wheel (minutes) with only PYTHON pointing at the venv, which is
    never activated; a re-install after uninstalling comes from the cached wheel."""
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    env = {"SEEDQ_WHEEL_CACHE": str(tmp_path / "wheels")}
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)

    first = run_script(python=python, **env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "self-check: academy_empty_goal_close stepped" in first.stdout

    subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "gfootball"], check=True)
    again = run_script(python=python, **env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "using cached wheel" in again.stdout
    assert "self-check: academy_empty_goal_close stepped" in again.stdout
