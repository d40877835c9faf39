"""Bad input and resource rules at the broker, on a real ROUTER driven one message at a time.

The test thread receives each message from the ROUTER and hands it to ``Broker.handle``, so
every case is deterministic (fake clock, no serve thread); replies travel back over the socket.
"""

import itertools
import logging

import msgpack
import numpy as np
import pytest
import zmq

from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.core.stats import EARLIER_STARTS
from seedq.messages import ERROR_CODES, EnvSpec, Hello, Step, decode_error, decode_header, encode
from seedq.messages.steps import STEP_HEAD

SPEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", num_actions=2)
_names = itertools.count()


class Recorder:
    def __init__(self) -> None:
        self.started, self.left = [], []

    def act(self, batch):
        return np.ones(batch.num_envs, np.int32)

    def record(self, batch):
        pass

    def actor_started(self, slot):
        self.started.append(slot.hello.actor_id)

    def actor_left(self, slot):
        self.left.append(slot.hello.actor_id)


class Harness:
    def __init__(self, **broker_args) -> None:
        self.ctx = zmq.Context()
        self.endpoint = f"inproc://faults-{next(_names)}"
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.bind(self.endpoint)
        self.now = 0.0
        self.consumer = Recorder()
        batcher = Batcher(max_batch=64, deadline_s=60.0, clock=lambda: self.now)
        self.broker = Broker(
            self.router, SPEC, batcher, self.consumer, clock=lambda: self.now, **broker_args
        )
        self.sockets = []

    def client(self) -> zmq.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 5000)
        sock.connect(self.endpoint)
        self.sockets.append(sock)
        return sock

    def send(self, sock, frames) -> None:
        sock.send_multipart(frames, copy=False)
        self.broker.handle(self.router.recv_multipart(copy=False))

    def answer_queued(self) -> None:
        self.broker._run_batch(self.broker.batcher.take())

    def reply(self, sock) -> dict:
        return decode_header(sock.recv_multipart()[0])

    def code(self, sock, frames) -> str:
        """The code of the Error that refuses ``frames``: on receipt (the header, the frame
        sizes) or when its batch is answered (the array values)."""
        self.send(sock, frames)
        self.answer_queued()
        return decode_error(self.reply(sock)).code

    def close(self) -> None:
        for sock in self.sockets:
            sock.close(linger=0)
        self.router.close(linger=0)
        self.ctx.term()


@pytest.fixture()
def harness():
    h = Harness()
    yield h
    h.close()


def hello(actor_id=0, run_id="r", n_envs=2, first_env=None):
    first_env = actor_id * 8 if first_env is None else first_env
    return encode(Hello(actor_id, run_id, n_envs, SPEC, first_env=first_env))


def step(seq=0, actor_id=0, run_id="r", n=2, **arrays) -> list:
    returns = arrays.get("returns", [])
    msg = Step(
        actor_id=actor_id,
        run_id=run_id,
        seq=seq,
        obs=arrays.get("obs", np.zeros((n, 4), np.float32)),
        reward=arrays.get("reward", np.zeros(n, np.float32)),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        final_obs=np.zeros((0, 4), np.float32),
        episode_returns=returns,
        episode_lengths=arrays.get("lengths", [1] * len(returns)),
    )
    return [f if isinstance(f, bytes) else np.asarray(f).tobytes() for f in encode(msg)]


STEP_FIELDS = (
    "mark", "version", "kind", "dtype", "actor_id", "n_envs", "n_final", "n_episodes", "seq",
    "run_tag",
)  # fmt: skip


def with_header(frames: list, tail: bytes | None = None, **changes) -> list:
    """A Step's frames with binary header fields changed (and the per-env bytes after it)."""
    fields = dict(zip(STEP_FIELDS, STEP_HEAD.unpack_from(frames[0]), strict=True))
    fields.update(changes)
    head = STEP_HEAD.pack(*(fields[name] for name in STEP_FIELDS))
    return [head + (frames[0][STEP_HEAD.size :] if tail is None else tail), *frames[1:]]


def with_hello_header(frames: list, **changes) -> list:
    header = msgpack.unpackb(frames[0])
    header.update(changes)
    return [msgpack.packb(header), *frames[1:]]


def joined(h: Harness, actor_id=0, **kw) -> zmq.Socket:
    sock = h.client()
    h.send(sock, hello(actor_id, **kw))
    return sock


