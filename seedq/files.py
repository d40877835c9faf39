"""Files a run keeps whole: a text written through a rename, a free name to set a file aside
under without replacing an earlier copy, and whether a folder takes new files at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, fsync and a rename, so a crash
    leaves either the old file or the new one whole."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.tmp")
    try:
        with open(tmp, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # A full disk: the old file stays as it was, and no half-written temp file beside it.
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def free_name(path: Path, before: str, after: str = "") -> Path:
    """The first of ``before + after``, ``before + "2" + after``, ... not taken in ``path``'s
    folder: an earlier copy set aside is never replaced."""
    n = 1
    while (aside := path.with_name(f"{before}{n if n > 1 else ''}{after}")).exists():
        n += 1
    return aside


def unwritable(folder: Path) -> str:
    """Why a file cannot be made in ``folder`` ("" if one can): one is made and removed (root
    passes ``os.access`` everywhere; an immutable folder or a read-only mount refuses it all
    the same)."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".seedq-write-check-")
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(name)
    return ""
