"""The PPO update: GAE once per collected batch, then epochs of minibatch steps.

Row t of a batch ``[T+1, B]`` holds obs t and the action and policy parameters the acting
network produced at it; the last row only bootstraps. Old log-probabilities come from the stored
parameters (the policy that really acted); old values and the GAE targets come from one forward
of the network before the first step (the collecting network, when acting paused during the
update). Observation statistics are merged only after the last step on a batch, under the
weights lock, so the batch is trained on with exactly the statistics it was collected with.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from seedq.agents.common.indicators import param_groups
from seedq.agents.common.normalize import update_obs_norm
from seedq.agents.common.onpolicy import LossMeans, OnPolicyLearner
from seedq.agents.common.update import GradientStep, Placement, make_adam
from seedq.agents.ppo.config import PPOConfig
from seedq.agents.ppo.loss import PPOLoss, gae, ppo_loss
from seedq.core.unroll import Unroll
from seedq.messages import EnvSpec

_STAT_KEYS = PPOLoss._fields


class PPOLearner(OnPolicyLearner):
    """Trains ``model`` on whole collected batches; owns the optimizer and the reward scaler."""

    def __init__(
        self,
        model: torch.nn.Module,
        cfg: PPOConfig,
        placement: Placement,
        *,
        total_env_steps: int,
        seed: int = 0,
        spec: EnvSpec | None = None,
    ) -> None:
        """``spec``: the env's, so weights reading indicator observations get their learning
        rate (``algorithm.indicator_lr_scale``)."""
        groups = param_groups(model, spec, cfg.lr, cfg.indicator_lr_scale)
        optimizer = make_adam(groups, lr=cfg.lr, eps=cfg.adam_eps)
        step = GradientStep(model.parameters(), optimizer, placement, grad_clip=cfg.grad_clip)
        super().__init__(model, cfg, step, total_env_steps=total_env_steps)
        self.generator = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def targets(
        self, batch: Unroll, transitions: tuple[torch.Tensor, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Old log-probs, old values, advantages and returns, each ``[T, B]``, under the
        current weights; ``transitions``: the batch's rewards and discounts (computed once
        per batch: the reward scaler sees each batch once)."""
        tensor = self.step.tensor
        with self.step.autocast():
            out, _ = self.model(
                tensor(batch.obs), tensor(batch.done), tuple(tensor(s) for s in batch.core_state)
            )
        values = out.value.float()
        rewards, discounts = transitions
        advantages, returns = gae(rewards, discounts, values[:-1], values[-1], self.cfg.gae_lambda)
        behaviour = tensor(batch.behaviour)[:-1].float()
        old_log_probs = out.distribution.log_prob(behaviour, tensor(batch.action)[:-1])
        return {
            "old_log_probs": old_log_probs,
            "old_values": values[:-1],
            "advantages": advantages,
            "returns": returns,
        }

    def _minibatches(self, batch: Unroll) -> list[torch.Tensor]:
        """Index sets: transitions of ``[T * B]`` (feed-forward) or env columns (LSTM)."""
        lstm = len(batch.core_state) > 0
        T, B = batch.reward.shape[0] - 1, batch.reward.shape[1]
        perm = torch.randperm(B if lstm else T * B, generator=self.generator)
        return list(perm.chunk(self.cfg.minibatches))

    def _minibatch_loss(self, batch: Unroll, data: dict[str, torch.Tensor], index: torch.Tensor):  # noqa: ANN202
        cfg, tensor = self.cfg, self.step.tensor
        if batch.core_state:
            cols = index.numpy()
            obs, done = tensor(batch.obs[:, cols]), tensor(batch.done[:, cols])
            state = tuple(tensor(s[cols]) for s in batch.core_state)
            with self.step.autocast():
                out, _ = self.model(obs, done, state)
            params, values = out.policy[:-1].float(), out.value[:-1].float()
            actions = tensor(batch.action[:-1, cols])
            pick = {k: v[:, index.to(v.device)] for k, v in data.items()}
        else:
            flat = index.numpy()
            obs = batch.obs[:-1].reshape(-1, *batch.obs.shape[2:])[flat]
            with self.step.autocast():
                out, _ = self.model(tensor(obs)[None], tensor(np.zeros((1, len(flat)), bool)), ())
            params, values = out.policy[0].float(), out.value[0].float()
            actions = tensor(batch.action[:-1].reshape(-1, *batch.action.shape[2:])[flat])
            pick = {k: v.reshape(-1)[index.to(v.device)] for k, v in data.items()}
        dist = out.distribution
        return ppo_loss(
            dist.log_prob(params, actions),
            pick["old_log_probs"],
            pick["advantages"],
            values,
            pick["old_values"],
            pick["returns"],
            dist.entropy(params),
            clip_eps=cfg.clip_eps,
            value_cost=cfg.value_cost,
            entropy_cost=cfg.entropy_cost,
            value_clip=cfg.value_clip,
            normalize_advantages=cfg.normalize_advantages,
            value_scale=self.value_scale(),
        )

    def train_batch(self, batch: Unroll) -> dict[str, Any]:
        """``epochs x minibatches`` updates on ``batch``; the means of their losses."""
        transitions = self.transitions(batch, self.step.tensor(batch.done))
        data = self.targets(batch, transitions)
        if self.popart is not None and not self.update_value_norm(data["returns"]):
            # Before the updates, so they regress on returns standardised with this batch in
            # the moments. The head keeps its outputs, so the targets stay valid, except after
            # the first returns, which moved an untrained head's values: computed again.
            data = self.targets(batch, transitions)
        terms, samples = LossMeans(), []
        for _ in range(self.cfg.epochs):
            for index in self._minibatches(batch):
                if self.stopping():
                    break
                loss = self._minibatch_loss(batch, data, index)
                # Skipped on the device when not finite; the norms are read once (settle).
                terms.add(loss, self.step.apply_deferred(loss.total))
                samples.append(
                    int(index.numel()) * (batch.reward.shape[0] - 1 if batch.core_state else 1)
                )
        grad_norms = terms.settle(self.stats)
        self.stats.samples += sum(n for n, kept in zip(samples, terms.kept(), strict=True) if kept)
        if not terms:
            return {"skipped": True}
        # After the updates: this batch was trained with the statistics it was collected with.
        update_obs_norm(self.model, batch.obs[1:], self.step.weights_lock, self.step.collective)
        stats = {f"loss/{k}": mean for k, mean in zip(_STAT_KEYS, terms.means(), strict=True)}
        stats |= {
            "grad_norm": sum(grad_norms) / len(grad_norms),
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        self.stats.add(stats)
        return stats
