"""``seedq-bench broker stages=true``: where the broker's microseconds go, stage by stage.

A :class:`~seedq.broker.router.Broker` on an ``inproc://`` ROUTER and ``streams`` DEALERs that
each have one Step queued; the broker's own methods are then timed one stage at a time over
the same messages, with this thread's CPU clock: receive (the ZeroMQ calls), admit (header
checks, batcher), assemble (the batch's arrays and their value checks), act (null policy),
encode (the replies), send, and bookkeeping (in-flight flags, counters, record). What the
serving loop adds on top (polls, the eviction timer) is the gap between the sum and the
``broker us/msg`` of the load test.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import zmq

from seedq.bench.pipeline import NullPolicy
from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.messages import EnvSpec, Hello, Step, encode
from seedq.messages.batch import encode_replies

STAGES = ("receive", "admit", "assemble", "act", "encode", "send", "bookkeeping")


def measure_stages(
    spec: EnvSpec, n_envs: int, streams: int, rounds: int, max_batch: int
) -> dict[str, float]:
    """CPU microseconds per message of each stage, over ``rounds`` x ``streams`` Steps."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://stages")
    started = time.perf_counter()
    broker = Broker(router, spec, Batcher(max_batch, 60.0), NullPolicy(), silent_timeout_s=0)
    dealers = []
    for a in range(streams):
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect("inproc://stages")
        dealer.send_multipart(encode(Hello(a, "r", n_envs, spec, first_env=a * n_envs)))
        broker.handle(router.recv_multipart(copy=False))
        dealers.append(dealer)
    obs = np.zeros((n_envs, *spec.obs_shape), spec.obs_dtype)
    flags = np.zeros(n_envs, bool)
    spent = dict.fromkeys(STAGES, 0)
    clock = time.thread_time_ns
    try:
        for seq in range(rounds):
            for a, dealer in enumerate(dealers):
                step = Step(a, "r", seq, obs, np.zeros(n_envs, np.float32), flags, flags, obs[:0])
                dealer.send_multipart(encode(step), copy=False)
            while router.poll(0) == 0:
                time.sleep(0.0005)
            received = []
            t0 = clock()
            for _ in dealers:
                identity = router.recv(0)
                head = router.recv(0)
                rest = []
                while router.getsockopt(zmq.RCVMORE):
                    rest.append(router.recv(0, copy=spec.obs_bytes * n_envs <= 32768))
                received.append((identity, head, rest))
            t1 = clock()
            for identity, head, rest in received:
                broker._step(identity, head, rest)
            spent["receive"] += t1 - t0
            spent["admit"] += clock() - t1
            while len(broker.batcher):
                requests = broker.batcher.take()
                t0 = clock()
                batch = broker._assemble(requests)
                t1 = clock()
                actions = broker.consumer.act(batch)
                t2 = clock()
                replies = encode_replies(
                    [s.hello.actor_id for s in batch.slots], batch.seqs, batch.sizes, actions
                )
                t3 = clock()
                for slot, reply in zip(batch.slots, replies, strict=True):
                    router.send(slot.identity, zmq.SNDMORE)
                    router.send(reply)
                t4 = clock()
                now = broker.clock()
                for slot in batch.slots:
                    slot.in_flight = False
                    slot.last_seen = now
                broker.stats.record_batch(batch.num_envs, batch.episodes)
                broker.consumer.record(batch)
                t5 = clock()
                spans = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
                for stage, dt in zip(STAGES[2:], spans, strict=True):
                    spent[stage] += dt
            for dealer in dealers:
                dealer.recv_multipart()
    finally:
        for dealer in dealers:
            dealer.close(linger=0)
        router.close(linger=0)
        ctx.term()
    messages = rounds * streams
    out = {stage: round(ns / messages / 1e3, 2) for stage, ns in spent.items()}
    out["total"] = round(sum(spent.values()) / messages / 1e3, 2)
    out["messages"] = messages
    out["wall_s"] = round(time.perf_counter() - started, 3)
    return out


def _measure_in_process(args: tuple) -> dict[str, float]:
    return measure_stages(*args)


def parallel_rates(spec: EnvSpec, rounds: int, max_batch: int, copies: int) -> dict[str, float]:
    """Messages/s of the stage loop (broker and its senders, all Python) alone, then ``copies``
    at once as threads of one process and as processes: whether more cores help depends on
    whether the work holds the interpreter lock."""
    import multiprocessing
    import threading

    args = (spec, 1, 256, rounds, max_batch)
    alone = measure_stages(*args)
    results: list[dict] = []
    threads = [
        threading.Thread(target=lambda: results.append(measure_stages(*args)))
        for _ in range(copies)
    ]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    threaded = sum(r["messages"] for r in results) / (time.perf_counter() - start)
    with multiprocessing.get_context("spawn").Pool(copies) as pool:
        pool.map(_measure_in_process, [(spec, 1, 4, 2, max_batch)] * copies)  # imports done
        start = time.perf_counter()
        done = pool.map(_measure_in_process, [args] * copies)
        processes = sum(r["messages"] for r in done) / (time.perf_counter() - start)
    return {
        "copies": copies,
        "alone_msgs_per_s": round(alone["messages"] / alone["wall_s"]),
        "threads_msgs_per_s": round(threaded),
        "processes_msgs_per_s": round(processes),
    }


def run_stages(options: dict[str, Any], specs: list[EnvSpec], max_batch: int) -> list[dict]:
    """One row per (obs, envs per message) of ``options``: stage costs per message."""
    rows = []
    for spec in specs:
        for n_envs in options["envs"]:
            streams = max(1, min(options["streams"][-1], max_batch // n_envs, 256))
            costs = measure_stages(spec, n_envs, streams, options["rounds"], max_batch)
            obs = f"{'x'.join(map(str, spec.obs_shape))}:{spec.obs_dtype}"
            rows.append({"obs": obs, "envs": n_envs, "streams": streams, **costs})
    return rows
