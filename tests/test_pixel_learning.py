"""Pixel observations learn: Catch drawn as faint objects on a textured frame
(``seedq/envs/catch.py``), trained through the real actor processes, broker and learner.

These caught the defect behind seedq's slow Atari learning (docs/results.md, "Why Pong did
not learn"): frames reached the network unnormalised, so a few changing pixels had to be found
among many static ones; V-trace stayed at Catch's random return (-0.6) for 150 k env steps.
With per-pixel normalisation it reaches 0.8 within about 50 k. R2D2's learner kept its network's
frame statistics at their start (pixels / 255) until 2026-12-07, the same defect: its case here
stayed at random play for 300 k env steps.
"""

import threading

import numpy as np
import pytest
import torch
from test_training import train

from seedq.actor.config import ActorConfig
from seedq.agents.common.models import RecurrentBody
from seedq.agents.common.normalize import update_obs_norm
from seedq.agents.registry import AGENTS
from seedq.agents.vtrace.config import VTraceConfig
from seedq.arch.seed import SeedRun
from seedq.broker.config import BrokerConfig
from seedq.config import SeedqConfig
from seedq.envs.catch import (
    CELL,
    COLUMNS,
    CONTRAST,
    ROWS,
    CatchBatch,
    CatchConfig,
    _background,
)

RANDOM_CATCH_RETURN = -0.6


# PPO pauses acting through each update: 512 transitions a batch (not 2,048) keep a CI box's
# pauses short, and 2 epochs (not 4) halve them: 0.8 at ~20 k env steps in 30 s on a quiet
# 2-core box, where 4 epochs took ~16 k steps and 43 s (2026-12-01).
# R2D2 with its CartPole defaults: 0.9 at ~47 k env steps and 121 updates (31 s on a quiet
# 2-core box); before its learner moved the frame statistics it stayed at random play for
# 300 k steps and 912 updates (2026-12-07).
SETTINGS = {
    "vtrace": [],
    "ppo": ["algorithm.batch_size=16", "algorithm.epochs=2"],
    "r2d2": [],
}


def test_every_discrete_action_algorithm_has_a_pixel_catch_case():
    # Catch's actions are discrete; SAC takes continuous ones only. An algorithm whose learner
    # forgets the frame statistics learns pixels as slowly as R2D2 did: give it a case above.
    assert set(SETTINGS) | {"sac"} == set(AGENTS)


@pytest.mark.parametrize("algorithm", list(SETTINGS))
def test_pixel_catch_is_solved_through_actors_broker_and_learner(tmp_path, algorithm):
    summary = train(
        tmp_path,
        "env=catch",
        f"algorithm={algorithm}",
        *SETTINGS[algorithm],
        "stop_at_return=0.8",
        # The step budget decides; minutes are only the backstop (PPO needs ~75 s on a quiet
        # box and ran past 4 minutes beside two Pong runs).
        "total_env_steps=150000",
        "max_minutes=10",
        "log_interval_s=2",
    )
    # The window that met the target; the final one also holds the episodes that ended while
    # the roles stopped (a fresh sample of a policy at ~0.8: see test_monitor.py).
    assert summary.stop_reason == "target_return", summary
    assert summary.return_at_target >= 0.8, summary


def paddle_column(frame: np.ndarray) -> int:
    """The paddle's column, read off the bottom row of cells of a Catch frame ``[1, H, W]``."""
    bottom = frame[0, (ROWS - 1) * CELL :].astype(int) - _background()[(ROWS - 1) * CELL :]
    return int(np.argmax(bottom.reshape(CELL, COLUMNS, CELL).sum(axis=(0, 2))))


