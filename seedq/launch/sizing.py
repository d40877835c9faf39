"""Runs sized to the machine: actor processes, Sebulba's env threads, each vector env's threads.

``actor.num_actors``, ``arch.sebulba.threads`` and, in an env family whose vector envs step on
C++ threads, the family's key for them (its config's ``threads_key``: atari's and procgen's
``env.num_threads``) default to 0, "size it to the machine". At start the run takes the cores
it may use (``seedq.cores``: the affinity mask and a container's CPU quota; with several runs at
once, its share, ``seedq.launch.sharing``), keeps :data:`LEARNER_THREADS` of them (plus one per
broker shard process) for the learner's own busy threads, and gives the rest to env stepping:
one actor process (or Sebulba env thread) per core left, at least :data:`MIN_WORKERS`, and to
each vector env as many C++ threads as that leaves per actor (one per core of the run's share
when fewer cores are left than actors). A value set anywhere (command line, preset) is kept.

Why these numbers: on one H100 with 16 cores (2026-11-25) every actor's ``AtariVectorEnv`` took
a thread per core, 448 threads on 16 cores, while 14 actors was the hand-found best; the learner
process there ran its broker-and-inference thread and its training thread, so 16 - 2 = 14. An
actor's two env batches take turns (one steps while the other awaits its actions), so one core
per actor covers its envs. On a 2-core box the floor keeps the 2 actors that were the default
before sizing.

``actor.max_envs`` caps the envs a sized run gets: fewer actor processes (or Sebulba threads),
each vector env taking more of the cores left. An on-policy preset that learns fastest per frame
on few envs sets it (``tuning/ppo_atari``: PPO on Pong at 112 envs learned several times slower
per frame than at 16, whatever its unroll length or actor layout; docs/results.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from seedq.agents.config import batch_of_envs, sized_minibatches
from seedq.broker.config import MAX_SHARDS
from seedq.cores import share_of_cores, usable_cores
from seedq.launch.sharing import fit_to_share, runs_at_once

log = logging.getLogger(__name__)

# The learner process's busy threads: the broker (central inference) thread and the training
# thread under arch=seed; the training thread and the inference desk's leader under Sebulba.
LEARNER_THREADS = 2
# Actor processes or Sebulba threads at the least: the default before runs sized themselves.
MIN_WORKERS = 2
# The keys sized here in every run; 0 in each means "size it". The env family's threads key
# joins them where the family has one (auto_keys).
WORKER_KEYS = ("actor.num_actors", "arch.sebulba.threads")


@dataclass(frozen=True)
class Sizes:
    """What a run gets on ``cores`` cores; ``env_threads`` 0 leaves it to each actor host."""

    cores: int
    learner_threads: int
    num_actors: int
    sebulba_threads: int
    env_threads: int


def plan_sizes(
    cores: int,
    *,
    arch: str = "seed",
    local_actors: bool = True,
    broker_shards: int = 1,
    num_actors: int = 0,
    sebulba_threads: int = 0,
    env_threads: int = 0,
    envs_per_vector_env: int = 16,
    max_actors: int = 0,
    max_sebulba_threads: int = 0,
) -> Sizes:
    """The run's sizes on ``cores`` cores; a non-zero argument is kept as given.

    ``local_actors``: the actors run on this machine (the local launcher); with ssh or Slurm
    they run on hosts whose cores this machine cannot see, so their number keeps the floor
    and each host sizes its vector envs' threads itself. ``broker_shards`` above 1 are
    processes of their own on this machine. ``envs_per_vector_env``: the envs in one vector
    env (a thread each at most). ``max_actors`` and ``max_sebulba_threads``: the most a sized
    count of each may be (from ``actor.max_envs``; 0: no cap); the cores they leave go to the
    vector envs' threads.
    """
    learner = LEARNER_THREADS + (broker_shards if broker_shards > 1 else 0)
    spare = cores - learner
    num_actors = num_actors or _capped(
        max(MIN_WORKERS, spare) if local_actors else MIN_WORKERS, max_actors
    )
    sebulba_threads = sebulba_threads or _capped(max(MIN_WORKERS, spare), max_sebulba_threads)
    if not env_threads:
        stepping = sebulba_threads if arch == "sebulba" else num_actors if local_actors else 0
        # Fewer cores left than workers (the floor on a small machine): the workers share
        # cores with the learner whatever their thread count, so each vector env takes one
        # thread per core, as before sizing. Of the run's cores, not the machine's (what 0
        # means to an actor): a share of 2 cores in a sweep of 8 runs on 16 gave every vector
        # env of every run 16 threads.
        if stepping:
            per_worker = spare // stepping if spare >= stepping else cores
            env_threads = min(per_worker, envs_per_vector_env)
    return Sizes(cores, learner, num_actors, sebulba_threads, env_threads)


def _capped(workers: int, cap: int) -> int:
    return min(workers, cap) if cap > 0 else workers


def workers_for_envs(cfg: Any) -> tuple[int, int]:
    """``(actor processes, Sebulba threads)``, the most of each whose envs fit in
    ``actor.max_envs``, at least one (a worker's envs may exceed it); ``(0, 0)`` when it is 0
    (no cap), or negative (left for validation to refuse)."""
    max_envs = int(cfg.actor.max_envs)
    if max_envs <= 0:
        return 0, 0
    per_actor = int(cfg.actor.batches_per_actor) * int(cfg.actor.envs_per_batch)
    per_thread = int(cfg.arch.sebulba.envs_per_thread)
    return max(1, max_envs // max(1, per_actor)), max(1, max_envs // max(1, per_thread))


def env_threads_key(env: Any) -> str | None:
    """``env.<key>`` of the threads each vector env of ``env``'s family steps with (its config
    class's ``threads_key``), or None for a family without C++ threads. ``env``: the family's
    dataclass, or a composed DictConfig of one."""
    config = OmegaConf.get_type(env) if isinstance(env, DictConfig) else type(env)
    key = getattr(config, "threads_key", "")
    return f"env.{key}" if key else None


def auto_keys(cfg: Any) -> tuple[str, ...]:
    """The keys of ``cfg`` sized at start when 0: :data:`WORKER_KEYS` and the env family's
    threads key, if it has one."""
    env_key = env_threads_key(cfg.env)
    return (*WORKER_KEYS, env_key) if env_key else WORKER_KEYS


def size_config(cfg: Any, cores: int | None = None) -> dict[str, int]:
    """Resolve the 0 keys of :func:`auto_keys` in ``cfg`` (a ``SeedqConfig`` or a DictConfig
    of one) in place, for ``cores`` (default: this process's); returns the keys set, logged.

    Nothing is set, and nothing logged, when no key is 0, or when one is negative (left for
    validation to refuse by name).
    """
    keys = auto_keys(cfg)
    shards = int(cfg.broker.shards)
    if any(int(_get(cfg, key)) < 0 for key in keys) or not 1 <= shards <= MAX_SHARDS:
        # Out of range: validation refuses it by name. Sizing around it would log the bad
        # value among the chosen ones first (broker.shards=1e9: a learner of a billion
        # threads).
        return {}
    cores = cores or usable_cores()
    warn_oversubscribed(cfg, cores)
    if all(_get(cfg, key) for key in keys):
        return size_batch(cfg)
    env_key = env_threads_key(cfg.env)
    arch = str(cfg.arch.name)
    envs_per_vector_env = (
        cfg.arch.sebulba.envs_per_thread if arch == "sebulba" else cfg.actor.envs_per_batch
    )
    max_actors, max_sebulba_threads = workers_for_envs(cfg)
    sizes = plan_sizes(
        cores,
        arch=arch,
        local_actors=cfg.launcher.name == "local",
        broker_shards=int(cfg.broker.shards),
        num_actors=int(cfg.actor.num_actors),
        sebulba_threads=int(cfg.arch.sebulba.threads),
        env_threads=int(_get(cfg, env_key)) if env_key else 0,
        envs_per_vector_env=int(envs_per_vector_env),
        max_actors=max_actors,
        max_sebulba_threads=max_sebulba_threads,
    )
    values = {"actor.num_actors": sizes.num_actors, "arch.sebulba.threads": sizes.sebulba_threads}
    if env_key:
        values[env_key] = sizes.env_threads
    changed = {key: value for key, value in values.items() if not _get(cfg, key) and value}
    for key, value in changed.items():
        _set(cfg, key, value)
    # The keys chosen here that the run uses (Sebulba starts no actor processes, the others no
    # Sebulba threads); those the command line set are as given.
    unused = "actor.num_actors" if arch == "sebulba" else "arch.sebulba.threads"
    shown = [k for k in changed if k != unused]
    if shown and arch != "anakin":
        learner = (
            f"{sizes.learner_threads} of them for the learner's threads"
            if sizes.learner_threads < cores
            # A run's share of a few cores (several runs at once): it has none to set apart.
            else f"shared with the learner's {sizes.learner_threads} threads"
        )
        log.info(
            "sized to %d core%s, %s: %s (%s%sset a key to choose it)",
            cores,
            "" if cores == 1 else "s",
            learner,
            ", ".join(f"{k}={_get(cfg, k)}" for k in shown),
            f"{env_key}: the cores left per {'Sebulba thread' if arch == 'sebulba' else 'actor'}"
            ", or one per core when fewer are left than that; "
            if env_key in changed
            else "",
            f"at most actor.max_envs={cfg.actor.max_envs} envs; " if max_actors else "",
        )
        key, worker, per_worker = (
            ("arch.sebulba.threads", "Sebulba thread", "arch.sebulba.envs_per_thread")
            if arch == "sebulba"
            else ("actor.num_actors", "actor process", "actor.envs_per_batch")
        )
        if max_actors and key in changed and run_envs(cfg) > int(cfg.actor.max_envs):
            log.warning(
                "actor.max_envs=%d is fewer than one %s's envs: the run steps %d (fewer envs "
                "per %s keep it under the cap)",
                cfg.actor.max_envs,
                worker,
                run_envs(cfg),
                per_worker,
            )
    return changed | size_batch(cfg)


# Local actor processes per core past which a run is warned: each is a Python process of its
# own (its start-up ~1-2 s of CPU, its memory), and beyond a few per core they only take turns.
ACTORS_PER_CORE_WARNED = 4


def warn_oversubscribed(cfg: Any, cores: int) -> None:
    """Warn when the command line starts many more local actor processes than there are
    cores (a 0 is sized to them, never past this)."""
    actors = int(cfg.actor.num_actors)
    if str(cfg.arch.name) != "seed" or cfg.launcher.name != "local":
        return
    if actors > ACTORS_PER_CORE_WARNED * cores:
        log.warning(
            "actor.num_actors=%d actor processes on %d core%s: %.0f per core, each a Python "
            "process that takes turns with the others (and their start-up delays the first "
            "step); fewer actors with more envs each (actor.envs_per_batch, "
            "actor.batches_per_actor) step as many envs for less, and actor.num_actors=0 sizes "
            "it to the cores",
            actors,
            cores,
            "" if cores == 1 else "s",
            actors / cores,
        )


def run_envs(cfg: Any) -> int:
    """The envs a run steps, each one env column of the unrolls: every actor's env batches
    (arch=seed), every Sebulba thread's envs, or Anakin's tensor envs."""
    arch = str(cfg.arch.name)
    if arch == "sebulba":
        return int(cfg.arch.sebulba.threads) * int(cfg.arch.sebulba.envs_per_thread)
    if arch == "anakin":
        return int(cfg.arch.anakin.num_envs)
    actor = cfg.actor
    return int(actor.num_actors) * int(actor.batches_per_actor) * int(actor.envs_per_batch)


def size_batch(cfg: Any) -> dict[str, int]:
    """An on-policy algorithm's ``batch_size`` 0, "one unroll of every env", set to
    :func:`run_envs` in place (after the actors are sized): each batch then holds one unroll
    of every env, and no batch's data waits behind another's (the envs act on while it trains
    unless the algorithm's ``pause_acting`` holds them). Then ``minibatches`` 0, shares
    of ``minibatch_size`` transitions (:func:`~seedq.agents.config.sized_minibatches`), so a
    larger batch takes more updates. Returns the keys set, logged."""
    alg = cfg.algorithm
    if not batch_of_envs(alg):
        return {}
    changed = {}
    if int(alg.batch_size) == 0:
        alg.batch_size = changed["algorithm.batch_size"] = envs = run_envs(cfg)
        log.info("algorithm.batch_size=%d: one unroll of each of the run's envs", envs)
    if int(alg.minibatches) == 0 and int(alg.minibatch_size) > 0:
        columns, length = trained_batch(cfg)
        alg.minibatches = changed["algorithm.minibatches"] = shares = sized_minibatches(
            alg, columns, length
        )
        log.info(
            "algorithm.minibatches=%d: shares of about %d transitions (algorithm.minibatch_size) "
            "of %d unrolls of %d",
            shares,
            alg.minibatch_size,
            columns,
            length,
        )
    return changed


def trained_batch(cfg: Any) -> tuple[int, int]:
    """``(env columns, transitions each)`` of what one on-policy training call gets: a batch
    of ``algorithm.batch_size`` unrolls, or under Anakin one of ``arch.anakin.minibatches``
    shares of its envs' unroll."""
    alg = cfg.algorithm
    if str(cfg.arch.name) == "anakin":
        anakin = cfg.arch.anakin
        length = int(anakin.unroll_length or alg.unroll_length)
        return int(anakin.num_envs) // int(anakin.minibatches), length
    return int(alg.batch_size), int(alg.unroll_length)


def _parent(cfg: Any, key: str) -> tuple[Any, str]:
    *path, name = key.split(".")
    for part in path:
        cfg = getattr(cfg, part)
    return cfg, name


def _get(cfg: Any, key: str) -> Any:
    return getattr(*_parent(cfg, key))


def _set(cfg: Any, key: str, value: int) -> None:
    setattr(*_parent(cfg, key), value)


def size_run(
    cfg: DictConfig,
    explicit: Iterable[str],
    launcher: Mapping[str, Any] | None = None,
    cores: int | None = None,
) -> dict[str, int]:
    """Size a composed config to this run's share of the machine, in place: the 0 keys
    (:func:`size_config`) for the cores this run may use, then the caps of several runs at once
    (:func:`~seedq.launch.sharing.fit_to_share`). Returns every key changed."""
    cores = cores or usable_cores()
    runs = cfg.hardware.runs_at_once or runs_at_once(launcher, cores)
    changed = size_config(cfg, share_of_cores(runs, cores))
    changed.update(fit_to_share(cfg, explicit, launcher, cores))
    return changed


def sized(cfg: Any, cores: int | None = None) -> Any:
    """A ``SeedqConfig`` built in code (not composed by ``seedq-train``) with its 0 keys
    resolved for ``cores`` (default: this process's); the same object when none is 0. The
    config itself is left as it was."""
    alg = cfg.algorithm
    if all(_get(cfg, key) for key in auto_keys(cfg)) and not (
        batch_of_envs(alg) and not (alg.batch_size and alg.minibatches)
    ):
        return cfg
    copy = dataclasses.replace(
        cfg,
        algorithm=dataclasses.replace(alg) if dataclasses.is_dataclass(alg) else alg,
        actor=dataclasses.replace(cfg.actor),
        env=dataclasses.replace(cfg.env),
        arch=dataclasses.replace(cfg.arch, sebulba=dataclasses.replace(cfg.arch.sebulba)),
    )
    size_config(copy, cores)
    return copy
