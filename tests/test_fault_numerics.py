"""NaN and inf end to end: a NaN-producing env costs one message per NaN, a NaN loss one update,
and a run that only produces NaN losses stops with its reason and its last good weights."""

import json
import math

import pytest
import torch
from fault_helpers import FAKE, make_run

import seedq.agents.vtrace.learner as vtrace_learner
from seedq.core import stats
from seedq.core.stats import NonFiniteTraining
from seedq.learner.checkpoint import find_checkpoint, load_checkpoint


def test_an_env_emitting_nan_costs_one_message_per_nan_and_the_run_goes_on(tmp_path, caplog):
    run = make_run(
        tmp_path, *FAKE, "env.nan_every=40", "total_env_steps=8000", "actor.num_actors=1"
    )
    summary = run.run()
    faults = json.loads((tmp_path / "faults.json").read_text())
    rejoins = (tmp_path / "actor_0.log").read_text().count("refused (non_finite")
    assert (summary.stop_reason, faults["actor_restarts"]) == ("total_env_steps", 0)
    # A refusal sent as the run stops may never be read by the actor.
    assert rejoins >= 3 and rejoins <= faults["non_finite_messages"] <= rejoins + 2
    # Each refused run said Bye before its batch rejoined: no second connection took an actor
    # id over (nor did the Byes count as bad messages).
    assert "took the id over" not in caplog.text
    assert faults["bad_messages"] == faults["non_finite_messages"]


def _nan_loss_every(period: int, monkeypatch) -> None:
    calls = {"n": 0}
    real = vtrace_learner.vtrace_loss

    def sometimes_nan(**kwargs):
        loss = real(**kwargs)
        calls["n"] += 1
        if calls["n"] % period == 0:
            return loss._replace(total=loss.total * math.nan)
        return loss

    monkeypatch.setattr(vtrace_learner, "vtrace_loss", sometimes_nan)


def test_a_nan_loss_skips_that_update_and_training_goes_on(tmp_path, monkeypatch):
    _nan_loss_every(3, monkeypatch)
    run = make_run(tmp_path, *FAKE, "actor.transport=inproc", "total_env_steps=15000")
    run.run()
    faults = json.loads((tmp_path / "faults.json").read_text())
    weights = load_checkpoint(find_checkpoint(str(tmp_path)))["model"]
    assert faults["skipped_updates"] >= 2 and run.agent.stats.updates >= 2 * 2
    assert all(torch.isfinite(w).all() for w in weights.values() if w.is_floating_point())


def test_only_nan_losses_stop_the_run_and_keep_the_last_good_weights(tmp_path, monkeypatch):
    _nan_loss_every(1, monkeypatch)
    monkeypatch.setattr(stats, "MAX_CONSECUTIVE_SKIPS", 10)  # 100 in a real run; same path
    run = make_run(tmp_path, *FAKE, "actor.transport=inproc", "max_minutes=3")
    initial = {k: v.clone() for k, v in run.agent.model.state_dict().items()}
    with pytest.raises(NonFiniteTraining, match="10 updates in a row had a NaN or inf loss"):
        run.run()
    saved = load_checkpoint(find_checkpoint(str(tmp_path)))["model"]
    # No update was applied: the saved weights are the initial ones, bit for bit.
    assert all(torch.equal(saved[k], initial[k]) for k in initial)
