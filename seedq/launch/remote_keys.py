"""Shipping the actor's CURVE keys to a host over the SSH connection that starts the actor.

The launcher runs ``ssh HOST sh -s`` and writes :func:`actor_script` to its stdin: the script
writes the two key files an actor needs (owner-only) and then ``exec``s the actor. The keys
travel inside the encrypted SSH channel and never appear in a command line (``ps`` on either
host would show those); the learner's secret key never leaves the learner.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from seedq.security import ACTOR_FILES, check_key_files

_EOF = "SEEDQ_KEY_EOF"


def actor_script(keys_dir: str, remote_keys_dir: str, actor_argv: list[str]) -> str:
    """A POSIX sh script: install ``actor.key_secret`` + ``learner.key``, then run the actor.

    ``actor_argv`` is the actor's command line on that host; it should carry
    ``--keys-dir remote_keys_dir``. A ``~`` at the start of ``remote_keys_dir`` is the remote
    user's home.
    """
    check_key_files(keys_dir, ACTOR_FILES, key="security.keys_dir")
    target = _remote_path(remote_keys_dir)
    lines = ["set -e", "umask 077", f"mkdir -p {target}", f"chmod 700 {target}"]
    for name in ACTOR_FILES:
        text = (Path(keys_dir).expanduser() / name).read_text()
        # Several actors on one host (or on a shared home) write the same files at once: each
        # writes its own temp file and renames it, so no actor ever reads a half-written key.
        temp = f"{target}/.{name}.$$"
        lines += [
            f"cat > {temp} <<'{_EOF}'",
            text.rstrip("\n"),
            _EOF,
            f"mv -f {temp} {target}/{name}",
        ]
    lines.append("exec " + shlex.join(actor_argv))
    return "\n".join(lines) + "\n"


def _remote_path(path: str) -> str:
    if path == "~" or path.startswith("~/"):
        return '"$HOME"' + shlex.quote(path[1:]) if path != "~" else '"$HOME"'
    return shlex.quote(path)
