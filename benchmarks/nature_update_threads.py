"""The Nature CNN's forward, and forward + backward + Adam, on 128 Pong frames per torch thread
count: what a CPU learner's training thread pays per minibatch (benchmarks/RESULTS.md, "The
training thread's cores on the CPU"). ``python benchmarks/nature_update_threads.py [1 2 ...]``.
"""

from __future__ import annotations

import argparse
import time

import torch

from seedq.agents.common.torsos import NatureTorso

FRAMES = 128


def ms_per_call(fn, repeats: int = 10, warmup: int = 3) -> float:  # noqa: ANN001
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def time_threads(threads: int, frames: torch.Tensor) -> tuple[float, float]:
    """Milliseconds per forward and per forward + backward + Adam step on ``threads``."""
    torch.set_num_threads(threads)
    torso = NatureTorso((4, 84, 84), channels_last=True)
    head = torch.nn.Linear(512, 7)
    optimizer = torch.optim.Adam([*torso.parameters(), *head.parameters()], lr=1e-4)

    def forward() -> None:
        with torch.no_grad():
            torso(frames)

    def update() -> None:
        optimizer.zero_grad()
        head(torso(frames)).sum().backward()
        optimizer.step()

    return ms_per_call(forward), ms_per_call(update)


def main() -> None:
    frames = torch.randint(0, 255, (FRAMES, 4, 84, 84), dtype=torch.uint8)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].split(". ")[0])
    parser.add_argument("threads", nargs="*", type=int, default=[1, 2], help="torch threads")
    for threads in parser.parse_args().threads:
        fwd, upd = time_threads(threads, frames)
        print(
            f"{threads} thread(s): forward {fwd:.1f} ms, forward+backward+Adam {upd:.1f} ms "
            f"per {FRAMES} frames ({FRAMES / upd * 1e3:,.0f} samples/s)"
        )


if __name__ == "__main__":
    main()