def served(h: Harness, sock, seq: int, actor_id=0) -> bool:
    h.send(sock, step(seq, actor_id))
    h.answer_queued()
    header = h.reply(sock)
    return (header["kind"], header["seq"]) == ("actions", seq)


# What follows the binary header of a 2-env Step: reward f32 [2], flags u8 [2 + 2], and (small
# observations travel inline) obs f32 [2, 4].
OBS_BYTES = bytes(32)
NAN_REWARD = np.array([np.nan, 0], np.float32).tobytes() + bytes(4) + OBS_BYTES
STEP_CASES = {
    "returns-nan": (lambda: step(0, returns=[float("nan")]), "non_finite"),
    "returns-inf": (lambda: step(0, returns=[float("inf")]), "non_finite"),
    "lengths-negative": (lambda: step(0, returns=[1.0], lengths=[-1]), "bad_field"),
    "lengths-too-many": (lambda: with_header(step(0), n_episodes=3), "bad_field"),
    "episodes-frame-missing": (lambda: with_header(step(0), n_episodes=1), "bad_frames"),
    "episodes-frame-short": (
        lambda: [*with_header(step(0), n_episodes=1), b"\0" * 15],
        "truncated",
    ),
    "seq-negative": (lambda: with_header(step(0), seq=-1), "bad_field"),
    "seq-huge": (lambda: with_header(step(0), seq=2**63 - 1), "bad_seq"),
    "n-envs-other": (lambda: with_header(step(0), n_envs=3), "bad_shape"),
    "n-envs-huge": (lambda: with_header(step(0), n_envs=2**32 - 1), "bad_shape"),
    "run-other": (lambda: step(0, run_id="other"), "stale_run"),
    "actor-id-huge": (lambda: with_header(step(0), actor_id=2**32 - 1), "unknown_actor"),
    "dtype-code": (lambda: with_header(step(0), dtype=255), "bad_dtype"),
    "final-rows-over-n": (lambda: with_header(step(0), n_final=3), "bad_shape"),
    "final-rows-huge": (lambda: with_header(step(0), n_final=2**32 - 1), "bad_shape"),
    "final-frame-missing": (lambda: with_header(step(0), n_final=1), "bad_frames"),
    "final-rows-not-truncated": (
        lambda: [*with_header(step(0), n_final=1), np.zeros(4, np.float32).tobytes()],
        "bad_shape",
    ),
    "flags-not-bool": (
        lambda: with_header(step(0), tail=bytes(8) + b"\x02\0\0\0" + OBS_BYTES),
        "bad_field",
    ),
    "reward-nan-in-header": (lambda: with_header(step(0), tail=NAN_REWARD), "non_finite"),
    "header-short": (lambda: with_header(step(0), tail=bytes(11)), "truncated"),
    "version": (lambda: with_header(step(0), version=0), "bad_version"),
    "kind": (lambda: with_header(step(0), kind=0), "bad_kind"),
    "valid": (lambda: step(0, returns=[2.0**64]), None),
}


@pytest.mark.parametrize(("frames", "code"), list(STEP_CASES.values()), ids=list(STEP_CASES))
def test_a_step_with_a_bad_field_gets_its_code_and_the_actor_is_still_served(harness, frames, code):
    sock = joined(harness)
    harness.send(sock, frames())
    harness.answer_queued()
    reply = harness.reply(sock)
    got = reply["kind"] if code is None else decode_error(reply).code
    assert (got, served(harness, sock, 0 if code else 1)) == (code or "actions", True)


@pytest.mark.parametrize(
    ("arrays", "code"),
    [
        ({"reward": np.array([0.0, np.nan], np.float32)}, "non_finite"),
        ({"reward": np.array([np.inf, 0.0], np.float32)}, "non_finite"),
        ({"obs": np.full((2, 4), -np.inf, np.float32)}, "non_finite"),
        ({"obs": np.zeros((2, 4), np.float64)}, "bad_dtype"),
        ({"obs": np.zeros((3, 4), np.float32)}, "bad_shape"),
    ],
    ids=["reward-nan", "reward-inf", "obs-inf", "obs-dtype", "obs-rows"],
)
def test_bad_arrays_are_refused(harness, arrays, code):
    sock = joined(harness)
    assert harness.code(sock, step(0, **arrays)) == code


