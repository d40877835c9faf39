"""A second run with an actor id already taken: the new run takes the id over (an actor that was
killed and restarted must get back in before its old connection is seen to drop), and the old
run is told so and its actor exits, instead of waiting in silence for a reply that never comes
while the learner's step count sits at 0."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import zmq
import zmq.asyncio

from seedq.actor.loop import ActorError, ActorTakenOver, Patience, run_env_batch
from seedq.actor.main import _run
from seedq.actor.stepping import ActorStats
from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.envs import FakeConfig, make_env_batch
from seedq.envs.base import env_spec_of
from seedq.messages import EnvSpec, Hello, Step, decode_error, decode_header, encode

SPEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", num_actions=2)
_names = itertools.count()


class Policy:
    """Action 1 everywhere; remembers the runs that started."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    def act(self, batch):
        return np.ones(batch.num_envs, np.int32)

    def record(self, batch):
        pass

    def actor_started(self, slot):
        self.runs.append(slot.hello.run_id)

    def actor_left(self, slot):
        pass


def hello(actor_id: int, run_id: str) -> list:
    return encode(Hello(actor_id, run_id, 2, SPEC, first_env=actor_id * 2))


def step(seq: int, actor_id: int, run_id: str) -> list:
    msg = Step(
        actor_id=actor_id,
        run_id=run_id,
        seq=seq,
        obs=np.zeros((2, 4), np.float32),
        reward=np.zeros(2, np.float32),
        terminated=np.zeros(2, bool),
        truncated=np.zeros(2, bool),
        final_obs=np.zeros((0, 4), np.float32),
    )
    return [f if isinstance(f, bytes) else np.asarray(f).tobytes() for f in encode(msg)]


@pytest.fixture()
def wired():
    """A broker driven one message at a time over inproc (no serve thread, no clock)."""
    ctx = zmq.Context()
    endpoint = f"inproc://takeover-{next(_names)}"
    router = ctx.socket(zmq.ROUTER)
    router.bind(endpoint)
    broker = Broker(router, SPEC, Batcher(max_batch=64, deadline_s=60.0, clock=lambda: 0.0),
                    Policy(), clock=lambda: 0.0)  # fmt: skip
    sockets = []

    def connect() -> zmq.Socket:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 5000)
        sock.connect(endpoint)
        sockets.append(sock)
        return sock

    def send(sock: zmq.Socket, frames: list) -> None:
        sock.send_multipart(frames, copy=False)
        broker.handle(router.recv_multipart(copy=False))

    yield broker, connect, send
    for sock in sockets:
        sock.close(linger=0)
    router.close(linger=0)
    ctx.term()


def error_of(sock: zmq.Socket) -> tuple[str, int, str]:
    error = decode_error(decode_header(sock.recv_multipart()[0]))
    return error.code, error.seq, error.message


def test_the_old_run_of_a_taken_over_id_is_refused_now_and_for_everything_it_sends_later(
    wired, caplog
):
    broker, connect, send = wired
    old, other, new = connect(), connect(), connect()
    send(old, hello(0, "old-run"))
    send(other, hello(1, "other-run"))  # so the batch waits and old's step stays in flight
    send(old, step(0, 0, "old-run"))
    with caplog.at_level(logging.WARNING):
        send(new, hello(0, "new-run"))
    in_flight = error_of(old)
    send(old, step(1, 0, "old-run"))
    later_step = error_of(old)
    send(old, hello(0, "old-run"))
    later_hello = error_of(old)
    taken = (
        "taken_over",
        "actor id 0 was taken over by another process (run new-run) joining the learner; "
        "give each actor process its own --actor-ids",
    )
    assert (
        (in_flight[0], in_flight[2]),
        in_flight[1],
        (later_step[0], later_step[2]),
        (later_hello[0], later_hello[2]),
        broker.actors[0].hello.run_id,
        "run new-run joined on another connection and took the id over from run old-run"
        in caplog.text,
    ) == (taken, 0, taken, taken, "new-run", True)


def test_a_new_run_on_the_same_connection_is_no_takeover(wired):
    broker, connect, send = wired
    sock = connect()
    send(sock, hello(0, "first"))
    send(sock, hello(0, "second"))
    send(sock, step(0, 0, "second"))
    broker.answer_ready()
    assert decode_header(sock.recv_multipart()[0])["kind"] == "actions"


@contextlib.contextmanager
def served_broker(spec: EnvSpec) -> Iterator[tuple[str, Policy]]:
    """A broker serving ``spec`` on a loopback port in a thread: its endpoint and policy."""
    zctx = zmq.Context()
    router = zctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    policy = Policy()
    broker = Broker(router, spec, Batcher(max_batch=8, deadline_s=0.001), policy)
    stop_broker = threading.Event()
    serving = threading.Thread(target=broker.serve, args=(stop_broker,), daemon=True)
    serving.start()
    try:
        yield f"tcp://127.0.0.1:{port}", policy
    finally:
        stop_broker.set()
        serving.join(timeout=5)
        router.close(linger=0)
        zctx.term()


