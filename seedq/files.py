"""Files a run keeps whole: a text written through a rename, and a free name to set a file
aside under without replacing an earlier copy."""

from __future__ import annotations

import os
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
