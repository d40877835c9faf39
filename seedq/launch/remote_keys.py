"""Shipping the actor's CURVE keys to a host over the SSH connection that starts the actor.

The launcher runs ``ssh HOST sh -s`` and writes :func:`actor_script` to its stdin: the script
writes the two key files an actor needs (owner-only) and then ``exec``s the actor. The keys
travel inside the encrypted SSH channel and never appear in a command line (``ps`` on either
host would show those); the learner's secret key never leaves the learner.

The folder on the host may hold another key set already: ``~/.seedq/keys``, the default, is
where ``seedq-keys`` is run on a host that is a learner too, and two runs with different keys
may share a host. The script never replaces a key file there that differs from this run's; the
host check (:func:`keys_check_script`) refuses such a host, or a folder it cannot create, before
anything starts.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from seedq.security import ACTOR_FILES, check_key_files

_EOF = "SEEDQ_KEY_EOF"
# The scripts' exit status when the keys cannot go to the host; its last stderr line says why.
KEYS_EXIT = 3


def actor_script(keys_dir: str, remote_keys_dir: str, actor_argv: list[str]) -> str:
    """A POSIX sh script: install ``actor.key_secret`` + ``learner.key``, then run the actor.

    ``actor_argv`` is the actor's command line on that host; it should carry
    ``--keys-dir remote_keys_dir``. A ``~`` at the start of ``remote_keys_dir`` is the remote
    user's home.
    """
    texts = _key_texts(keys_dir)
    target = _remote_path(remote_keys_dir)
    lines = ["set -e", *_prepare_folder(texts, target, remote_keys_dir, keys_dir)]
    for name, text in texts.items():
        # Several actors on one host (or on a shared home) write the same files at once: each
        # writes its own temp file and renames it, so no actor ever reads a half-written key.
        temp = f"{target}/.{name}.$$"
        lines += [f"cat > {temp} <<'{_EOF}'", text, _EOF, f"mv -f {temp} {target}/{name}"]
    lines.append("exec " + shlex.join(actor_argv))
    return "\n".join(lines) + "\n"


def keys_check_script(keys_dir: str, remote_keys_dir: str) -> str:
    """The host check's part of :func:`actor_script`: the folder made (or found writable) and no
    different key file in it; nothing written. Exits :data:`KEYS_EXIT` with one line if not."""
    texts = _key_texts(keys_dir)
    target = _remote_path(remote_keys_dir)
    return "\n".join(_prepare_folder(texts, target, remote_keys_dir, keys_dir)) + "\n"


def _key_texts(keys_dir: str) -> dict[str, str]:
    check_key_files(keys_dir, ACTOR_FILES, key="security.keys_dir")
    return {n: (Path(keys_dir).expanduser() / n).read_text().rstrip("\n") for n in ACTOR_FILES}


def _prepare_folder(texts: dict[str, str], target: str, remote_keys_dir: str, keys_dir: str):
    """sh lines: under umask 077, create the folder if missing (a folder that exists keeps its
    mode: it may be shared on purpose), then refuse one that is not writable or holds a key file
    unlike this run's."""
    where = f"launcher.remote_keys_dir={remote_keys_dir}"
    cannot_create = shlex.quote(f"{where}: cannot create it on this host (")
    cannot_write = shlex.quote(
        f"{where} is not writable on this host; set launcher.remote_keys_dir to a folder the "
        "remote user can write"
    )
    fix = shlex.quote(
        f"; they are not security.keys_dir={keys_dir}'s (another key set lives there: this host's "
        "own seedq-keys, or another run's) and would be overwritten: set launcher.remote_keys_dir "
        "to another folder, or remove those files there"
    )
    lines = [
        "umask 077",
        f"if [ ! -d {target} ]; then",
        f"  seedq_err=$(mkdir -p {target} 2>&1) || {{ printf '%s%s%s\\n' {cannot_create} "
        f'"$seedq_err" \'); set launcher.remote_keys_dir to a folder the remote user can '
        f"create' >&2; exit {KEYS_EXIT}; }}",
        "fi",
        f"[ -w {target} ] || {{ printf '%s\\n' {cannot_write} >&2; exit {KEYS_EXIT}; }}",
        "seedq_differ=''",
    ]
    for name, text in texts.items():
        # `[` is a shell builtin: the key is compared without appearing in a command line.
        lines += [
            f'if [ -e {target}/{name} ] && [ "$(cat {target}/{name})" != {shlex.quote(text)} ]',
            f'then seedq_differ="$seedq_differ {name}"; fi',
        ]
    lines.append(
        f"[ -z \"$seedq_differ\" ] || {{ printf '%s holds%s%s\\n' {shlex.quote(where)} "
        f'"$seedq_differ" {fix} >&2; exit {KEYS_EXIT}; }}'
    )
    return lines


def _remote_path(path: str) -> str:
    if path == "~" or path.startswith("~/"):
        return '"$HOME"' + shlex.quote(path[1:]) if path != "~" else '"$HOME"'
    return shlex.quote(path)
