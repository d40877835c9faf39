"""What gathering one minibatch's frame stacks costs, whichever way it is done (issue 34).

A V-trace update of the Atari preset gathers 128 of a batch's 512 frame stacks (uint8
``[4, 84, 84]``, 3.6 MB) before its forward pass. Thread CPU per gather, one torch thread:
``torch.index_select``, the same into a reused buffer, ``np.take``, and advanced indexing.
``python benchmarks/frame_gather.py [repeats]``. Figures near one another mean the gather is
bound by the bytes it moves, not by how it is called.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def per_call_us(fn, repeats: int) -> float:  # noqa: ANN001
    for _ in range(10):
        fn()
    start = time.thread_time()
    for _ in range(repeats):
        fn()
    return (time.thread_time() - start) / repeats * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repeats", nargs="?", default=200, type=int, help="gathers timed each way")
    repeats = parser.parse_args().repeats
    torch.set_num_threads(1)
    frames = torch.randint(0, 255, (512, 4, 84, 84), dtype=torch.uint8)
    index = torch.randperm(512)[:128]
    out = torch.empty((128, 4, 84, 84), dtype=torch.uint8)
    ways = {
        "index_select": lambda: torch.index_select(frames, 0, index),
        "index_select into a buffer": lambda: torch.index_select(frames, 0, index, out=out),
        "np.take": lambda: np.take(frames.numpy(), index.numpy(), axis=0),
        "advanced indexing": lambda: frames[index],
    }
    mb = out.numel() / 1e6
    print(f"128 of 512 frame stacks, {mb:.1f} MB; thread CPU per gather, {repeats} repeats")
    for name, fn in ways.items():
        us = per_call_us(fn, repeats)
        print(f"{name:28s} {us:8.1f} µs  {mb / us * 1e3:5.1f} GB/s")


if __name__ == "__main__":
    main()
