"""The ``security`` config section, its checks, and the CURVE keys an actor's socket uses.

Keys are pyzmq certificates (``zmq.auth.create_certificates``) in one directory, written by
``seedq-keys DIR`` (:mod:`seedq.keys`)::

    learner.key  learner.key_secret  actor.key  actor.key_secret  [authorized/*.key]

The learner needs all of them (``actor.key_secret`` for the actors it starts itself or ships the
key to); an actor host needs only ``actor.key_secret`` (which holds the actor's public key too)
and ``learner.key``. Each public key must be the public half of its secret. The server side (ZAP
handler, refused counter) lives in :mod:`seedq.broker.security`; this module stays light, as
actors import it.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.utils import z85

from seedq.schema import ConfigError, setting

LEARNER = "learner"
ACTOR = "actor"
# Extra client public keys the learner also accepts (one ``*.key`` certificate per client).
AUTHORIZED_DIR = "authorized"
# What each role reads from keys_dir.
LEARNER_FILES = (f"{LEARNER}.key", f"{LEARNER}.key_secret", f"{ACTOR}.key")
# A learner that starts its actors (locally, or over ssh/srun) hands them actor.key_secret.
LAUNCHING_LEARNER_FILES = (*LEARNER_FILES, f"{ACTOR}.key_secret")
ACTOR_FILES = (f"{ACTOR}.key_secret", f"{LEARNER}.key")
SECRET_FILES = (f"{LEARNER}.key_secret", f"{ACTOR}.key_secret")


@dataclass
class SecurityConfig:
    curve: bool | None = setting(
        None,
        "encrypt and authenticate actor traffic with ZMQ CURVE; null = on whenever broker.host "
        "is not a loopback address",
    )
    keys_dir: str = setting(
        "", "directory of the CURVE keys written by `seedq-keys DIR` (needed when curve is on)"
    )
    allow_insecure: bool = setting(
        False,
        "bind a non-loopback broker.host without CURVE (only on a network you trust); with "
        "curve=null it also turns CURVE off",
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, as in ``tcp://host:port``) is this machine only.

    Wildcards (``*``, ``0.0.0.0``, ``::``) listen on every interface, so they are not loopback;
    a name counts only if every address it resolves to is loopback; a name that does not resolve
    (or a ZMQ interface name such as ``eth0``) is treated as public.
    """
    host = host.strip().strip("[]")
    if host in ("", "*"):
        return False
    if host.lower() == "localhost":
        return True
    try:
        return _loopback_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(_loopback_address(a.split("%")[0]) for a in addresses)


def _loopback_address(text: str) -> bool:
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1; Python < 3.13 calls it not loopback
    return address.is_loopback


def curve_enabled(security: SecurityConfig, host: str) -> bool:
    """CURVE on or off for a broker bound on ``host``; ``curve=None`` decides by the address."""
    if security.curve is not None:
        return security.curve
    return not security.allow_insecure and not is_loopback(host)


def validate_security(
    security: SecurityConfig, broker_host: str, launches_actors: bool = False
) -> None:
    """Raise ConfigError before any process starts if the broker would be open or keyless;
    ``launches_actors``: the learner starts actors with the keys, so it needs the actor's secret
    too."""
    if not curve_enabled(security, broker_host):
        if not is_loopback(broker_host) and not security.allow_insecure:
            raise ConfigError(
                f"broker.host={broker_host!r} is not a loopback address and security.curve=false: "
                "anyone who can reach the port could feed the learner. Create keys with "
                "`seedq-keys DIR` and set security.curve=true security.keys_dir=DIR, or set "
                "security.allow_insecure=true on a network you trust"
            )
        return
    if not security.keys_dir:
        raise ConfigError(
            f"security.curve is on (broker.host={broker_host!r}) but security.keys_dir is empty; "
            "create keys with `seedq-keys DIR` and set security.keys_dir=DIR"
        )
    names = LAUNCHING_LEARNER_FILES if launches_actors else LEARNER_FILES
    check_key_files(security.keys_dir, names, key="security.keys_dir")
    authorized_public_keys(security.keys_dir)


def authorized_public_keys(keys_dir: str, key: str = "security.keys_dir") -> list[bytes]:
    """The public keys of ``authorized/*.key`` in ``keys_dir`` (none without the folder); a
    ConfigError names a file there that holds no valid public key."""
    folder = Path(keys_dir).expanduser() / AUTHORIZED_DIR
    if not folder.is_dir():
        return []
    # Hidden files skipped, as zmq.auth.load_certificates skips them.
    names = sorted(f"{AUTHORIZED_DIR}/{p.name}" for p in folder.glob("[!.]*.key"))
    return [read_keys(keys_dir, name, key)[0] for name in names]