HELLO_FIELD_CASES = {
    "n-envs-bool": ({"n_envs": True}, "bad_field"),
    "n-envs-zero": ({"n_envs": 0}, "bad_field"),
    "n-envs-huge": ({"n_envs": 2**64 - 1}, "bad_field"),
    "n-envs-float": ({"n_envs": 2.0}, "bad_field"),
    "obs-shape-str": ({"obs_shape": ["4"]}, "bad_shape"),
    "obs-shape-nested": ({"obs_shape": [[4]]}, "bad_shape"),
    "obs-shape-huge": ({"obs_shape": [2**20, 2**20]}, "too_large"),
    "obs-dtype-object": ({"obs_dtype": "object"}, "bad_dtype"),
    "num-actions-none": ({"num_actions": None}, "bad_field"),
    "run-id-long": ({"run_id": "r" * 300}, "bad_field"),
    "first-env-negative": ({"first_env": -1}, "bad_field"),
    "actor-id-missing": ({"actor_id": None}, "bad_field"),
    "spec": ({"num_actions": 3}, "spec_mismatch"),
}


@pytest.mark.parametrize(
    ("changes", "code"), list(HELLO_FIELD_CASES.values()), ids=list(HELLO_FIELD_CASES)
)
def test_a_bad_hello_gets_its_code_and_allocates_nothing(harness, changes, code):
    sock = harness.client()
    got = harness.code(sock, with_hello_header(hello(), **changes))
    assert (got, harness.broker.rows.high, harness.broker.actors) == (code, 0, {})


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        (lambda: with_header(step(0), n_episodes=1), "bad_frames"),
        (lambda: [*step(0), b""], "bad_frames"),
        (lambda: [*step(0), *[b""] * 10], "bad_frames"),
        (lambda: [*hello(), b"extra"], "bad_frames"),
        (lambda: [step(0)[0][:-1]], "truncated"),
        (lambda: [step(0)[0] + b"\0" * 4], "truncated"),
    ],
    ids=["too-few", "one-extra", "many", "hello-extra", "short-frame", "long-frame"],
)
def test_frame_counts_and_sizes_that_disagree_with_the_header_are_refused(harness, frames, code):
    sock = joined(harness)
    assert harness.code(sock, frames()) == code


def test_oversize_messages_are_refused():
    h = Harness(max_message_bytes=1000)
    try:
        sock = joined(h)
        code = h.code(sock, [*step(0)[:1], b"\0" * 2000, *step(0)[2:]])
    finally:
        h.close()
    assert code == "too_large"


def test_a_hello_whose_every_step_is_over_the_size_limit_is_refused_naming_what_fits():
    # Was accepted: ZeroMQ then dropped the connection at its first step without a word, and
    # the actor took that for a stalled learner, rejoining until it gave up.
    h = Harness(max_message_bytes=1000)
    try:
        sock = h.client()
        h.send(sock, hello(n_envs=60))
        error = decode_error(h.reply(sock))
    finally:
        h.close()
    assert (error.code, error.message) == (
        "too_large",
        "actor 0's 60 envs make Steps of at least 1356 bytes, more than this learner's "
        "broker.max_message_bytes=1000; start it with --envs-per-batch 17 or fewer",
    )


def test_steps_from_unknown_actors_and_other_connections_are_refused(harness):
    owner = joined(harness)
    stranger = harness.client()
    codes = [
        harness.code(stranger, step(0, actor_id=5)),
        harness.code(stranger, step(0)),
        harness.code(stranger, encode_bye(0, "r")),
        harness.code(stranger, encode_bye(5, "r")),
    ]
    assert (codes, served(harness, owner, 0)) == (
        ["unknown_actor", "not_joined", "not_joined", "unknown_actor"],
        True,
    )


def test_the_step_after_a_refused_hello_is_not_said_to_come_before_one(harness):
    # The learner logged "actor 5 sent a step before Hello" after refusing actor 5's Hello.
    sock = harness.client()
    refused = harness.code(sock, hello(actor_id=5, n_envs=0))
    harness.send(sock, step(0, actor_id=5))
    error = decode_error(harness.reply(sock))
    assert (refused, error.code, error.message) == (
        "bad_field",
        "unknown_actor",
        "actor 5 is not joined: its step came without an accepted Hello (none sent, one "
        "refused, or its run was evicted)",
    )


