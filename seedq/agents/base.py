"""The protocol between an algorithm and everything that runs it.

The launcher, ``seedq-bench``, ``seedq-eval`` and checkpointing use an algorithm only through
this interface (acme's builder idea): they never ask which algorithm it is. An agent owns its
network head, its action selector, what happens to each completed unroll (its sink), its
training loop, its metric columns and its checkpoint state. What it is given is a
:class:`RunContext`; the shared pieces it builds on live in ``seedq.learner``.

How one env step reaches an agent::

    actor Step -> broker batch -> CentralInference.act: model forward + agent.selector
                               -> CentralInference.record: UnrollStore (agent.unroll_layout)
                               -> completed unroll -> agent.on_unroll (train queue / replay)
    training thread: agent.train(env_steps) until ctx.stop
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import numpy as np
import torch

from seedq.learner.stats import TrainStats
from seedq.learner.unroll_store import Unroll
from seedq.messages import EnvSpec
from seedq.schema import ConfigError


class Selection(NamedTuple):
    actions: torch.Tensor  # long [N], or float [N, D] for continuous actions
    behaviour: torch.Tensor  # float [N, P]: policy parameters or Q-values, stored with the step
    values: torch.Tensor  # float [N], the state value in reward units (truncation bootstrap)


class Selector(Protocol):
    """Turns a model output for ``N`` envs (``T = 1``) into actions.

    ``epsilon``: float ``[N]`` on the model's device for agents that explore by it, else None.
    """

    def __call__(
        self, out: Any, epsilon: torch.Tensor | None, generator: torch.Generator
    ) -> Selection: ...


class Exploration(Protocol):
    """Per-actor acting parameters an agent keeps beside central inference (R2D2's epsilons)."""

    def actor_started(self, actor_id: int, env_ids: np.ndarray) -> None: ...

    def actor_left(self, actor_id: int) -> None: ...

    def epsilon(self, actor_id: int) -> np.ndarray: ...

    def observe_returns(self, actor_id: int, returns: Sequence[float]) -> None: ...


@dataclass
class RunContext:
    """What a run hands an agent to build itself."""

    cfg: Any  # the whole SeedqConfig (the agent reads cfg.algorithm, cfg.actor, ...)
    spec: EnvSpec
    device: torch.device
    weights_lock: threading.Lock
    stop: threading.Event
    amp_dtype: torch.dtype | None = None
    pin_memory: bool = False


class Agent(Protocol):
    name: ClassVar[str]
    # Metric columns this algorithm adds to metrics.csv, in order (see docs/architecture.md).
    metric_columns: ClassVar[list[str]]

    model: torch.nn.Module  # the network central inference runs; training updates it in place
    selector: Selector
    exploration: Exploration | None
    stats: TrainStats

    @classmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool) -> torch.nn.Module:
        """The algorithm's network for ``spec`` (also used by seedq-eval and seedq-bench)."""
        ...

    @classmethod
    def make_selector(cls, alg: Any, *, greedy: bool = False) -> Selector:
        """Action selection for acting; ``greedy`` is seedq-eval's ``mode=greedy``."""
        ...

    @classmethod
    def default_epsilon(cls, alg: Any) -> float | None:
        """The epsilon a trained policy acts with when evaluated (None: no epsilon)."""
        ...

    @classmethod
    def samples_per_update(cls, alg: Any) -> int: ...

    def unroll_layout(self) -> tuple[int, int]:
        """``(length, overlap)`` of the unrolls central inference cuts for this agent."""
        ...

    def on_unroll(self, unroll: Unroll) -> None:
        """A completed unroll (blocking is backpressure: the broker and actors wait)."""
        ...

    def train(self, env_steps: Callable[[], int]) -> None:
        """Thread body: train until ``ctx.stop``; exceptions reach the run, which stops."""
        ...

    def metrics(self) -> dict[str, float | int | None]:
        """This interval's values of ``metric_columns``."""
        ...

    def progress(self, row: dict[str, Any]) -> str:
        """The algorithm's part of the one-line progress report."""
        ...

    def judged_returns(self, returns: list[float]) -> list[float]:
        """The episode returns the run's target is judged by (R2D2: its eval envs')."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything it owns for a checkpoint (call under the weights lock)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def save_files(self, run_dir: str) -> None:
        """Large state kept beside the checkpoints (R2D2's replay, when configured)."""
        ...

    def restore_files(self, checkpoint_dir: str) -> None: ...


def require_discrete(spec: EnvSpec, algorithm: str) -> None:
    """Refuse a continuous action space for an algorithm whose head is discrete (a
    :class:`~seedq.schema.ConfigError`: the run stops at start-up with the message, exit 2)."""
    if spec.continuous:
        raise ConfigError(
            f"algorithm={algorithm} supports discrete actions only; this env has {spec.num_actions}"
            "-dimensional continuous actions: use algorithm=ppo or algorithm=sac"
        )


class ModelAndLearnerState:
    """The checkpoint part of an agent that owns ``model`` and ``learner`` (whose
    ``state_dict`` holds its optimizer) and keeps nothing beside its checkpoints; it is
    judged by all its episodes."""

    model: torch.nn.Module
    learner: Any

    def judged_returns(self, returns: list[float]) -> list[float]:
        return returns

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), **self.learner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.learner.load_state_dict(state)

    def save_files(self, run_dir: str) -> None:
        """Nothing is kept beside the checkpoints."""

    def restore_files(self, checkpoint_dir: str) -> None:
        """Nothing is kept beside the checkpoints."""


def build_agent(ctx: RunContext) -> Agent:
    """The configured algorithm's agent for a run."""
    from seedq.agents.registry import agent_class

    return agent_class(ctx.cfg.algorithm.name)(ctx)
