"""A ``seedq-bench`` subcommand on an older commit and on this checkout, side by side.

    python scripts/bench_against.py BASE [--pairs 3] [--metric us_per_step]
        [--bench learner] [-- bench arguments...]

``BASE`` (a commit, tag or branch) is exported with ``git archive`` into a temporary folder,
and this checkout's copy of the subcommand's module (``seedq/bench/<bench>.py``) is copied over
it, so both sides measure the same way. Each pair runs the two at once, one per core, so a busy
neighbour slows both alike: only the ratio means anything on a shared box. Prints one row per
pair, the means and their ratio (base / this checkout: above 1 is this checkout doing better
for a lower-is-better metric such as CPU µs per step; use ``--higher-is-better`` for rates).

A benchmark prints figures rather than failing a test, so a slowdown shows only when someone
looks: the learner's frame gather lost the learner-cpu branch's 1.8x on main without any test
noticing (benchmarks/RESULTS.md, fifth session). This script is how it was found.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(commit: str, bench: str, into: Path) -> Path:
    """``commit``'s tree under ``into``, with this checkout's ``seedq/bench/<bench>.py``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"bench_against: git archive {commit}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    module = bench.replace("-", "_")
    shutil.copy(
        ROOT / "seedq" / "bench" / f"{module}.py", into / "seedq" / "bench" / f"{module}.py"
    )
    if import_error(into, module):
        # The module needs helpers the base's ``common.py`` predates (``scratch_dir`` since
        # fc928c5): this checkout's copy goes over it too, as the measuring code it is.
        shutil.copy(ROOT / "seedq" / "bench" / "common.py", into / "seedq" / "bench" / "common.py")
        error = import_error(into, module)
        if error:
            raise SystemExit(
                f"bench_against: seedq.bench.{module} does not import on {commit}:\n{error}"
            )
    return into


def import_error(tree: Path, module: str) -> str:
    """The tail of the traceback of importing ``seedq.bench.<module>`` in ``tree`` and
    composing the default config through its ``common.py``, or ''. (An import alone passed
    against 0ac3cd8 while every run then failed in ``compose``, on a name the base's cli
    predates.)"""
    check = f"import seedq.bench.{module}; from seedq.bench.common import compose; compose([])"
    run = subprocess.run(
        [sys.executable, "-c", check],
        cwd=tree,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        check=False,
    )
    return "" if run.returncode == 0 else run.stderr.strip()[-1500:]


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a run of ``tree``'s code (with ``cwd=tree``: ``python -m`` puts the
    working directory first on sys.path, so from this checkout both sides would import it)."""
    return {**os.environ, "PYTHONPATH": str(tree)}


def imports_from(tree: Path) -> None:
    """Refuse to compare unless ``tree``'s seedq is the one its runs import."""
    where = subprocess.run(
        [sys.executable, "-c", "import seedq; print(seedq.__file__)"],
        cwd=tree,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        check=False,
    )
    path = Path(where.stdout.strip() or "?").resolve()
    if where.returncode != 0 or tree.resolve() not in path.parents:
        raise SystemExit(f"bench_against: runs in {tree} import seedq from {path}, not from it")


def start(tree: Path, bench: str, args: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "seedq.bench.cli", bench, *args]
    return subprocess.Popen(
        command, cwd=tree, env=tree_env(tree), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def figures(proc: subprocess.Popen, label: str) -> dict:
    out, err = proc.communicate()
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(
            f"bench_against: the {label} run exited {proc.returncode}:\n{err.decode()[-2000:]}"
        )
    return json.loads(lines[-1])


def metric(line: dict, key: str) -> float:
    if not isinstance(line.get(key), (int, float)):
        numbers = sorted(k for k, v in line.items() if isinstance(v, (int, float)))
        raise SystemExit(f"bench_against: no number {key!r} in the JSON line; it has {numbers}")
    return float(line[key])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="commit, tag or branch to compare against")
    parser.add_argument("--bench", default="learner", help="seedq-bench subcommand")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--metric", default="us_per_step", help="key of the bench's JSON line")
    parser.add_argument("--higher-is-better", action="store_true")
    parser.add_argument("args", nargs="*", help="the subcommand's key=value arguments")
    opts = parser.parse_intermixed_args(argv)
    if opts.pairs < 1:
        parser.error("--pairs must be >= 1")
    with tempfile.TemporaryDirectory(prefix="seedq-bench-against-") as tmp:
        base = export(opts.base, opts.bench, Path(tmp))
        imports_from(base)
        imports_from(ROOT)
        rows = []
        for pair in range(1, opts.pairs + 1):
            old, new = start(base, opts.bench, opts.args), start(ROOT, opts.bench, opts.args)
            try:
                a, b = (
                    metric(figures(old, opts.base), opts.metric),
                    metric(figures(new, "checkout"), opts.metric),
                )
            finally:
                # One side failed: the other is not left running on its own.
                for proc in (old, new):
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            rows.append((a, b))
            print(f"pair {pair}: {opts.base} {a:,.2f}  checkout {b:,.2f}", flush=True)
    mean_a = sum(a for a, _ in rows) / len(rows)
    mean_b = sum(b for _, b in rows) / len(rows)
    ratio = mean_b / mean_a if opts.higher_is_better else mean_a / mean_b
    print(f"mean: {opts.base} {mean_a:,.2f}  checkout {mean_b:,.2f}  ({opts.metric})")
    print(f"checkout better by {ratio:.2f}x" if ratio >= 1 else f"checkout worse: {ratio:.2f}x")
    print(json.dumps({"base": opts.base, "metric": opts.metric, "pairs": rows, "ratio": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
