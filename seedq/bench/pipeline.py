"""``seedq-bench pipeline``: actors -> ZMQ -> broker -> batcher -> actors, with nothing else.

Actor processes step a *null* env (fixed observations of a chosen shape, no episode ends)
through seedq's real actor loop, sockets, wire format, broker and size-or-deadline batcher; the
learner side answers with a *null* policy (action 0, no model, no unrolls). What is left is the
cost of moving observations and actions: the ceiling of the whole system for that shape.

Layout and batching come from the usual config keys (``actor.num_actors``,
``actor.batches_per_actor``, ``actor.envs_per_batch``, ``broker.max_batch``,
``broker.deadline_ms``); the observation from ``obs_shape=4`` / ``obs_shape=4,84,84`` and
``obs_dtype=``. ``env`` keys are refused: the env is null whatever they say (``env=atari`` only
sized the actors as Atari's); ``seedq-bench raw-env`` times an env itself.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import threading
import time
from typing import Any

import numpy as np
import zmq

from seedq.bench.common import (
    BenchError,
    compose,
    ended,
    gather,
    print_json,
    print_table,
    split_args,
)
from seedq.broker.batch import RequestBatch
from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.broker.security import bind_router
from seedq.envs import BatchBase, StepBatch
from seedq.messages import EnvSpec
from seedq.messages.protocol import ALLOWED_DTYPES
from seedq.schema import ConfigError

OPTIONS = {"seconds": 5.0, "warmup_s": 1.0, "obs_shape": [4], "obs_dtype": "float32"}


class NullEnvBatch(BatchBase):
    """``num_envs`` envs that return the same zero observation forever, at no cost."""

    def __init__(
        self, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: str, env_offset: int = 0
    ) -> None:
        super().__init__(num_envs, obs_shape, np.dtype(obs_dtype), 2, None, env_offset)
        self._obs = np.zeros((num_envs, *self.obs_shape), dtype=self.obs_dtype)
        self._result = StepBatch(
            obs=self._obs,
            reward=np.zeros(num_envs, np.float32),
            terminated=np.zeros(num_envs, bool),
            truncated=np.zeros(num_envs, bool),
            final_obs=self._no_final_obs,
        )

    def reset(self, seed: int | None = None) -> np.ndarray:
        return self._obs

    def step(self, actions: np.ndarray) -> StepBatch:
        return self._result


class NullPolicy:
    """The broker's consumer: action 0 for every env, nothing stored."""

    def __init__(self) -> None:
        self._actions = np.zeros(0, np.int32)

    def act(self, batch: RequestBatch) -> np.ndarray:
        n = batch.num_envs
        if n > self._actions.size:
            self._actions = np.zeros(n, np.int32)
        return self._actions[:n]

    def record(self, batch: RequestBatch) -> None:
        pass

    def actor_started(self, slot: Any) -> None:
        pass

    def actor_left(self, slot: Any) -> None:
        pass


def actor_process(
    endpoint: str,
    actor_ids: list[int],
    envs_per_batch: int,
    obs_shape: tuple[int, ...],
    obs_dtype: str,
    seconds: float,
    warmup_s: float,
    results: Any,
) -> None:
    """One actor process: its env batches through the real actor loop for ``seconds``."""
    import zmq.asyncio

    from seedq.actor.loop import install_event_loop_policy, run_env_batch
    from seedq.actor.stepping import ActorStats

    install_event_loop_policy()
    stats = ActorStats(latencies=[])

    async def main() -> None:
        ctx = zmq.asyncio.Context()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # Latencies of the warm-up (connection, first batches) are dropped.
        loop.call_later(warmup_s, stats.latencies.clear)
        loop.call_later(warmup_s + seconds, stop.set)
        try:
            await asyncio.gather(
                *(
                    run_env_batch(
                        ctx,
                        endpoint,
                        actor_id,
                        NullEnvBatch(
                            envs_per_batch, obs_shape, obs_dtype, actor_id * envs_per_batch
                        ),
                        seed=0,
                        stop=stop,
                        stats=stats,
                    )
                    for actor_id in actor_ids
                )
            )
        finally:
            ctx.term()

    try:
        asyncio.run(main())
        results.put(("ok", np.asarray(stats.latencies, dtype=np.float64)))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def _failure(results: Any, proc: Any) -> str:
    """What an actor process that exited early reported (its exception), or how it ended."""
    try:
        while True:
            status, value = results.get(timeout=5)
            if status == "error":
                return f"an actor process failed: {value}"
    except queue.Empty:
        return f"an actor process {ended(proc.exitcode)} before it joined the broker"


def refuse_env_keys(overrides: list[str]) -> None:
    """A BenchError for overrides of the ``env`` group or its keys, which the null env ignores
    (``env=atari`` changed only the actors' sizing: 2 x 2 x 4 envs where 2 x 2 x 64 were)."""
    given = [o for o in overrides if o.partition("=")[0].lstrip("+~").split(".")[0] == "env"]
    if given:
        raise BenchError(
            f"{' '.join(given)}: pipeline steps a null env (obs_shape= and obs_dtype= set its "
            "observation, actor.* keys its layout); leave env keys out, or time an env with "
            "seedq-bench raw-env"
        )


