"""Many actors at once: deadlines and evictions with hundreds of streams (fake clock, messages
handed to the broker one at a time), and thousands of real TCP connections for a few seconds
(``seedq-bench broker``, as a user runs it). No timing is asserted."""

import json
import subprocess
import sys

import numpy as np
import pytest
import zmq

from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.messages import Actions, EnvSpec, Hello, Step, decode_reply, encode

SPEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", num_actions=2)
DEADLINE_S = 0.002


class Ones:
    def act(self, batch):
        return np.ones(batch.num_envs, np.int32)

    def record(self, batch): ...
    def actor_started(self, slot): ...
    def actor_left(self, slot): ...


class Crowd:
    """A broker on a fake clock and ``count`` joined actors, each with its own DEALER."""

    def __init__(self, count: int, **broker_args) -> None:
        self.now = 0.0
        self.ctx = zmq.Context()
        self.ctx.set(zmq.MAX_SOCKETS, count + 64)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.bind("inproc://crowd")
        clock = lambda: self.now  # noqa: E731
        batcher = Batcher(max_batch=4096, deadline_s=DEADLINE_S, clock=clock)
        self.broker = Broker(self.router, SPEC, batcher, Ones(), clock=clock, **broker_args)
        self.socks = []
        for actor_id in range(count):
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, 5000)
            sock.connect("inproc://crowd")
            self.socks.append(sock)
            self.deliver(sock, encode(Hello(actor_id, "r", 1, SPEC, first_env=actor_id)))
        self.seq = [0] * count

    def deliver(self, sock, frames) -> None:
        sock.send_multipart(frames, copy=False)
        self.broker.handle(self.router.recv_multipart(copy=False))

    def step(self, actor_id: int, *, read: bool = True) -> None:
        """Actor ``actor_id`` sends its next request; the broker reads it now, or (``read``
        false) it waits in the socket for the broker's next drain."""
        obs = np.zeros((1, 4), np.float32)
        flags = np.zeros(1, bool)
        msg = Step(actor_id, "r", self.seq[actor_id], obs, np.zeros(1, np.float32), flags, flags,
                   obs[:0])  # fmt: skip
        if read:
            self.deliver(self.socks[actor_id], encode(msg))
        else:
            self.socks[actor_id].send_multipart(encode(msg), copy=False)

    def answered(self, actor_id: int) -> bool:
        sock = self.socks[actor_id]
        if not sock.poll(0):
            return False
        reply = decode_reply(sock.recv_multipart(), 1)
        ok = isinstance(reply, Actions) and reply.seq == self.seq[actor_id]
        self.seq[actor_id] += ok
        return ok

    def close(self) -> None:
        for sock in self.socks:
            sock.close(linger=0)
        self.router.close(linger=0)
        self.ctx.term()


@pytest.fixture()
def crowd():
    crowds = []

    def make(count: int, **broker_args) -> Crowd:
        crowds.append(Crowd(count, **broker_args))
        return crowds[-1]

    yield make
    for c in crowds:
        c.close()


def test_a_vanished_stream_holds_a_batch_back_no_longer_than_the_deadline(crowd):
    c = crowd(600)
    for actor_id in range(1, 600):  # actor 0 vanished: it never sends
        c.step(actor_id)
    before = c.broker.answer_ready()
    c.now += DEADLINE_S
    after = c.broker.answer_ready()
    served = sum(c.answered(actor_id) for actor_id in range(600))
    assert (before, after, served) == (0, 1, 599)


def test_when_every_stream_waits_the_batch_goes_without_waiting_for_the_deadline(crowd):
    c = crowd(600)
    for actor_id in range(600):
        c.step(actor_id)
    assert (c.broker.answer_ready(), sum(c.answered(a) for a in range(600))) == (1, 600)


