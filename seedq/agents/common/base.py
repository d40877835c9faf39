"""The skeleton every agent shares, so an algorithm's ``__init__.py`` holds only what is its own.

:class:`AgentBase` builds the model (on the run's device), the selector and the learner from the
:class:`~seedq.core.agent.RunContext`, maps the learner's loss means to metric columns, and runs
the training thread's loop with its wait/busy accounting. :mod:`seedq.agents.common.onpolicy`
(V-trace, PPO) and :mod:`seedq.agents.common.replay_agent` (R2D2, SAC) add the two ways of
feeding a learner.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import torch

from seedq.agents.common.policy_head import SampleFromDistribution
from seedq.agents.common.update import Placement
from seedq.core.agent import RunContext, Selector
from seedq.core.collective import LearnerCollective
from seedq.core.stats import TrainStats
from seedq.messages import EnvSpec
from seedq.schema import ConfigError

Item = TypeVar("Item")


def require_discrete(spec: EnvSpec, algorithm: str) -> None:
    """Refuse a continuous action space for an algorithm whose head is discrete (a
    :class:`~seedq.schema.ConfigError`: the run stops at start-up with the message, exit 2)."""
    if spec.continuous:
        raise ConfigError(
            f"algorithm={algorithm} supports discrete actions only; this env has {spec.num_actions}"
            "-dimensional continuous actions: use algorithm=ppo or algorithm=sac"
        )


def discrete_network(
    agent: type, build: Callable[..., torch.nn.Module], spec: EnvSpec, alg: Any, channels_last: bool
) -> torch.nn.Module:
    """``build(obs_shape, num_actions, alg.model, channels_last=)``, the network of an agent
    whose head is discrete (V-trace's, R2D2's); a continuous action space is refused."""
    require_discrete(spec, agent.name)
    return build(spec.obs_shape, spec.num_actions, alg.model, channels_last=channels_last)


def placement_of(ctx: RunContext) -> Placement:
    """Where the run's learner computes (device, weights lock, AMP, pinned uploads)."""
    return Placement(ctx.device, ctx.weights_lock, ctx.amp_dtype, ctx.pin_memory, ctx.collective)


class AgentBase(ABC):
    """Model, selector, learner and metric columns from a run context.

    A subclass sets ``name`` and ``columns`` (metric column -> the key of the learner's loss
    means, or None for a column :meth:`extra_metrics` supplies) and implements
    :meth:`build_model`, :meth:`make_learner`, ``on_unroll``, ``train``, ``progress`` and the
    checkpoint methods (the two feeding bases implement the last ones).
    """

    name: ClassVar[str]
    columns: ClassVar[dict[str, str | None]]
    metric_columns: ClassVar[list[str]]

    stats: TrainStats
    learner: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "columns" in cls.__dict__:
            cls.metric_columns = list(cls.columns)

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.alg = ctx.cfg.algorithm
        channels_last = bool(ctx.cfg.hardware.channels_last)
        model = self.build_model(ctx.spec, self.alg, channels_last=channels_last)
        self.model = model.to(ctx.device)
        self.selector = self.make_selector(self.alg)
        self.exploration: Any = None
        self.learner = self.make_learner(ctx, placement_of(ctx))
        self.stats = self.learner.stats
        if ctx.compile_training != "none":
            # The learner's forward only: the optimizer steps the uncompiled model's parameters.
            self.learner.model = torch.compile(self.model, mode=ctx.compile_training)

    # ------------------------------------------------------------ what a subclass supplies

    @classmethod
    @abstractmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool) -> torch.nn.Module:
        """The algorithm's network for ``spec`` (the same on the learner and in seedq-eval)."""

    @abstractmethod
    def make_learner(self, ctx: RunContext, placement: Placement) -> Any:
        """The algorithm's learner for ``self.model`` (its ``stats`` become the agent's)."""

    def extra_metrics(self) -> dict[str, Any]:
        """The values of the columns mapped to None in ``columns``."""
        return {}

    # ---------------------------------------------------------------------- defaults

    @classmethod
    def make_selector(cls, alg: Any, *, greedy: bool = False) -> Selector:
        return SampleFromDistribution(greedy=greedy)

    @classmethod
    def default_epsilon(cls, alg: Any) -> float | None:
        return None

    def unroll_layout(self) -> tuple[int, int]:
        # One row of overlap: an unroll's last row bootstraps it and is the next one's first.
        return self.alg.unroll_length, 1

    def unroll_columns(self) -> int:
        return 0

    def metrics(self) -> dict[str, Any]:
        means = self.stats.pop_means()
        extra = self.extra_metrics()
        return {
            column: extra.get(column) if key is None else means.get(key)
            for column, key in self.columns.items()
        }

    def judged_returns(self, returns: list[float]) -> list[float]:
        return returns

    def before_training(self, envs: int = 1) -> tuple[int, str]:
        """The env steps a fresh run of ``envs`` envs (stepping together) takes at least
        before its first update, with what fills in that time (a replay's minimum size, an
        on-policy batch)."""
        return 0, "it has its first batch"

    def training_loop(self, take: Callable[[], Item | None], train: Callable[[Item], None]) -> None:
        """The training thread: ``take()`` the next item (None: nothing yet, look again) and
        ``train`` on it until ``ctx.stop``; time spent taking counts as waiting."""
        if self.ctx.collective is not None:
            self._lockstep_loop(take, train, self.ctx.collective)
            return
        stats, stop = self.stats, self.ctx.stop
        while not stop.is_set():
            start = time.monotonic()
            item = take()
            begin = time.monotonic()
            stats.wait_s += begin - start
            if item is None:
                continue
            train(item)
            stats.busy_s += time.monotonic() - begin

    def _lockstep_loop(
        self,
        take: Callable[[], Item | None],
        train: Callable[[Item], None],
        ranks: LearnerCollective,
    ) -> None:
        """The training thread of one of several learner ranks: an update only in a round where
        every rank holds a batch, so all take the same updates; the loop ends on the round any
        rank stops in. A rank keeps its batch through rounds in which another has none (``take``
        returns None within a fraction of a second, so rounds keep coming and no collective
        waits long on a slow rank's data)."""
        stats, stop = self.stats, self.ctx.stop
        item: Item | None = None
        while True:
            start = time.monotonic()
            if item is None:
                item = take()
            all_ready, stopping = ranks.next_turn(item is not None, stop.is_set())
            begin = time.monotonic()
            stats.wait_s += begin - start
            if stopping:
                return
            if all_ready and item is not None:
                train(item)
                item = None
                stats.busy_s += time.monotonic() - begin


def first_items_steps(items: int, steps_each: int, envs: int) -> int:
    """The env steps ``envs`` envs stepping together take to make ``items`` items (unrolls,
    sequences, transitions) of ``steps_each`` new steps each: every env makes one per
    ``steps_each`` steps, so the first ``items`` come whole rounds of all envs at a time (256
    envs fill a batch of 32 unrolls of 20 steps at 5,120 env steps, not 640)."""
    envs = max(1, envs)
    return -(-items // envs) * envs * steps_each


def from_envs(items: int, envs: int) -> str:
    """What :func:`first_items_steps` adds to a message, where the envs count."""
    return f", made by {envs} envs at once" if envs > items else ""
