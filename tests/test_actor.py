"""The actor loop: episode statistics, and a clear error when the learner is gone."""

import asyncio

import numpy as np
import pytest
import zmq
import zmq.asyncio

from seedq.actor import loop
from seedq.actor.loop import ActorError, Patience, run_env_batch
from seedq.actor.stepping import ActorStats, EpisodeTracker
from seedq.envs import FakeConfig, make_env_batch
from seedq.messages.control import decode_header


def test_episode_tracker_reports_raw_returns_and_lengths_of_ended_episodes():
    tracker = EpisodeTracker(3)
    tracker.update(np.array([1.0, 2.0, 3.0]), np.array([False, False, False]))
    returns, lengths = tracker.update(np.array([1.0, 1.0, 1.0]), np.array([True, False, True]))
    assert (returns, lengths) == ([2.0, 4.0], [2, 2])


def test_episode_tracker_starts_over_after_an_episode_ends():
    tracker = EpisodeTracker(1)
    tracker.update(np.array([5.0]), np.array([True]))
    returns, _ = tracker.update(np.array([1.0]), np.array([True]))
    assert returns == [1.0]


@pytest.mark.parametrize(
    ("by_hand", "timeout"), [(True, "--reply-timeout-s=1"), (False, "actor.reply_timeout_s=1")]
)
def test_actor_without_a_learner_stops_with_a_clear_error(monkeypatch, caplog, by_hand, timeout):
    # While it waits it says so, naming the endpoint and that nothing connected: a standalone
    # actor pointed at the wrong port was silent for the whole reply_timeout_s. Both lines name
    # the timeout as it was set: seedq-actor's flag by hand (it was actor.reply_timeout_s,
    # a key such an actor has not got), the run's key when launched.
    monkeypatch.setattr(loop, "FIRST_NOTE_S", 0.3)
    env = make_env_batch(FakeConfig(obs_shape=[4]), 2, seed=0)

    async def main():
        ctx = zmq.asyncio.Context()
        try:
            await run_env_batch(
                ctx,
                "tcp://127.0.0.1:9",
                0,
                env,
                seed=0,
                stop=asyncio.Event(),
                patience=Patience(reply_timeout_s=1.0, by_hand=by_hand),
            )
        finally:
            ctx.term()

    with pytest.raises(ActorError, match=f"no reply from the learner for 1 s \\({timeout}\\)"):
        asyncio.run(main())
    assert "actor 0: no answer from the learner at tcp://127.0.0.1:9 after" in caplog.text
    assert "no connection: is the learner running" in caplog.text
    assert f"waiting up to {timeout} s" in caplog.text


def test_an_actor_whose_connection_dropped_while_a_reply_was_due_rejoins(caplog):
    # A learner frozen past the heartbeat timeout (SIGSTOP for 6 s): the connection dropped and
    # came back, the reply to the pending request went to the old connection, and the actor
    # waited in silence for reply_timeout_s while the learner evicted it: the run went on
    # with no env steps. Here the learner goes away after taking a step and a new one binds
    # the same port; the actor must rejoin it on a new connection.
    env = make_env_batch(FakeConfig(obs_shape=[4]), 2, seed=0)
    stats = ActorStats()

    async def main() -> list[dict]:
        ctx = zmq.asyncio.Context()
        first = ctx.socket(zmq.ROUTER)
        port = first.bind_to_random_port("tcp://127.0.0.1")
        stop = asyncio.Event()
        actor = asyncio.create_task(
            run_env_batch(
                ctx,
                f"tcp://127.0.0.1:{port}",
                0,
                env,
                seed=0,
                stop=stop,
                patience=Patience(reply_timeout_s=60.0),
                stats=stats,
            )
        )
        second = ctx.socket(zmq.ROUTER)
        try:
            seen = [decode_header((await first.recv_multipart())[1]) for _ in range(2)]
            first.close(linger=0)  # the Hello and the first step taken; no reply comes
            for _ in range(100):  # the closed socket's port is let go by ZMQ's I/O thread
                try:
                    second.bind(f"tcp://127.0.0.1:{port}")
                    break
                except zmq.ZMQError:
                    await asyncio.sleep(0.05)
            frames = await asyncio.wait_for(second.recv_multipart(), timeout=20)
            seen.append(decode_header(frames[1]))
            return seen
        finally:
            stop.set()
            await asyncio.wait_for(actor, timeout=10)
            ctx.destroy(linger=0)

    hello, _, again = asyncio.run(main())
    assert again["kind"] == "hello" and again["run_id"] != hello["run_id"]
    assert stats.rejoins == 1
    assert "the connection to the learner dropped and came back" in caplog.text
