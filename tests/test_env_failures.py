"""An env whose own reset or step raises: a simulator that crashes now and then costs its env
batch's episodes in flight (the batch is built again and rejoins as a new run), through an actor
process and through Sebulba's threads alike, and no unroll spans the rebuild; one that never
works ends the run with the env's error. Also gymnasium's ``module:EnvName-v0`` ids, which
import the module that registers the env (``tests/flaky_envs.py`` here)."""

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from fault_helpers import CONF_DIR, capture_batches, make_run
from hydra import compose, initialize_config_dir

from seedq.actor.stepping import EnvFailed, EnvFailures, TooManyEnvFailures
from seedq.arch.sebulba import SebulbaRun
from seedq.cli import to_config
from seedq.core.stats import RunFault
from seedq.envs import EnvError
from seedq.envs.gym_ids import gym_spec
from seedq.evaluate import main as evaluate_main
from seedq.evaluate import merged_env
from seedq.learner.checkpoint import find_checkpoint
from seedq.schema import ConfigError

TESTS = str(Path(__file__).parent)
FLAKY = ["env=gym", "env.id=flaky_envs:Flaky-v0", "log_interval_s=0.5", "max_minutes=3"]
# Each env crashes at its 45th step since it was built: four 10-step episodes end before.
NOW_AND_THEN = [*FLAKY, "+env.kwargs.fail_every=45"]
NEVER_WORKS = [*FLAKY, "+env.kwargs.fail_reset=true", "actor.max_rejoins=2"]
SEBULBA = ["arch=sebulba", "arch.sebulba.threads=2", "arch.sebulba.envs_per_thread=4"]


@pytest.fixture(autouse=True)
def actors_import_flaky_envs(monkeypatch):
    """The actor processes import ``flaky_envs`` too: put this folder on their path."""
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", TESTS if not path else f"{TESTS}{os.pathsep}{path}")


def failure(episodes: int, message: str = "boom") -> EnvFailed:
    try:
        try:
            raise RuntimeError(message)
        except RuntimeError as exc:
            raise EnvFailed(episodes) from exc
    except EnvFailed as failed:
        return failed


def test_failures_count_in_a_row_until_the_env_finishes_an_episode(caplog):
    failures = EnvFailures("actor 3", limit=2, setting="actor.max_rejoins")
    failures.note(failure(0), 4)
    failures.note(failure(0), 4)
    failures.note(failure(5), 4)  # five episodes finished since the last: a new row
    failures.note(failure(0), 4)
    assert (failures.in_a_row, failures.total) == (2, 4)
    with pytest.raises(TooManyEnvFailures) as raised:
        failures.note(failure(0, "the last"), 4)
    assert str(raised.value).startswith(
        "actor 3: its envs raised 3 times in a row without finishing an episode, more than "
        "actor.max_rejoins=2; the last: RuntimeError: the last"
    )
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 5 and all(r.exc_info for r in warnings)
    assert "starting over with 4 new ones (1 in a row, 3 in all)" in warnings[2].getMessage()
    assert "giving up (3 in a row, 5 in all)" in warnings[4].getMessage()


def test_a_module_env_id_imports_the_module_that_registers_it():
    assert gym_spec("flaky_envs:Flaky-v0").id == "Flaky-v0"


@pytest.mark.parametrize(
    ("module_text", "env_id", "says"),
    [
        (None, "no_such_envs_pkg:Thing-v0", "names the module 'no_such_envs_pkg' to import first"),
        ("raise ValueError('half-written')", "broken_envs:Thing-v0", "ValueError('half-written')"),
        ("import no_such_dependency_pkg", "needs_dep_envs:Thing-v0", "no_such_dependency_pkg"),
        ("", "silent_envs:Thing-v0", "no env 'Thing-v0' is registered"),
        (None, ":Thing-v0", "gymnasium's module:EnvName-v0 form"),
    ],
)
def test_a_module_env_id_that_cannot_work_says_why(
    tmp_path, monkeypatch, module_text, env_id, says
):
    if module_text is not None:
        (tmp_path / f"{env_id.partition(':')[0]}.py").write_text(module_text + "\n")
        monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvError, match=f"env.id='{env_id}'") as raised:
        gym_spec(env_id)
    assert says in str(raised.value)


