"""Property-based fuzzing of a live broker with structured messages (valid msgpack headers with
plausible keys and random values, binary Step headers with plausible and random fields, random
frames), while a well-behaved actor keeps stepping."""

import contextlib
import ctypes
import gc
import threading
import time

import msgpack
import numpy as np
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.core.stats import EARLIER_STARTS
from seedq.messages import (
    ERROR_CODES,
    KINDS,
    PROTOCOL_VERSION,
    EnvSpec,
    Hello,
    Step,
    decode_reply,
    encode,
    run_tag,
)
from seedq.messages.steps import STEP_HEAD

SPEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", num_actions=2)
POOL = 5  # per example: POOL headers x (POOL frame lists + none) = 30 messages
EXAMPLES = 340  # 10,200 fuzz messages
GOOD_ACTOR = 1000

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.integers(-2, 8),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["float32", "uint8", "bool", "object", "r", "step", "hello", "bye"]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.lists(st.lists(scalars, max_size=2)))
# Version and kind are mostly right so that most messages reach the per-kind decoders.
required = {
    "v": st.sampled_from([PROTOCOL_VERSION] * 6 + [None, PROTOCOL_VERSION + 1, "1", True]),
    "kind": st.sampled_from(["step"] * 3 + ["hello"] * 2 + list(KINDS) + [None, 7, "x"]),
}
plausible = {
    "actor_id": st.one_of(st.integers(0, 7), values),
    "run_id": st.one_of(st.just("r"), values),
    "seq": st.one_of(st.integers(0, 3), values),
    "n_envs": st.one_of(st.integers(1, 3), values),
    "first_env": st.one_of(st.integers(0, 64), values),
    "obs_shape": st.one_of(st.just([4]), values),
    "obs_dtype": st.one_of(st.just("float32"), values),
    "num_actions": st.one_of(st.just(2), values),
    "dtypes": st.one_of(st.just(["float32", "float32", "bool", "bool", "float32"]), values),
    "shapes": st.one_of(st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=6), values),
    "episode_returns": values,
    "episode_lengths": values,
}
headers = st.fixed_dictionaries(required, optional=plausible).map(
    lambda h: msgpack.packb(h, use_bin_type=True)
)
# Binary Step headers: mostly plausible fields (a fuzzer may have joined as actor 0-7 of run
# "r"), some random, followed by per-env bytes of the right size or not.
binary_headers = st.builds(
    lambda fields, tail: STEP_HEAD.pack(*fields) + tail,
    st.tuples(
        st.sampled_from([0xC1]),
        st.sampled_from([PROTOCOL_VERSION] * 6 + [2, 4, 255]),
        st.sampled_from([1] * 6 + [0, 2, 9]),
        st.one_of(st.just(7), st.integers(0, 255)),
        st.one_of(st.integers(0, 7), st.integers(0, 2**32 - 1)),
        st.one_of(st.integers(1, 3), st.integers(0, 2**32 - 1)),
        st.one_of(st.integers(0, 3), st.integers(0, 2**32 - 1)),
        st.one_of(st.integers(0, 3), st.integers(0, 2**32 - 1)),
        st.one_of(st.integers(0, 3), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(st.just(run_tag("r")), st.integers(0, 2**64 - 1)),
    ),
    st.one_of(
        st.sampled_from([bytes(6 * n) for n in (1, 2, 3)]),
        st.sampled_from([np.full(n, np.nan, np.float32).tobytes() + bytes(2 * n) for n in (1, 2)]),
        st.sampled_from([bytes(4 * n) + bytes([2]) * 2 * n for n in (1, 2)]),
        st.binary(max_size=24),
    ),
)
frame = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([np.zeros((n, 4), np.float32).tobytes() for n in (1, 2, 3)]),
    st.sampled_from([np.zeros(n, np.float32).tobytes() for n in (1, 2, 3)]),
    st.sampled_from([np.zeros(n, bool).tobytes() for n in (1, 2, 3)]),
)
# Headers and frame lists are drawn once and sent in every combination: generation, not the
# broker, is the slow part, and combining keeps 10,000 messages within a minute.
pools = st.tuples(
    st.lists(
        st.one_of(headers, binary_headers, binary_headers, st.binary(max_size=32)),
        min_size=POOL,
        max_size=POOL,
    ),
    st.lists(st.lists(frame, max_size=7), min_size=POOL, max_size=POOL),
).map(lambda p: [[h, *f] for h in p[0] for f in [[], *p[1]]])


def rss_bytes() -> int:
    """Resident bytes after handing freed heap back to the system: what a backlog of queued
    messages took and gave back (more of them on a loaded machine) is not counted as growth."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class Policy:
    def act(self, batch):
        return np.ones(batch.num_envs, np.int32)

    def record(self, batch):
        pass

    def actor_started(self, slot):
        pass

    def actor_left(self, slot):
        pass


def test_structured_fuzz_never_stops_the_broker_or_starves_a_good_actor():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://fuzz")
    broker = Broker(router, SPEC, Batcher(max_batch=8, deadline_s=0.001), Policy())
    stop = threading.Event()
    thread = threading.Thread(target=broker.serve, args=(stop,), daemon=True)
    thread.start()
    fuzzers = []
    for _ in range(3):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect("inproc://fuzz")
        fuzzers.append(sock)
    good = ctx.socket(zmq.DEALER)
    good.setsockopt(zmq.LINGER, 0)
    good.setsockopt(zmq.RCVTIMEO, 10_000)
    good.connect("inproc://fuzz")
    good.send_multipart(encode(Hello(GOOD_ACTOR, "good", 2, SPEC, first_env=10_000)))
    state = {"seq": 0, "sent": 0, "answered": 0, "rss": None}

    def good_step() -> None:
        msg = Step(
            GOOD_ACTOR, "good", state["seq"], np.zeros((2, 4), np.float32), np.zeros(2),
            np.zeros(2, bool), np.zeros(2, bool), np.zeros((0, 4), np.float32),
        )  # fmt: skip
        good.send_multipart(encode(msg), copy=False)
        reply = decode_reply(good.recv_multipart(), 2)
        state["answered"] += (type(reply).__name__, reply.seq) == ("Actions", state["seq"])
        state["seq"] += 1

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(pools)
    def fuzz(batch):
        for i, frames in enumerate(batch):
            fuzzers[i % len(fuzzers)].send_multipart(frames)
        state["sent"] += len(batch)
        for sock in fuzzers:  # replies to the fuzzers are read and thrown away
            while sock.poll(0):
                sock.recv_multipart()
        good_step()
        if state["rss"] is None:
            state["rss"] = rss_bytes()

    try:
        fuzz()
        deadline = time.monotonic() + 30
        while broker.stats.messages < state["sent"] + state["seq"] + 1:
            assert time.monotonic() < deadline, "broker did not read every message"
            time.sleep(0.01)
        alive = thread.is_alive()
        growth = rss_bytes() - state["rss"]
    finally:
        stop.set()
        thread.join(timeout=5)
        for sock in [*fuzzers, good]:
            sock.close(linger=0)
        router.close(linger=0)
        ctx.term()
    counts = broker.stats.bad_messages
    assert (
        alive,
        state["sent"] >= 10_000,
        state["answered"] == state["seq"] == EXAMPLES,
        set(counts) == ERROR_CODES | {EARLIER_STARTS},
        counts["internal"],
        growth < 50 * 2**20,
    ) == (True, True, True, True, 0, True), (dict(counts), growth)
