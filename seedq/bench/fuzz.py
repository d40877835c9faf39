"""Fuzzed messages for a live broker: valid msgpack headers with plausible keys and random values,
random frames, and plain garbage. Seeded, so a burst can be replayed.

The property-based broker tests (``tests/test_fuzz_broker.py``) draw their messages with
hypothesis; this generator needs only numpy, so ``scripts/chaos.py`` and ``scripts/soak.py`` can
fire bursts at a training run.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgpack
import numpy as np
import zmq

from seedq.messages import KINDS, PROTOCOL_VERSION

STEP_DTYPES = ["float32", "float32", "bool", "bool", "float32"]


def _scalar(rng: np.random.Generator) -> object:
    pick = rng.integers(8)
    return [
        None,
        bool(rng.integers(2)),
        int(rng.integers(-(2**62), 2**62)),
        int(rng.integers(-2, 9)),
        float(rng.choice([np.nan, np.inf, -1.5, 0.0, 1e300])),
        "".join(chr(c) for c in rng.integers(32, 127, rng.integers(0, 9))),
        str(rng.choice(["float32", "uint8", "bool", "object", "step", "hello", "bye"])),
        [int(x) for x in rng.integers(0, 4, rng.integers(0, 4))],
    ][pick]


def _header(rng: np.random.Generator, actor_ids: range) -> dict:
    header: dict = {
        "v": PROTOCOL_VERSION if rng.random() < 0.8 else _scalar(rng),
        "kind": str(rng.choice(["step", "step", "hello", *KINDS])) if rng.random() < 0.9 else 7,
    }
    plausible = {
        "actor_id": int(rng.choice(actor_ids)),
        "run_id": "fuzz",
        "seq": int(rng.integers(0, 4)),
        "n_envs": int(rng.integers(1, 4)),
        "first_env": int(rng.integers(0, 64)),
        "obs_shape": [4],
        "obs_dtype": "float32",
        "num_actions": 2,
        "dtypes": STEP_DTYPES,
        "shapes": [[int(rng.integers(0, 4))] for _ in range(5)],
    }
    for key, good in plausible.items():
        roll = rng.random()
        if roll < 0.5:
            header[key] = good
        elif roll < 0.8:
            header[key] = _scalar(rng)
    return header


def _frame(rng: np.random.Generator) -> bytes:
    n = int(rng.integers(1, 4))
    return [
        rng.bytes(int(rng.integers(0, 41))),
        np.zeros((n, 4), np.float32).tobytes(),
        np.full(n, np.nan, np.float32).tobytes(),
        np.zeros(n, bool).tobytes(),
    ][int(rng.integers(4))]


def fuzz_messages(seed: int, count: int, actor_ids: range = range(8)) -> Iterator[list[bytes]]:
    """``count`` messages (lists of frames, header first); about 1 in 10 is not msgpack at all.

    ``actor_ids``: ids the fuzzed headers claim, e.g. those of real actors, to test that a
    stranger cannot disturb them (it is refused as ``not_joined``).
    """
    rng = np.random.default_rng(seed)
    for _ in range(count):
        if rng.random() < 0.1:
            head = rng.bytes(int(rng.integers(0, 33)))
        else:
            head = msgpack.packb(_header(rng, actor_ids), use_bin_type=True)
        yield [head, *(_frame(rng) for _ in range(int(rng.integers(0, 8))))]


def fire_burst(endpoint: str, seed: int, count: int, actor_ids: range = range(8)) -> int:
    """Send ``count`` fuzzed messages to ``endpoint`` from a fresh DEALER; returns how many replies
    came back within a second of the last send (the broker answers what it can address)."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    replies = 0
    try:
        for frames in fuzz_messages(seed, count, actor_ids):
            sock.send_multipart(frames)
            while sock.poll(0):
                sock.recv_multipart()
                replies += 1
        while sock.poll(1000):
            sock.recv_multipart()
            replies += 1
    finally:
        sock.close(linger=0)
    return replies
