"""``arch=sebulba``: vector envs stepped by threads of the learner process, no sockets.

``threads`` actor threads each own one env batch of ``envs_per_thread`` envs, built by the env
registry (``make_env_batch``: ale_py's C++ ``AtariVectorEnv`` for Atari, the native vector
CartPole, any gymnasium id through the gym backend, the fake envs in tests). Each thread steps
its batch and hands the ``Step`` straight to central inference through an
:class:`~seedq.arch.sebulba_threads.InferenceDesk`; the agent trains on its own thread beside
them, exactly as in ``arch=seed``. Agents, metrics, progress, checkpoints (same format as
:class:`~seedq.arch.seed.SeedRun`) and stop rules are shared with the SEED run.

Copies: the desk concatenates the threads' observations into one batch once (the batch owns
its arrays, which the unroll store keeps until it writes them into the training batch, the
second and last copy on the CPU). On CUDA the engine stages each batch in page-locked memory
(``hardware.pin_memory``) for an asynchronous upload.

The env steps of ``AtariVectorEnv`` run in its C++ threads with the GIL released; what holds the
GIL is Python glue (the desk, unroll bookkeeping) and the trainer's op dispatch. As in the SEED
run, ``hardware.gil_switch_interval_s`` keeps the threads from starving each other.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from seedq.actor.stepping import ActorStats, EnvFailed, EnvFailures, close_quietly, hung_env_call
from seedq.arch.base import TRAIN_THREAD, TrainingRun
from seedq.arch.sebulba_threads import InferenceDesk, make_slot, step_env_batch
from seedq.core.stats import RunFault, RunStats
from seedq.envs import EnvBatch, env_spec, make_env_batch, rows_per_env
from seedq.envs.config import resumed_seed
from seedq.launch.sizing import sized
from seedq.learner.device import prepare_learner_process
from seedq.schema import ConfigError

log = logging.getLogger(__name__)

__all__ = ["SebulbaRun", "sebulba_layout"]

DEFAULT_THREADS = 2
DEFAULT_ENVS_PER_THREAD = 32


def sebulba_layout(cfg: Any) -> tuple[int, int]:
    """``(threads, envs_per_thread)`` from ``cfg.arch.sebulba``, or the defaults without one."""
    section = getattr(getattr(cfg, "arch", None), "sebulba", None)
    threads = int(getattr(section, "threads", DEFAULT_THREADS))
    envs = int(getattr(section, "envs_per_thread", DEFAULT_ENVS_PER_THREAD))
    if threads < 1 or envs < 1:
        raise ConfigError(
            f"arch.sebulba.threads={threads} and arch.sebulba.envs_per_thread={envs} must both "
            "be >= 1"
        )
    per_env = rows_per_env(cfg.env)
    if envs % per_env:
        raise ConfigError(
            f"arch.sebulba.envs_per_thread={envs} must be a multiple of {per_env} (the rows one "
            f"{cfg.env.kind} env fills)"
        )
    return threads, envs


def layout_config(cfg: Any, threads: int, envs_per_thread: int) -> Any:
    """``cfg`` as the agent and monitor should see it: one logical actor per thread (R2D2's
    epsilon ladder and eval batches count them), and a batch can hold every env."""
    actor = dataclasses.replace(
        cfg.actor, num_actors=1, batches_per_actor=threads, envs_per_batch=envs_per_thread
    )
    broker = dataclasses.replace(cfg.broker, max_batch=threads * envs_per_thread)
    return dataclasses.replace(cfg, actor=actor, broker=broker)


def build_env_batches(make: Callable[[int], EnvBatch], count: int) -> list[EnvBatch]:
    """``[make(0), ..., make(count - 1)]``, built on ``count`` threads at once.

    Built one after another, 14 Atari batches of 32 envs took 85 s before the first step on the
    16-core GPU machine. Threads overlap whatever a builder does without the GIL (a backend's
    subprocesses, its C++ work, file reads). ale_py 0.12's ``AtariVectorEnv`` constructor does
    not release it: it builds its envs one after another in C++ (~0.09 s per Pong env on the
    2-core box), so Atari batches still build in turn; their resets, in each env thread, run in
    parallel already. ``scripts/ale_build_gil.py`` measures it: a Python loop on another thread
    kept a few per cent of its speed during a build. 85 % of that time is one colour-averaging
    table each ALE instance computes in its constructor, the same for every env of a game
    (``perf``; benchmarks/RESULTS.md, "Sebulba's start-up"); upstream ALE's pull request #740
    shares it between envs.

    If a build fails, the batches already built are closed and the failure of the
    lowest-numbered batch is raised as it was, with a note naming that batch (the others'
    failures are logged).
    """
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="env-build") as pool:
        futures = [pool.submit(make, i) for i in range(count)]
    built, failed = [], []
    for i, future in enumerate(futures):
        exc = future.exception()
        if exc is None:
            built.append(future.result())
        else:
            failed.append((i, exc))
    if not failed:
        return built
    for env in built:
        env.close()
    for i, exc in failed[1:]:
        log.error("building env batch %d of %d failed too: %r", i, count, exc)
    i, exc = failed[0]
    exc.add_note(f"while building env batch {i} of {count} (arch.sebulba.threads)")
    raise exc


class EnvHung(RunFault):
    """An actor thread's env call ran past ``actor.env_timeout_s``."""


