"""scripts/vs_sb3.py: reading seedq's metrics, the verdict of each row, and one short run of both
sides (Stable-Baselines3 itself when installed, else a stand-in with its interface)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "vs_sb3.py"
_spec = importlib.util.spec_from_file_location("vs_sb3", SCRIPT)
vs = importlib.util.module_from_spec(_spec)
sys.modules["vs_sb3"] = vs  # dataclasses look their module up here
_spec.loader.exec_module(vs)

# What scripts/vs_sb3_worker.py uses of SB3, acting at random: enough to run the script's
# plumbing where stable-baselines3 (the `bench` extra) is not installed.
FAKE_SB3 = {
    "stable_baselines3/__init__.py": """
        import gymnasium as gym

        class _Model:
            def __init__(self, policy, env, seed=None, device="cpu", verbose=0):
                self.env, self.num_timesteps = env, 0
                for i, e in enumerate(env):
                    e.reset(seed=seed + i)
                    e.action_space.seed(seed + i)

            def learn(self, total_timesteps, callback):
                callback.model = self
                callback._on_training_start()
                returns = [0.0] * len(self.env)
                while self.num_timesteps < total_timesteps:
                    infos = []
                    for i, e in enumerate(self.env):
                        _, r, term, trunc, _ = e.step(e.action_space.sample())
                        returns[i] += r
                        info = {}
                        if term or trunc:
                            info["episode"] = {"r": returns[i]}
                            returns[i] = 0.0
                            e.reset()
                        infos.append(info)
                    self.num_timesteps += len(self.env)
                    callback.num_timesteps = self.num_timesteps
                    callback.locals = {"infos": infos}
                    if not callback._on_step():
                        return self

        class PPO(_Model):
            pass

        class SAC(_Model):
            pass
    """,
    "stable_baselines3/common/__init__.py": "",
    "stable_baselines3/common/callbacks.py": """
        class BaseCallback:
            model, locals, num_timesteps = None, {}, 0
    """,
    "stable_baselines3/common/env_util.py": """
        def make_vec_env(make, n_envs, seed):
            return [make() for _ in range(n_envs)]
    """,
}


def rows(*returns_and_episodes):
    return [
        {
            "wall_time": float(i + 1),
            "env_steps": 1000.0 * (i + 1),
            "return_mean": ret,
            "episode/count": float(episodes),
        }
        for i, (ret, episodes) in enumerate(returns_and_episodes)
    ]


def test_the_threshold_counts_only_once_100_episodes_finished():
    result = vs.seedq_result(rows((9.0, 50), (7.0, 120), (8.5, 150)), threshold=8.0)

    assert (result["time_to_threshold_s"], result["steps_to_threshold"]) == (3.0, 3000.0)
    assert result["final_return"] == 8.5 and result["steps_per_s"] == 1000.0


def test_an_env_without_threshold_is_judged_by_its_return():
    result = vs.seedq_result(rows((1.0, 10), (2.0, 200)), threshold=None)

    assert result["time_to_threshold_s"] is None and result["final_return"] == 2.0


def summary(reached, time=None, final=0.0):
    return {"reached": reached, "time": time, "final": final}


@pytest.mark.parametrize(
    ("ours", "theirs", "wins"),
    [
        (summary(2, 10.0), summary(2, 20.0), True),
        (summary(2, 30.0), summary(2, 20.0), False),
        (summary(1, 5.0), summary(2, 20.0), False),  # fewer seeds reached it
        (summary(1, 50.0), summary(0, final=-5.0), True),
        (summary(0, final=-3.0), summary(0, final=-5.0), True),
        (summary(0, final=-7.0), summary(0, final=-5.0), False),
    ],
)
def test_seedq_wins_by_time_to_threshold_else_by_return(ours, theirs, wins):
    assert vs.beats(ours, theirs) is wins


def test_listed_and_unlisted_ids_become_cases_with_their_thresholds():
    taxi = vs.find_case("Taxi-v4")
    other = vs.find_case("FrozenLake8x8-v1")

    assert taxi.seedq_env == ("env=gym", "env.id=Taxi-v4") and taxi.threshold == 8.0
    assert other.seedq_env == ("env=gym", "env.id=FrozenLake8x8-v1")
    assert other.threshold == 0.85  # gymnasium's reward_threshold
    assert vs.pairs(vs.is_continuous(vs.find_case("Pendulum-v1")))[0] == ("seedq", "sac")


def test_the_seedq_command_is_a_plain_default_run_with_the_budget():
    cliff = vs.find_case("CliffWalking-v1")

    cmd = vs.seedq_command(cliff, "ppo", 3, 90.0, Path("/tmp/x"))

    assert cmd[3:] == [
        "algorithm=ppo",
        "env=gym",
        "env.id=CliffWalking-v1",
        "env.max_episode_steps=200",
        "seed=3",
        "max_minutes=1.5",
        "log_interval_s=1",
        "hydra.run.dir=/tmp/x",
    ]


def test_a_short_side_by_side_run_writes_results_and_the_table(tmp_path):
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    if importlib.util.find_spec("stable_baselines3") is None:
        for name, text in FAKE_SB3.items():
            path = tmp_path / "fake" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fake"), env["PYTHONPATH"]])
    out = tmp_path / "out"

    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--env",
            "CartPole-v1",
            "--seeds",
            "0",
            "--budget",
            "3",
            "--only",
            "seedq:vtrace",
            "--only",
            "sb3:ppo",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["framework"], r["algorithm"]) for r in results] == [
        ("seedq", "vtrace"),
        ("sb3", "ppo"),
    ]
    assert all(r["env_steps"] > 0 and r["curve"] for r in results)
    table = (out / "table.md").read_text()
    assert re.search(
        r"^\| CartPole-v1 \(475\) \| seedq VTRACE \| [01]/1 \|.*\| (yes|no) vs SB3 PPO \|$",
        table,
        re.M,
    )
    assert re.search(r"^\| CartPole-v1 \(475\) \| sb3 PPO \| [01]/1 \|", table, re.M)
