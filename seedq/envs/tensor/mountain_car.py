"""MountainCar-v0 as batched tensor code, step for step gymnasium's ``MountainCarEnv``.

Gymnasium (float64 state) adds the push and gravity to the velocity, clips it to ``0.07`` in
magnitude, moves the car and clips its position to ``[-1.2, 0.6]``; a car that hits the left
wall with a negative velocity stops dead (velocity 0). The episode terminates at
``position >= 0.5`` with ``velocity >= 0``; reward is -1 on every step. Reset puts the car at
rest at a position uniform in ``[-0.6, -0.4)``.
"""

from __future__ import annotations

import torch

from seedq.envs.tensor.base import TensorEnvBase

__all__ = ["MountainCar"]


class MountainCar(TensorEnvBase):
    """``N`` MountainCar-v0 envs. State ``[N, 2]``: ``(position, velocity)``; obs the same as
    float32; actions 0, 1, 2 accelerate left, not at all, right; time limit 200."""

    env_id = "MountainCar-v0"
    obs_shape = (2,)
    num_actions = 3
    state_size = 2
    default_max_episode_steps = 200

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.5
    goal_velocity = 0.0
    force = 0.001
    gravity = 0.0025
    reset_low, reset_high = -0.6, -0.4

    def _initial_state(self, n: int) -> torch.Tensor:
        u = torch.rand(n, generator=self.generator, device=self.device, dtype=self.dtype)
        position = self.reset_low + (self.reset_high - self.reset_low) * u
        return torch.stack((position, torch.zeros_like(position)), dim=1)

    def _transition(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        position, velocity = state.unbind(1)
        push = (actions - 1).to(self.dtype) * self.force
        velocity = velocity + (push + torch.cos(3 * position) * (-self.gravity))
        velocity = velocity.clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        # The left wall is inelastic.
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        reward = torch.full_like(position, -1.0, dtype=torch.float32)
        return torch.stack((position, velocity), dim=1), reward, terminated

    def _observation(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32)
