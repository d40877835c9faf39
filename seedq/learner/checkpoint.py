"""Checkpoints: the learner's state in ``<run dir>/checkpoints``, written atomically, read back
with clear errors.

A checkpoint holds the networks, the optimizer, the step counters, the RNG states and the
resolved config. Each is written to a temp file, synced and renamed into place, so a failed
write (disk full, read-only folder) never replaces a good checkpoint and raises
:class:`CheckpointWriteError`; the newest ``keep`` are kept. Temp files are named so that no
reader ever takes one for a checkpoint, and leftovers of a killed writer are removed.

The run takes a checkpoint in two halves: :func:`copy_tensors` under the weights lock (tensor
copies, no serialisation), then :func:`save_checkpoint` on the writer's thread
(:mod:`seedq.learner.checkpoint_writer`). :func:`load_newest` is what ``resume=auto`` reads: the
newest checkpoint that loads, a damaged newer one skipped with a warning.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch
from omegaconf import OmegaConf

from seedq.envs.section import saved_env_section
from seedq.learner.checkpoint_files import (  # noqa: F401 - find_checkpoint: this module's API too
    DIR_NAME,
    PREFIX,
    find_checkpoint,
    list_checkpoints,
    move_aside,
)
from seedq.learner.errors import CheckpointError
from seedq.schema import ConfigError

log = logging.getLogger(__name__)

# What seedq-train does with a checkpoint: the default ``purpose`` of the readers below, named
# in the advice to take an older one (seedq-eval's is "evaluate").
RESUME = "resume from"

FORMAT = 2
# Settings that must match for a checkpoint to fit a run: the networks' shapes and meaning
# (with the algorithm's keys declared `setting(..., network=True)`, which the caller names).
COMPATIBILITY_KEYS = ("algorithm.name", "algorithm.model", "env")
# Keys inside those sections that set how fast, not what: a run may move to another machine.
SPEED_KEYS = {"env": ("num_threads", "vectorization")}
# Settings added after checkpoints were written, with the value every run before them had: a
# checkpoint without the key is read as having that value.
LEGACY_VALUES: dict[str, Any] = {
    "algorithm.model": {"activation": "relu"},
    "algorithm.value_norm": False,
}


class CheckpointWriteError(OSError):
    """A checkpoint could not be written; the previous one is intact."""


class NonFiniteState(CheckpointWriteError):
    """A state holding NaN or inf is not written: it would rotate good checkpoints out."""


def first_non_finite(value: Any, name: str = "") -> str | None:
    """The dotted name of the first floating-point tensor in ``value`` (nested dicts, lists and
    tuples of a checkpoint's state) holding a NaN or an inf; None when every one is finite.
    Nothing a run keeps is legitimately non-finite: the learner skips an update whose loss or
    gradient is not finite, so such a tensor is damage."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            return None if bool(torch.isfinite(value).all()) else name
        return None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = first_non_finite(item, f"{name}.{key}" if name else str(key))
        if found is not None:
            return found
    return None


TEMP_PREFIX = ".writing-"


def plain_config(cfg: Any) -> dict:
    if is_dataclass(cfg):
        return asdict(cfg)
    return OmegaConf.to_container(cfg, resolve=True)


def copy_tensors(value: Any, into: Any = None) -> Any:
    """``value`` (nested dicts, lists and tuples of a state dict) with every tensor copied on its
    own device, every other leaf deep-copied: cheap enough under the weights lock (a memory copy,
    no serialisation), and safe to write while training changes the originals.

    ``into``: an earlier copy nobody uses any more (one already written); its tensors of the
    same shape, layout and device are filled in place rather than allocated again, which
    spares the page faults of fresh memory (a third to a half of the copy on a busy CPU).
    Copies stay on their device: a device-to-device copy is the shortest pause for a GPU
    learner, and ``torch.save`` moves them to the host on the writer's thread.
    """
    if isinstance(value, torch.Tensor):
        if _same_layout(value, into):
            return into.copy_(value.detach())
        return value.detach().clone()
    if isinstance(value, dict):
        spare = into if isinstance(into, dict) else {}
        return {key: copy_tensors(item, spare.get(key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        spare = into if isinstance(into, (list, tuple)) and len(into) == len(value) else None
        items = zip(value, spare or [None] * len(value), strict=True)
        return type(value)(copy_tensors(item, old) for item, old in items)
    return copy.deepcopy(value)


def _same_layout(tensor: torch.Tensor, spare: Any) -> bool:
    return (
        isinstance(spare, torch.Tensor)
        and spare.shape == tensor.shape
        and spare.dtype == tensor.dtype
        and spare.device == tensor.device
        and spare.stride() == tensor.stride()
    )


def _write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write via a synced temp file and a rename: ``path`` is the old file or the whole new
    one, never a torn one."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_own_temp_prefix(), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        _remove_quietly(tmp)
        # torch's zip writer reports a full disk as a RuntimeError raised while handling the
        # OSError; name the OSError, it says what to fix. Anything else is a bug: raised as is.
        cause = _os_error_in(exc)
        if cause is None:
            raise
        try:
            earlier = bool(list_checkpoints(path.parent))
        except OSError:  # a failing disk: the write's own error is the one to report
            earlier = True
        kept = (
            "the previous checkpoint is kept"
            if earlier
            else "no checkpoint of this run is on disk yet"
        )
        raise CheckpointWriteError(
            f"could not write {path} ({type(cause).__name__}: {cause}); {kept}. Free disk "
            "space or point run_dir at a writable folder"
        ) from exc


def _os_error_in(exc: BaseException) -> OSError | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _remove_quietly(path: str | None) -> None:
    if path is None:
        return
    try:
        os.unlink(path)
    except OSError:
        log.warning("could not remove the partial file %s", path)


def _own_temp_prefix() -> str:
    # The writer's pid in the name: this process may be writing a checkpoint and the replay at
    # once, and only another (killed) process's temp files are stale.
    return f"{TEMP_PREFIX}{os.getpid()}-"


def remove_stale_temp_files(folder: Path) -> None:
    """Delete temp files a killed writer left behind (never read, but they take disk); this
    process's own are files being written."""
    for stale in folder.glob(f"{TEMP_PREFIX}*"):
        if not stale.name.startswith(_own_temp_prefix()):
            _remove_quietly(str(stale))


def save_checkpoint(run_dir: str, state: dict[str, Any], *, keep: int) -> str:
    """Write ``state`` (with ``env_steps``) as a new checkpoint; keep the newest ``keep``.

    Only checkpoints older than the one written are removed: a file that sorts after it (one
    copied in from elsewhere, or left by another timeline of the run) is left alone and never
    takes the new one's place, so the run's newest state is always on disk."""
    folder = Path(run_dir) / DIR_NAME
    path = folder / f"{PREFIX}{int(state['env_steps']):012d}.pt"
    bad = first_non_finite(state)
    if bad is not None:
        raise NonFiniteState(
            f"not writing {path}: {bad} holds NaN or inf, and the checkpoints before it are "
            "kept rather than rotated out"
        )
    remove_stale_temp_files(folder)
    _write_atomically(path, lambda f: torch.save({"format": FORMAT, **state}, f))
    older = [p for p in list_checkpoints(folder) if p.name < path.name]
    for old in older[: max(0, len(older) - (keep - 1))]:
        old.unlink()
    log.info("checkpoint %s (%d env steps, %d updates)", path, state["env_steps"], state["updates"])
    return str(path)


REPLAY_NAME = "replay.npz"


def save_arrays(run_dir: str, fill: Callable[[Callable[[str, Any], None]], None]) -> str:
    """Write the replay's arrays next to the checkpoints, atomically (one file, replaced), in
    ``np.savez``'s format: ``fill(put)`` calls ``put(name, array)`` for each, and each is
    written as it comes (the replay's owner decides what it may still change meanwhile)."""
    import numpy as np

    def write(f: BinaryIO) -> None:
        with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:

            def put(name: str, array: Any) -> None:
                with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)

            fill(put)

    path = Path(run_dir) / DIR_NAME / REPLAY_NAME
    _write_atomically(path, write)
    return str(path)


def load_arrays(path: Path) -> dict[str, Any]:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except Exception as exc:  # noqa: BLE001 - any failure to read means the same to the user
        raise CheckpointError(
            f"{path} cannot be read ({type(exc).__name__}: {exc}); delete it to resume with "
            "an empty replay"
        ) from None


def load_newest(run_dir: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint of ``run_dir`` that reads back, and its state: what
    ``resume=auto`` continues.

    A newer file that does not read (cut short by a full disk or a crash of the machine, or
    damaged later) is skipped with a warning naming it, and moved into
    ``checkpoints/damaged/``: kept for a look, but no longer taken for the run's newest (by
    ``seedq-eval`` or the next resume) nor counted among the ``checkpoint.keep`` newest, where
    it would outrank every checkpoint the resumed run writes. None when the run has no
    checkpoint yet; :class:`CheckpointError` when it has some and none of them reads (then
    nothing is moved).
    """
    folder = Path(run_dir) / DIR_NAME
    found = newest_that_reads(folder)
    if found is None:
        return None
    path, state, damaged = found
    if damaged:
        aside = move_aside(damaged, folder / DAMAGED_DIR)
        log.warning(
            "resume=auto: %d newer checkpoint(s) that do not read (%s) moved to %s; resuming "
            "from %s",
            len(damaged),
            ", ".join(p.name for p in damaged),
            aside,
            path.name,
        )
    return path, state


DAMAGED_DIR = "damaged"


def newest_that_reads(
    folder: Path, purpose: str = RESUME
) -> tuple[Path, dict[str, Any], list[Path]] | None:
    """The newest checkpoint in ``folder`` that reads, its state, and the newer ones that do
    not (each skipped with a warning); None when there is no checkpoint;
    :class:`CheckpointError` when none reads."""
    found = list_checkpoints(folder)
    damaged: list[Path] = []
    for path in reversed(found):
        try:
            return path, load_checkpoint(path, purpose), damaged
        except CheckpointError as exc:
            log.warning("skipping a checkpoint that does not read: %s", exc)
            damaged.append(path)
    if found:
        fresh = f"; move {folder} away to start this run again from scratch"
        raise CheckpointError(
            f"{folder}: none of its {len(found)} checkpoints reads (see the warnings above)"
            f"{fresh if purpose == RESUME else ''}"
        )
    return None


def read_checkpoint(path: str, purpose: str = RESUME) -> tuple[Path, dict[str, Any]]:
    """A checkpoint file and its state; for a run directory (or its ``checkpoints`` folder),
    its newest checkpoint that reads, a damaged newer one skipped with a warning (moving
    nothing: what ``seedq-eval`` and ``resume=<run dir>`` read). ``purpose``: what the reader
    does with it, for the advice to take an older one ("resume from", "evaluate")."""
    target = Path(path).expanduser()  # "~/runs/x" from Python or a quoted override
    if target.is_file():
        return target, load_checkpoint(target, purpose)
    newest = find_checkpoint(str(target))  # CheckpointError when there is none
    path_, state, _ = newest_that_reads(newest.parent, purpose)  # not None: it holds `newest`
    return path_, state


# Where torch's unpickling error turns to advice about weights_only=False, which does not apply
# to a damaged file and would unpickle code from a file no one vouched for.
TORCH_ADVICE = " In PyTorch 2.6, we changed"


def first_line(exc: BaseException) -> str:
    """An error's first line (torch's unpickling errors run to a page of advice)."""
    lines = str(exc).strip().splitlines()
    return lines[0].split(TORCH_ADVICE)[0] if lines else ""


def older_ones(path: Path, purpose: str = RESUME) -> str:
    """The advice after a checkpoint that does not read: its run's older ones, if it has any,
    to ``purpose`` ("resume from", "evaluate")."""
    older = [p for p in list_checkpoints(path.parent) if p.name < path.name]
    if not older:
        return ""
    return f". Its folder has {len(older)} older one(s), newest {older[-1].name}: {purpose} it"


# What every checkpoint holds: save_checkpoint names and logs it by these.
COUNTER_KEYS = ("env_steps", "updates")
# What a run's checkpoint holds besides: the config it was written by, which builds the
# networks, and their weights. A file without either cannot be resumed or evaluated (a
# config without an algorithm or env section neither): every reader needs both.
RUN_KEYS = ("config", "model")


def missing_keys(state: dict[str, Any]) -> list[str]:
    """The keys a checkpoint's ``state`` must hold and does not (``config.env`` for a config
    without its env section)."""
    missing = [key for key in (*COUNTER_KEYS, *RUN_KEYS) if key not in state]
    config = state.get("config")
    if "config" in state and not isinstance(config, dict):
        missing.append("config (a dict)")
    elif isinstance(config, dict):
        algorithm = config.get("algorithm")
        if not isinstance(algorithm, dict) or "name" not in algorithm:
            missing.append("config.algorithm.name")
        if not isinstance(config.get("env"), dict):
            missing.append("config.env")
    return missing


def load_checkpoint(path: Path, purpose: str = RESUME) -> dict[str, Any]:
    """Read a checkpoint (tensors and plain data only: no code is unpickled); a file without
    the keys every checkpoint holds is not one (:func:`missing_keys`). A file whose bytes fail
    their checksums, or whose tensors hold NaN or inf, is damaged: torch reads either without
    a word, and a run resumed from it would train on (and checkpoint) garbage."""
    member = failed_checksum(path)
    if member is not None:
        raise CheckpointError(
            f"{path} cannot be read (its part {member} fails its checksum); it is damaged"
            f"{older_ones(Path(path), purpose)}"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to read means the same to the user
        raise CheckpointError(
            f"{path} cannot be read ({type(exc).__name__}: {first_line(exc)}); it is damaged "
            f"or not a seedq checkpoint{older_ones(Path(path), purpose)}"
        ) from None
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(
            f"{path} is not a seedq checkpoint (a torch file holding a "
            f"{type(state).__name__}{' without a format' if isinstance(state, dict) else ''})"
        )
    if state["format"] != FORMAT:
        raise CheckpointError(
            f"{path} has checkpoint format {state['format']!r}; this seedq reads format {FORMAT}"
        )
    missing = missing_keys(state)
    if missing:
        raise CheckpointError(
            f"{path} is not a seedq checkpoint (it has no {', '.join(missing)})"
            f"{older_ones(Path(path), purpose)}"
        )
    bad = first_non_finite(state)
    if bad is not None:
        raise CheckpointError(
            f"{path} cannot be used: {bad} holds NaN or inf, so it is damaged"
            f"{older_ones(Path(path), purpose)}"
        )
    config = state.get("config")
    if isinstance(config, dict) and isinstance(config.get("env"), dict):
        # Checkpoints written before each env family had its own config hold every family's
        # keys; a resumed run and seedq-eval see the run's family's alone.
        try:
            config["env"] = saved_env_section(config["env"])
        except ConfigError as exc:
            # Not a CheckpointError: an older checkpoint of the run would be refused alike.
            raise ConfigError(f"{path} cannot be used: {exc}") from None
    return state


def failed_checksum(path: Path) -> str | None:
    """The first part of a checkpoint's zip archive whose bytes do not match their CRC-32;
    None when all do, or when the file is no zip archive (``torch.load`` then says what it
    is)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except zlib.error:
        return "(a compressed part)"
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        return None


def _section(config: dict, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def check_compatible(
    path: Path, saved: dict, current: dict, network_keys: tuple[str, ...] = ()
) -> None:
    """Raise naming the first setting where the checkpoint's run and this run differ;
    ``network_keys``: the algorithm's keys that shape its network (``schema.network_keys``)."""
    for key in (*COMPATIBILITY_KEYS, *(f"algorithm.{k}" for k in network_keys)):
        old, new = _section(saved, key), _section(current, key)
        legacy = LEGACY_VALUES.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            old = {**{k: v for k, v in (legacy or {}).items() if k in new}, **old}
            free = SPEED_KEYS.get(key, ())
            old = {k: v for k, v in old.items() if k not in free}
            new = {k: v for k, v in new.items() if k not in free}
        elif old is None and new is not None and legacy is not None:
            old = legacy
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            diff = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            detail = ", ".join(f"{key}.{k}={old.get(k)!r} there, {new.get(k)!r} here" for k in diff)
        else:
            detail = f"{key}={old!r} there, {new!r} here"
        if key == "algorithm.name" and old:
            # `resume=auto` composes this command line, whose algorithm is the default's when
            # it names none: say which one continues the checkpoint
            detail += f" (name it: algorithm={old})"
        raise CheckpointError(
            f"{path} was written by a run with other settings ({detail}); resume it with the "
            "same algorithm, model and env"
        )
