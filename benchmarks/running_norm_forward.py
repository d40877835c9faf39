"""CPU time of ``RunningNorm.forward`` on Pong-shaped uint8 frames ``[N, 4, 84, 84]``, one thread.

    python benchmarks/running_norm_forward.py [REPEATS]

Prints the thread-CPU milliseconds per forward for a batch's V-trace targets pass (528 frames),
a minibatch (128) and an inference batch (16) (benchmarks/RESULTS.md, ninth session).
"""

from __future__ import annotations

import argparse
import time

import torch

from seedq.agents.common.normalize import RunningNorm


def main(repeats: int = 20) -> None:
    torch.set_num_threads(1)
    norm = RunningNorm((4, 84, 84), initial_std=255.0)
    frames = torch.randint(0, 256, (528, 4, 84, 84), dtype=torch.uint8)
    norm.update(frames)
    for rows in (528, 128, 16):
        batch = frames[:rows]
        for _ in range(3):
            norm(batch)
        start = time.thread_time()
        for _ in range(repeats):
            norm(batch)
        print(f"{rows} frames: {(time.thread_time() - start) / repeats * 1000:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repeats", nargs="?", default=20, type=int, help="forwards timed")
    main(parser.parse_args().repeats)
