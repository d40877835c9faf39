"""ActorPool supervision through the ``spawn`` hook other launchers use: any spawned process is
restarted with backoff, and too many crashes in the window end the run quoting its log."""

import subprocess
import sys

import pytest
from fault_helpers import wait_for

from seedq.bench.fuzz import fuzz_messages
from seedq.envs import FakeConfig
from seedq.exit_status import EXIT_ACTOR_TAKEN_OVER
from seedq.launch.actors import ActorFailure, ActorPool, RestartPolicy, SpawnRefused


def crashing_spawn(started: list[list[str]]):
    """A launcher hook whose 'actor' writes a line to its log and exits with status 7."""

    def spawn(index: int, cmd: list[str], log_file: str) -> subprocess.Popen:
        started.append(cmd)
        code = f"open({log_file!r}, 'a').write('start {len(started)}\\n'); raise SystemExit(7)"
        return subprocess.Popen([sys.executable, "-c", code])

    return spawn


def pool(tmp_path, spawn, policy: RestartPolicy) -> ActorPool:
    return ActorPool(
        endpoint="tcp://127.0.0.1:9",
        env=FakeConfig(),
        num_actors=1,
        batches_per_actor=2,
        envs_per_batch=4,
        seed=0,
        run_dir=str(tmp_path),
        spawn=spawn,
        restart=policy,
    )


def test_a_crashed_process_from_any_spawn_hook_is_restarted_with_backoff(tmp_path):
    started: list[list[str]] = []
    actors = pool(tmp_path, crashing_spawn(started), RestartPolicy(5, 60.0, backoff_s=0.05))
    actors.start()

    def two_restarts() -> bool:
        actors.check()
        return actors.restarts >= 2

    wait_for(two_restarts, 60, "two restarts")
    actors.stop()
    assert (started[0] == started[1] == started[2], "--parent-pid" in started[0]) == (True, False)


def test_crashing_more_than_max_restarts_in_the_window_fails_with_the_log(tmp_path):
    actors = pool(tmp_path, crashing_spawn([]), RestartPolicy(1, 60.0, backoff_s=0.05))
    actors.start()
    with pytest.raises(ActorFailure) as failure:
        wait_for(lambda: actors.check() and False, 60, "the failure")
    actors.stop()
    message = str(failure.value)
    assert "exited with code 7: 2 crashes within 60 s, more than actor.max_restarts=1" in message
    assert message.endswith("start 1\nstart 2\n")


def test_backoff_doubles_up_to_its_cap():
    policy = RestartPolicy(backoff_s=1.0, max_backoff_s=5.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]


def test_fuzz_bursts_are_reproducible_from_their_seed():
    assert list(fuzz_messages(3, 50)) == list(fuzz_messages(3, 50))


def test_a_place_its_launcher_gives_up_is_dropped_and_the_others_go_on(tmp_path):
    """The ssh launcher refuses to re-spawn on a host that keeps failing (SpawnRefused): that
    actor is dropped with a warning and the pool keeps supervising the others."""
    started: list[int] = []

    def spawn(index: int, cmd: list[str], log_file: str) -> subprocess.Popen:
        if index == 0 and index in started:
            raise SpawnRefused("actor host h0 was dropped after repeated failures")
        started.append(index)
        # Actor 0 dies at once; actor 1 lives until stopped.
        code = "raise SystemExit(7)" if index == 0 else "import time; time.sleep(600)"
        return subprocess.Popen([sys.executable, "-c", code])

    actors = pool(tmp_path, spawn, RestartPolicy(5, 60.0, backoff_s=0.05))
    actors.num_actors = 2
    actors.start()

    def dropped() -> bool:
        actors.check()
        return any(a.dropped for a in actors._procs)

    wait_for(dropped, 60, "actor 0 dropped")
    alive = actors.pids
    actors.stop()
    assert (sorted(set(started)), len(alive), actors.restarts) == ([0, 1], 1, 0)


def test_when_every_place_is_given_up_the_run_fails(tmp_path):
    def spawn(index: int, cmd: list[str], log_file: str) -> subprocess.Popen:
        if (tmp_path / "spawned").exists():
            raise SpawnRefused("actor host h0 was dropped after repeated failures")
        (tmp_path / "spawned").touch()
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])

    actors = pool(tmp_path, spawn, RestartPolicy(5, 60.0, backoff_s=0.05))
    actors.start()
    with pytest.raises(ActorFailure, match="no actor is left"):
        wait_for(lambda: actors.check() and False, 60, "the failure")
    actors.stop()


def test_an_actor_whose_ids_another_process_took_over_is_not_restarted(tmp_path, caplog):
    """Exit status 5 (another process joined with its actor ids) is no crash: restarting it
    would take the ids back and the two would take turns until max_restarts ended the run."""
    started: list[int] = []

    def spawn(index: int, cmd: list[str], log_file: str) -> subprocess.Popen:
        started.append(index)
        code = (
            f"raise SystemExit({EXIT_ACTOR_TAKEN_OVER})"
            if index == 0
            else "import time; time.sleep(600)"
        )
        return subprocess.Popen([sys.executable, "-c", code])

    actors = pool(tmp_path, spawn, RestartPolicy(0, 60.0, backoff_s=0.05))
    actors.num_actors = 2
    actors.start()

    def dropped() -> bool:
        actors.check()  # max_restarts=0: a crash would raise ActorFailure here
        return any(a.dropped for a in actors._procs)

    with caplog.at_level("WARNING"):
        wait_for(dropped, 60, "actor 0 dropped")
    alive = actors.pids
    actors.stop()
    assert (started, len(alive), actors.restarts) == ([0, 1], 1, 0)
    assert "another process joined the learner with its actor ids" in caplog.text
