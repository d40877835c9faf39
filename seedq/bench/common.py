"""What the bench subcommands share: ``key=value`` arguments, configs, tables, the JSON line."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import platform
import queue
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import seedq
from seedq.config import ConfigError, SeedqConfig, register_configs
from seedq.envs import EnvError
from seedq.launch.sizing import size_run

CONF_DIR = str(Path(seedq.__file__).parent / "conf")


MAX_SECONDS = 7 * 24 * 3600.0  # a bench's seconds or warm-up; inf or 1e12 overflowed timers


class BenchError(ValueError):
    """A bench argument is wrong; the message names it and what is allowed."""


class BenchStopped(KeyboardInterrupt):
    """SIGTERM ended a bench, or stopped the training run it times: raised in the main thread
    as Ctrl-C's KeyboardInterrupt is, so every ``finally`` (child processes, sockets, scratch
    dirs) runs. Its default action killed the bench at once, its actor, env and generator
    processes and a contention copy's whole run left running on their own."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _stopped(signum: int, frame: Any) -> None:
    raise BenchStopped(signal.Signals(signum).name)


def stop_on_sigterm() -> None:
    """SIGTERM raises :class:`BenchStopped` in the main thread from now on (a training run
    takes it over while it runs, and stops in order: :func:`check_not_stopped`)."""
    signal.signal(signal.SIGTERM, _stopped)


def check_not_stopped(run: Any) -> None:
    """Raise :class:`BenchStopped` if a stop signal ended ``run`` (a ``TrainingRun``, which
    takes SIGINT and SIGTERM over while it trains and returns early): its figures would be
    those of a cut-short window, and a bench of several runs would go on to the next."""
    if getattr(run, "stop_signal", ""):
        raise BenchStopped(run.stop_signal)


def stopped_status(command: str, exc: KeyboardInterrupt) -> int:
    """One line for a bench that Ctrl-C or SIGTERM ended, and its exit status (128 + the
    signal's number, as a shell reports it)."""
    name = exc.name if isinstance(exc, BenchStopped) else "SIGINT"
    print(f"{command}: stopped by {name}; nothing was measured to the end", file=sys.stderr)
    return 128 + signal.Signals[name].value