def test_a_stream_waiting_for_its_reply_is_never_evicted_however_long_it_waits(crowd):
    """400 streams step every second for 40 s, 200 fall silent at 5 s; 30.5 s after the last
    replies, everyone is silent except the one stream whose request is still queued."""
    c = crowd(600, silent_timeout_s=30.0)
    live = range(400)
    for t in range(40):
        c.now = float(t)
        for actor_id in live if t >= 5 else range(600):
            c.step(actor_id)
        c.now += DEADLINE_S
        c.broker.answer_ready()
        for actor_id in range(600):
            c.answered(actor_id)
    c.now = 40.0
    c.step(0)  # queued, waiting for us: not silent
    c.now = 70.5  # 30.5 s after actor 0's request and every live stream's last reply
    evicted = c.broker.evict_silent(c.now, 30.0)
    assert (sorted(evicted), sorted(c.broker.actors)) == (list(range(1, 600)), [0])


def test_under_load_streams_answered_recently_are_never_evicted(crowd):
    c = crowd(600, silent_timeout_s=30.0)
    for t in range(40):
        c.now = float(t)
        for actor_id in range(400 if t >= 5 else 600):
            c.step(actor_id)
        c.now += DEADLINE_S
        c.broker.answer_ready()
        for actor_id in range(600):
            c.answered(actor_id)
        c.broker.evict_silent(c.now, 30.0)
    assert (sorted(c.broker.actors), c.broker.stats.evicted) == (list(range(400)), 200)


class TrainsInRecord(Ones):
    """A consumer whose ``record`` holds the broker for ``seconds`` of the crowd's clock, as
    an on-policy learner's sink does while it trains (PPO's ``pause_acting``)."""

    def __init__(self, crowd: Crowd, seconds: float) -> None:
        self.crowd, self.seconds = crowd, seconds

    def record(self, batch):
        self.crowd.now += self.seconds


def test_requests_sent_while_the_broker_trained_are_read_before_anyone_is_judged_silent(crowd):
    """record() holds the broker for 45 s; actors 0 and 1 send their next request meanwhile
    (unread when the update ends), actor 2 sends nothing: the eviction turn reads the socket
    first, so 0 and 1 stay and 2 goes."""
    c = crowd(3, silent_timeout_s=30.0)
    c.broker.consumer = TrainsInRecord(c, seconds=45.0)
    for actor_id in range(3):
        c.step(actor_id)
    c.broker.answer_ready()  # one batch; its record() takes 45 s
    answered = [c.answered(actor_id) for actor_id in range(3)]
    for actor_id in range(2):
        c.step(actor_id, read=False)
    c.broker.evict_if_due()
    assert (answered, sorted(c.broker.actors), len(c.broker.batcher)) == ([True] * 3, [0, 1], 2)


def test_a_stopped_actor_is_evicted_though_the_broker_trains_nearly_all_the_time(crowd):
    """Each batch's record() holds the broker for 0.9 s of a 1.5 s timeout (a learner-bound
    run waiting on its training queue): actor 2 stops after the first turn, 0 and 1 go on, and
    2 is evicted on the second (1.8 s after its last reply), not excused for every stretch the
    broker was away."""
    c = crowd(3, silent_timeout_s=1.5)
    c.broker.consumer = TrainsInRecord(c, seconds=0.9)
    evicted_at = None
    for turn in range(10):
        for actor_id in range(2 if turn else 3):
            c.step(actor_id)
        c.now += DEADLINE_S
        c.broker.answer_ready()
        assert all(c.answered(actor_id) for actor_id in range(2))
        c.broker.evict_if_due()
        if evicted_at is None and 2 not in c.broker.actors:
            evicted_at = turn
    assert (sorted(c.broker.actors), c.broker.stats.evicted, evicted_at) == ([0, 1], 1, 1)


def bench(*args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "seedq.bench.cli", "broker", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("streams", "shards"), [(1500, 1), (1000, 2)], ids=["one-broker", "two-shards"]
)
def test_thousands_of_connections_are_all_served_and_none_is_evicted(streams, shards):
    figures = bench(
        f"streams={streams}", f"shards={shards}", "seconds=2", "warmup_s=0.5", "generators=2"
    )
    (point,) = figures["points"]
    assert (
        point["evicted"],
        point["refused"],
        point["starved"],
        point["replies_per_s"] > 0,
        point["open_files"] >= streams,
    ) == (0, 0, 0, True, True)
