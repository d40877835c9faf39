"""Does building an ale_py ``AtariVectorEnv`` hold the GIL? (issue 34: Sebulba's start-up)

Sebulba builds its env batches on threads so that they overlap. They can only overlap if the
constructor lets go of the GIL. This script counts how far a pure-Python loop on a second thread
gets while the main thread builds one vector env, against how far it gets in the same time with
nothing else running. A share near 100 % means the constructor releases the GIL; near 0 %, it
holds it for the whole build, and threads cannot build batches in parallel.

    python scripts/ale_build_gil.py [--game pong] [--envs 16]

It prints one JSON line: the build's seconds and CPU seconds, seconds per env, and the loop's
share of its free-running speed during the build. On a busy machine both figures move with the
load, so compare the share against 100 %, not against another machine's.
"""

from __future__ import annotations

import argparse
import json
import threading
import time


def spin(stop: threading.Event, counter: list[int]) -> None:
    n = 0
    while not stop.is_set():
        for _ in range(1000):
            n += 1
        counter[0] = n


def loop_rate(seconds: float) -> float:
    """Iterations per second of ``spin`` on its own thread, nothing else running."""
    stop, counter = threading.Event(), [0]
    thread = threading.Thread(target=spin, args=(stop, counter))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    return counter[0] / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="pong", help="ROM name, snake_case (ale_py.roms)")
    parser.add_argument("--envs", type=int, default=16, help="envs in the vector env")
    args = parser.parse_args()

    from ale_py.vector_env import AtariVectorEnv

    AtariVectorEnv(args.game, 1, num_threads=1).close()  # load the library and ROM once
    stop, counter = threading.Event(), [0]
    thread = threading.Thread(target=spin, args=(stop, counter))
    thread.start()
    time.sleep(0.05)
    start_count, start, start_cpu = counter[0], time.perf_counter(), time.thread_time()
    env = AtariVectorEnv(args.game, args.envs, num_threads=1)
    build_s = time.perf_counter() - start
    build_cpu_s = time.thread_time() - start_cpu
    during = counter[0] - start_count
    stop.set()
    thread.join()
    env.close()
    free = loop_rate(max(build_s, 0.5)) * build_s
    print(
        json.dumps(
            {
                "game": args.game,
                "envs": args.envs,
                "build_s": round(build_s, 3),
                "build_cpu_s": round(build_cpu_s, 3),
                "s_per_env": round(build_s / args.envs, 4),
                "loop_share_during_build": round(during / free, 3) if free else None,
            }
        )
    )


if __name__ == "__main__":
    main()
