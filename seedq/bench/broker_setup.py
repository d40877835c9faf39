"""The broker that ``seedq-bench broker`` loads: one in-process broker thread, or ``shards``
broker processes answered by a hub thread, each with a null policy; and the figures read
from outside it (CPU clocks, RSS, open files)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
import zmq

from seedq.bench.pipeline import NullPolicy
from seedq.broker.batch import RequestBatch
from seedq.broker.batcher import Batcher
from seedq.broker.router import Broker
from seedq.broker.security import bind_router
from seedq.broker.shards import ShardHub
from seedq.launch.shards import start_shard
from seedq.messages import EnvSpec

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class CountingPolicy(NullPolicy):
    """The null policy, counting the requests it answered (the replies)."""

    def __init__(self) -> None:
        super().__init__()
        self.replies = 0

    def act(self, batch: RequestBatch) -> np.ndarray:
        self.replies += len(batch)
        return super().act(batch)


def proc_cpu_s(pid: int, tid: int | None = None) -> float:
    """CPU seconds (user + system) of a process, or of one of its threads."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def open_files(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class CountingInference:
    """Central inference with the configured algorithm's network on the CPU (one thread),
    cutting unrolls as a run does and dropping them (no training): the learner's cost per
    request on top of the broker's."""

    def __init__(self, cfg: Any, spec: EnvSpec) -> None:
        import torch

        from seedq.agents.registry import build_agent
        from seedq.core.agent import RunContext
        from seedq.learner.central_inference import CentralInference
        from seedq.learner.inference import InferenceEngine

        lock, device = threading.Lock(), torch.device("cpu")
        agent = build_agent(RunContext(cfg, spec, device, lock, threading.Event()))
        engine = InferenceEngine(agent.model, device, lock, select=agent.selector)
        length, overlap = agent.unroll_layout()
        self.inference = CentralInference(
            engine, length, lambda unroll: None, overlap=overlap, exploration=agent.exploration
        )
        self.replies = 0
        self._thread: int | None = None

    def act(self, batch: RequestBatch) -> np.ndarray:
        if self._thread != threading.get_ident():
            # torch's thread count holds only in the thread that sets it (learner.device).
            import torch

            torch.set_num_threads(1)
            self._thread = threading.get_ident()
        self.replies += len(batch)
        return self.inference.act(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inference, name)


class BrokerUnderTest:
    """The broker of a learner with a null policy (or ``policy=model``: central inference):
    a thread here, or ``shards`` processes."""

    def __init__(self, cfg: Any, spec: EnvSpec, shards: int, policy: str = "null") -> None:
        broker_cfg = cfg.broker
        self.policy = CountingPolicy() if policy == "null" else CountingInference(cfg, spec)
        self.stop = threading.Event()
        self.hub: ShardHub | None = None
        self.broker: Broker | None = None
        if shards > 1:
            settings = {
                "max_batch": broker_cfg.max_batch,
                "deadline_ms": broker_cfg.deadline_ms,
                "silent_timeout_s": broker_cfg.silent_timeout_s,
                "max_message_bytes": broker_cfg.max_message_bytes,
                "io_threads": broker_cfg.io_threads,
            }
            binds = [f"tcp://{broker_cfg.host}:0"] * shards
            self.hub = ShardHub(spec, self.policy, binds, settings, start_shard)
            self.endpoints = self.hub.endpoints
            self.stats = self.hub.stats
            serve = self.hub.serve
        else:
            self.ctx = zmq.Context(io_threads=broker_cfg.io_threads)
            self.socket = self.ctx.socket(zmq.ROUTER)
            self.socket.setsockopt(zmq.LINGER, 0)
            port = bind_router(self.socket, broker_cfg.host, 0)
            self.endpoints = [f"tcp://{broker_cfg.host}:{port}"]
            self.broker = Broker(
                self.socket,
                spec,
                Batcher(broker_cfg.max_batch, broker_cfg.deadline_ms / 1000.0),
                self.policy,
                silent_timeout_s=broker_cfg.silent_timeout_s,
                max_message_bytes=broker_cfg.max_message_bytes,
            )
            self.stats = self.broker.stats
            serve = self.broker.serve
        self.thread = threading.Thread(target=serve, args=(self.stop,), daemon=True)
        self.thread.start()
        while self.thread.native_id is None:
            time.sleep(0.001)

    @property
    def connected_streams(self) -> int:
        # Read from another thread: len() is atomic, a sum over the dict is not.
        return len(self.hub.slots) if self.hub is not None else len(self.broker.actors)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.hub.procs] if self.hub is not None else []

    def counters(self) -> dict[str, Any]:
        """Cumulative counts and clocks. ``broker_cpu``: the threads that run the broker loops
        (this process's broker thread, or each shard process's main thread); ``process_cpu``:
        every process of the broker (ZeroMQ I/O threads, the hub), not the generators."""
        stats = self.stats
        hub_cpu = time.clock_gettime(time.pthread_getcpuclockid(self.thread.ident))
        shard_cpu = [proc_cpu_s(pid, pid) for pid in self.pids]
        return {
            "replies": self.policy.replies,
            "env_steps": stats.env_steps,
            "evicted": stats.evicted,
            "refused": sum(stats.bad_messages.values()),
            "broker_cpu": sum(shard_cpu) if shard_cpu else hub_cpu,
            "shard_cpu": shard_cpu,
            "hub_cpu": hub_cpu if shard_cpu else 0.0,
            "process_cpu": time.process_time() + sum(proc_cpu_s(pid) for pid in self.pids),
            "rss_mb": rss_mb() + sum(rss_mb(pid) for pid in self.pids),
            "open_files": open_files() + sum(open_files(pid) for pid in self.pids),
            "wall": time.perf_counter(),
        }

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        if self.hub is not None:
            self.hub.close()
        else:
            self.socket.close(linger=0)
            self.ctx.term()
