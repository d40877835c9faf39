"""The keys every env family shares: the base of the ``env`` section.

Each family's own keys live beside its backend, in a dataclass that subclasses
:class:`EnvConfig` (``envs/atari.py``'s ``AtariConfig``, ...); the registry maps ``env.kind`` to
that class, and the ``env=<kind>`` Hydra group option selects it, so a run holds, shows and
accepts its family's keys only. CartPole, which has no keys of its own, is this class itself.
This module imports no backend: the backends import it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from seedq.schema import positive, setting

# The largest run seed: env i of a run is seeded with seed + i, and ale_py's seeds are 31-bit.
MAX_SEED = 2**30


def resumed_seed(seed: int, env_steps: int) -> int:
    """The env seed of a start of a run ``env_steps`` in: one no earlier start used (each start
    reset its envs with the first start's seeds, replaying their episode starts and sticky
    actions), kept in ``[0, MAX_SEED]`` so ``seed + env index`` stays below ale_py's 2^31."""
    return (seed + env_steps) % (MAX_SEED + 1)


KIND_HELP = (
    "The env family, which picks the backend and the other env keys: env=<kind> sets it with "
    "its keys (seedq-train --keys lists the kinds, --keys env=<kind> a kind's keys)."
)


# env.num_threads of the families whose vector envs step on C++ threads (atari, procgen).
NUM_THREADS_HELP = (
    "C++ threads each vector env steps its envs with (>= 0); 0: sized at start so that the env "
    "threads of all actors (or Sebulba's env threads) together match the cores left after the "
    "learner's (logged), or one per core on an actor host of the ssh or slurm launcher."
)


def kind_setting(kind: str) -> Any:
    """The ``kind`` field of a family's config: its own kind as the default."""
    return setting(kind, KIND_HELP)


@dataclass
class EnvConfig:
    """What the actors step: the env family, its id and the time limit; CartPole's config.

    A family that has keys of its own subclasses this, setting ``kind`` (and ``id``) to its
    own defaults, and overrides the methods below where its keys change the answer.
    """

    kind: str = kind_setting("cartpole")
    id: str = setting(
        "CartPole-v1",
        "The env id, as the family names its envs (a gymnasium id for cartpole and gym); names "
        "the run directory.",
    )
    max_episode_steps: int | None = setting(
        None, "Truncate episodes after this many agent steps (> 0); null keeps the env's own limit."
    )

    # The key that sets rows_per_env(), named when actor.envs_per_batch is not a multiple of it.
    rows_key: ClassVar[str] = ""
    # The key of the C++ threads each vector env steps its envs with, 0 meaning "sized at start"
    # (seedq.launch.sizing reads and sets it through this name); "": the family has no such pool.
    threads_key: ClassVar[str] = ""
    # Keys that say how this host steps the envs, not what the envs are: they may differ
    # between the learner and an actor on another host (threads_key is one too).
    host_keys: ClassVar[tuple[str, ...]] = ()

    def identity(self) -> dict[str, Any]:
        """What the envs are: this section without its host keys. An actor's Hello carries it,
        and the learner refuses an actor whose envs are not its own (another game, frame skip
        or sticky-action rate with the same observation and action shapes)."""
        skip = {*self.host_keys, self.threads_key}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}

    def check(self) -> None:
        """Raise a ConfigError (or an EnvError) naming the key for a value this family cannot
        take; run by config validation before any process starts."""
        if self.max_episode_steps is not None:
            positive("env.max_episode_steps", self.max_episode_steps)

    def rows_per_env(self) -> int:
        """Rows of an actor batch that one environment fills (1 unless one env acts for several
        agents)."""
        return 1

    def frames_per_step(self) -> float:
        """Frames the env renders per agent step (Atari's frame skip), for frame counts."""
        return 1
