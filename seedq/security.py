"""The ``security`` config section, its checks, and the CURVE keys an actor's socket uses.

Keys are pyzmq certificates (``zmq.auth.create_certificates``) in one directory, written by
``seedq-keys DIR`` (:mod:`seedq.keys`)::

    learner.key  learner.key_secret  actor.key  actor.key_secret  [authorized/*.key]

The learner needs all of them; an actor host needs only ``actor.key_secret`` (which holds the
actor's public key too) and ``learner.key``. The server side (ZAP handler, refused counter)
lives in :mod:`seedq.broker.security`; this module stays light, as actors import it.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from seedq.schema import ConfigError, setting

LEARNER = "learner"
ACTOR = "actor"
# Extra client public keys the learner also accepts (one ``*.key`` certificate per client).
AUTHORIZED_DIR = "authorized"
# What each role reads from keys_dir.
LEARNER_FILES = (f"{LEARNER}.key", f"{LEARNER}.key_secret", f"{ACTOR}.key")
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


def validate_security(security: SecurityConfig, broker_host: str) -> None:
    """Raise ConfigError before any process starts if the broker would be open or keyless."""
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
    check_key_files(security.keys_dir, LEARNER_FILES, key="security.keys_dir")


def check_key_files(keys_dir: str, names: tuple[str, ...], key: str = "--keys-dir") -> None:
    """Raise ConfigError unless ``names`` are readable certificates, secrets owner-only."""
    directory = Path(keys_dir).expanduser()
    missing = [n for n in names if not (directory / n).is_file()]
    if missing:
        raise ConfigError(
            f"{key}={keys_dir!r} lacks {', '.join(missing)}; create the keys with "
            f"`seedq-keys {keys_dir}` (or copy them from the learner's key directory)"
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
        try:
            zmq.auth.load_certificate(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{key}={keys_dir!r}: cannot read {name} ({exc}); recreate the keys with "
                f"`seedq-keys --force {keys_dir}`"
            ) from exc


def client_options(keys_dir: str) -> dict[int, bytes]:
    """DEALER socket options that make an actor a CURVE client of the learner in ``keys_dir``.

    This is what ``run_env_batch(curve_client=...)`` applies before connecting.
    """
    check_key_files(keys_dir, ACTOR_FILES)
    directory = Path(keys_dir).expanduser()
    public, secret = zmq.auth.load_certificate(directory / f"{ACTOR}.key_secret")
    server_public, _ = zmq.auth.load_certificate(directory / f"{LEARNER}.key")
    return {
        zmq.CURVE_PUBLICKEY: public,
        zmq.CURVE_SECRETKEY: secret,
        zmq.CURVE_SERVERKEY: server_public,
    }


def secure_client(sock: zmq.Socket, keys_dir: str) -> None:
    """Make ``sock`` (not yet connected) a CURVE client with the actor key in ``keys_dir``."""
    for option, value in client_options(keys_dir).items():
        sock.setsockopt(option, value)
