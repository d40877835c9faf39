"""The actor loop: episode statistics, and a clear error when the learner is gone."""

import asyncio

import numpy as np
import pytest
import zmq
import zmq.asyncio

from seedq.actor import loop
from seedq.actor.loop import ActorError, EpisodeTracker, Patience, run_env_batch
from seedq.envs import FakeConfig, make_env_batch


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


def test_actor_without_a_learner_stops_with_a_clear_error(monkeypatch, caplog):
    # While it waits it says so, naming the endpoint and that nothing connected: a standalone
    # actor pointed at the wrong port was silent for the whole reply_timeout_s.
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
                patience=Patience(reply_timeout_s=1.0),
            )
        finally:
            ctx.term()

    with pytest.raises(ActorError, match="no reply from the learner"):
        asyncio.run(main())
    assert "actor 0: no answer from the learner at tcp://127.0.0.1:9 after" in caplog.text
    assert "no connection: is the learner running" in caplog.text
