"""Summarise a ``py-spy record --format raw`` profile: samples per thread and hottest frames.

    py-spy record -p PID -d 20 -r 100 --threads --idle -f raw -o learner.txt
    python scripts/profile_summary.py learner.txt --top 12

Prints, per thread, its share of all samples and of the samples where it was running (not
idle in a wait), and the frames where its running samples spent their time ("self" time, the
innermost Python frame; native frames as py-spy names them).
"""

from __future__ import annotations

import argparse
import collections
import sys

IDLE_FRAMES = (
    "wait (threading.py",
    "_wait_for_tstate_lock",
    "poll (zmq",
    "select (selectors.py",
    "sleep",
    "get (queue.py",
    "acquire",
    "epoll",
    "_run_once (asyncio",
    # uvloop's loop is C: while it sits in epoll, the innermost Python frame is Runner.run.
    "Runner.run (asyncio",
    "GarbageCollectorThread.run (zmq",
)


def summarize(path: str, top: int) -> str:
    threads: collections.Counter = collections.Counter()
    running: collections.Counter = collections.Counter()
    frames: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            parts = stack.split(";")
            thread = parts[0]
            total += n
            threads[thread] += n
            leaf = parts[-1]
            if any(marker in leaf for marker in IDLE_FRAMES):
                continue
            running[thread] += n
            frames[thread][leaf] += n
    out = [f"{total} samples"]
    for thread, n in threads.most_common():
        busy = running[thread]
        out.append(f"\n{thread}: {n / total:.0%} of samples, running in {busy / max(n, 1):.0%}")
        for leaf, m in frames[thread].most_common(top):
            out.append(f"  {m / max(busy, 1):6.1%}  {leaf}")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    print(summarize(args.profile, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
