"""The device-environment protocol: a batch of envs stepped as tensor code (Anakin).

Anakin (Podracer, Hessel et al. 2021) runs the environment on the learner's device, inside the
act-and-learn loop: the observations an env batch returns are already where the network is, and
nothing crosses to the host per step. Any simulator that honours :class:`TensorEnv` plugs in:

* ``reset(seed) -> obs [N, *obs_shape]`` starts every env afresh and reseeds its generator;
* ``observe() -> obs [N, *obs_shape]`` the current observation, without side effects;
* ``step(actions [N]) -> TensorStep`` advances all ``N`` envs by one step, with **same-step
  auto-reset**: an env whose episode ends on this step is reset inside ``step``, ``obs`` holds
  the first observation of its new episode and ``final_obs`` the observation the step led to;
* ``episode_return [N]`` / ``episode_length [N]`` of the running episodes, and
  ``drain_episode_stats()`` for the finished ones: they are summed on the device every step and
  read (one host sync) only when the caller asks, e.g. once per logging interval.

No call may loop over envs in Python or read a tensor's value on the host (``.item()``,
``bool(t)``, ``.any()`` in an ``if``); randomness comes from ``generator``, a
:class:`torch.Generator` on ``device``, so a seed reproduces a run on a given device.

:class:`TensorEnvBase` does all the bookkeeping (auto-reset, time limit, episode statistics,
argument checks); a simulator subclasses it and writes three pure functions of the state::

    class Corridor(TensorEnvBase):
        '''Walk along 10 cells; reaching the last one ends the episode with reward 1.'''

        env_id = "Corridor"
        obs_shape = (1,)
        num_actions = 2  # 0: left, 1: right
        state_size = 1
        default_max_episode_steps = 50

        def _initial_state(self, n: int) -> torch.Tensor:
            return torch.zeros(n, 1, dtype=self.dtype, device=self.device)

        def _transition(self, state, actions):
            position = (state[:, 0] + 2 * actions.to(self.dtype) - 1).clamp(min=0)
            at_end = position >= 9
            return position[:, None], at_end.to(torch.float32), at_end

        def _observation(self, state):
            return (state / 9).to(torch.float32)

    env = Corridor(num_envs=4096, device="cuda", seed=0)
    obs = env.observe()
    for _ in range(1000):
        actions = policy(obs)  # [N] integer actions, on env.device
        step = env.step(actions)
        # A truncated env bootstraps from value(step.final_obs); a terminated one from 0.
        obs = step.obs
    stats = env.drain_episode_stats()  # the one host sync, every logging interval

A simulator that keeps its own state (an external GPU physics engine, say) implements
:class:`TensorEnv` directly instead; ``isinstance(env, TensorEnv)`` checks the attributes.

As in the rest of seedq (``seedq.actor.envs``), ``terminated`` and ``truncated`` never both hold:
an episode that terminates on the step its time limit runs out counts as terminated, because
its value is zero whatever the clock says.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

import torch

__all__ = ["EpisodeStats", "TensorEnv", "TensorEnvBase", "TensorStep"]


def _is_integer(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


class TensorStep(NamedTuple):
    """One step of a batch of ``N`` device envs; every tensor lives on the env's device.

    Attributes:
        obs: ``[N, *obs_shape]`` (``obs_dtype``), the observation to act on next: for an env whose
            episode ended on this step, the first observation of its next episode.
        reward: ``[N]`` float32, the reward of this step.
        terminated: ``[N]`` bool, the episode reached a terminal state (its value is zero).
        truncated: ``[N]`` bool, the episode hit its time limit without terminating. Never True
            where ``terminated`` is.
        final_obs: ``[N, *obs_shape]``, the observation this step led to, before any reset:
            equal to ``obs`` in the rows of envs that go on; a learner bootstraps a truncated
            env from ``value(final_obs)``.
    """

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor


@dataclass(frozen=True)
class EpisodeStats:
    """Episodes finished since the last :meth:`TensorEnv.drain_episode_stats`, on the host.

    The return and length figures are ``nan`` when ``count`` is 0.
    """

    count: int
    return_mean: float
    return_min: float
    return_max: float
    length_mean: float


@runtime_checkable
class TensorEnv(Protocol):
    """A batch of ``num_envs`` environments stepped as tensor code on ``device``.

    See the module docstring for the contract of each call.
    """

    env_id: str
    num_envs: int
    device: torch.device
    obs_shape: tuple[int, ...]
    obs_dtype: torch.dtype
    num_actions: int
    max_episode_steps: int
    generator: torch.Generator
    episode_return: torch.Tensor  # [N] float32, return of the running episode so far
    episode_length: torch.Tensor  # [N] int32, steps taken in the running episode

    def reset(self, seed: int) -> torch.Tensor:
        """Reseed, start a new episode in every env, clear the statistics; ``[N, *obs_shape]``."""
        ...

    def observe(self) -> torch.Tensor:
        """The current observation ``[N, *obs_shape]``; no side effects."""
        ...

    def step(self, actions: torch.Tensor) -> TensorStep:
        """Advance every env by one step, with same-step auto-reset; ``actions``: ``[N]`` int."""
        ...

    def drain_episode_stats(self) -> EpisodeStats:
        """Statistics of the episodes finished since the last drain (one host sync)."""
        ...


class TensorEnvBase(ABC):
    """Auto-reset, time limit, episode statistics and checks around a pure tensor simulator.

    A subclass sets the class attributes ``env_id``, ``obs_shape``, ``num_actions``,
    ``state_size`` and ``default_max_episode_steps`` and implements :meth:`_initial_state`,
    :meth:`_transition` and :meth:`_observation`, which must work on any device and any ``N``
    without host syncs.

    Args:
        num_envs: ``N``, the number of envs in the batch.
        device: where the state, the generator and every returned tensor live.
        seed: seed of the reset distribution; the constructor calls ``reset(seed)``.
        max_episode_steps: time limit; ``None`` takes the env's default (gymnasium's for the
            classic-control envs).
        dtype: floating dtype of the state. float64 reproduces gymnasium step for step; float32
            is for devices without (fast) float64, at the cost of slowly diverging trajectories.
    """

    env_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: torch.dtype = torch.float32
    num_actions: int
    state_size: int
    default_max_episode_steps: int

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        max_episode_steps: int | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if max_episode_steps is None:
            max_episode_steps = self.default_max_episode_steps
        if not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ValueError(
                f"max_episode_steps must be a positive int or None (the env's default, "
                f"{self.default_max_episode_steps}), got {max_episode_steps!r}"
            )
        if not dtype.is_floating_point:
            raise ValueError(f"dtype is the state's floating dtype (float64/float32), got {dtype}")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_steps = max_episode_steps
        self.dtype = dtype
        self.generator = torch.Generator(device=self.device)
        self.reset(seed)

    @abstractmethod
    def _initial_state(self, n: int) -> torch.Tensor:
        """``n`` draws from the reset distribution, ``[n, state_size]`` (``dtype``), drawn with
        ``self.generator``."""

    @abstractmethod
    def _transition(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of the dynamics, without time limit or reset.

        Args:
            state: ``[N, state_size]``.
            actions: ``[N]`` integer actions in ``[0, num_actions)``.

        Returns:
            ``(next_state [N, state_size], reward [N] float32, terminated [N] bool)``.
        """

    @abstractmethod
    def _observation(self, state: torch.Tensor) -> torch.Tensor:
        """The observation of ``state [N, state_size]``: ``[N, *obs_shape]`` (``obs_dtype``)."""

    def reset(self, seed: int) -> torch.Tensor:
        """Reseed ``generator``, draw a fresh state for every env, clear the episode counters and
        statistics. Returns the first observations, ``[N, *obs_shape]``."""
        self.generator.manual_seed(seed)
        n, dev = self.num_envs, self.device
        self.state = self._initial_state(n)
        self.episode_return = torch.zeros(n, dtype=torch.float32, device=dev)
        self.episode_length = torch.zeros(n, dtype=torch.int32, device=dev)
        # Finished-episode accumulators, 0-d tensors the caller drains now and then.
        self._finished_count = torch.zeros((), dtype=torch.int64, device=dev)
        self._finished_return_sum = torch.zeros((), dtype=self.dtype, device=dev)
        self._finished_length_sum = torch.zeros((), dtype=torch.int64, device=dev)
        self._finished_return_min = torch.full((), math.inf, dtype=torch.float32, device=dev)
        self._finished_return_max = torch.full((), -math.inf, dtype=torch.float32, device=dev)
        return self.observe()

    def observe(self) -> torch.Tensor:
        """The current observation ``[N, *obs_shape]``; no side effects."""
        return self._observation(self.state)

    def step(self, actions: torch.Tensor) -> TensorStep:
        """Advance every env by one step; envs whose episode ends are reset in the same call.

        Args:
            actions: ``[N]`` integer actions in ``[0, num_actions)``. Values are not checked
                (that would need a host sync); out-of-range actions give meaningless dynamics.

        Returns:
            A :class:`TensorStep`; see its docstring for the shapes and the auto-reset contract.
        """
        if actions.shape != (self.num_envs,):
            raise ValueError(
                f"{self.env_id}: actions must have shape [num_envs] = [{self.num_envs}], "
                f"got {list(actions.shape)}"
            )
        if not _is_integer(actions.dtype):
            raise ValueError(
                f"{self.env_id}: actions must be integer indices in [0, {self.num_actions}), "
                f"got dtype {actions.dtype}"
            )
        state, reward, terminated = self._transition(self.state, actions.to(self.device))
        self.episode_return += reward
        self.episode_length += 1
        truncated = (self.episode_length >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        final_obs = self._observation(state)
        self._record_finished(done)
        # Drawing N fresh states and selecting costs far less on a device than a host sync to
        # find out which envs are done.
        self.state = torch.where(done[:, None], self._initial_state(self.num_envs), state)
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0)
        return TensorStep(self.observe(), reward, terminated, truncated, final_obs)

    def _record_finished(self, done: torch.Tensor) -> None:
        """Fold the episodes ending now (``done [N]`` bool) into the device accumulators."""
        returns = self.episode_return
        self._finished_count += done.sum()
        self._finished_return_sum += torch.where(done, returns, 0.0).sum(dtype=self.dtype)
        self._finished_length_sum += torch.where(done, self.episode_length, 0).sum()
        self._finished_return_min = torch.minimum(
            self._finished_return_min, torch.where(done, returns, math.inf).amin()
        )
        self._finished_return_max = torch.maximum(
            self._finished_return_max, torch.where(done, returns, -math.inf).amax()
        )

    def drain_episode_stats(self) -> EpisodeStats:
        """Statistics of the episodes finished since the last drain (or reset), then clear them.

        This is the only call that waits for the device; call it once per logging interval.
        """
        count, return_sum, length_sum, return_min, return_max = torch.stack(
            [
                self._finished_count.to(torch.float64),
                self._finished_return_sum.to(torch.float64),
                self._finished_length_sum.to(torch.float64),
                self._finished_return_min.to(torch.float64),
                self._finished_return_max.to(torch.float64),
            ]
        ).tolist()
        self._finished_count.zero_()
        self._finished_return_sum.zero_()
        self._finished_length_sum.zero_()
        self._finished_return_min.fill_(math.inf)
        self._finished_return_max.fill_(-math.inf)
        if count == 0:
            return EpisodeStats(0, math.nan, math.nan, math.nan, math.nan)
        return EpisodeStats(
            count=int(count),
            return_mean=return_sum / count,
            return_min=return_min,
            return_max=return_max,
            length_mean=length_sum / count,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.env_id!r}, num_envs={self.num_envs}, "
            f"device={self.device}, dtype={self.dtype}, max_episode_steps={self.max_episode_steps})"
        )