def test_an_actor_whose_id_another_process_takes_exits_naming_it_and_the_new_one_steps(caplog):
    env_cfg = FakeConfig(obs_shape=[4])
    first_env = make_env_batch(env_cfg, 2, seed=0)
    second_env = make_env_batch(env_cfg, 2, seed=1)
    patience = Patience(reply_timeout_s=60.0)
    first_stats, second_stats = ActorStats(), ActorStats()

    async def main() -> tuple[str, int]:
        ctx = zmq.asyncio.Context()
        stop_first, stop_second = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(
            run_env_batch(ctx, endpoint, 0, first_env, seed=0, stop=stop_first,
                          patience=patience, stats=first_stats)
        )  # fmt: skip
        second = None
        try:
            while first_stats.env_steps < 10 and not first.done():
                await asyncio.sleep(0.01)
            second = asyncio.create_task(
                run_env_batch(ctx, endpoint, 0, second_env, seed=1, stop=stop_second,
                              patience=patience, stats=second_stats)
            )  # fmt: skip
            with pytest.raises(ActorError) as failed:
                await asyncio.wait_for(first, timeout=30)
            steps_then = second_stats.env_steps
            while second_stats.env_steps < steps_then + 10 and not second.done():
                await asyncio.sleep(0.01)
            return str(failed.value), second_stats.env_steps - steps_then
        finally:
            stop_first.set()
            stop_second.set()
            await asyncio.gather(*[t for t in (first, second) if t], return_exceptions=True)
            ctx.destroy(linger=0)

    with served_broker(env_spec_of(first_env)) as (endpoint, policy):
        with caplog.at_level(logging.WARNING):
            error, stepped_after = asyncio.run(main())
    old_run, new_run = policy.runs[:2]
    assert (
        error,
        stepped_after >= 10,
        first_stats.rejoins,
        f"run {new_run} joined on another connection and took the id over from run {old_run}"
        in caplog.text,
    ) == (
        f"actor id 0 was taken over by another process (run {new_run}) joining the learner; "
        "give each actor process its own --actor-ids",
        True,
        0,
        True,
    )


@pytest.mark.parametrize("taken", [[0], [0, 1]])
def test_a_process_whose_ids_are_taken_over_steps_the_others_and_exits_5_when_none_is_left(
    taken, caplog
):
    """An actor process runs several ids; another process taking one of them over costs that
    id, not the others (they went unstepped, the process ended), and only a process left with
    none ends as taken over (exit 5: the launcher neither counts nor restarts it)."""
    env_cfg = FakeConfig(obs_shape=[4])
    patience = Patience(reply_timeout_s=60.0)
    process_stats, other_stats = ActorStats(), ActorStats()

    async def main() -> tuple[BaseException | None, int]:
        ctx = zmq.asyncio.Context()
        stop_process, stop_other = asyncio.Event(), asyncio.Event()
        process = asyncio.create_task(
            _run(ctx, endpoint, [0, 1], env_cfg, 2, 0, stop_process, process_stats,
                 patience=patience)
        )  # fmt: skip
        others = []
        try:
            while process_stats.env_steps < 20 and not process.done():
                await asyncio.sleep(0.01)
            for actor_id in taken:
                env = make_env_batch(env_cfg, 2, seed=5, env_offset=actor_id * 2)
                others.append(asyncio.create_task(
                    run_env_batch(ctx, endpoint, actor_id, env, seed=5, stop=stop_other,
                                  patience=patience, stats=other_stats)
                ))  # fmt: skip
            while other_stats.env_steps < 20 * len(taken) and not process.done():
                await asyncio.sleep(0.01)
            # Every takeover has been answered once the other process steps them all.
            steps_then = process_stats.env_steps
            deadline = asyncio.get_running_loop().time() + 10
            while not process.done() and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)
                if process_stats.env_steps >= steps_then + 20:
                    break
            stepped_after = process_stats.env_steps - steps_then
            stop_process.set()
            try:
                await asyncio.wait_for(process, timeout=30)
            except ActorTakenOver as exc:
                return exc, stepped_after
            return None, stepped_after
        finally:
            stop_process.set()
            stop_other.set()
            await asyncio.gather(process, *others, return_exceptions=True)
            ctx.destroy(linger=0)

    with served_broker(env_spec_of(make_env_batch(env_cfg, 2, seed=0))) as (endpoint, _):
        with caplog.at_level(logging.ERROR):
            ended_as, stepped_after = asyncio.run(main())
    if taken == [0]:
        assert (ended_as, stepped_after >= 20) == (None, True)
        assert "this process's other actor ids go on" in caplog.text
    else:
        assert isinstance(ended_as, ActorTakenOver) and stepped_after == 0


def test_a_process_whose_batches_all_fail_raises_one_and_leaves_none_unretrieved(caplog):
    """Both env batches refused for good (envs of another shape): the first failure is the
    process's, and the other is collected, not logged by asyncio at exit as "Task exception was
    never retrieved" with a traceback in the actor's log."""
    env_cfg = FakeConfig(obs_shape=[4])
    other = EnvSpec(obs_shape=(3,), obs_dtype="float32", num_actions=2)
    with served_broker(other) as (endpoint, _):
        with caplog.at_level(logging.ERROR):

            async def main() -> None:
                ctx = zmq.asyncio.Context()
                try:
                    await _run(ctx, endpoint, [0, 1], env_cfg, 2, 0, asyncio.Event(), ActorStats(),
                               patience=Patience(reply_timeout_s=30.0))  # fmt: skip
                finally:
                    ctx.destroy(linger=0)

            with pytest.raises(ActorError):
                asyncio.run(main())
            gc.collect()
    assert "never retrieved" not in caplog.text