def run(argv: list[str]) -> dict[str, Any]:
    options, overrides = split_args(argv, OPTIONS)
    refuse_env_keys(overrides)
    cfg = compose(overrides)
    actor, broker_cfg = cfg.actor, cfg.broker
    obs_shape = tuple(options["obs_shape"])
    if not obs_shape or min(obs_shape) < 1:
        raise BenchError(f"obs_shape={options['obs_shape']}: give positive sizes, e.g. 4,84,84")
    try:
        dtype = np.dtype(options["obs_dtype"]).name
    except TypeError:
        dtype = options["obs_dtype"]
    if dtype not in ALLOWED_DTYPES:
        carried = ", ".join(sorted(ALLOWED_DTYPES))
        raise BenchError(f"obs_dtype={options['obs_dtype']}: the protocol carries {carried}")
    seconds, warmup_s = options["seconds"], options["warmup_s"]
    total_envs = actor.num_actors * actor.batches_per_actor * actor.envs_per_batch
    spec = EnvSpec(obs_shape, dtype, 2)
    # A Step a training run refuses at its start: the broker refused its Hello (more than
    # 65,536 envs) or dropped it (too_large), the actors exited, and the bench waited 60 s
    # for them and ended in a RuntimeError traceback.
    from seedq.arch.seed import check_message_size

    check_message_size(cfg, spec)

    ctx = zmq.Context()
    socket = ctx.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        port = bind_router(socket, broker_cfg.host, 0)
    except ConfigError as exc:
        socket.close()
        ctx.term()
        raise BenchError(str(exc)) from None
    endpoint = f"tcp://{broker_cfg.host}:{port}"
    batcher = Batcher(broker_cfg.max_batch, broker_cfg.deadline_ms / 1000.0)
    broker = Broker(
        socket, spec, batcher, NullPolicy(), max_message_bytes=broker_cfg.max_message_bytes
    )
    stop = threading.Event()
    serving = threading.Thread(target=broker.serve, args=(stop,), daemon=True)
    serving.start()

    mp = multiprocessing.get_context("spawn")
    results = mp.Queue()
    procs = []
    for p in range(actor.num_actors):
        ids = list(range(p * actor.batches_per_actor, (p + 1) * actor.batches_per_actor))
        args = (endpoint, ids, actor.envs_per_batch, obs_shape, dtype, seconds, warmup_s, results)
        proc = mp.Process(target=actor_process, args=args, daemon=True)
        proc.start()
        procs.append(proc)
    outcomes = None
    try:
        # Measure from when every actor has joined and warmed up until the first one stops.
        deadline = time.monotonic() + 60
        while broker.connected_envs < total_envs:
            if dead := [p for p in procs if not p.is_alive()]:
                raise BenchError(_failure(results, dead[0]))
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{broker.connected_envs} of the {total_envs} actor envs joined the broker "
                    "within 60 s"
                )
            time.sleep(0.01)
        time.sleep(warmup_s)
        s0 = (
            broker.stats.env_steps,
            broker.stats.messages,
            broker.stats.batches,
            broker.stats.batch_envs,
            time.perf_counter(),
        )
        time.sleep(seconds * 0.9)
        s1 = (
            broker.stats.env_steps,
            broker.stats.messages,
            broker.stats.batches,
            broker.stats.batch_envs,
            time.perf_counter(),
        )
        outcomes = gather(results, procs, seconds + 60, "an actor process")
    finally:
        for proc in procs:
            # Ended by an exception (Ctrl-C, SIGTERM, an actor that died): the others would
            # run on until their seconds were up, each joined for 10 s.
            if outcomes is None:
                proc.terminate()
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        stop.set()
        serving.join(timeout=5)
        socket.close(linger=0)
        ctx.term()
    errors = [value for status, value in outcomes if status == "error"]
    if errors:
        raise BenchError(f"an actor process failed: {errors[0]}")
    latencies = np.concatenate([value for _, value in outcomes]) * 1e3
    dt = s1[4] - s0[4]
    steps, messages, batches, batch_envs = (b - a for a, b in zip(s0[:4], s1[:4], strict=True))
    figures = {
        "obs_shape": list(obs_shape),
        "obs_dtype": dtype,
        "num_actors": actor.num_actors,
        "batches_per_actor": actor.batches_per_actor,
        "envs_per_batch": actor.envs_per_batch,
        "actor_envs": total_envs,
        "max_batch": broker_cfg.max_batch,
        "deadline_ms": broker_cfg.deadline_ms,
        "env_steps_per_s": round(steps / dt, 1),
        "messages_per_s": round(messages / dt, 1),
        "batches_per_s": round(batches / dt, 1),
        "batch_fill": round(batch_envs / max(batches * broker_cfg.max_batch, 1), 4),
        "mean_batch_envs": round(batch_envs / max(batches, 1), 1),
        "obs_mb_per_s": round(steps / dt * np.prod(obs_shape) * np.dtype(dtype).itemsize / 1e6, 1),
        "latency_ms_p50": round(float(np.percentile(latencies, 50)), 3) if latencies.size else None,
        "latency_ms_p99": round(float(np.percentile(latencies, 99)), 3) if latencies.size else None,
    }
    print_table(
        f"pipeline: null env {dtype}{list(obs_shape)}, {actor.num_actors} processes x "
        f"{actor.batches_per_actor} batches x {actor.envs_per_batch} envs, max_batch "
        f"{broker_cfg.max_batch}, deadline {broker_cfg.deadline_ms} ms, null policy",
        [
            "env steps/s",
            "messages/s",
            "batches/s",
            "batch fill",
            "obs MB/s",
            "latency p50 ms",
            "latency p99 ms",
        ],
        [
            [
                figures["env_steps_per_s"],
                figures["messages_per_s"],
                figures["batches_per_s"],
                figures["batch_fill"],
                figures["obs_mb_per_s"],
                figures["latency_ms_p50"],
                figures["latency_ms_p99"],
            ]
        ],
    )
    print_json("pipeline", figures)
    return figures
