"""A CURVE ROUTER on real sockets, as the learner's broker binds it, for the tests of CURVE
(tests/test_security.py) and of the actor's handshake (tests/test_actor_handshake.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import zmq

from seedq.broker.security import secure_server


@contextlib.contextmanager
def curve_router(keys_dir: str) -> Iterator[tuple[zmq.Context, zmq.Socket, object, str]]:
    """A CURVE ROUTER on tcp://127.0.0.1:<random port> admitting the actor key of
    ``keys_dir``: (its context, the socket, its guard, its endpoint); torn down in order."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    guard = secure_server(router, ctx, keys_dir)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        yield ctx, router, guard, f"tcp://127.0.0.1:{port}"
    finally:
        guard.stop()
        router.close()
        ctx.term()
