"""The SAC update on a batch of replayed transitions: critics, actor, temperature, targets.

One :meth:`SACLearner.train_step` is one step of the paper's algorithm 1: the twin critics
regress on the soft target of the target critics, the actor on the online critics, the
temperature on the policy's entropy, then the target critics move towards the online ones by
Polyak averaging. Each optimizer step is taken under the weights lock (``GradientStep``), so
inference never acts with a half-written network and a checkpoint never copies half-averaged
targets.

:meth:`SACLearner.train_block` takes ``K`` such steps on one sampled block of ``K B``
transitions (one replay draw, one upload), as SB3's ``gradient_steps`` takes several updates per
``train_freq``; the replay's rate limiter still holds the updates per env step. Between the
matrix products, what an update costs on a CPU is per-tensor work: the three Adam steps are
fused (one kernel per optimizer) and the target average is one ``_foreach_lerp_`` over cached
tensor lists (benchmarks/RESULTS.md, "SAC and R2D2 update rate").
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from seedq.agents.common.replay import SampledSequences
from seedq.agents.common.targets import transition_rewards
from seedq.agents.common.update import GradientStep, Placement, load_optimizer_state, make_adam
from seedq.agents.sac.config import SACConfig
from seedq.agents.sac.loss import actor_loss, critic_loss, soft_q_target, temperature_loss
from seedq.agents.sac.network import SACNet
from seedq.core.stats import TrainStats


class PolyakAverager:
    """``target <- (1 - tau) target + tau online`` for every floating parameter and buffer, in
    one fused call; other tensors (counters) are copied. The tensor lists are built once."""

    def __init__(self, target: torch.nn.Module, online: torch.nn.Module) -> None:
        pairs = list(zip(target.state_dict().values(), online.state_dict().values(), strict=True))
        self.float_pairs = [(t, o) for t, o in pairs if t.is_floating_point()]
        self.other_pairs = [(t, o) for t, o in pairs if not t.is_floating_point()]

    @torch.no_grad()
    def __call__(self, tau: float) -> None:
        if self.float_pairs:
            targets, onlines = zip(*self.float_pairs, strict=True)
            torch._foreach_lerp_(list(targets), list(onlines), tau)
        for t, o in self.other_pairs:
            t.copy_(o)


def polyak_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """``target <- (1 - tau) target + tau online`` for every parameter and buffer, in place."""
    PolyakAverager(target, online)(tau)


class SACLearner:
    """One SAC update per call; owns the target critics and the three optimizers."""

    def __init__(self, model: SACNet, cfg: SACConfig, placement: Placement) -> None:
        self.model, self.cfg = model, cfg
        self.target_critics = copy.deepcopy(model.critics).requires_grad_(False)
        target = cfg.target_entropy
        self.target_entropy = -float(model.unit.dim) if target is None else float(target)
        actor_params = [*model.actor_torso.parameters(), *model.policy_head.parameters()]
        self.steps = {
            name: GradientStep(
                params,
                make_adam(params, lr=cfg.lr, eps=cfg.adam_eps),
                placement,
                grad_clip=cfg.grad_clip,
            )
            for name, params in (
                ("critic", list(model.critics.parameters())),
                ("actor", actor_params),
                ("temperature", [model.log_alpha]),
            )
        }
        self.average_targets = PolyakAverager(self.target_critics, model.critics)
        self.optimizers = {name: step.optimizer for name, step in self.steps.items()}
        self.stats = TrainStats()

    def _batch(self, data: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """Device tensors: obs ``[2, B, ...]``, action ``[B, D]`` in [-1, 1], reward and
        discount ``[B]`` of transitions stored as two rows ``[B, 2, ...]``."""
        cfg, tensor, model = self.cfg, self.steps["critic"].tensor, self.model
        rows = {k: tensor(v).transpose(0, 1) for k, v in data.items()}  # [2, B, ...]
        rewards = transition_rewards(
            rows["reward"],
            rows["truncated"],
            rows["truncation_value"],
            first=1,
            gamma=cfg.gamma,
            reward_clip=cfg.reward_clip,
        )[0]
        return {
            "obs": rows["obs"],
            "action": model.to_unit(rows["action"][0]),
            "reward": rewards,
            "discount": cfg.gamma * (~rows["done"][1]).to(rewards.dtype),
        }

    def train_block(self, sample: SampledSequences, updates: int) -> None:
        """``updates`` consecutive updates, each on its own ``B`` of the ``updates * B``
        transitions of ``sample`` (uploaded once)."""
        block = self._batch(sample.data)
        size = len(block["reward"]) // updates
        for i in range(updates):
            part = slice(i * size, (i + 1) * size)
            self.update({k: v[:, part] if k == "obs" else v[part] for k, v in block.items()})

    def train_step(self, sample: SampledSequences) -> dict[str, float] | None:
        """Update on B transitions; their mean losses, or None if the critic step was skipped
        (a loss or gradient that was not finite)."""
        return self.update(self._batch(sample.data))

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float] | None:
        """One update on a batch as :meth:`_batch` makes it."""
        model, step = self.model, self.steps["critic"]
        with step.autocast():
            x = model.normalize(batch["obs"].reshape(-1, *batch["obs"].shape[2:]))
            x, next_x = x.view(2, -1, x.shape[-1]).unbind(0)
            with torch.no_grad():
                alpha = model.log_alpha.exp()
                next_action, next_log_prob = model.sample(model.policy(next_x))
                next_q = model.q(next_x, next_action, self.target_critics).float()
                y = soft_q_target(
                    batch["reward"], batch["discount"], *next_q, next_log_prob.float(), alpha
                )
            q = model.q(x, batch["action"]).float()
            loss_q = critic_loss(q[0], q[1], y)
        grad_norm = step.apply(loss_q, after_step=self._after_critic_step)
        if not self.stats.record_step(grad_norm):
            return None
        # The actor's gradient goes through the critics to the action only: frozen critics
        # skip their weight gradients (inference runs without autograd, unaffected).
        model.critics.requires_grad_(False)
        try:
            with self.steps["actor"].autocast():
                action, log_prob = model.sample(model.policy(x))
                loss_pi = actor_loss(log_prob.float(), *model.q(x, action).float(), alpha)
            self.steps["actor"].apply(loss_pi)
        finally:
            model.critics.requires_grad_(True)
        loss_alpha = temperature_loss(model.log_alpha, log_prob.float(), self.target_entropy)
        if self.cfg.learn_temperature:
            self.steps["temperature"].apply(loss_alpha)
        self.stats.samples += int(y.numel())
        stats = {
            "loss/critic": float(loss_q.detach()),
            "loss/actor": float(loss_pi.detach()),
            "loss/temperature": float(loss_alpha.detach()),
            "alpha": float(alpha),
            "entropy": float(-log_prob.detach().mean()),
            "q_mean": float(q[0].detach().mean()),
            "grad_norm": grad_norm,
            "lr": self.optimizers["critic"].param_groups[0]["lr"],
        }
        self.stats.add(stats)
        return stats

    def _after_critic_step(self) -> None:
        # Under the weights lock, so a checkpoint never copies half-averaged targets.
        self.average_targets(self.cfg.tau)

    def state_dict(self) -> dict[str, Any]:
        return {
            "target_critics": self.target_critics.state_dict(),
            **{f"optimizer/{k}": opt.state_dict() for k, opt in self.optimizers.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.target_critics.load_state_dict(state["target_critics"])
        for name, opt in self.optimizers.items():
            load_optimizer_state(opt, state[f"optimizer/{name}"])