def check_key_files(keys_dir: str, names: tuple[str, ...], key: str = "--keys-dir") -> None:
    """Raise ConfigError unless ``names`` are readable certificates, secrets owner-only, each
    holding the keys it must (a public key; a secret key too in a ``.key_secret`` file), and
    each public key there the public half of its secret (where both files are there)."""
    directory = Path(keys_dir).expanduser()
    if directory.exists() and not directory.is_dir():
        raise ConfigError(
            f"{key}={keys_dir!r} is a file, not a folder; give the folder that holds the keys "
            "(`seedq-keys DIR` writes one)"
        )
    missing = [n for n in names if not (directory / n).is_file()]
    if missing:
        raise ConfigError(
            f"{key}={keys_dir!r} lacks {', '.join(missing)}; {_create_remedy(keys_dir, key)}"
        )
    for name in names:
        path = directory / name
        if name in SECRET_FILES and os.name == "posix":
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                raise ConfigError(
                    f"{path} is readable by others (mode {mode:o}); a secret key must be "
                    f"owner-only: chmod 600 {path}"
                )
        read_keys(keys_dir, name, key)
    for role in (LEARNER, ACTOR):
        public_name, secret_name = f"{role}.key", f"{role}.key_secret"
        if not {public_name, secret_name} & set(names):
            continue
        if not ((directory / public_name).is_file() and (directory / secret_name).is_file()):
            continue
        public, _ = read_keys(keys_dir, public_name, key)
        secret_public, _ = read_keys(keys_dir, secret_name, key)
        if public != secret_public:
            raise ConfigError(
                f"{key}={keys_dir!r}: {public_name} is not the public half of {secret_name} "
                f"(they come from different key pairs); {_remedy(keys_dir, key, public_name)}"
            )


def _create_remedy(keys_dir: str, key: str) -> str:
    """What to do about missing key files: ``seedq-keys`` refuses a folder that holds some."""
    directory = Path(keys_dir).expanduser()
    if key == "--keys-dir":
        return (
            f"copy {ACTOR}.key_secret and {LEARNER}.key into {keys_dir} from the learner's key "
            "directory (written by `seedq-keys DIR`)"
        )
    held = [n for n in (*LEARNER_FILES, f"{ACTOR}.key_secret") if (directory / n).exists()]
    if not held:
        return f"create the keys with `seedq-keys {keys_dir}`"
    return (
        f"put the missing files back from where the keys were made, or make a new set with "
        f"`seedq-keys --force {keys_dir}` (actors elsewhere then need its new "
        f"{ACTOR}.key_secret and {LEARNER}.key)"
    )


def read_keys(keys_dir: str, name: str, key: str = "--keys-dir") -> tuple[bytes, bytes | None]:
    """The public key and (for a ``.key_secret`` file) the secret key of certificate ``name``
    in ``keys_dir``, each a 40-character Z85 key of 32 bytes; else a ConfigError naming the
    file and what to do. libzmq would take neither a missing key nor a malformed one: a
    TypeError or "Invalid argument" from deep inside the socket setup."""
    path = Path(keys_dir).expanduser() / name
    try:
        public, secret = zmq.auth.load_certificate(path)
    except OSError as exc:
        raise ConfigError(
            f"{key}={keys_dir!r}: cannot read {name} ({exc}); {_remedy(keys_dir, key, name)}"
        ) from None
    except (ValueError, IndexError):  # no public-key line; a key line without its "="
        public, secret = None, None
    needed = {"public-key": public}
    if name.endswith(".key_secret"):
        needed["secret-key"] = secret
    for line, value in needed.items():
        if value is None or not _is_curve_key(value):
            what = "has no" if value is None else "has a malformed"
            raise ConfigError(
                f"{key}={keys_dir!r}: {name} {what} {line} (a CURVE key is 40 Z85 characters, "
                f"32 bytes); {_remedy(keys_dir, key, name)}"
            )
    if secret is not None and zmq.curve_public(secret) != public:
        raise ConfigError(
            f"{key}={keys_dir!r}: {name}'s public-key is not the public half of its secret-key "
            f"(lines from different key pairs); {_remedy(keys_dir, key, name)}"
        )
    return public, secret


def _is_curve_key(text: bytes) -> bool:
    if len(text) != 40 or not set(text) <= set(z85.Z85CHARS):
        return False
    try:
        return len(z85.decode(text)) == 32
    except (ValueError, struct.error):  # 5 characters past 2**32
        return False


def _remedy(keys_dir: str, key: str, name: str) -> str:
    if name.startswith(f"{AUTHORIZED_DIR}/"):
        return "put an actor's public key there (a .key file `seedq-keys` wrote), or remove it"
    if key == "--keys-dir":  # an actor host's copy of the learner's keys
        return (
            f"copy {ACTOR}.key_secret and {LEARNER}.key into {keys_dir} again from the learner's "
            "key directory (written by `seedq-keys DIR`)"
        )
    return f"recreate the keys with `seedq-keys --force {keys_dir}`"


def client_options(keys_dir: str) -> dict[int, bytes]:
    """DEALER socket options that make an actor a CURVE client of the learner in ``keys_dir``.

    This is what ``run_env_batch(curve_client=...)`` applies before connecting.
    """
    check_key_files(keys_dir, ACTOR_FILES)
    public, secret = read_keys(keys_dir, f"{ACTOR}.key_secret")
    server_public, _ = read_keys(keys_dir, f"{LEARNER}.key")
    return {
        zmq.CURVE_PUBLICKEY: public,
        zmq.CURVE_SECRETKEY: secret,
        zmq.CURVE_SERVERKEY: server_public,
    }


def secure_client(sock: zmq.Socket, keys_dir: str) -> None:
    """Make ``sock`` (not yet connected) a CURVE client with the actor key in ``keys_dir``."""
    for option, value in client_options(keys_dir).items():
        sock.setsockopt(option, value)