class SebulbaRun(TrainingRun):
    """Everything one Sebulba run owns; ``run()`` blocks until a stop condition."""

    def __init__(self, cfg: Any, run_dir: str, *, resume: dict | None = None) -> None:
        """``resume``: a loaded checkpoint (already checked against ``cfg``) to continue."""
        super().__init__()
        self.cfg = cfg = sized(cfg)
        self.run_dir = run_dir
        self.threads_n, self.envs_per_thread = sebulba_layout(cfg)
        self.layout = layout_config(cfg, self.threads_n, self.envs_per_thread)
        self.device = prepare_learner_process(cfg)
        self.spec = env_spec(cfg.env, seed=cfg.seed)
        self._build_acting(self.layout)
        self.stats = RunStats()
        max_batch = self.threads_n * self.envs_per_thread
        self.desk = InferenceDesk(self.consumer, self.stats, self.stop, max_batch)
        if resume is not None:
            self.restore(resume)
        # Fresh episodes on resume, from a seed no earlier start of this run used (as Anakin):
        # every start reset the envs with the first start's seeds.
        self.env_seed = resumed_seed(cfg.seed, self.stats.env_steps)
        envs = self.envs_per_thread
        began = time.monotonic()
        self.envs: list[EnvBatch] = build_env_batches(
            lambda i: make_env_batch(cfg.env, envs, self.env_seed, i * envs), self.threads_n
        )
        log.info(
            "built %d env batches of %d envs in %.1f s",
            self.threads_n,
            envs,
            time.monotonic() - began,
        )
        self.slots = [
            make_slot(i, env, self.spec, i * self.envs_per_thread)
            for i, env in enumerate(self.envs)
        ]
        # Each actor thread notes its env call in progress here (the hung-env check).
        self.thread_stats = [ActorStats() for _ in range(self.threads_n)]
        self.actor_threads: list[threading.Thread] = []
        for slot in self.slots:
            self.consumer.actor_started(slot)

    def _close_envs(self) -> None:
        for env in self.envs:
            env.close()

    def _start_roles(self) -> list[threading.Thread]:
        threads = [self._thread(TRAIN_THREAD, self.agent.train, self.training_env_steps)]
        self.actor_threads = [
            self._thread(f"actor-{i}", self._act, i) for i in range(self.threads_n)
        ]
        return threads + self.actor_threads

    def _check_roles(self) -> None:
        """An env call (a batch's reset or step) past ``actor.env_timeout_s`` is a hung env.
        A thread cannot be stopped, so the run stops with a checkpoint, naming the env and
        where it is stuck; ``resume=auto`` (or ``supervise=true``) goes on with new envs."""
        for i, stats in enumerate(self.thread_stats):
            thread = self.actor_threads[i].ident
            if why := hung_env_call(
                stats,
                self.cfg.actor.env_timeout_s,
                thread,
                f"actor thread {i}",
                "actor.env_timeout_s",
            ):
                raise EnvHung(
                    f"{why}, and a thread cannot be stopped; resume the run (resume=auto, or "
                    "supervise=true) to go on with new envs"
                )

    def _act(self, i: int) -> None:
        """Actor thread ``i``: step its env batch. When its envs raise, the batch is closed and
        built again and starts over as a new run on the same rows (a SEED actor's rejoin): the
        episodes in flight are lost, not the run, unless they raise more than
        ``actor.max_rejoins`` times in a row without finishing an episode
        (:class:`~seedq.actor.stepping.EnvFailures`)."""
        cfg, envs = self.cfg, self.envs_per_thread
        failures = EnvFailures(f"actor thread {i}", cfg.actor.max_rejoins, "actor.max_rejoins")
        seed = self.env_seed
        while True:
            try:
                step_env_batch(
                    self.envs[i], self.slots[i], self.desk, self.stop, seed, self.thread_stats[i]
                )
                return
            except EnvFailed as failed:
                failures.note(failed, envs)
                close_quietly(self.envs[i], f"actor thread {i}")
                self.envs[i] = make_env_batch(cfg.env, envs, self.env_seed, i * envs)
                slot = make_slot(i, self.envs[i], self.spec, i * envs)
                self.desk.replace(self.slots[i], slot)
                self.slots[i] = slot
                seed += 1  # fresh episodes, not a replay of the ones that failed

    def _close_roles(self) -> None:
        self._close_envs()

    def monitor_config(self) -> Any:
        return self.layout

    def launched_envs(self) -> int:
        return self.threads_n * self.envs_per_thread

    def describe(self) -> str:
        return f"arch=sebulba, {self.threads_n} threads x {self.envs_per_thread} envs"