def assert_no_column_spans_a_rebuild(batches) -> None:
    """Observation 1 counts each env's steps since it was built: +1 from row to row in every
    unroll column, unless the column holds steps of two builds of the env."""
    columns = 0
    for batch in batches:
        lived = batch.obs[..., 1]
        steps = np.diff(lived, axis=0)
        assert (steps == 1).all(), lived.T
        columns += lived.shape[1]
    assert columns > 0


def sebulba_run(tmp_path, *overrides: str) -> SebulbaRun:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"run_dir={tmp_path}", *overrides])
    return SebulbaRun(to_config(cfg), str(tmp_path))


def test_an_actor_whose_envs_crash_now_and_then_rebuilds_them_and_goes_on(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="seedq.broker")
    run = make_run(tmp_path, *NOW_AND_THEN, "actor.num_actors=1", "total_env_steps=3000")
    batches = capture_batches(run)
    summary = run.run()
    assert summary.stop_reason == "total_env_steps"
    assert summary.episodes > 0
    log = (tmp_path / "actor_0.log").read_text()
    assert log.count("its envs raised (RuntimeError: flaky env: crashed at its step 45)") >= 2
    assert "Traceback" in log  # the env's own, with each failure
    faults = (tmp_path / "faults.json").read_text()
    assert '"actor_restarts": 0' in faults
    assert_no_column_spans_a_rebuild(batches)
    # The failed run said Bye: the learner freed it, and the rebuilt batch joined afresh, not as
    # a second connection taking the actor id over.
    assert "actor 0 left" in caplog.text and "took the id over" not in caplog.text


def test_sebulba_threads_whose_envs_crash_now_and_then_rebuild_them_and_go_on(tmp_path, caplog):
    run = sebulba_run(tmp_path, *NOW_AND_THEN, *SEBULBA, "total_env_steps=3000")
    batches = capture_batches(run)
    summary = run.run()
    assert summary.stop_reason == "total_env_steps"
    raised = [r for r in caplog.records if "its envs raised" in r.getMessage()]
    assert {r.getMessage().split(":")[0] for r in raised} == {"actor thread 0", "actor thread 1"}
    assert_no_column_spans_a_rebuild(batches)


def test_an_env_that_never_works_ends_the_run_with_its_error(tmp_path):
    run = make_run(tmp_path, *NEVER_WORKS, "actor.num_actors=1", "actor.max_restarts=0")
    with pytest.raises(RunFault) as raised:
        run.run()
    message = str(raised.value)
    assert "its envs raised 3 times in a row without finishing an episode" in message, message
    assert "RuntimeError: flaky env: its reset always fails" in message


def test_a_sebulba_env_that_never_works_ends_the_run_with_its_error(tmp_path):
    run = sebulba_run(tmp_path, *NEVER_WORKS, *SEBULBA)
    with pytest.raises(TooManyEnvFailures, match="flaky env: its reset always fails"):
        run.run()


def test_seedq_eval_env_keys_change_one_kwarg_and_keep_the_others():
    trained = {"kind": "gym", "id": "flaky_envs:Flaky-v0", "kwargs": {"a": 1, "b": 2}}
    assert merged_env(trained, {"kwargs.b": 3, "max_episode_steps": 7}) == {
        **trained,
        "kwargs": {"a": 1, "b": 3},
        "max_episode_steps": 7,
    }
    assert merged_env(trained, {"kwargs": {"c": 4}})["kwargs"] == {"c": 4}
    assert merged_env({"kind": "gym"}, {"kwargs.c": 4})["kwargs"] == {"c": 4}
    with pytest.raises(ConfigError, match="env.id is 'flaky_envs:Flaky-v0', not a mapping"):
        merged_env(trained, {"id.x": 1})


