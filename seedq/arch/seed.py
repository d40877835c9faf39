"""``arch=seed``: the SEED RL run. The broker and central inference in this process, actors as
processes started by the launcher (here, over ssh, or as Slurm job steps), or as ``inproc://``
threads in tests.

This is the one place that wires the SEED roles together; the roles talk only through
``seedq.messages``, and the algorithm is whatever agent the registry builds.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import numpy as np
import zmq

from seedq.actor.loop import Patience
from seedq.arch.base import TRAIN_THREAD, TrainingRun
from seedq.broker.batcher import Batcher
from seedq.broker.registry import ActorRegistry
from seedq.broker.router import Broker
from seedq.broker.security import bind_router, secure_server
from seedq.broker.shards import ShardHub
from seedq.envs import env_spec
from seedq.envs.config import resumed_seed
from seedq.launch import remote_launcher
from seedq.launch.actors import ActorPool, RestartPolicy, spawn_local
from seedq.launch.shards import start_shard
from seedq.launch.sizing import sized
from seedq.learner.device import prepare_learner_process
from seedq.limits import raise_open_file_limit
from seedq.messages import MAX_ENVS, EnvSpec, env_json
from seedq.messages.steps import ENV_BYTES, EPISODE_BYTES
from seedq.schema import ConfigError
from seedq.security import curve_enabled

log = logging.getLogger(__name__)

__all__ = ["SeedRun", "check_message_size"]


# A Step's bytes beyond its arrays: the msgpack header (bounded by messages.MAX_HEADER_BYTES).
STEP_HEADER_BYTES = 64 * 1024


def check_message_size(cfg: Any, spec: EnvSpec) -> None:
    """Refuse a batch whose Step cannot fit ``broker.max_message_bytes`` (or the protocol's
    bound on envs per Step).

    Counted at its largest: every env's observation plus, when all envs truncate at once, as
    many final observations and finished episodes. Too large a message would otherwise be
    dropped by ZeroMQ without a word and the actor would wait for a reply that never comes, or
    be refused (``too_large``) and the actor crash: Pendulum's envs all truncate at once.
    """
    n = cfg.actor.envs_per_batch
    if n > MAX_ENVS:
        # The broker refuses such a Hello (bad_field): every actor exited at its start and the
        # run failed once actor.max_restarts were spent.
        raise ConfigError(
            f"actor.envs_per_batch={n} is more than one Step carries (at most {MAX_ENVS} envs); "
            "spread the envs over more actor.batches_per_actor or actor.num_actors"
        )
    obs_bytes = int(np.prod(spec.obs_shape)) * np.dtype(spec.obs_dtype).itemsize
    largest = n * _env_bytes(obs_bytes) + STEP_HEADER_BYTES
    if largest > cfg.broker.max_message_bytes:
        fitting = largest_fitting_batch(cfg, obs_bytes)
        remedy = (
            f"lower actor.envs_per_batch to at most {fitting} or raise broker.max_message_bytes"
            if fitting
            # Not even one env fits: only a larger limit helps.
            else "raise broker.max_message_bytes to at least "
            f"{_env_bytes(obs_bytes) + STEP_HEADER_BYTES} (one env's largest Step)"
        )
        raise ConfigError(
            f"actor.envs_per_batch={n} envs x {obs_bytes} bytes per observation "
            f"(shape {list(spec.obs_shape)}, {spec.obs_dtype}) make Step messages of up to "
            f"{largest} bytes (observations and final observations), more than "
            f"broker.max_message_bytes={cfg.broker.max_message_bytes}; {remedy}"
        )


def largest_fitting_batch(cfg: Any, obs_bytes: int) -> int:
    """The most envs per batch whose largest Step fits ``broker.max_message_bytes``."""
    return max(0, (cfg.broker.max_message_bytes - STEP_HEADER_BYTES) // _env_bytes(obs_bytes))


def _env_bytes(obs_bytes: int) -> int:
    """One env's share of its Step at its largest: observation, final observation, reward and
    flags, finished episode (its episodes' bytes were left out: a Step of 4,200 Pendulum envs
    all truncating came to 193,236 bytes where 191,536 had been counted)."""
    return 2 * obs_bytes + ENV_BYTES + EPISODE_BYTES


class SeedRun(TrainingRun):
    """``arch=seed``: the broker in this process, actors as processes (or threads in tests);
    ``run()`` blocks until a stop condition."""

    def __init__(
        self,
        cfg: Any,
        run_dir: str,
        *,
        context: zmq.Context | None = None,
        resume: dict | None = None,
    ):
        """``resume``: a loaded checkpoint (already checked against ``cfg``) to continue."""
        super().__init__()
        self.cfg = cfg = sized(cfg)
        self.run_dir = run_dir
        self.device = prepare_learner_process(cfg)
        self.spec = env_spec(cfg.env, seed=cfg.seed)
        check_message_size(cfg, self.spec)
        # Remote hosts are checked before the learner is built: nothing starts half-way.
        self.remote = remote_launcher(cfg, run_dir)
        self._build_acting(cfg)
        raise_open_file_limit()
        self.ctx = context or zmq.Context(io_threads=cfg.broker.io_threads)
        self._own_context = context is None
        curve = cfg.actor.transport == "tcp" and curve_enabled(cfg.security, cfg.broker.host)
        self.keys_dir = cfg.security.keys_dir if curve else ""
        self.broker: Broker | None = None
        self.hub: ShardHub | None = None
        self.curve = None
        # The env ids of the actors this run starts are theirs, whoever else joins.
        num_actors = self.remote.num_actors if self.remote else cfg.actor.num_actors
        self.registry = ActorRegistry(
            launched=(num_actors * cfg.actor.batches_per_actor, cfg.actor.envs_per_batch)
        )
        self.envs_started = num_actors * cfg.actor.batches_per_actor * cfg.actor.envs_per_batch
        if cfg.broker.shards > 1:
            self.hub = self._start_shards()
            self.stats = self.hub.stats
            endpoints = self.hub.endpoints
        else:
            self.socket = self.ctx.socket(zmq.ROUTER)
            self.socket.setsockopt(zmq.LINGER, 0)
            self.socket.setsockopt(zmq.MAXMSGSIZE, cfg.broker.max_message_bytes)
            # CURVE (and its ZAP handler) must be set up before the socket binds.
            if curve:
                self.curve = secure_server(self.socket, self.ctx, cfg.security.keys_dir)
            endpoints = [self._bind()]
            batcher = Batcher(cfg.broker.max_batch, cfg.broker.deadline_ms / 1000.0)
            self.broker = Broker(
                self.socket,
                self.spec,
                batcher,
                self.consumer,
                silent_timeout_s=cfg.broker.silent_timeout_s,
                max_message_bytes=cfg.broker.max_message_bytes,
                env=env_json(cfg.env.identity()),
                registry=self.registry,
            )
            self.stats = self.broker.stats
        # Actor a dials endpoints[a % shards] (seedq.actor.main).
        self.endpoint = ",".join(endpoints)
        if self.remote:
            endpoints = [self.remote.actor_endpoint(cfg.broker, e) for e in endpoints]
        if resume is not None:
            self.restore(resume)
        self.actors = ActorPool(
            endpoint=",".join(endpoints),
            env=cfg.env,
            num_actors=num_actors,
            batches_per_actor=cfg.actor.batches_per_actor,
            envs_per_batch=cfg.actor.envs_per_batch,
            # Fresh episodes on resume, from seeds no earlier start of this run used.
            seed=resumed_seed(cfg.seed, self.stats.env_steps),
            run_dir=self.dist.rank_dir(run_dir),
            python=cfg.launcher.python,
            keys_dir=self.keys_dir,
            spawn=self.remote.spawn if self.remote else spawn_local,
            inproc_context=self.ctx if cfg.actor.transport == "inproc" else None,
            restart=RestartPolicy(
                cfg.actor.max_restarts, cfg.actor.restart_window_s, cfg.actor.restart_backoff_s
            ),
            patience=Patience(
                cfg.actor.reply_timeout_s,
                cfg.actor.learner_lost_s,
                cfg.actor.max_rejoins,
                cfg.actor.env_timeout_s,
            ),
        )

    def fault_counts(self) -> dict[str, int]:
        """What went wrong during the run and was survived (``faults.json`` in the run dir)."""
        restarts = self.actors.restarts + self.faults_before.get("actor_restarts", 0)
        return {"actor_restarts": restarts, **super().fault_counts()}

    def _bind(self) -> str:
        broker = self.cfg.broker
        if self.cfg.actor.transport == "inproc":
            endpoint = f"inproc://seedq-{os.getpid()}-{id(self)}"
            self.socket.bind(endpoint)
            return endpoint
        port = bind_router(self.socket, broker.host, broker.port)
        return f"tcp://{broker.host}:{port}"

    def _start_shards(self) -> ShardHub:
        """``broker.shards`` broker processes on ports broker.port + i (or free ones); actors
        on an inproc transport (tests) dial them over loopback TCP."""
        broker = self.cfg.broker
        host = broker.host
        binds = [
            f"tcp://{host}:{broker.port + i if broker.port else 0}" for i in range(broker.shards)
        ]
        settings = {
            "max_batch": broker.max_batch,
            "deadline_ms": broker.deadline_ms,
            "silent_timeout_s": broker.silent_timeout_s,
            "max_message_bytes": broker.max_message_bytes,
            "io_threads": broker.io_threads,
            "log_dir": self.run_dir,
            "env": env_json(self.cfg.env.identity()),
        }
        return ShardHub(
            self.spec,
            self.consumer,
            binds,
            settings,
            start_shard,
            keys_dir=self.keys_dir,
            registry=self.registry,
        )

    def _start_roles(self) -> list[threading.Thread]:
        serve = self.hub.serve if self.hub is not None else self.broker.serve
        threads = [
            self._thread("broker", serve, self.stop),
            self._thread(TRAIN_THREAD, self.agent.train, self.training_env_steps),
        ]
        self.actors.start()
        return threads

    def _check_roles(self) -> None:
        self.actors.check()

    def _stop_roles(self) -> None:
        self.actors.stop()

    def _close_roles(self) -> None:
        if self.hub is not None:
            self.hub.close()
        else:
            if self.curve is not None:
                self.curve.stop()
            self.socket.close(linger=0)
        if self._own_context:
            self.ctx.term()

    def launched_envs(self) -> int:
        return max(1, self.envs_started)

    def describe(self) -> str:
        if self.hub is not None:
            return f"arch=seed, {len(self.hub.endpoints)} broker shards at {self.endpoint}"
        return f"arch=seed, broker at {self.endpoint}"
