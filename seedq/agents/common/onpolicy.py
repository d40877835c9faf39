"""What the on-policy algorithms (V-trace, PPO) share: a learner that trains on whole batches of
fresh unrolls, and an agent that feeds it from a small bounded queue or synchronously.

Threaded (``arch=seed``, ``arch=sebulba``): completed unrolls are cut into batches of
``batch_size`` env columns for a bounded queue (fresh, nearly on-policy data); the training
thread takes one batch per :meth:`OnPolicyAgent.learn`. When training falls behind, the queue
fills, the sink blocks, inference stops answering and the actors wait. With ``pause_acting``
the sink also waits until the batch it queued has been trained on, so the next steps are taken
by the new policy (PPO).

Synchronous (``arch=anakin``): the architecture calls :meth:`OnPolicyAgent.learn` itself with
each unroll it collected on the device.
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from seedq.agents.common.base import AgentBase, first_items_steps, from_envs
from seedq.agents.common.batches import BatchAssembler
from seedq.agents.common.reward_scaler import RewardScaler
from seedq.agents.common.targets import clip_rewards, transition_rewards
from seedq.agents.common.update import GradientStep, linear_lr, load_optimizer_state
from seedq.agents.common.value_norm import popart_of
from seedq.core.agent import RunContext
from seedq.core.stats import TrainStats
from seedq.core.unroll import Unroll


class LossMeans:
    """The loss terms (a NamedTuple of 0-dim tensors) and gradient norm of each update a batch
    took, kept where they are and read once for the batch. Reading each term of each update
    (``float``) cost a host sync per term and update, 6 x 16 a batch with the Atari presets,
    and reading each norm one per update (on a GPU, a stall of the training thread each
    time): the norms come from :meth:`GradientStep.apply_deferred`, NaN for an update the
    device skipped, and :meth:`settle` counts them."""

    def __init__(self) -> None:
        self._terms: list[torch.Tensor] = []
        self._norms: list[torch.Tensor] = []
        self._kept: list[bool] | None = None

    def add(self, loss: tuple[torch.Tensor, ...], grad_norm: torch.Tensor | None = None) -> None:
        with torch.no_grad():  # a copy of the values: no graph kept alive with it
            self._terms.append(torch.stack(list(loss)))
            if grad_norm is not None:
                self._norms.append(grad_norm.detach().to(self._terms[-1].device).float())

    def settle(self, stats: TrainStats) -> list[float]:
        """Read the norms added and count each update with ``stats.record_step`` (a NaN: a
        skipped update, whose terms are left out of :meth:`means`); the taken updates' norms,
        in order."""
        norms = torch.stack(self._norms).tolist() if self._norms else []
        self._kept = [stats.record_step(norm) for norm in norms]
        return [norm for norm, kept in zip(norms, self._kept, strict=True) if kept]

    def kept(self) -> list[bool]:
        """Whether each update added was taken (all of them before :meth:`settle`)."""
        return [True] * len(self._terms) if self._kept is None else list(self._kept)

    def __len__(self) -> int:
        return sum(self.kept())

    def means(self) -> list[float]:
        """Each term's mean over the updates added (after :meth:`settle`, those taken), in the
        loss's order (float64 sums)."""
        terms = self._terms
        if self._kept is not None:
            terms = [t for t, kept in zip(terms, self._kept, strict=True) if kept]
        return torch.stack(terms).double().mean(0).tolist()


