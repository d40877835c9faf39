"""``seedq-keys DIR``: write the learner's and the actors' CURVE key pairs.

One key pair for the learner (the CURVE server) and one shared by all actors (the clients the
learner accepts). Secret files are owner-only; so is the folder when ``seedq-keys`` creates it
(an existing folder keeps its mode, with a warning when other users can open it).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

import zmq.auth

from seedq.security import ACTOR, LEARNER


class KeysExistError(FileExistsError):
    """Keys are already there; overwriting them would lock out every deployed actor."""


def key_paths(keys_dir: str | os.PathLike) -> list[Path]:
    directory = Path(keys_dir).expanduser()
    suffixes = (".key", ".key_secret")
    return [directory / f"{name}{suffix}" for name in (LEARNER, ACTOR) for suffix in suffixes]


def create_keys(keys_dir: str | os.PathLike, force: bool = False) -> list[Path]:
    """Write ``learner.key[_secret]`` and ``actor.key[_secret]`` into ``keys_dir``; their paths.

    Refuses to overwrite existing keys unless ``force``.
    """
    directory = Path(keys_dir).expanduser()
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory} is a file; give a folder for the keys")
    existing = [p for p in key_paths(directory) if p.exists()]
    if existing and not force:
        raise KeysExistError(
            f"{', '.join(str(p) for p in existing)} already exist; new keys would lock out "
            "actors that hold the old ones. Use --force to replace them"
        )
    # The secret file is created with the default umask by pyzmq, so narrow the umask while
    # writing and chmod afterwards: no moment where the secret is world-readable.
    old_umask = os.umask(0o077)
    try:
        # Only a folder made here is made owner-only: an existing one may be shared on
        # purpose (`seedq-keys /tmp` must not lock other users out of /tmp).
        if not directory.exists():
            directory.mkdir(parents=True)
            directory.chmod(0o700)
        for name in (LEARNER, ACTOR):
            _, secret_file = zmq.auth.create_certificates(directory, name)
            Path(secret_file).chmod(0o600)
            (directory / f"{name}.key").chmod(0o644)
    finally:
        os.umask(old_umask)
    return key_paths(directory)


def open_to_others(keys_dir: str | os.PathLike) -> str:
    """A warning when the existing folder ``keys_dir`` lets group or others in ("" if not)."""
    directory = Path(keys_dir).expanduser()
    if os.name != "posix" or not directory.is_dir():
        return ""
    mode = stat.S_IMODE(directory.stat().st_mode)
    if not mode & 0o077:
        return ""
    return (
        f"{directory} is open to other users (mode {mode:o}), left as it was: they can see the "
        "key files (the secrets themselves are owner-only); use a folder of your own, or "
        f"chmod 700 {directory} if it is yours alone"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seedq-keys",
        description="write CURVE key pairs for a seedq learner and its actors",
    )
    parser.add_argument("dir", help="directory for the keys (one it creates is owner-only)")
    parser.add_argument("--force", action="store_true", help="replace existing keys")
    args = parser.parse_args(argv)
    if not args.dir.strip():
        # Path("") is the working directory: the keys landed there, and the hint printed
        # security.keys_dir= (empty), which seedq-train refuses.
        parser.error("dir is empty; give the folder for the keys, e.g. seedq-keys ~/.seedq/keys")
    warning = open_to_others(args.dir)
    try:
        paths = create_keys(args.dir, force=args.force)
    except KeysExistError as exc:
        print(f"seedq-keys: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # A folder that cannot be made or written (no parent, read-only, another user's);
        # create_keys' own refusals say what to do already.
        said = (
            str(exc)
            if exc.strerror is None
            else (
                f"cannot write the keys into {args.dir} ({exc.strerror}); give a folder this user "
                "can create or write"
            )
        )
        print(f"seedq-keys: {said}", file=sys.stderr)
        return 1
    for path in paths:
        print(f"wrote {path}")
    if warning:
        print(f"seedq-keys: warning: {warning}", file=sys.stderr)
    print(
        f"\nlearner: seedq-train security.curve=true security.keys_dir={args.dir}\n"
        f"actors:  seedq-actor --keys-dir DIR ..., DIR holding actor.key_secret and learner.key\n"
        "         (the ssh launcher copies them; never copy learner.key_secret off the learner)\n"
        "extra actor keys: put their public *.key files in "
        f"{os.path.join(args.dir, 'authorized')}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
