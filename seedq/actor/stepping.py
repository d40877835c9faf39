"""What stepping an env batch takes, wherever the batch's actions come from: its counts
(:class:`ActorStats`), its episodes' raw returns (:class:`EpisodeTracker`), the request that
follows a step (:func:`next_step`), and the envs' own faults: a reset or step that raises
(:class:`EnvFailed`, counted by :class:`EnvFailures`) or hangs (:func:`hung_env_call`).

SEED's actor loop (``seedq.actor.loop``) and Sebulba's actor threads share them; nothing here
knows a socket.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np

from seedq.core.stats import RunFault
from seedq.envs import EnvBatch
from seedq.envs.base import StepBatch
from seedq.messages import Step

log = logging.getLogger(__name__)


@dataclass
class ActorStats:
    env_steps: int = 0
    episodes: int = 0
    rejoins: int = 0  # recoverable refusals answered by a reset and a new run id
    env_failures: int = 0  # env batches whose reset or step raised, rebuilt and rejoined
    # The env call in progress: (actor id, "reset" or "step", its start on the monotonic
    # clock), None between calls; the actor process's watchdog reads it (actor.env_timeout_s).
    env_call: tuple[int, str, float] | None = None
    # Seconds from sending each Step to holding its actions; recorded only when a list is given
    # (seedq-bench pipeline).
    latencies: list[float] | None = None


class EpisodeTracker:
    """Raw episodic return and length per env, vectorised."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def update(self, reward: np.ndarray, done: np.ndarray) -> tuple[list[float], list[int]]:
        self.returns += reward
        self.lengths += 1
        if not done.any():
            return [], []
        ended = np.flatnonzero(done)
        finished = (self.returns[ended].tolist(), self.lengths[ended].tolist())
        self.returns[ended] = 0.0
        self.lengths[ended] = 0
        return finished


class EnvFailed(Exception):
    """The env batch's own reset or step raised (a simulator's crash, a bug in the env); the
    env's exception is the cause, ``episodes`` the episodes the batch finished before it."""

    def __init__(self, episodes: int) -> None:
        super().__init__(f"the envs raised after {episodes} finished episodes")
        self.episodes = episodes


class TooManyEnvFailures(RunFault):
    """An env batch's envs raised more than ``max_rejoins`` times in a row."""


class EnvFailures:
    """One env batch's failures (:class:`EnvFailed`), each logged with the env's traceback.

    A failure after which the rebuilt batch finishes no episode before it fails again continues
    a row; more than ``limit`` in a row is an env that does not work (it fails at its reset, or
    at the same point of every episode) and raises :class:`TooManyEnvFailures`, naming the
    env's error. An env that crashes now and then, between finished episodes, is rebuilt each
    time. ``who`` names the batch in messages, ``setting`` what the user set ``limit`` by
    (``actor.max_rejoins``, or ``--max-rejoins`` to a ``seedq-actor`` started by hand).
    """

    def __init__(self, who: str, limit: int, setting: str) -> None:
        self.who = who
        self.limit = limit
        self.setting = setting
        self.in_a_row = 0
        self.total = 0

    def note(self, failed: EnvFailed, num_envs: int) -> None:
        cause = failed.__cause__
        self.in_a_row = 1 if failed.episodes else self.in_a_row + 1
        self.total += 1
        what = f"{type(cause).__name__}: {cause}"
        over = self.in_a_row > self.limit
        log.warning(
            "%s: its envs raised (%s) after %d finished episodes; %s (%d in a row, %d in all)",
            self.who,
            what,
            failed.episodes,
            "giving up" if over else f"closing them and starting over with {num_envs} new ones",
            self.in_a_row,
            self.total,
            exc_info=cause,
        )
        if over:
            raise TooManyEnvFailures(
                f"{self.who}: its envs raised {self.in_a_row} times in a row without finishing "
                f"an episode, more than {self.setting}={self.limit}; the last: {what} (its "
                "traceback is in the log above)"
            ) from cause


def hung_env_call(
    stats: ActorStats, timeout_s: float, thread: int | None, who: str, setting: str
) -> str:
    """ "" while the env call ``stats`` notes (``env_call``) is younger than ``timeout_s``;
    else the stack where ``thread`` is stuck goes to the log and the reason comes back, one
    line naming ``who`` and ``setting``, what the user set ``timeout_s`` by (the actor
    process's watchdog and Sebulba's run loop end on it)."""
    call = stats.env_call
    if not timeout_s or call is None or time.monotonic() - call[2] < timeout_s:
        return ""
    frame = sys._current_frames().get(thread or -1)
    where = "".join(traceback.format_stack(frame)).rstrip() if frame else "(not found)"
    log.error("%s: where its envs' %s is stuck:\n%s", who, call[1], where)
    return (
        f"{who}: its envs' {call[1]} has run for {time.monotonic() - call[2]:.0f} s, more than "
        f"{setting}={timeout_s:g}: the env hangs"
    )


def close_quietly(env: EnvBatch, who: str) -> None:
    """Close an env batch that may be broken: its error is logged, not raised."""
    try:
        env.close()
    except Exception:  # a crashed simulator may fail to close too
        log.warning("%s: closing its envs failed", who, exc_info=True)


def next_step(step: Step, out: StepBatch, returns: list, lengths: list) -> Step:
    """The request that follows ``step``: the env batch's result and the episodes it ended."""
    return Step.of_batch(step.actor_id, step.run_id, step.seq + 1, out, returns, lengths)
