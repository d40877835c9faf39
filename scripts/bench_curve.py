"""Steady-state DEALER<->ROUTER round trips per second, plain vs CURVE, side by side.

Each round trip is what an actor batch does per step: a request of ``envs`` observations, a
reply of ``envs`` int32 actions, over tcp://127.0.0.1. The connection (and the CURVE handshake)
is made before timing starts, and plain and CURVE runs alternate, so both see the same box.
``--train`` instead times whole training runs (``seedq-bench train``: actors, broker,
inference, learner; env steps/s after the warm-up), alternating ``security.curve=false`` and
``true``; extra arguments are seedq-train overrides for both.

    PYTHONPATH=. python scripts/bench_curve.py [--seconds 3] [--rounds 3]
    PYTHONPATH=. python scripts/bench_curve.py --train --seconds 20 --rounds 3 [env=...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import zmq

from seedq.broker.security import secure_server
from seedq.keys import create_keys
from seedq.security import secure_client

PAYLOADS = {
    # name: (observation shape per env, dtype)
    "atari": ((4, 84, 84), np.uint8),
    "cartpole": ((4,), np.float32),
}


def _echo(router: zmq.Socket, reply: bytes, stop: threading.Event) -> None:
    while not stop.is_set():
        if router.poll(50):
            frames = router.recv_multipart(copy=False)
            router.send_multipart([frames[0], reply])


def round_trips_per_s(obs: np.ndarray, seconds: float, keys_dir: str | None) -> float:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    dealer = ctx.socket(zmq.DEALER)
    router.linger = dealer.linger = 0
    guard = secure_server(router, ctx, keys_dir) if keys_dir else None
    if keys_dir:
        secure_client(dealer, keys_dir)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    stop = threading.Event()
    server = threading.Thread(
        target=_echo, args=(router, np.zeros(obs.shape[0], np.int32).tobytes(), stop)
    )
    server.start()
    try:
        for _ in range(20):  # connect, handshake, warm up
            dealer.send(obs, copy=False)
            dealer.recv()
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            dealer.send(obs, copy=False)
            dealer.recv()
            n += 1
        return n / elapsed
    finally:
        stop.set()
        server.join()
        if guard is not None:
            guard.stop()
        dealer.close()
        router.close()
        ctx.term()


def train_steps_per_s(seconds: float, overrides: list[str]) -> float:
    """Env steps/s of one ``seedq-bench train`` run (its last line is its JSON summary)."""
    cmd = [sys.executable, "-m", "seedq.bench.cli", "train", f"seconds={seconds}", *overrides]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise SystemExit(
            f"bench_curve: {' '.join(cmd[2:])} exited with status {result.returncode}:\n{tail}"
        )
    return json.loads(result.stdout.strip().splitlines()[-1])["env_steps_per_s"]


def compare_training(seconds: float, rounds: int, keys_dir: str, overrides: list[str]) -> None:
    plain, curve = [], []
    for i in range(rounds):
        plain.append(train_steps_per_s(seconds, ["security.curve=false", *overrides]))
        curve.append(
            train_steps_per_s(
                seconds, ["security.curve=true", f"security.keys_dir={keys_dir}", *overrides]
            )
        )
        print(f"round {i + 1}: plain {plain[-1]:.0f} steps/s, curve {curve[-1]:.0f} steps/s")
    p, c = statistics.median(plain), statistics.median(curve)
    print(f"median env steps/s: plain {p:.0f}, curve {c:.0f}, curve/plain {c / p:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=32, help="envs per request")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per run")
    parser.add_argument("--rounds", type=int, default=3, help="plain/CURVE pairs per payload")
    parser.add_argument("--train", action="store_true", help="time seedq-bench train runs")
    args, overrides = parser.parse_known_args()
    if overrides and not args.train:
        parser.error(f"unknown arguments {overrides} (seedq-train overrides go with --train)")
    with tempfile.TemporaryDirectory() as tmp:
        create_keys(tmp)
        if args.train:
            compare_training(args.seconds, args.rounds, tmp, overrides)
            return
        header = ("payload", "bytes", "plain rt/s", "curve rt/s", "curve/plain", "+us/rt")
        print(
            f"{header[0]:<10} {header[1]:>9} {header[2]:>11} {header[3]:>11} {header[4]:>12}",
            end="",
        )
        print(f" {header[5]:>8}")
        for name, (shape, dtype) in PAYLOADS.items():
            obs = np.zeros((args.envs, *shape), dtype)
            plain, curve = [], []
            for _ in range(args.rounds):
                plain.append(round_trips_per_s(obs, args.seconds, None))
                curve.append(round_trips_per_s(obs, args.seconds, tmp))
            p, c = statistics.median(plain), statistics.median(curve)
            added_us = 1e6 / c - 1e6 / p
            print(
                f"{name:<10} {obs.nbytes:>9} {p:>11.0f} {c:>11.0f} {c / p:>12.2f} {added_us:>8.0f}"
            )


if __name__ == "__main__":
    main()