def encode_bye(actor_id, run_id):
    from seedq.messages import Bye

    return encode(Bye(actor_id, run_id))


def test_a_second_request_in_flight_is_busy_and_the_first_is_still_answered(harness):
    sock = joined(harness)
    harness.send(sock, step(0))
    code = harness.code(sock, step(1))
    harness.answer_queued()
    answer = harness.reply(sock)
    assert (code, answer["kind"], answer["seq"], len(harness.broker.batcher)) == (
        "busy",
        "actions",
        0,
        0,
    )


def test_hello_bye_churn_reuses_rows(harness):
    for actor_id in range(50):
        sock = joined(harness, actor_id, n_envs=3)
        harness.send(sock, encode_bye(actor_id, "r"))
    assert (harness.broker.rows.high, harness.broker.rows.in_use, len(harness.consumer.left)) == (
        3,
        0,
        50,
    )


def test_rejected_hellos_allocate_no_rows(harness):
    joined(harness, 0, first_env=0)
    sock = harness.client()
    codes = [harness.code(sock, hello(actor_id, first_env=1)) for actor_id in range(1, 20)]
    assert (set(codes), harness.broker.rows.high) == ({"env_id_conflict"}, 2)


def test_a_hello_with_other_n_envs_drops_the_queued_request_and_moves_rows(harness):
    sock = joined(harness, 0, n_envs=2)
    joined(harness, 1, n_envs=2)
    harness.send(sock, step(0))  # queued: the batcher waits for actor 1
    harness.send(sock, hello(0, run_id="again", n_envs=3))
    slot = harness.broker.actors[0]
    assert (
        len(harness.broker.batcher),
        harness.consumer.left,
        slot.rows.tolist(),
        harness.broker.rows.in_use,
    ) == (0, [0], [0, 1, 4], 5)


def test_a_new_run_with_the_same_n_envs_keeps_its_rows_and_drops_old_requests(harness):
    sock = joined(harness, 0)
    joined(harness, 1)
    harness.send(sock, step(0))
    harness.send(sock, hello(0, run_id="again"))
    assert (len(harness.broker.batcher), harness.broker.actors[0].rows.tolist()) == (0, [0, 1])


def test_silent_actors_are_evicted_and_their_rows_reused(harness):
    quiet = joined(harness, 0)
    waiting = joined(harness, 1)
    harness.send(waiting, step(0, actor_id=1))  # in flight: waiting for us, not silent
    harness.now = 31.0
    evicted = harness.broker.evict_silent(harness.now, timeout_s=30.0)
    code = harness.code(quiet, step(0))
    new = joined(harness, 2)
    assert (
        evicted,
        harness.consumer.left,
        harness.broker.stats.evicted,
        code,
        harness.broker.actors[2].rows.tolist(),
    ) == ([0], [0], 1, "unknown_actor", [0, 1])
    del new


def test_silence_counts_from_the_last_reply(harness):
    sock = joined(harness)
    harness.now = 20.0
    served(harness, sock, 0)
    harness.now = 40.0
    assert harness.broker.evict_silent(harness.now, timeout_s=30.0) == []


def test_an_unexpected_exception_costs_one_message_and_is_logged_once(harness, caplog):
    def broken(slot):
        raise RuntimeError("consumer bug")

    harness.consumer.actor_started = broken
    sock = harness.client()
    with caplog.at_level(logging.WARNING, logger="seedq.broker.router"):
        codes = [harness.code(sock, hello(actor_id)) for actor_id in range(3)]
    logged = [r for r in caplog.records if "internal" in r.getMessage()]
    assert (codes, harness.broker.stats.bad_messages["internal"], len(logged)) == (
        ["internal"] * 3,
        3,
        1,
    )


def test_bad_message_counts_use_only_known_codes(harness):
    sock = joined(harness)
    harness.code(sock, [b"\xc1"])
    harness.code(sock, step(3))
    counts = harness.broker.stats.bad_messages
    # And the bad messages a resumed run's earlier starts counted (its checkpoint's total).
    known = ERROR_CODES | {EARLIER_STARTS}
    assert (set(counts) == known, counts["bad_header"], counts["bad_seq"]) == (True, 1, 1)
