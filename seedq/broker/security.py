"""The learner's ROUTER as a CURVE server that admits only known actor keys, counting refusals.

Two layers refuse a peer, and both happen inside libzmq before a message reaches the broker
(so a refused peer gets no reply, no row, no allocation):

- the ZAP handler (a ``zmq.auth.ThreadAuthenticator``) answers 400 to a CURVE client whose
  public key is not ``actor.key`` or one in ``authorized/``;
- the CURVE handshake itself fails for a plain (NULL) socket (mechanism mismatch) and for a
  client that encrypts to another server key. The ZAP handler never sees these.

So the refused count comes from the ROUTER's socket monitor (``HANDSHAKE_FAILED_*`` events),
which covers all three; the ZAP handler only logs which key it refused. libzmq reconnects a
refused client every ``reconnect_ivl`` (100 ms by default), so the count is of refused
handshakes, not of distinct peers: a steadily rising ``refused_peers`` column means a
misconfigured or hostile peer keeps trying.
"""

from __future__ import annotations

import collections
import errno
import ipaddress
import logging
import threading
import time

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils.monitor import recv_monitor_message

from seedq.schema import ConfigError
from seedq.security import (
    ACTOR,
    LEARNER,
    LEARNER_FILES,
    authorized_public_keys,
    check_key_files,
    read_keys,
)

log = logging.getLogger(__name__)

ZAP_DOMAIN = "seedq"
_REFUSALS = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "protocol",  # plain socket, wrong server key
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "unknown_key",  # the ZAP handler said no
}


def authorized_keys(keys_dir: str) -> set[bytes]:
    """Z85 public keys the learner accepts: ``actor.key`` and ``authorized/*.key``."""
    public, _ = read_keys(keys_dir, f"{ACTOR}.key", key="security.keys_dir")
    return {public, *authorized_public_keys(keys_dir)}


class _KeyList:
    """``configure_curve_callback`` provider: a fixed key set, logging (rarely) whom it refuses."""

    def __init__(self, keys: set[bytes]) -> None:
        self.keys = frozenset(keys)
        self._last_warning = 0.0

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.keys:
            return True
        now = time.monotonic()
        if now - self._last_warning > 5.0:
            self._last_warning = now
            log.warning("refused an actor with unknown CURVE key %s", key.decode("ascii"))
        return False


# What a handshake the ZAP handler never saw most likely was, for the learner's log: the actor
# hears its side of it (seedq.actor.loop), the operator of the learner heard nothing.
_MECHANISM_MISMATCH = getattr(zmq, "PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH", None)
_PLAIN_PEER = "a peer without CURVE (an actor started without --keys-dir, or not a seedq actor)"
_OTHER_SERVER_KEY = (
    "a CURVE peer whose handshake does not decrypt with this learner's key (an actor whose "
    "learner.key is another learner's: give it this one's)"
)
REFUSAL_LOG_EVERY_S = 5.0


class CurveGuard:
    """The ZAP handler and the refusal counter of one CURVE ROUTER; made by :func:`secure_server`.

    ``refused`` (total) and ``refused_by_reason`` are safe to read from any thread.
    ``stop()`` after the broker loop stopped and before closing the socket.
    """

    def __init__(self, sock: zmq.Socket, authenticator: ThreadAuthenticator) -> None:
        self.authenticator = authenticator
        self.accepted = 0
        self.refused_by_reason: collections.Counter[str] = collections.Counter()
        self._sock = sock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_warning = float("-inf")
        self._monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | sum(_REFUSALS))
        self._thread = threading.Thread(target=self._watch, name="curve-monitor", daemon=True)
        self._thread.start()

    @property
    def refused(self) -> int:
        with self._lock:
            return sum(self.refused_by_reason.values())

    def _watch(self) -> None:
        while not self._stop.is_set():
            if not self._monitor.poll(100):
                continue
            try:
                message = recv_monitor_message(self._monitor)
            except zmq.ZMQError:
                return
            event = message["event"]
            with self._lock:
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self.accepted += 1
                elif event in _REFUSALS:
                    self.refused_by_reason[_REFUSALS[event]] += 1
            if event in _REFUSALS and event != zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self._warn(event, message["value"])

    def _warn(self, event: int, value: int) -> None:
        """Log a refusal the ZAP handler did not see (it logs its own), at most every
        ``REFUSAL_LOG_EVERY_S``: a refused peer retries every 100 ms."""
        now = time.monotonic()
        if now - self._last_warning < REFUSAL_LOG_EVERY_S:
            return
        self._last_warning = now
        if value == _MECHANISM_MISMATCH:
            who = _PLAIN_PEER
        elif event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            who = _OTHER_SERVER_KEY
        else:
            who = "a peer whose connection ended during the handshake"
        log.warning(
            "refused a CURVE handshake from %s; %d refused so far (faults/refused_peers)",
            who,
            self.refused,
        )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._monitor.close(linger=0)
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:  # the socket is already closed
            pass
        self.authenticator.stop()


