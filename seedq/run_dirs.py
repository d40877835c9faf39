"""A run's folder as ``seedq-train``'s command line names it, read before Hydra makes it:
Hydra's own files put beside the run (``run_dir=``, ``resume=RUN``), the refusal of a folder
that cannot hold a run or that a live run holds, and :class:`RunDirRecord`, which leaves a
refused command's folder as it found it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from seedq.command_keys import AUTO
from seedq.exit_status import EXIT_REFUSED
from seedq.files import unwritable
from seedq.launch.sweep_jobs import Command
from seedq.launch.sweeps import JOB_NUM, sweeping, with_sweep_dir
from seedq.learner.run_lock import LOCK_NAME, held_by
from seedq.parallel.ranks import launched_rank

log = logging.getLogger("seedq")


def with_hydra_dir(argv: list[str]) -> list[str]:
    """``run_dir=DIR`` also puts Hydra's own files there (``.hydra/``, ``cli.log``): one folder
    holds the whole run, however often it is restarted (sweeps keep Hydra's job folders). So
    does ``resume=RUN`` for the run directory it continues."""
    from seedq.learner.checkpoint_files import resumed_run_dir

    if sweeping(argv):
        return with_sweep_dir(argv)
    if any(a.startswith("hydra.run.dir=") for a in argv):
        return argv
    dirs = [a.split("=", 1)[1] for a in argv if a.startswith("run_dir=")]
    if dirs:
        return [*argv, f"hydra.run.dir={dirs[-1]}"]
    resumes = [a.split("=", 1)[1] for a in argv if a.startswith("resume=")]
    if resumes and resumes[-1] not in (AUTO, "null", "None", ""):
        run_dir = resumed_run_dir(resumes[-1])
        if run_dir is not None:
            return [*argv, f"hydra.run.dir={run_dir}"]
    return argv


def live_run_dir(argv: list[str]) -> str | None:
    """The refusal of a run into the folder a live seedq run holds (its lock), before Hydra
    writes its ``.hydra/`` and ``cli.log`` there; None if there is none. The learner's own
    claim still decides (a run may start in between); ranks a launcher started leave it to
    their rank 0, which holds the folder itself."""
    from seedq.learner.run_lock import held_by, in_use

    if sweeping(argv) or launched_rank() is not None:
        return None
    dirs = [a.split("=", 1)[1] for a in argv if a.startswith("hydra.run.dir=")]
    if not dirs or not dirs[-1] or "${" in dirs[-1]:
        return None
    holder = held_by(dirs[-1])
    return None if holder is None else in_use(dirs[-1], holder)


def unusable_run_dir(argv: list[str]) -> str | None:
    """The refusal of a ``run_dir=`` (or ``hydra.run.dir=``, a sweep's ``hydra.sweep.dir=``)
    that cannot hold a run: empty, a file, a path through a file, a folder this user cannot
    write; None if there is none. Checked before Hydra, whose own setup of the folder and its
    log fails there with a traceback."""
    from seedq.learner.checkpoint_files import resumed_run_dir

    folder_keys = ("run_dir", "hydra.run.dir", "hydra.sweep.dir")
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in folder_keys and "=" in arg and not value.strip():
            # Hydra took it for the working directory, then seedq's writers for no folder (a
            # sweep's: its job folders and multirun.yaml in the working directory).
            return (
                f"{key}= is empty: give a folder for the run, or leave {key}= out for a dated "
                f"folder under {RUNS_ROOT}/"
            )
        if key == "run_dir" and value.rstrip("/").endswith(f"/{JOB_NUM}"):
            # A sweep's folder per job (with_sweep_dir): the folder above them must hold them.
            value = value.rstrip("/").removesuffix(f"/{JOB_NUM}")
        if key == "resume" and value not in ("", AUTO, "null", "None"):
            # The run it continues goes on in its own folder (unless run_dir= says otherwise).
            if any(a.startswith(("run_dir=", "hydra.run.dir=")) for a in argv):
                continue
            if (resumed := resumed_run_dir(value)) is None:
                continue
            arg, value = f"resume={value} (its run dir)", str(resumed)
        elif key not in folder_keys or not value or "${" in value:
            continue
        path = Path(value).expanduser()
        if path.exists() and not path.is_dir():
            return f"{arg}: that is a file, not a folder; give a folder for the run"
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            return f"{arg}: {existing} is a file, so no folder can be made under it"
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{arg}: {existing} cannot be written by this user; give another folder"
        if reason := unwritable(existing):
            # root passes os.access everywhere; an immutable folder or a read-only mount
            # refuses it all the same.
            return f"{arg}: {existing} cannot be written ({reason}); give another folder"
    return None


# What Hydra puts in a run dir before the command is judged; nothing else is ever removed.
HYDRA_FILES = (".hydra", "cli.log", LOCK_NAME)


RUNS_ROOT = "runs"  # where hydra.run.dir (conf/config.yaml) puts a run with no run_dir


class RunDirRecord:
    """A run dir as it was before this command: Hydra rewrites ``.hydra/`` (the config and
    command line that ``seedq-plot`` labels the run by) and makes the folder before seedq has
    judged the command. :meth:`settle` puts the files back when no run started, and removes a
    folder this command made that holds nothing but Hydra's files, so a refused command
    leaves no trace beside its error."""

    def __init__(self, argv: list[str]) -> None:
        dirs = [a.split("=", 1)[1] for a in argv if a.startswith("hydra.run.dir=")]
        self.named = Path(dirs[-1]).expanduser() if dirs and "${" not in dirs[-1] else None
        self.existed = self.named is not None and self.named.is_dir()
        self.kept: dict[Path, bytes] = {}
        # The folders above Hydra's dated one (runs/, runs/<day>/) that are here now: a
        # refused command removes those it made itself.
        self.here: set[Path] = set()
        with contextlib.suppress(OSError):
            self.here = {Path("."), *(Path(name) for name in os.listdir(RUNS_ROOT))}
        if self.existed:
            for path in (self.named / ".hydra").glob("*.yaml"):
                with contextlib.suppress(OSError):
                    self.kept[path] = path.read_bytes()

    def settle(self, command: Command) -> None:
        if command.started or command.output_dir is None:
            return
        folder = Path(command.output_dir)
        if held_by(str(folder)) not in (None, str(os.getpid())):
            # Another run holds the folder (it started between this command's look and its
            # claim, the race of two starts): its files are its own now; removing them took
            # its lock file with them, and a third start then ran beside it.
            return
        try:
            if self.existed and self.named is not None and folder.resolve() == self.named.resolve():
                for path, data in self.kept.items():
                    if path.read_bytes() != data:
                        path.write_bytes(data)
            elif not self.existed and {p.name for p in folder.iterdir()} <= set(HYDRA_FILES):
                shutil.rmtree(folder)
                if self.named is None:
                    self._remove_made_parents(folder)
        except OSError as exc:
            log.warning("could not tidy %s after the refused command: %s", folder, exc)

    def settle_sweep(self, command: Command) -> None:
        """A sweep all of whose jobs were refused (nothing trained) leaves no trace beside its
        errors, as a refused run does: the job folders of Hydra's files alone, its
        ``multirun.yaml`` and the dated folders above that this command made. It left them
        behind, one folder per job and a dated sweep folder per try."""
        jobs = (command.next_job or 0) + 1
        refused = command.job_codes.count(EXIT_REFUSED) == len(command.job_codes) == jobs
        if command.started or not command.sweep_dir or not refused:
            return
        sweep = Path(command.sweep_dir)
        try:
            for job in [p for p in sweep.iterdir() if p.is_dir()]:
                if {p.name for p in job.iterdir()} <= set(HYDRA_FILES):
                    shutil.rmtree(job)
            if {p.name for p in sweep.iterdir()} <= {"multirun.yaml"}:
                shutil.rmtree(sweep)
                self._remove_made_parents(sweep)
        except OSError as exc:
            log.warning("could not tidy %s after the refused sweep: %s", sweep, exc)

    def _remove_made_parents(self, folder: Path) -> None:
        """The empty folders above ``folder`` up to ``runs/`` that this command made."""
        root = Path(RUNS_ROOT).resolve()
        for parent in folder.resolve().parents:
            if not parent.is_relative_to(root) or parent.relative_to(root) in self.here:
                return
            if any(parent.iterdir()):
                return
            parent.rmdir()
