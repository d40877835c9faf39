"""Unrolls collected on the device: the acting half of Anakin's act-and-learn step.

:class:`DeviceRollout` steps a :class:`~seedq.envs.tensor.TensorEnv` with the acting network
and writes every step into preallocated time-major buffers ``[T+1, N, ...]`` on the env's
device, in the rows convention of :mod:`seedq.agents.common.targets` (row t: obs t, the reward and
done flags that arrived with it, the action and logits taken at it). The last row of an unroll
is row 0 of the next (one row of overlap, as the SEED path cuts V-trace unrolls).

The per-step work (forward, Gumbel-max sampling, env step, episode bookkeeping) is a fixed
sequence of tensor ops with no Python loop over envs and no host read, so it can be compiled
(``hardware.compile``) and queued on a GPU without waiting. Once per unroll the envs that were
truncated are gathered and the acting network's value of their true last observation becomes
their ``truncation_value`` (the weights have not changed since they acted).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from seedq.arch.episodes import EpisodeTracker
from seedq.core.agent import Selector
from seedq.core.unroll import Unroll
from seedq.envs.tensor import TensorEnv

StepOutputs = tuple[torch.Tensor, ...]


class DeviceRollout:
    """``collect()`` returns the next unroll ``[T+1, N]`` as device tensors (an
    :class:`~seedq.learner.unroll_store.Unroll`; its buffers are reused by the next call)."""

    def __init__(
        self,
        env: TensorEnv,
        model: torch.nn.Module,
        select: Selector,
        unroll_length: int,
        generator: torch.Generator,
        *,
        compile_mode: str = "none",
    ) -> None:
        self.env, self.model, self.select, self.generator = env, model, select, generator
        n, device, rows = env.num_envs, env.device, unroll_length + 1
        self.unroll_length = unroll_length
        self.episodes = EpisodeTracker(n, device)

        def empty(*shape: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(rows, n, *shape, dtype=dtype, device=device)

        self.obs = empty(*env.obs_shape, dtype=env.obs_dtype)
        self.final_obs = empty(*env.obs_shape, dtype=env.obs_dtype)
        self.reward = empty(dtype=torch.float32)
        self.done = empty(dtype=torch.bool)
        self.truncated = empty(dtype=torch.bool)
        self.truncation_value = empty(dtype=torch.float32)
        self.action = empty(dtype=torch.int64)
        self.behaviour = empty(env.num_actions, dtype=torch.float32)
        self.env_id = torch.arange(n, device=device)
        # The last row of the (virtual) previous unroll: every env starts an episode.
        last = rows - 1
        self.obs[last] = env.observe()
        self.done[last] = True
        self._step: Callable[[torch.Tensor, torch.Tensor], StepOutputs] = self._act_and_step
        if compile_mode != "none":
            self._step = torch.compile(self._act_and_step, mode=compile_mode)

    def _act_and_step(self, obs: torch.Tensor, done: torch.Tensor) -> StepOutputs:
        """Act on ``obs [N, ...]`` and step the envs; every output is ``[N, ...]``."""
        out, _ = self.model(obs[None], done[None], ())
        selection = self.select(out, None, self.generator)
        step = self.env.step(selection.actions)
        ended = step.terminated | step.truncated
        self.episodes.record(step.reward, ended)
        return (
            selection.actions,
            selection.behaviour,
            step.obs,
            step.reward,
            ended,
            step.truncated,
            step.final_obs,
        )

    @torch.no_grad()
    def collect(self) -> Unroll:
        """Step every env ``T`` times; the unroll ``[T+1, N]`` of those steps."""
        last = self.unroll_length
        for buffer in (self.obs, self.reward, self.done, self.truncated, self.truncation_value):
            buffer[0] = buffer[last]
        for t in range(last):
            action, behaviour, obs, reward, done, truncated, final_obs = self._step(
                self.obs[t], self.done[t]
            )
            self.action[t] = action
            self.behaviour[t] = behaviour
            self.obs[t + 1] = obs
            self.reward[t + 1] = reward
            self.done[t + 1] = done
            self.truncated[t + 1] = truncated
            self.final_obs[t + 1] = final_obs
        self._bootstrap_truncated()
        return Unroll(
            obs=self.obs,
            reward=self.reward,
            done=self.done,
            truncated=self.truncated,
            truncation_value=self.truncation_value,
            action=self.action,
            behaviour=self.behaviour,
            core_state=(),
            env_id=self.env_id,
        )

    def _bootstrap_truncated(self) -> None:
        """``truncation_value[t]`` = V(final_obs[t]) where truncated, else 0 (rows 1..T)."""
        self.truncation_value[1:].zero_()
        # The one data-dependent shape of the unroll (how many envs hit their time limit);
        # kept out of the per-step path.
        rows, cols = self.truncated[1:].nonzero(as_tuple=True)
        if not rows.numel():
            return
        final = self.final_obs[1:][rows, cols]
        out, _ = self.model(final[None], torch.zeros_like(rows, dtype=torch.bool)[None], ())
        # The selector's value, as central inference bootstraps truncations on the SEED path.
        values = self.select(out, None, self.generator).values
        self.truncation_value[1:][rows, cols] = values.float()