def secure_server(sock: zmq.Socket, context: zmq.Context, keys_dir: str) -> CurveGuard:
    """Make ``sock`` (a ROUTER, not yet bound) a CURVE server admitting only the actor keys.

    Call before ``bind``: the ZAP handler must listen before the first peer knocks.
    """
    if sock.getsockopt(zmq.LAST_ENDPOINT):
        raise RuntimeError("secure_server must be called before the socket is bound")
    check_key_files(keys_dir, LEARNER_FILES, key="security.keys_dir")
    public, secret = read_keys(keys_dir, f"{LEARNER}.key_secret", key="security.keys_dir")
    keys = authorized_keys(keys_dir)
    authenticator = ThreadAuthenticator(context, log=logging.getLogger(f"{__name__}.zap"))
    authenticator.start()
    authenticator.configure_curve_callback(ZAP_DOMAIN, _KeyList(keys))
    sock.curve_server = True
    sock.curve_publickey = public
    sock.curve_secretkey = secret
    sock.zap_domain = ZAP_DOMAIN.encode()
    # Without this, libzmq admits every CURVE client when no ZAP handler answers (say the
    # authenticator thread died); with it, such handshakes fail.
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
    log.info("broker is a CURVE server admitting %d actor key(s) from %s", len(keys), keys_dir)
    return CurveGuard(sock, authenticator)


def bind_router(sock: zmq.Socket, host: str, port: int) -> int:
    """Bind ``sock`` (the learner's ROUTER, or a shard's) on ``tcp://host:port``, port 0 for a
    free one; the port it bound.

    A ConfigError names ``broker.host`` when the address is not one of this machine's, and
    ``broker.port`` only when the port is the problem (taken, or privileged). An IPv6 address
    is refused: the actors' DEALER sockets do not enable ZMQ_IPV6, so none could dial it.
    """
    if _is_ipv6(host):
        raise ConfigError(
            f"broker.host={host!r} is an IPv6 address; seedq's broker and actors speak IPv4: "
            "give an IPv4 address (127.0.0.1 for this machine only, 0.0.0.0 for every "
            "interface) or a name that resolves to one"
        )
    try:
        if port == 0:
            return sock.bind_to_random_port(f"tcp://{host}")
        sock.bind(f"tcp://{host}:{port}")
        return port
    except zmq.ZMQError as exc:
        if exc.errno in (errno.EADDRNOTAVAIL, errno.ENODEV):
            raise ConfigError(
                f"broker.host={host!r} is not an address (or interface) of this machine "
                f"({exc.strerror}): give one of its own addresses, 127.0.0.1 for this machine "
                "only, or 0.0.0.0 for every interface"
            ) from None
        if port and exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise ConfigError(
                f"broker.port={port}: cannot bind {host}:{port} ({exc.strerror}); choose "
                "another port or broker.port=0 for a free one"
            ) from None
        raise ConfigError(
            f"cannot bind the broker on tcp://{host}:{port or '*'} ({exc.strerror}); check "
            "broker.host and broker.port"
        ) from None


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).version == 6
    except ValueError:  # a name, an interface or the * wildcard
        return False