def script_main(main: Callable[[list[str]], Any], doc: str, argv: list[str]) -> int:
    """A benchmark script's ``main(argv)`` of ``key=value`` arguments run as a command: ``-h``
    or ``--help`` prints ``doc`` (its usage), a refused argument, config or env one line; the
    exit status (0, or 2 refused), as ``seedq-bench`` answers."""
    if any(a in ("-h", "--help") for a in argv):
        print(doc.strip())
        return 0
    name = Path(sys.argv[0]).name
    stop_on_sigterm()
    try:
        main(argv)
    except (BenchError, ConfigError, EnvError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return stopped_status(name, exc)
    return 0


def split_args(args: Sequence[str], options: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Separate the bench's own ``key=value`` options from seedq config overrides.

    ``options`` maps each bench option to its default; a value is parsed to the default's type
    (lists as comma-separated). Everything else is handed to Hydra as an override.
    """
    values = dict(options)
    overrides = []
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep:
            raise BenchError(f"{arg!r}: arguments are key=value (e.g. seconds=5 env=atari)")
        if key not in options:
            overrides.append(arg)
            continue
        default = options[key]
        try:
            if isinstance(default, bool):
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                values[key] = raw.lower() in ("true", "1")
            elif isinstance(default, list):
                kind = type(default[0]) if default else str
                values[key] = [kind(x) for x in raw.split(",") if x]
            elif default is None:
                values[key] = raw
            else:
                values[key] = type(default)(raw)
        except ValueError:
            raise BenchError(
                f"{key}={raw!r}: expected {type(default).__name__} like {default!r}"
            ) from None
        if values[key] == []:
            # Nothing to measure: a table of no rows ended in a TypeError.
            example = ",".join(str(x) for x in default)
            raise BenchError(f"{key}={raw} names nothing; give one or more, e.g. {key}={example}")
    # Every bench measures for `seconds` after `warmup_s`: none over no time (a division by
    # zero, or a table of zeros).
    if "seconds" in values and not 0 < values["seconds"] <= MAX_SECONDS:
        raise BenchError(
            f"seconds={values['seconds']}: must be > 0 (the time measured) and at most "
            f"{MAX_SECONDS:g} (a week)"
        )
    if "warmup_s" in values and not 0 <= values["warmup_s"] <= MAX_SECONDS:
        raise BenchError(f"warmup_s={values['warmup_s']}: must be >= 0 and at most {MAX_SECONDS:g}")
    return values, overrides


def ended(exitcode: int) -> str:
    """How a process ended, by its multiprocessing exit code: "was killed by SIGKILL"."""
    if exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name}"
    return f"exited with status {exitcode}"


def gather(results: Any, procs: Sequence[Any], limit_s: float, what: str) -> list[Any]:
    """One report from each of ``procs`` (multiprocessing processes) off the ``results`` queue,
    as they come. One that exits without its report (killed: the OOM killer, a segfault,
    SIGKILL) is a BenchError at once; the bench waited out ``limit_s`` (its seconds and two
    minutes more) and ended in a ``queue.Empty`` traceback."""
    reports: list[Any] = []
    deadline = time.monotonic() + limit_s
    while len(reports) < len(procs):
        try:
            reports.append(results.get(timeout=0.5))
            continue
        except queue.Empty:
            pass
        # Reports are put before the process exits: a failure reports one and exits 0.
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead and len(reports) < len(procs):
            raise BenchError(f"{what} {ended(dead[0])} before it reported its figures")
        if time.monotonic() > deadline:
            raise BenchError(f"{what} reported nothing within {limit_s:g} s")
    return reports


def one_of(key: str, value: Any, allowed: Sequence[Any]) -> None:
    """A BenchError unless ``value`` is one of ``allowed``: a misspelt mode ran the default
    one without a word."""
    if value not in allowed:
        raise BenchError(f"{key}={value!r} is not allowed; choose one of {list(allowed)}")


def only_in_mode(
    argv: Sequence[str], key: str, mode: Any, read_by: dict[Any, Sequence[str]]
) -> None:
    """A BenchError when ``argv`` sets an option that only another value of ``key`` reads:
    ``read_by`` maps a mode to the options only it reads. Such an option was ignored without a
    word (``anakin seeds=0,1,2`` measured throughput, ``learner mode=run requests=4`` the
    default)."""
    given = [arg.partition("=")[0] for arg in argv]
    own = read_by.get(mode, ())
    for other, keys in read_by.items():
        foreign = [k for k in dict.fromkeys(given) if k in keys and k not in own]
        if other != mode and foreign:
            shown = str(other).lower() if isinstance(other, bool) else other
            names = " ".join(f"{k}=" for k in foreign)
            raise BenchError(
                f"{names}: only {key}={shown} reads {'it' if len(foreign) == 1 else 'them'}; "
                f"add {key}={shown}, or leave {'it' if len(foreign) == 1 else 'them'} out"
            )


def positive_sizes(key: str, value: int | Sequence[int], example: str) -> None:
    """A BenchError unless ``value`` (a size or count, or a list of them: one or more) is > 0
    throughout; ``example``: a value that is allowed."""
    sizes = [value] if isinstance(value, int) else list(value)
    if not sizes or min(sizes) < 1:
        shown = value if isinstance(value, int) else ",".join(str(v) for v in sizes)
        raise BenchError(
            f"{key}={shown} is not allowed; it takes whole numbers > 0, e.g. {key}={example}"
        )


def scratch_dir(prefix: str) -> str:
    """A temporary run dir for a bench that reports figures, not files: removed (with whatever
    the run wrote there) when the process exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@contextlib.contextmanager
def kept_dir(given: str, prefix: str) -> Iterator[str]:
    """The run dir of a bench whose figures name it: ``given``, or a new temporary one that is
    kept when the body finishes and removed when it raises (a bad override leaves nothing)."""
    if given:
        yield given
        return
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def compose(overrides: Sequence[str], run_dir: str | None = None) -> SeedqConfig:
    """The training config ``seedq-train OVERRIDES`` would run, validated. Without
    ``run_dir`` the config points at a scratch dir removed at exit."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException

    from seedq import cli

    # scripts/bench_against.py lays this file over older trees as the measuring code: the
    # checks of the overrides live in seedq.command_keys since 2026-12-07, in seedq.cli before
    # (from 2026-12-02), and a tree older than that runs without them.
    try:
        from seedq import command_keys as checks
    except ImportError:
        checks = cli
    overrides = list(overrides)
    if hasattr(checks, "key_refusal"):
        overrides = checks.whole_numbers(overrides)
        if refusal := checks.key_refusal(overrides):
            raise ConfigError(refusal)
    register_configs()
    run_dir = run_dir or scratch_dir("seedq-bench-")
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=[f"run_dir={run_dir}", *overrides])
    except HydraException as exc:
        raise ConfigError(str(exc)) from None
    size_run(cfg, overrides)
    return cli.to_config(cfg)


def frames_per_step(cfg: SeedqConfig) -> float:
    """Emulator frames per agent step (Atari's frame skip; 1 elsewhere)."""
    return cfg.env.frames_per_step()


def machine() -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table: numbers right-aligned with thousands separators."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.3g}" if abs(value) < 10 else f"{value:,.0f}"
        if isinstance(value, int):
            return f"{value:,}"
        return "-" if value is None else str(value)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in text)) for i, c in enumerate(columns)]
    print(title)
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in text:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    print()


def print_json(bench: str, figures: dict[str, Any]) -> None:
    """The last line of every subcommand: its figures, machine-readable."""
    print(json.dumps({"bench": bench, **figures, "machine": machine()}), flush=True)
