"""A sweep's command line (``seedq-train -m``), read before Hydra: whether it is one, the
folder per job it names, whether its jobs run in a launcher's processes, and the sweeps
refused in one line where Hydra's answer was a traceback or a sweep gone wrong."""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException


def sweeping(argv: list[str]) -> bool:
    """Whether this command line is a sweep: ``-m``, ``--multirun``, or Hydra's
    ``hydra.mode=MULTIRUN`` (which ran one without ``-m``, unseen by seedq's checks: a failed
    job's sweep ended 0)."""
    return any(
        a in ("-m", "--multirun") or a.replace(" ", "").upper() == "HYDRA.MODE=MULTIRUN"
        for a in argv
    )


JOB_NUM = "${hydra:job.num}"


def with_sweep_dir(argv: list[str]) -> list[str]:
    """A sweep's ``run_dir=DIR/${hydra:job.num}`` (one folder per job, as the docs show) also
    puts each job's Hydra files there: ``hydra.sweep.dir=DIR``, one subfolder per job. Without
    it they went to ``runs/multirun/...``, apart from the run, and ``seedq-plot`` labelled
    the jobs by their folder numbers."""
    if any(a.startswith(("hydra.sweep.dir=", "hydra.sweep.subdir=")) for a in argv):
        return argv
    dirs = [a.split("=", 1)[1] for a in argv if a.startswith("run_dir=")]
    if not dirs or not dirs[-1].rstrip("/").endswith(f"/{JOB_NUM}"):
        return argv
    top = dirs[-1].rstrip("/").removesuffix(f"/{JOB_NUM}")
    if "${" in top or "," in top:
        return argv
    return [*argv, f"hydra.sweep.dir={top}", "hydra.sweep.subdir=${hydra.job.num}"]


def jobs_elsewhere(argv: list[str]) -> bool:
    """Whether a sweep's jobs run in processes of Hydra's launcher (``hydra/launcher=joblib``,
    submitit), not in seedq-train's own (Hydra's basic launcher)."""
    named = [
        a.partition("=")[2] for a in argv if a.partition("=")[0].lstrip("+") == "hydra/launcher"
    ]
    return bool(named) and named[-1] != "basic"


def printing_sweep(argv: list[str]) -> str | None:
    """The refusal of ``--cfg`` or ``--info`` with ``-m``: Hydra's answer was a ValueError
    traceback ("Only one of --run, --multirun, --cfg, --info ... can be specified")."""
    if not any(a in ("-m", "--multirun") for a in argv):
        return None
    for arg in argv:
        if arg in ("--cfg", "-c", "--info", "-i"):
            return (
                f"{arg} prints one run's config and cannot go with -m: drop -m and give each "
                "swept key one of its values (seed=0,1 -> seed=0) to see that job's"
            )
    return None


def supervised_sweep(argv: list[str]) -> str | None:
    """The refusal of ``supervise=true`` with ``-m`` before Hydra: each job refused it alone,
    leaving a dated sweep folder of refused jobs behind."""
    multirun = sweeping(argv)
    asked = [a.partition("=")[2] for a in argv if a.lstrip("+").partition("=")[0] == "supervise"]
    if multirun and asked and asked[-1].lower() in ("true", "yes", "on", "1"):
        return (
            "supervise=true supervises one run, not a sweep (-m): drop -m, or drop supervise "
            "and continue a stopped sweep with resume=auto"
        )
    return None


def interval_sweep(argv: list[str]) -> str | None:
    """The refusal of ``key=interval(a,b)`` with Hydra's basic sweeper, which runs lists,
    ``range()`` and ``choice()`` only: its answer was a HydraException traceback ("BasicSweeper
    does not support sweep type : INTERVAL_SWEEP")."""
    from hydra.core.override_parser.types import ValueType

    multirun = sweeping(argv)
    if not multirun or any(a.lstrip("+").startswith("hydra/sweeper=") for a in argv):
        return None
    try:
        overrides = OverridesParser.create().parse_overrides(
            [a for a in argv if not a.startswith("-")]
        )
    except HydraException:
        return None  # Hydra names what it cannot read
    for override in overrides:
        if override.value_type == ValueType.INTERVAL_SWEEP:
            return (
                f"{override.input_line}: interval() is a range for an optimising sweeper to "
                "sample (hydra/sweeper=optuna, its Hydra plugin installed); Hydra's basic "
                "sweeper runs the values given: a list (0.001,0.003), range() or choice()"
            )
    return None


def shared_sweep_dir(argv: list[str]) -> str | None:
    """The refusal of a sweep (``-m``) whose jobs would all write into one ``run_dir=``; None
    if there is none. Each job needs its own folder: Hydra gives it one when run_dir is left
    out, and ``run_dir=runs/x/${hydra:job.num}`` names one per job."""
    if not sweeping(argv):
        return None
    for arg in argv:
        if arg.startswith("run_dir=") and "${" not in arg and "," not in arg:
            return (
                f"{arg}: every job of this sweep would write into that one folder (their "
                "metrics, checkpoints and summaries mixed); leave run_dir out (each job gets "
                "its own folder under runs/multirun/) or give one per job, e.g. "
                "'run_dir=runs/sweep/${hydra:job.num}'"
            )
    return None


def sweep_refusal(argv: list[str]) -> str | None:
    """The refusal of a sweep command line that cannot run as asked; None if there is none."""
    return (
        printing_sweep(argv)
        or supervised_sweep(argv)
        or interval_sweep(argv)
        or shared_sweep_dir(argv)
    )
