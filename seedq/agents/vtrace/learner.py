"""The V-trace update on a batch of unrolls ``[T+1, B]``."""

from __future__ import annotations

from typing import Any

import torch

from seedq.agents.common.indicators import param_groups
from seedq.agents.common.normalize import update_obs_norm
from seedq.agents.common.onpolicy import OnPolicyLearner
from seedq.agents.common.update import GradientStep, Placement
from seedq.agents.vtrace.config import VTraceConfig
from seedq.agents.vtrace.loss import vtrace_loss
from seedq.core.unroll import Unroll
from seedq.messages import EnvSpec


def make_optimizer(
    model: torch.nn.Module, cfg: VTraceConfig, spec: EnvSpec | None = None
) -> torch.optim.Optimizer:
    """Adam or RMSprop over ``model``; with ``spec``, weights reading indicator observations
    get their learning rate (``algorithm.indicator_lr_scale``)."""
    groups = param_groups(model, spec, cfg.lr, cfg.indicator_lr_scale)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, eps=cfg.adam_eps)
    return torch.optim.RMSprop(
        groups,
        lr=cfg.lr,
        alpha=cfg.rmsprop_alpha,
        eps=cfg.rmsprop_eps,
        momentum=cfg.rmsprop_momentum,
    )


class VTraceLearner(OnPolicyLearner):
    """One V-trace update per batch; owns the optimizer and the reward scaler."""

    def __init__(
        self,
        model: torch.nn.Module,
        cfg: VTraceConfig,
        placement: Placement,
        *,
        total_env_steps: int,
        spec: EnvSpec | None = None,
    ) -> None:
        optimizer = make_optimizer(model, cfg, spec)
        step = GradientStep(model.parameters(), optimizer, placement, grad_clip=cfg.grad_clip)
        super().__init__(model, cfg, step, total_env_steps=total_env_steps)

    def loss(self, batch: Unroll):  # noqa: ANN201 - a VTraceLoss
        """The IMPALA loss of ``batch`` under the current weights.

        Row t of ``batch`` holds obs t and the behaviour logits and action taken at it; the
        last row only bootstraps (its value), so the loss sees rows ``[:-1]`` of everything
        per-step and the transitions' rewards/discounts come from rows ``[1:]``.
        """
        cfg, tensor = self.cfg, self.step.tensor
        obs, done = tensor(batch.obs), tensor(batch.done)
        state = tuple(tensor(s) for s in batch.core_state)
        with self.step.autocast():
            out, _ = self.model(obs, done, state)
        logits, values = out.logits.float(), out.baseline.float()
        rewards, discounts = self.transitions(batch, done)
        return vtrace_loss(
            target_logits=logits[:-1],
            behaviour_logits=tensor(batch.behaviour)[:-1],
            actions=tensor(batch.action).long()[:-1],
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

    def train_batch(self, batch: Unroll) -> dict[str, Any]:
        """One update; the returned stats have ``skipped=True`` when it was not finite."""
        loss = self.loss(batch)
        grad_norm = self.step.apply(loss.total)
        if not self.stats.record_step(grad_norm):
            # A skipped update leaves the observation statistics alone too: a NaN observation
            # must not poison them, and a run of skips keeps the last good model whole.
            return {"skipped": True}
        # After the step: this batch was trained with the statistics it was collected with.
        update_obs_norm(self.model, batch.obs[1:], self.step.weights_lock, self.step.collective)
        stats = {
            "loss/total": float(loss.total.detach()),
            "loss/pg": float(loss.pg.detach()),
            "loss/baseline": float(loss.baseline.detach()),
            "loss/entropy": float(loss.entropy.detach()),
            "grad_norm": grad_norm,
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        self.stats.samples += int(batch.action.shape[1]) * (int(batch.action.shape[0]) - 1)
        self.stats.add(stats)
        return stats
