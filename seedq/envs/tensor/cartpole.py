"""CartPole-v1 as batched tensor code, step for step gymnasium's ``CartPoleEnv``.

Gymnasium (1.x) keeps the state in float64, integrates with explicit Euler, terminates when the
cart leaves ``|x| <= 2.4`` or the pole ``|theta| <= 12 deg`` (checked on the float64 state), pays
reward 1 on every step including the terminating one, and returns the state cast to float32.
Every arithmetic expression below is written in gymnasium's order so that float64 results agree
to the last bit wherever ``cos``/``sin`` do.
"""

from __future__ import annotations

import math

import torch

from seedq.envs.tensor.base import TensorEnvBase

__all__ = ["CartPole"]


class CartPole(TensorEnvBase):
    """``N`` CartPole-v1 envs. State ``[N, 4]``: ``(x, x_dot, theta, theta_dot)``; obs the same
    as float32; actions 0 (push left) and 1 (push right); reset draws each state variable
    uniformly from ``[-0.05, 0.05)``; time limit 500."""

    env_id = "CartPole-v1"
    obs_shape = (4,)
    num_actions = 2
    state_size = 4
    default_max_episode_steps = 500

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds between state updates
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    reset_low, reset_high = -0.05, 0.05

    def _initial_state(self, n: int) -> torch.Tensor:
        u = torch.rand(n, 4, generator=self.generator, device=self.device, dtype=self.dtype)
        # numpy's uniform(low, high) is low + (high - low) * u.
        return self.reset_low + (self.reset_high - self.reset_low) * u

    def _transition(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, x_dot, theta, theta_dot = state.unbind(1)
        force = torch.where(actions == 1, self.force_mag, -self.force_mag).to(self.dtype)
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        temp = (force + self.polemass_length * (theta_dot * theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * (costheta * costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        terminated = (
            (x < -self.x_threshold)
            | (x > self.x_threshold)
            | (theta < -self.theta_threshold_radians)
            | (theta > self.theta_threshold_radians)
        )
        reward = torch.ones(state.shape[0], dtype=torch.float32, device=state.device)
        return torch.stack((x, x_dot, theta, theta_dot), dim=1), reward, terminated

    def _observation(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32)
