"""CPU time of merging one PPO-sized batch of float observations into ``RunningNorm``'s
statistics (``update_obs_norm``: the finite-row check, screening, the merge), one thread.

    python benchmarks/running_norm_update.py [REPEATS]

A batch of 129 x 64 rows of 17 float32 values (a MuJoCo PPO batch), merged after the statistics
are trusted; prints the thread-CPU milliseconds per merge, best and median of five rounds.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
import torch

from seedq.agents.common.normalize import RunningNorm, update_obs_norm


def main(repeats: int) -> None:
    torch.set_num_threads(1)
    model = torch.nn.Sequential(RunningNorm((17,)))
    lock = threading.Lock()
    obs = np.random.default_rng(0).normal(size=(129, 64, 17)).astype(np.float32)
    for _ in range(5):  # past the warm-up rows: the statistics are trusted
        update_obs_norm(model, obs, lock)
    rounds = []
    for _ in range(5):
        start = time.thread_time()
        for _ in range(repeats):
            update_obs_norm(model, obs, lock)
        rounds.append((time.thread_time() - start) / repeats * 1e3)
    rounds.sort()
    print(f"ms per 129x64x17 merge: best {rounds[0]:.3f}, median {rounds[2]:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repeats", nargs="?", default=200, type=int, help="merges per round")
    main(parser.parse_args().repeats)
