"""One Stable-Baselines3 run for ``scripts/vs_sb3.py``: its defaults, a wall-time budget, a curve.

    python scripts/vs_sb3_worker.py --env-id Taxi-v4 --algo ppo --seconds 60 --seed 0 \
        --out runs/vs_sb3/taxi_sb3_ppo_0.json [--max-episode-steps N] [--n-envs 8]

The model is built as a user would build it, ``PPO("MlpPolicy", env)`` / ``SAC("MlpPolicy",
env)`` with every hyper-parameter at SB3's default; only the number of envs is chosen here
(8 for PPO, as rl-baselines3-zoo's classic-control settings; 1 for SAC, SB3's own example).
torch runs with ``--threads`` intra-op threads, 1 by default as seedq's learner does
(``hardware.num_threads=1``): on the shared 2-core box torch's own default (a thread per core)
made SB3's PPO 9x slower, 78 against 724 env steps/s on FrozenLake-v1 at load 11, as idle
OpenMP workers spin against neighbours; ``--threads 0`` keeps torch's default.
The clock starts when ``learn`` starts (after the envs and the model are built), as seedq's
metrics clock starts once its actors are up; the whole process time is recorded too.

Written as JSON: a curve row every second (wall time, env steps, mean return of the last 100
episodes, episodes) and the first moment the 100-episode mean reached ``--threshold``, checked
at every episode end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

# The envs seedq reads as MinAtar games exist in gymnasium only after MinAtar registers them.
MINATAR_PREFIX = "MinAtar/"


def make_env_fn(env_id: str, max_episode_steps: int | None) -> Any:
    """A zero-argument env constructor (what SB3's ``make_vec_env`` takes)."""
    import gymnasium as gym

    if env_id.startswith(MINATAR_PREFIX):
        from minatar.gym import register_envs

        if env_id not in gym.registry:
            register_envs()

    def make() -> Any:
        return gym.make(env_id, max_episode_steps=max_episode_steps)

    return make


def run(args: argparse.Namespace) -> dict[str, Any]:
    process_start = time.monotonic()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    algos = {"ppo": PPO, "sac": SAC}
    n_envs = args.n_envs or (8 if args.algo == "ppo" else 1)
    env = make_vec_env(
        make_env_fn(args.env_id, args.max_episode_steps), n_envs=n_envs, seed=args.seed
    )
    model = algos[args.algo]("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0)
    threshold = args.threshold
    curve: list[list[float]] = []
    hit: dict[str, float] = {}

    class Budget(BaseCallback):
        """Stops learning at the budget; keeps the curve and the threshold crossing."""

        def _on_training_start(self) -> None:
            self.start = time.monotonic()
            self.next_row = self.start + args.row_s
            self.returns: deque[float] = deque(maxlen=100)
            self.episodes = 0

        def _on_step(self) -> bool:
            now = time.monotonic()
            for info in self.locals.get("infos", ()):
                episode = info.get("episode")
                if episode is None:
                    continue
                self.returns.append(float(episode["r"]))
                self.episodes += 1
                if (
                    threshold is not None
                    and not hit
                    and len(self.returns) >= 100
                    and sum(self.returns) / len(self.returns) >= threshold
                ):
                    hit.update(wall_s=now - self.start, env_steps=self.num_timesteps)
            if now >= self.next_row:
                self.row(now)
                self.next_row = now + args.row_s
            return now - self.start < args.seconds

        def row(self, now: float) -> None:
            mean = sum(self.returns) / len(self.returns) if self.returns else None
            curve.append([round(now - self.start, 3), self.num_timesteps, mean, self.episodes])

    budget = Budget()
    load_start = os.getloadavg()[0]
    model.learn(total_timesteps=10**12, callback=budget)
    budget.row(time.monotonic())
    wall = curve[-1][0]
    return {
        "framework": "sb3",
        "algorithm": args.algo,
        "env_id": args.env_id,
        "seed": args.seed,
        "n_envs": n_envs,
        "torch_threads": torch.get_num_threads(),
        "budget_s": args.seconds,
        "wall_s": wall,
        "process_s": round(time.monotonic() - process_start, 2),
        "env_steps": curve[-1][1],
        "steps_per_s": curve[-1][1] / wall if wall else 0.0,
        "final_return": curve[-1][2],
        "episodes": curve[-1][3],
        "threshold": threshold,
        "time_to_threshold_s": hit.get("wall_s"),
        "steps_to_threshold": hit.get("env_steps"),
        "load_start": load_start,
        "load_end": os.getloadavg()[0],
        "curve": curve,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", required=True)
    parser.add_argument("--algo", choices=("ppo", "sac"), required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--max-episode-steps", type=int, default=None)
    parser.add_argument("--n-envs", type=int, default=0, help="0: 8 for PPO, 1 for SAC")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's)")
    parser.add_argument("--row-s", type=float, default=1.0, help="seconds between curve rows")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
