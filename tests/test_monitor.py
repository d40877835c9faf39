"""The run monitor: its progress line and the run summary it hands back."""

import logging
import threading
import time
from types import SimpleNamespace

import torch

from seedq.arch.monitor import Monitor
from seedq.core.stats import RunStats, TrainStats
from seedq.parallel.agreement import NullWriter
from seedq.progress import PROGRESS_LOGGER


class QuietAgent:
    metric_columns: list[str] = []

    def __init__(self) -> None:
        self.stats = TrainStats()

    def metrics(self) -> dict:
        return {}

    def judged_returns(self, returns: list[float]) -> list[float]:
        return returns

    def progress(self, row: dict) -> str:
        return ""


def monitor_config(stop_at_return: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        total_env_steps=10**6,
        stop_at_return=stop_at_return,
        max_minutes=0,
        broker=SimpleNamespace(max_batch=1),
    )


def test_the_final_progress_line_reports_the_run_average(caplog):
    """A run of 100 s and 1,000 steps whose last interval was a millisecond: 10 steps/s."""
    stats = RunStats()
    monitor = Monitor(monitor_config(), QuietAgent(), stats, NullWriter(), time.monotonic() - 100.0)
    stats.env_steps = 1000
    monitor.last_steps, monitor.last_time = 990, time.monotonic() - 0.001
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        monitor.tick(final=True)
    assert "| 10 steps/s on average |" in caplog.records[-1].getMessage()


def test_a_run_stopped_at_its_target_reports_the_window_that_met_it():
    """Episodes that end while the roles stop (after the stop was decided) move the final
    window; the summary still says which mean met the target, and the final one beside it."""
    stats = RunStats()
    monitor = Monitor(monitor_config(0.8), QuietAgent(), stats, NullWriter(), time.monotonic())
    stats.record_episodes(99, [1.0] * 99, [9] * 99)
    assert monitor.tick() == ""  # 99 episodes: too few to judge
    stats.record_episodes(1, [1.0], [9])
    assert monitor.tick() == "target_return"
    stats.record_episodes(40, [-1.0] * 40, [9] * 40)  # finished while the roles stopped
    monitor.tick(final=True)
    summary = monitor.summary("target_return")
    assert summary.return_at_target == 1.0
    assert summary.return_mean == 0.2  # 60 x 1 and 40 x -1
    assert summary.time_to_target_s is not None


def test_a_run_that_misses_its_target_reports_none_for_it():
    stats = RunStats()
    monitor = Monitor(monitor_config(0.8), QuietAgent(), stats, NullWriter(), time.monotonic())
    stats.record_episodes(100, [0.5] * 100, [9] * 100)
    assert monitor.tick() == ""
    monitor.tick(final=True)
    summary = monitor.summary("total_env_steps")
    assert (summary.return_at_target, summary.time_to_target_s) == (None, None)
    assert summary.return_mean == 0.5


def test_the_target_is_seen_between_rows_by_the_rule_a_row_stops_on():
    stats = RunStats()
    monitor = Monitor(monitor_config(0.8), QuietAgent(), stats, NullWriter(), time.monotonic())
    assert not Monitor(monitor_config(), QuietAgent(), stats, NullWriter(), 0.0).target_met()
    stats.record_episodes(99, [1.0] * 99, [9] * 99)
    assert not monitor.target_met()  # 99 episodes: too few to judge, as tick() has it
    stats.record_episodes(1, [0.5], [9])
    assert monitor.target_met()  # mean 0.995
    assert monitor.tick() == "target_return"
    assert not monitor.target_met()  # met once: the row that stopped the run timed it


def test_the_batch_that_spends_the_step_budget_sets_the_stop_event():
    stats, stop = RunStats(), threading.Event()
    stats.stop_at(300, stop)
    stats.record_batch(256, [])
    assert not stop.is_set()
    stats.record_batch(64, [])
    assert (stop.is_set(), stats.env_steps) == (True, 320)


def test_a_learner_rank_stops_at_its_steps_plus_the_other_ranks_last_summed():
    # Ranks checked the budget only at their loop's rows: two ranks of a fake env given 2,000
    # env steps ran to 15-25 k before the first row's sum stopped them.
    others = [0]
    stats, stop = RunStats(), threading.Event()
    stats.stop_at(1000, stop, lambda: others[0])
    stats.record_batch(400, [])
    others[0] = 500  # the other rank's count as a training round summed it
    assert not stop.is_set()  # read when this rank counts, not before
    stats.record_batch(100, [])
    assert (stop.is_set(), stats.env_steps) == (True, 500)


def test_the_other_ranks_steps_are_the_newer_of_a_rows_and_a_rounds_sum():

    from seedq.parallel.agreement import COUNTERS, RankAgreement

    agreement = RankAgreement.__new__(RankAgreement)
    agreement.others = torch.zeros(len(COUNTERS), dtype=torch.int64)
    agreement.collective = SimpleNamespace(env_steps=0, local_at_round=0)
    assert agreement.others_env_steps() == 0
    agreement.others[COUNTERS.index("env_steps")] = 700  # a row's sum
    agreement.collective.env_steps, agreement.collective.local_at_round = 1500, 600
    assert agreement.others_env_steps() == 900  # the round is newer
    agreement.collective.env_steps, agreement.collective.local_at_round = 1000, 400
    assert agreement.others_env_steps() == 700  # the row is


def test_a_batchs_steps_and_episodes_are_counted_in_one_moment():
    # A checkpoint took env_steps after a batch had added its steps and before it had added
    # its episodes: the episode log then held episodes at those steps the checkpoint did not
    # count (149 logged against 147, tests/test_resume.py under load). And Sebulba's threads
    # each add steps: a += outside the lock can lose another thread's.
    from seedq.broker.batch import Episodes

    stats = RunStats()
    stats.record_batch(16, [Episodes(0, [1.0], [10])])
    seen = []
    with stats.lock:  # a reader in the middle of the next batch's counting
        writer = threading.Thread(
            target=stats.record_batch, args=(16, [Episodes(1, [2.0, 3.0], [11, 12])])
        )
        writer.start()
        writer.join(timeout=0.2)
        seen.append((stats.env_steps, stats.episodes))
    writer.join()
    assert seen == [(16, 1)] and stats.counts() == (32, 3)
    logged = stats.drain_episodes()
    steps, episodes = stats.counts()
    assert len([e for e in logged if e[0] <= steps]) == episodes

    threads = [
        threading.Thread(target=lambda: [stats.record_batch(1, []) for _ in range(20000)])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stats.counts() == (32 + 80000, 3)


def test_a_resumed_run_already_past_its_budget_is_stopped_at_once():
    stats, stop = RunStats(env_steps=5000), threading.Event()
    stats.stop_at(3000, stop)
    assert stop.is_set()