def test_seedq_eval_of_an_env_that_crashes_names_the_episode_and_reports_no_returns(
    tmp_path, capsys
):
    run = make_run(tmp_path, *FLAKY, "actor.num_actors=1", "total_env_steps=2000")
    assert run.run().stop_reason == "total_env_steps"
    # The env's kwargs as training's command line writes them (+env.kwargs.NAME) or as keys.
    assert evaluate_main([str(tmp_path), "episodes=2", "env.kwargs.episode_length=20"]) == 0
    assert "2 episodes: return mean 20.00" in capsys.readouterr().out
    assert evaluate_main([str(tmp_path), "episodes=3", "+env.kwargs.fail_every=15"]) == 1
    out, err = capsys.readouterr()
    assert "episodes: return" not in out
    assert "RuntimeError: flaky env: crashed at its step 15" in err  # the env's traceback
    assert err.rstrip().endswith(
        "seedq-eval: the env raised in episode 2 of 3 (RuntimeError: flaky env: crashed at its "
        "step 15); no returns are reported (its traceback is above)"
    )


def test_fake_envs_that_crash_lose_no_order_through_actor_broker_and_learner(tmp_path):
    """``env.crash_every``: each batch raises at its 25th step since it was built, after two
    10-12 step episodes. Every unroll column holds one build's steps: the episode counter
    (observation 2) never goes back, and the step counter (1) goes up by one or starts over
    at an episode's end."""
    run = make_run(
        tmp_path,
        "env=fake",
        "env.crash_every=25",
        "actor.num_actors=1",
        "actor.envs_per_batch=4",
        "total_env_steps=4000",
        "log_interval_s=0.5",
    )
    batches = capture_batches(run)
    assert run.run().stop_reason == "total_env_steps"
    assert (tmp_path / "actor_0.log").read_text().count("crashed at step 25 of its batch") >= 4
    assert batches
    for batch in batches:
        t, episode = batch.obs[..., 1], batch.obs[..., 2]
        assert (np.diff(episode, axis=0) >= 0).all(), episode.T
        stepped = np.diff(t, axis=0)
        assert ((stepped == 1) | ((t[1:] == 0) & (np.diff(episode, axis=0) == 1))).all(), t.T


def test_an_actor_whose_env_hangs_exits_and_is_restarted(tmp_path):
    """Each env hangs at its 45th step since it was built: the actor process stops stepping
    (every batch waits on it), its watchdog logs where it is stuck and exits after
    actor.env_timeout_s, and the launcher restarts it: a restart per hang, not the run."""
    run = make_run(
        tmp_path,
        *FLAKY,
        "+env.kwargs.hang_every=45",
        "actor.num_actors=1",
        "actor.env_timeout_s=1",
        "actor.restart_backoff_s=0.1",
        "total_env_steps=4000",
    )
    summary = run.run()
    assert summary.stop_reason == "total_env_steps"
    faults = json.loads((tmp_path / "faults.json").read_text())
    assert faults["actor_restarts"] >= 1
    log = (tmp_path / "actor_0.log").read_text()
    assert "its envs' step has run for 1 s, more than actor.env_timeout_s=1: the env hangs" in log
    assert "time.sleep(3600)" in log  # where it was stuck


def test_an_actor_whose_env_hangs_for_good_ends_the_run_naming_the_timeout(tmp_path):
    run = make_run(
        tmp_path,
        *FLAKY,
        "+env.kwargs.hang_every=45",
        "actor.num_actors=1",
        "actor.env_timeout_s=1",
        "actor.max_restarts=0",
    )
    with pytest.raises(RunFault, match=r"more than actor.env_timeout_s=1: the env hangs"):
        run.run()


def test_a_sebulba_env_that_hangs_stops_the_run_naming_the_thread_and_the_timeout(tmp_path):
    run = sebulba_run(
        tmp_path, *FLAKY, *SEBULBA, "+env.kwargs.hang_every=45", "actor.env_timeout_s=1"
    )
    with pytest.raises(RunFault, match=r"actor thread \d: its envs' step has run for 1 s, more "):
        run.run()
    assert find_checkpoint(str(tmp_path)) is not None  # the run stopped with one
