"""The R2D2 update on sampled sequences: burn-in, n-step double-Q targets, priorities."""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np
import torch

from seedq.agents.common.moments import FRAME_ELEMENTS
from seedq.agents.common.normalize import FRAME_ROWS, obs_norms, update_obs_norm
from seedq.agents.common.replay import SampledSequences
from seedq.agents.common.update import GradientStep, Placement, load_optimizer_state
from seedq.agents.r2d2.config import R2D2Config
from seedq.agents.r2d2.loss import n_step_double_q_targets, sequence_priorities
from seedq.agents.r2d2.sequences import trained_transitions
from seedq.core.stats import TrainStats

log = logging.getLogger(__name__)


class R2D2Learner:
    """One R2D2 update per call; owns the optimizer and the target network."""

    def __init__(self, model: torch.nn.Module, cfg: R2D2Config, placement: Placement) -> None:
        self.model = model
        self.target = copy.deepcopy(model).requires_grad_(False)
        self.cfg = cfg
        self.step = GradientStep.adam(model.parameters(), cfg, placement)
        self.optimizer = self.step.optimizer
        self.stats = TrainStats()
        # The network's observation normalisers (frame_norm, obs_norm): their statistics move
        # after each update, as V-trace's and PPO's do (False: none, or kept as loaded).
        self.merges_obs = bool(obs_norms(model))

    def td_errors(self, data: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """TD errors ``[L, B]`` (gradient through the online Q only) and the taken Q-values.

        ``data``: batch-major sequences ``[B, R, ...]`` as the replay stores them. The stored
        state starts both networks; the first ``burn_in`` rows only warm it (no gradient).
        """
        cfg, tensor, burn = self.cfg, self.step.tensor, self.cfg.burn_in
        obs = tensor(data["obs"]).transpose(0, 1)  # [R, B, ...]
        done = tensor(data["done"]).T
        core = tensor(data["core_state"])  # [B, k, H]
        state = tuple(core[:, i] for i in range(core.shape[1]))  # (h, c), each [B, H]
        with torch.no_grad(), self.step.autocast():
            online_state, target_state = state, state
            if burn:
                _, online_state = self.model(obs[:burn], done[:burn], state)
                _, target_state = self.target(obs[:burn], done[:burn], state)
            q_target = self.target(obs[burn:], done[burn:], target_state)[0].q.float()
        with self.step.autocast():
            q_online = self.model(obs[burn:], done[burn:], online_state)[0].q.float()
        rewards, dones = trained_transitions(
            tensor(data["reward"]).T,
            done,
            tensor(data["truncated"]).T,
            tensor(data["truncation_value"]).T,
            cfg,
        )
        y = n_step_double_q_targets(
            q_online.detach(),
            q_target,
            rewards,
            dones,
            gamma=cfg.gamma,
            n=cfg.n_step,
            eps=cfg.value_rescale_eps,
        )
        actions = tensor(data["action"]).T[burn:-1].long().unsqueeze(-1)
        q_taken = q_online[:-1].gather(-1, actions).squeeze(-1)
        return y - q_taken, q_taken  # y carries no gradient

    def train_step(self, sample: SampledSequences) -> np.ndarray | None:
        """Update on B sequences; their new priorities ``[B]``, or None if the update was
        skipped (a loss or gradient that was not finite)."""
        td, q_taken = self.td_errors(sample.data)
        weights = self.step.tensor(sample.weights)
        loss = (weights * (0.5 * td.pow(2)).mean(0)).mean()
        grad_norm = self.step.apply(loss, after_step=self._after_step)
        if not self.stats.record_step(grad_norm):
            # A skipped update leaves the observation statistics alone too (see V-trace's).
            return None
        self._merge_obs(sample.data["obs"])
        self.stats.samples += int(td.numel())
        self.stats.add(
            {
                "loss/td": float(loss.detach()),
                "q_mean": float(q_taken.detach().mean()),
                "grad_norm": grad_norm,
                "lr": self.optimizer.param_groups[0]["lr"],
            }
        )
        return sequence_priorities(td.detach(), self.cfg.priority_eta).cpu().numpy()

    def _merge_obs(self, obs: np.ndarray) -> None:
        """The sampled sequences' observations ``[B, R, ...]`` into the network's normalisers,
        after the update that trained on them. Frames: the rows a normaliser keeps of a large
        batch (``FRAME_ROWS``, evenly spaced in time-major order) are picked on the host, so a
        GPU learner uploads 64 frames, not the batch's ~8,000 again."""
        if not self.merges_obs:
            return
        count = obs.shape[0] * obs.shape[1]
        if obs[0, 0].size >= FRAME_ELEMENTS and count > FRAME_ROWS:
            picked = np.arange(0, count, -(-count // FRAME_ROWS))
            obs = obs[picked % obs.shape[0], picked // obs.shape[0]][None]
        update_obs_norm(self.model, obs, self.step.weights_lock, self.step.collective)

    def _after_step(self) -> None:
        # Runs under the weights lock, so a checkpoint never copies a half-updated target
        # network; this update is counted right after, hence the + 1.
        if (self.stats.updates + 1) % self.cfg.target_update_period == 0:
            self.target.load_state_dict(self.model.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "target": self.target.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The optimizer and target network of a checkpoint (the model is loaded first)."""
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.target.load_state_dict(state["target"])
        untouched = any(float(norm.count) == 0 for norm in obs_norms(self.model))
        if self.merges_obs and untouched and state["optimizer"].get("state"):
            # Before 2026-12-07 R2D2 never moved its normalisers' statistics, so a network
            # trained then saw frames as pixels / 255: starting them now would change every
            # input it learned on.
            self.merges_obs = False
            log.warning(
                "this checkpoint's network was trained without observation statistics "
                "(R2D2 kept none before 2026-12-07): it goes on seeing frames as pixels / 255 "
                "and vectors as they are; a new run normalises them (algorithm.model.frame_norm, "
                "obs_norm)"
            )
