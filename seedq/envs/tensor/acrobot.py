"""Acrobot-v1 as batched tensor code, step for step gymnasium's ``AcrobotEnv``.

Gymnasium integrates the "book" dynamics (Sutton & Barto) over ``dt = 0.2`` s with one classic
Runge-Kutta step in float64, wraps both angles into ``[-pi, pi]``, clips the angular velocities
to ``4 pi`` and ``9 pi``, and ends the episode when the tip rises above the bar:
``-cos(theta1) - cos(theta2 + theta1) > 1``. Reward is -1 per step, 0 on the terminating one.
Its reset draws the state uniformly from ``[-0.1, 0.1)`` and rounds it to float32; we do the
same so that the two start from identical values. Expressions keep gymnasium's operation order.
"""

from __future__ import annotations

import math

import torch

from seedq.envs.tensor.base import TensorEnvBase

__all__ = ["Acrobot"]

_PI = math.pi


def _wrap(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Gymnasium's ``wrap``: add or subtract ``high - low`` until ``low <= x <= high``.

    Gymnasium loops while out of range; two unrolled passes cover any angle one step can reach
    from ``[-pi, pi]`` (|velocity| <= 9 pi over 0.2 s) with the same roundings as its loop.
    """
    diff = high - low
    for _ in range(2):
        x = torch.where(x > high, x - diff, x)
    for _ in range(2):
        x = torch.where(x < low, x + diff, x)
    return x


class Acrobot(TensorEnvBase):
    """``N`` Acrobot-v1 envs. State ``[N, 4]``: ``(theta1, theta2, dtheta1, dtheta2)``; obs
    ``[N, 6]`` float32 ``(cos theta1, sin theta1, cos theta2, sin theta2, dtheta1, dtheta2)``;
    actions 0, 1, 2 apply torque -1, 0, +1 on the joint between the links; time limit 500."""

    env_id = "Acrobot-v1"
    obs_shape = (6,)
    num_actions = 3
    state_size = 4
    default_max_episode_steps = 500

    dt = 0.2
    link_length_1 = 1.0
    link_mass_1 = 1.0
    link_mass_2 = 1.0
    link_com_pos_1 = 0.5
    link_com_pos_2 = 0.5
    link_moi = 1.0
    max_vel_1 = 4 * _PI
    max_vel_2 = 9 * _PI
    reset_low, reset_high = -0.1, 0.1

    def _initial_state(self, n: int) -> torch.Tensor:
        u = torch.rand(n, 4, generator=self.generator, device=self.device, dtype=self.dtype)
        state = self.reset_low + (self.reset_high - self.reset_low) * u
        return state.to(torch.float32).to(self.dtype)

    def _derivatives(
        self, s: tuple[torch.Tensor, ...], a: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Gymnasium's ``_dsdt`` ("book" dynamics) for ``s = (theta1, theta2, dtheta1, dtheta2)``
        (each ``[N]``) and torque ``a [N]``."""
        m1, m2 = self.link_mass_1, self.link_mass_2
        l1 = self.link_length_1
        lc1, lc2 = self.link_com_pos_1, self.link_com_pos_2
        I1 = I2 = self.link_moi  # noqa: N806 (the physics' names)
        g = 9.8
        theta1, theta2, dtheta1, dtheta2 = s
        cos_theta2, sin_theta2 = torch.cos(theta2), torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos_theta2) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos_theta2) + I2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - _PI / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin_theta2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin_theta2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - _PI / 2)
            + phi2
        )
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin_theta2 - phi2) / (
            m2 * lc2**2 + I2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return dtheta1, dtheta2, ddtheta1, ddtheta2

    def _transition(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        torque = (actions - 1).to(self.dtype)  # AVAIL_TORQUE = [-1, 0, +1]
        # Gymnasium's rk4 over t = [0, dt]: one step of size dt, half-steps dt / 2.
        dt, dt2 = self.dt, self.dt / 2.0
        y0 = state.unbind(1)
        k1 = self._derivatives(y0, torque)
        k2 = self._derivatives(tuple(y + dt2 * k for y, k in zip(y0, k1, strict=True)), torque)
        k3 = self._derivatives(tuple(y + dt2 * k for y, k in zip(y0, k2, strict=True)), torque)
        k4 = self._derivatives(tuple(y + dt * k for y, k in zip(y0, k3, strict=True)), torque)
        theta1, theta2, dtheta1, dtheta2 = (
            y + dt / 6.0 * (a + 2 * b + 2 * c + d)
            for y, a, b, c, d in zip(y0, k1, k2, k3, k4, strict=True)
        )
        theta1 = _wrap(theta1, -_PI, _PI)
        theta2 = _wrap(theta2, -_PI, _PI)
        dtheta1 = dtheta1.clamp(-self.max_vel_1, self.max_vel_1)
        dtheta2 = dtheta2.clamp(-self.max_vel_2, self.max_vel_2)
        terminated = -torch.cos(theta1) - torch.cos(theta2 + theta1) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(torch.float32)
        return torch.stack((theta1, theta2, dtheta1, dtheta2), dim=1), reward, terminated

    def _observation(self, state: torch.Tensor) -> torch.Tensor:
        theta1, theta2, dtheta1, dtheta2 = state.unbind(1)
        obs = (
            torch.cos(theta1),
            torch.sin(theta1),
            torch.cos(theta2),
            torch.sin(theta2),
            dtheta1,
            dtheta2,
        )
        return torch.stack(obs, dim=1).to(torch.float32)
