"""A run's share of the machine when several seedq runs train at once (a Hydra joblib sweep).

``seedq-train -m hydra/launcher=joblib seed=0,1`` starts ``hydra.launcher.n_jobs`` runs at once
(joblib's -1, the default, means one per core). Each run sized for the whole machine would start
``actor.num_actors`` actor processes and ``hardware.num_threads`` and ``train_threads`` torch
threads on cores the other runs need too, and every lockstep round trip then waits for the
scheduler. So each run takes ``cores // runs`` cores (at least one): its actor processes and
torch threads are capped there, unless the command line sets them. Fewer actor processes each
step more env batches (``actor.batches_per_actor``), so the run keeps its envs and its batches:
what it learns does not change, only how many processes step it. ``hardware.runs_at_once``
names the number of runs when the launcher cannot tell (several ``seedq-train`` by hand); 1
turns the sizing off.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from seedq.cores import share_of_cores, usable_cores

log = logging.getLogger(__name__)

# The keys sized to the share; torch's num_threads 0 means "one per core", and train_threads
# 0 the run's cores on the CPU.
SIZED_KEYS = ("actor.num_actors", "hardware.num_threads", "hardware.train_threads")


def runs_at_once(launcher: Mapping[str, Any] | None, cores: int) -> int:
    """Runs a Hydra launcher config starts at once: joblib's ``n_jobs`` (negative counts back
    from the cores as joblib does: -1 is one per core), 1 for any other launcher."""
    if not launcher or launcher.get("n_jobs") is None:
        return 1
    n_jobs = int(launcher["n_jobs"])
    return max(1, cores + 1 + n_jobs if n_jobs < 0 else n_jobs)


def fit_to_share(
    cfg: DictConfig,
    explicit: Iterable[str],
    launcher: Mapping[str, Any] | None = None,
    cores: int | None = None,
) -> dict[str, int]:
    """Cap ``cfg``'s actor processes and torch threads at its share of ``cores``; in place.

    ``explicit``: the command line's overrides (``key=value``); the keys they set are left as
    given. Returns the keys changed and their new values.
    """
    cores = cores or usable_cores()
    runs = cfg.hardware.runs_at_once or runs_at_once(launcher, cores)
    if runs <= 1:
        return {}
    share = share_of_cores(runs, cores)
    given = {override.lstrip("+~").split("=", 1)[0] for override in explicit}
    env_batches = cfg.actor.num_actors * cfg.actor.batches_per_actor
    changed = {}
    for key in SIZED_KEYS:
        value = OmegaConf.select(cfg, key)
        if key in given or value is None:
            continue
        fitted = share if value == 0 else min(value, share)
        if fitted != value:
            OmegaConf.update(cfg, key, fitted)
            changed[key] = fitted
    if "actor.num_actors" in changed and "actor.batches_per_actor" not in given:
        per_actor = math.ceil(env_batches / cfg.actor.num_actors)
        cfg.actor.batches_per_actor = changed["actor.batches_per_actor"] = per_actor
    if changed:
        log.info(
            "%d runs at once on %d cores: this run takes %d (%s; set them on the command line, "
            "or hardware.runs_at_once=1, to choose)",
            runs,
            cores,
            share,
            ", ".join(f"{k}={v}" for k, v in changed.items()),
        )
    return changed