def test_catch_frames_show_the_paddle_where_the_actions_moved_it():
    env = CatchBatch(3, seed=0)
    obs = env.reset()
    rng = np.random.default_rng(1)
    for _ in range(20):
        actions = rng.integers(0, 3, size=3)
        before = [paddle_column(o) for o in obs]
        out = env.step(actions)
        expected = [
            # An episode end resets the paddle to the middle.
            COLUMNS // 2 if end else int(np.clip(col + a - 1, 0, COLUMNS - 1))
            for col, a, end in zip(before, actions, out.terminated, strict=True)
        ]
        assert [paddle_column(o) for o in out.obs] == expected
        obs = out.obs


def test_catch_objects_are_faint_against_the_background():
    frame = CatchBatch(1, seed=0).reset()[0, 0].astype(int)
    delta = frame - _background()
    assert set(np.unique(delta)) == {0, CONTRAST}


def test_frames_are_normalised_per_pixel_once_statistics_exist():
    body = RecurrentBody((1, 8, 8), 3, torso="minatar", frame_norm=True, channels_last=False)
    frames = torch.full((1, 16, 1, 8, 8), 100, dtype=torch.uint8)
    frames[0, ::2, 0, 3, 4] = 140  # one pixel that changes; every other one is static
    update_obs_norm(body, frames.numpy(), threading.Lock())
    normalised = body.obs_norm(frames[0].float())
    changing = normalised[:, 0, 3, 4]
    static = normalised.clone()
    static[:, 0, 3, 4] = 0
    assert (
        torch.allclose(changing.abs(), torch.ones(16), atol=1e-4),
        torch.count_nonzero(static).item(),
    ) == (True, 0)


def test_an_untrained_frame_normaliser_scales_pixels_to_the_unit_interval():
    body = RecurrentBody((1, 8, 8), 3, torso="minatar", frame_norm=True, channels_last=False)
    frames = torch.arange(64, dtype=torch.uint8).reshape(1, 1, 8, 8) * 4
    torch.testing.assert_close(body.obs_norm(frames), frames.float() / 255.0)


def test_training_rows_pair_each_frame_with_the_action_the_next_frame_shows(tmp_path):
    """Catch through inproc actors, broker and learner: in every unroll a training batch holds,
    row t's action is the one that moved the paddle between frame t and frame t + 1."""
    cfg = SeedqConfig(
        run_dir=str(tmp_path),
        env=CatchConfig(),
        actor=ActorConfig(num_actors=2, envs_per_batch=3, batches_per_actor=2, transport="inproc"),
        broker=BrokerConfig(max_batch=5, deadline_ms=1.0),
        algorithm=VTraceConfig(unroll_length=7, batch_size=4),
        total_env_steps=1500,
        log_interval_s=0.2,
        max_minutes=2,
    )
    batches = []
    run = SeedRun(cfg, str(tmp_path))
    train_batch = run.agent.learner.train_batch
    run.agent.learner.train_batch = lambda batch: (batches.append(batch), train_batch(batch))[1]
    run.run()

    checked, wrong = 0, []
    for batch in batches:
        for t in range(batch.obs.shape[0] - 1):
            for b in range(batch.obs.shape[1]):
                if batch.done[t + 1, b]:
                    continue  # a new episode: the paddle starts in the middle
                before, after = paddle_column(batch.obs[t, b]), paddle_column(batch.obs[t + 1, b])
                moved = int(np.clip(before + int(batch.action[t, b]) - 1, 0, COLUMNS - 1))
                checked += 1
                if moved != after:
                    wrong.append((t, b))
    assert (checked > 500, wrong) == (True, [])


@pytest.mark.slow  # ~25 s on the shared 2-core box, almost all of it process start-up
def test_seedq_eval_plays_a_catch_checkpoint(tmp_path, capsys):
    from cli_helpers import run_cli

    from seedq.evaluate import main

    result = run_cli("env=catch", "total_env_steps=1000", f"hydra.run.dir={tmp_path}", timeout=180)
    assert result.returncode == 0, result.stdout
    assert main([f"checkpoint={tmp_path}", "episodes=2"]) == 0
    assert "2 episodes: return mean" in capsys.readouterr().out
