"""The protocol between an algorithm and everything that runs it.

The architectures (``seedq.arch``), ``seedq-bench``, ``seedq-eval`` and checkpointing use an
algorithm only through this interface (acme's builder idea): they never ask which algorithm it
is. An agent owns its network head, its action selector, what happens to each unroll, its
training loop, its metric columns and its checkpoint state. What it is given is a
:class:`RunContext`. This module sits below both the learner runtime (``seedq.learner``) and
the agents (``seedq.agents``); neither imports the other's internals.

Two ways an unroll reaches an agent:

* threaded (``arch=seed``, ``arch=sebulba``): central inference cuts unrolls from the request
  stream and hands each to ``on_unroll`` (a bounded queue, a replay); a training thread runs
  ``train(env_steps)`` until ``ctx.stop``::

      actor Step -> broker batch -> CentralInference.act: model forward + agent.selector
                                 -> CentralInference.record: UnrollStore (agent.unroll_layout)
                                 -> completed unroll -> agent.on_unroll
      training thread: agent.train(env_steps)

* synchronous (``arch=anakin``): the architecture collects an unroll on the device and calls
  ``learn(unroll, env_steps)``, which trains on it before returning. An agent that cannot learn
  that way (a replay agent) says so in its config class (``AlgorithmConfig.cannot``), and
  config validation refuses the pairing with that reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import numpy as np
import torch

from seedq.core.collective import LearnerCollective
from seedq.core.stats import TrainStats
from seedq.core.unroll import Unroll
from seedq.messages import EnvSpec


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
    # A torch.compile mode for the learner's forward ("none": eager). arch=anakin sets
    # hardware.compile here (its act-and-learn step is compiled whole); the threaded
    # architectures compile only inference (seedq.learner.inference).
    compile_training: str = "none"
    # The other learner ranks of a data-parallel run (hardware.learners > 1), else None: the
    # learner averages its gradients and takes its updates in lockstep through it.
    collective: LearnerCollective | None = None


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

    def unroll_columns(self) -> int:
        """Env columns of each unroll handed to ``on_unroll``, joined from several actors' (the
        training batch, written at once); 0: each actor's unroll as it completes."""
        ...

    def on_unroll(self, unroll: Unroll) -> None:
        """A completed unroll (blocking is backpressure: the broker and actors wait)."""
        ...

    def train(self, env_steps: Callable[[], int]) -> None:
        """Thread body: train until ``ctx.stop``; exceptions reach the run, which stops."""
        ...

    def learn(self, unroll: Unroll, env_steps: int) -> None:
        """Train on ``unroll`` now, before returning (Anakin's act-and-learn step); its arrays
        may be device tensors. Only agents whose config does not declare ``cannot["learn"]``."""
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