class OnPolicyLearner(ABC):
    """Owns the optimizer (through ``step``), the reward scaler and the learning-rate schedule;
    subclasses implement ``train_batch(batch)``."""

    def __init__(
        self, model: torch.nn.Module, cfg: Any, step: GradientStep, *, total_env_steps: int
    ) -> None:
        self.model, self.cfg, self.step = model, cfg, step
        self.optimizer = step.optimizer
        self.total_env_steps = total_env_steps
        self.reward_scaler = RewardScaler(cfg.gamma) if cfg.reward_scaling else None
        self.stats = TrainStats()
        # Set by the agent to the run's stop: a batch of many minibatch updates ends between
        # two of them, so a stopping run never leaves its training thread inside torch.
        self.stop_event: threading.Event | None = None
        # The PopArt value head (algorithm.value_norm): its normaliser and its linear layer.
        self.popart = popart_of(model)

    def value_scale(self) -> torch.Tensor | None:
        """The std the value error is divided by (PopArt), or None."""
        return None if self.popart is None else self.popart[0].std()

    def update_value_norm(self, targets: torch.Tensor) -> bool:
        """Move the PopArt moments with this batch's value targets (every rank's, in rank
        order, with several learners), preserving the value head's outputs; under the weights
        lock, so inference never reads a half-rescaled head. False when these were the first
        targets, which set the moments and leave the head's outputs to move (so targets
        computed from its values must be computed again)."""
        norm, head = self.popart
        preserved = bool(norm.count > 0)
        targets = targets.reshape(-1, 1)
        if self.step.collective is not None:
            targets = self.step.collective.gather_rows(targets)
        with self.step.weights_lock:
            norm.update(targets, head)
        return preserved

    def stopping(self) -> bool:
        """Whether to end this batch before its next update. Never with several learner ranks:
        each update is a gradient average every rank must join, so they stop together at the
        next training round instead (a rank that left alone would hang the others)."""
        if self.step.collective is not None:
            return False
        return self.stop_event is not None and self.stop_event.is_set()

    def set_progress(self, env_steps: int) -> None:
        if self.cfg.lr_schedule == "linear":
            linear_lr(
                self.optimizer,
                self.cfg.lr,
                env_steps,
                self.total_env_steps,
                start=self.cfg.lr_decay_start,
            )

    @abstractmethod
    def train_batch(self, batch: Unroll) -> dict[str, Any]:
        """One collected batch's updates; the stats of its metrics row."""

    def transitions(self, batch: Unroll, done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rewards and discounts ``[T, B]`` of the T transitions of ``batch`` (``done``: its
        ``done`` on the device): rewards clipped, then scaled (``reward_scaling``), and
        bootstrapped from the truncation values; no discount into an episode's first
        observation.

        Clipped first, as DeepMind's Atari wrappers (and CleanRL's, Sample Factory's) clip in
        the env: scaled first, a clip to [-1, 1] undid the scaling of every reward the return's
        std made larger, and the scaler's returns were not those of the rewards trained on.
        """
        cfg, tensor = self.cfg, self.step.tensor
        reward, clip = batch.reward, cfg.reward_clip
        if self.reward_scaler is not None:
            reward = self.reward_scaler.scale(clip_rewards(reward, clip), batch.done, batch.env_id)
            clip = "none"
        rewards = transition_rewards(
            tensor(reward),
            tensor(batch.truncated),
            tensor(batch.truncation_value),
            first=1,
            gamma=cfg.gamma,
            reward_clip=clip,
        )
        return rewards, cfg.gamma * (~done[1:]).to(rewards.dtype)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"optimizer": self.optimizer.state_dict()}
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_optimizer_state(self.optimizer, state["optimizer"])
        if self.reward_scaler is not None and "reward_scaler" in state:
            self.reward_scaler.load_state_dict(state["reward_scaler"])


class OnPolicyAgent(AgentBase):
    """An agent whose learner trains on each batch of fresh unrolls once it is complete."""

    learner: OnPolicyLearner

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.learner.stop_event = ctx.stop
        size = int(getattr(self.alg, "train_queue_batches", 1))
        self.train_queue: queue.Queue[Unroll] = queue.Queue(maxsize=size)
        self.assembler = BatchAssembler(self.alg.batch_size)
        self._trained = threading.Event()
        # Wait in the sink until the batch just queued has been trained on (the module doc);
        # every on-policy algorithm's config has the key.
        self.pauses_acting = bool(self.alg.pause_acting)

    @classmethod
    def samples_per_update(cls, alg: Any) -> int:
        # A batch of batch_size unrolls, trained in ``minibatches`` shares per pass.
        return alg.batch_size * alg.unroll_length // alg.minibatches

    def unroll_columns(self) -> int:
        # Central inference writes each training batch at once; the assembler passes it on.
        return int(self.alg.batch_size)

    def before_training(self, envs: int = 1) -> tuple[int, str]:
        # The run's sized batch (batch_size 0 is one unroll of every env by now).
        columns, length = int(self.alg.batch_size), int(self.alg.unroll_length)
        return first_items_steps(columns, length, envs), (
            f"its first batch holds {columns} unrolls of {length} steps "
            f"(algorithm.batch_size, algorithm.unroll_length){from_envs(columns, envs)}"
        )

    def on_unroll(self, unroll: Unroll) -> None:
        stop = self.ctx.stop
        for batch in self.assembler.add(unroll):
            self._trained.clear()
            while not stop.is_set():
                try:
                    self.train_queue.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if self.pauses_acting:
                while not stop.is_set() and not self._trained.wait(0.1):
                    pass

    def train(self, env_steps: Callable[[], int]) -> None:
        def take() -> Unroll | None:
            try:
                return self.train_queue.get(timeout=0.1)
            except queue.Empty:
                return None

        def learn(batch: Unroll) -> None:
            try:
                self.learn(batch, env_steps())
            finally:
                self._trained.set()

        self.training_loop(take, learn)

    def learn(self, unroll: Unroll, env_steps: int) -> None:
        self.learner.set_progress(env_steps)
        self.learner.train_batch(unroll)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), **self.learner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.learner.load_state_dict(state)

    def save_files(self, run_dir: str) -> None:
        """Nothing is kept beside the checkpoints."""

    def restore_files(self, checkpoint_dir: str) -> None:
        """Nothing is kept beside the checkpoints."""
