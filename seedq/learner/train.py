"""The V-trace training step and the thread that runs it beside inference.

Training and inference share one model. Inference only reads the weights, so the lock is held
just around ``optimizer.step()`` (the in-place write) and around each inference forward: the
actors always act with a whole set of weights, never a half-updated one.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from seedq.config import VTraceConfig
from seedq.learner.losses.vtrace import vtrace_loss
from seedq.learner.models import ActorCriticNet
from seedq.learner.tensors import to_device
from seedq.learner.unroll_store import Unroll

log = logging.getLogger(__name__)


def make_optimizer(model: torch.nn.Module, cfg: VTraceConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    return torch.optim.RMSprop(
        model.parameters(),
        lr=cfg.lr,
        alpha=cfg.rmsprop_alpha,
        eps=cfg.rmsprop_eps,
        momentum=cfg.rmsprop_momentum,
    )


def clip_rewards(rewards: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "abs_one":
        return rewards.clamp(-1.0, 1.0)
    if mode == "tanh":
        # IMPALA's soft clipping for Atari: keeps reward sign and rough magnitude order.
        return torch.tanh(rewards / 5.0) * 5.0
    return rewards


def transition_targets(
    reward: torch.Tensor,
    done: torch.Tensor,
    truncated: torch.Tensor,
    truncation_value: torch.Tensor,
    *,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards and discounts ``[T, B]`` of the transitions t -> t+1 of unroll rows ``[T+1, B]``.

    Transition t earns the reward that arrived with obs t+1. If obs t+1 starts a new episode,
    the return stops there (discount 0): for a terminated episode that is the whole story; for
    a truncated one the value of its true last observation is added to the reward, so the
    return bootstraps from it and not from the next episode's first observation (Pardo et al.
    2018, "Time limits in reinforcement learning").
    """
    rewards = reward[1:] + gamma * truncation_value[1:] * truncated[1:].to(reward.dtype)
    discounts = gamma * (~done[1:]).to(reward.dtype)
    return rewards, discounts


@dataclass
class TrainStats:
    updates: int = 0
    samples: int = 0
    wait_s: float = 0.0
    busy_s: float = 0.0
    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, values: dict[str, float]) -> None:
        with self.lock:
            for key, value in values.items():
                self.sums[key] = self.sums.get(key, 0.0) + value
            self.count += 1

    def pop_means(self) -> dict[str, float]:
        """Mean of each scalar since the last call (losses for one logging interval)."""
        with self.lock:
            means = {k: v / self.count for k, v in self.sums.items()} if self.count else {}
            self.sums, self.count = {}, 0
        return means


class VTraceLearner:
    """One V-trace update on an Unroll batch ``[T+1, B]``."""

    def __init__(
        self,
        model: ActorCriticNet,
        cfg: VTraceConfig,
        device: torch.device,
        weights_lock: threading.Lock,
        *,
        total_env_steps: int,
        pin_memory: bool = False,
        amp_dtype: torch.dtype | None = None,
    ) -> None:
        self.model = model
        self.cfg = cfg
        self.device = device
        self.weights_lock = weights_lock
        self.total_env_steps = total_env_steps
        self.pin_memory = pin_memory and device.type == "cuda"
        self.amp_dtype = amp_dtype
        self.optimizer = make_optimizer(model, cfg)
        # fp16 needs loss scaling; bf16 has fp32's range and does not.
        self.scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
        self.stats = TrainStats()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return to_device(array, self.device, self.pin_memory)

    def set_progress(self, env_steps: int) -> None:
        if self.cfg.lr_schedule == "linear":
            fraction = max(0.0, 1.0 - env_steps / self.total_env_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = self.cfg.lr * fraction

    def train_step(self, batch: Unroll) -> dict[str, float]:
        cfg = self.cfg
        obs = self._tensor(batch.obs)
        done = self._tensor(batch.done)
        state = tuple(self._tensor(s) for s in batch.core_state)
        behaviour_logits = self._tensor(batch.behaviour)
        actions = self._tensor(batch.action).long()
        reward = clip_rewards(self._tensor(batch.reward), cfg.reward_clip)
        truncated = self._tensor(batch.truncated)
        truncation_value = self._tensor(batch.truncation_value)

        autocast = (
            torch.autocast(self.device.type, dtype=self.amp_dtype)
            if self.amp_dtype is not None
            else contextlib.nullcontext()
        )
        with autocast:
            out, _ = self.model(obs, done, state)
        logits, values = out.logits.float(), out.baseline.float()
        rewards, discounts = transition_targets(
            reward, done, truncated, truncation_value, gamma=cfg.gamma
        )
        loss = vtrace_loss(
            target_logits=logits[:-1],
            behaviour_logits=behaviour_logits[:-1],
            actions=actions[:-1],
            values=values[:-1],
            bootstrap_value=values[-1],
            rewards=rewards,
            discounts=discounts,
            baseline_cost=cfg.baseline_cost,
            entropy_cost=cfg.entropy_cost,
            clip_rho_threshold=cfg.clip_rho_threshold,
            clip_pg_rho_threshold=cfg.clip_pg_rho_threshold,
            lambda_=cfg.lambda_,
        )
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss.total).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        with self.weights_lock:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        stats = {
            "loss/total": float(loss.total.detach()),
            "loss/pg": float(loss.pg.detach()),
            "loss/baseline": float(loss.baseline.detach()),
            "loss/entropy": float(loss.entropy.detach()),
            "grad_norm": float(grad_norm),
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        self.stats.updates += 1
        self.stats.samples += int(batch.action.shape[1]) * (int(batch.action.shape[0]) - 1)
        self.stats.add(stats)
        return stats


def run_training(
    learner: VTraceLearner,
    train_queue: queue.Queue,
    stop: threading.Event,
    env_steps: Callable[[], int],
    errors: list[BaseException],
) -> None:
    """Thread body: train on batches until ``stop``; an exception is stored and stops the run."""
    try:
        while not stop.is_set():
            start = time.monotonic()
            try:
                batch = train_queue.get(timeout=0.1)
            except queue.Empty:
                learner.stats.wait_s += time.monotonic() - start
                continue
            learner.stats.wait_s += time.monotonic() - start
            begin = time.monotonic()
            learner.set_progress(env_steps())
            learner.train_step(batch)
            learner.stats.busy_s += time.monotonic() - begin
    except BaseException as exc:  # noqa: BLE001 - reported by the run loop, which stops the run
        log.exception("training thread failed")
        errors.append(exc)
        stop.set()
