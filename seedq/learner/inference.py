"""Central inference: one batched forward pass for the requests of many actors.

The learner owns the recurrent state of every env, indexed by a global env row. A request
marks the envs whose observation starts a new episode (``done``); the model resets their state
before reading the observation. For envs that were *truncated* this step, the true last
observation also goes through the model (with the state from before the reset), so training
can bootstrap from its value instead of from the next episode's first observation.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np
import torch

from seedq.core.agent import Selector
from seedq.core.tensors import amp_autocast, to_device


class InferenceResult(NamedTuple):
    actions: np.ndarray  # int32 [B], or float32 [B, D] for continuous actions
    behaviour: np.ndarray  # float32 [B, P]: the policy's parameters (logits; Gaussian mean and
    # log-std) or Q-values (R2D2)
    truncation_value: np.ndarray  # float32 [B], V(final obs) where truncated, else 0
    input_state: tuple[np.ndarray, ...]  # each [B, H]: state before this step (pre-reset)


class InferenceEngine:
    """Batched policy evaluation over global env rows, sharing weights with training."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        weights_lock: threading.Lock,
        *,
        select: Selector,
        seed: int = 0,
        pin_memory: bool = False,
        amp_dtype: torch.dtype | None = None,
        compile_mode: str = "none",
    ) -> None:
        """``compile_mode``: ``"none"`` or a ``torch.compile`` mode for the forward pass.

        A compiled forward sees batches padded to the next power of two (at least 8), so a run
        compiles (and with ``reduce-overhead`` captures a CUDA graph for) a handful of shapes
        instead of one per batch size the batcher happens to produce.
        """
        self.model = model
        self.compiled = compile_mode != "none"
        self._forward = model
        if self.compiled:
            # One graph per padded batch size: up to 2**20 envs stays under the limit.
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 24)
            self._forward = torch.compile(
                model, mode=None if compile_mode == "default" else compile_mode, dynamic=False
            )
        self.select = select
        self.device = device
        self.weights_lock = weights_lock
        self.pin_memory = pin_memory and device.type == "cuda"
        self.amp_dtype = amp_dtype
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._state: tuple[torch.Tensor, ...] = model.initial_state(0, device)
        self.forward_calls = 0
        self.samples = 0

    @property
    def num_rows(self) -> int:
        return int(self._state[0].shape[0]) if self._state else 0

    def ensure_rows(self, rows: int) -> None:
        """Grow the recurrent-state table to at least ``rows`` env rows (new rows are zero)."""
        if not self._state or rows <= self.num_rows:
            return
        grown = self.model.initial_state(max(rows, 2 * self.num_rows), self.device)
        for new, old in zip(grown, self._state, strict=True):
            new[: old.shape[0]] = old
        self._state = grown

    def reset_rows(self, rows: np.ndarray) -> None:
        if self._state:
            index = torch.as_tensor(rows, dtype=torch.long, device=self.device)
            for s in self._state:
                s[index] = 0

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        return to_device(array, self.device, self.pin_memory)

    @torch.no_grad()
    def infer(
        self,
        obs: np.ndarray,
        done: np.ndarray,
        rows: np.ndarray,
        truncated_index: np.ndarray,
        final_obs: np.ndarray,
        epsilon: np.ndarray | None = None,
    ) -> InferenceResult:
        """Act for B envs.

        obs: [B, *obs_shape]; done: bool [B]; rows: int [B] global env rows;
        truncated_index: int [K] positions in the batch whose env was truncated;
        final_obs: [K, *obs_shape] their true last observations;
        epsilon: float [B] exploration rate per env (epsilon-greedy selection only).
        """
        batch = obs.shape[0]
        k = final_obs.shape[0]
        row_index = torch.as_tensor(rows, dtype=torch.long, device=self.device)
        input_state = tuple(s[row_index] for s in self._state)
        if k:
            # One forward for both: the K final observations continue the old episode
            # (no reset, pre-reset state), the B observations may start new ones.
            all_obs = np.concatenate([obs, final_obs])
            all_done = np.concatenate([done, np.zeros(k, dtype=bool)])
            trunc = torch.as_tensor(truncated_index, dtype=torch.long, device=self.device)
            state = tuple(torch.cat([s, s[trunc]]) for s in input_state)
        else:
            all_obs, all_done, state = obs, done, input_state
        if self.compiled:
            all_obs, all_done, state = _pad_to_bucket(all_obs, all_done, state)
        obs_t = self._to_device(np.ascontiguousarray(all_obs))[None]
        done_t = self._to_device(np.ascontiguousarray(all_done))[None]
        with self.weights_lock, amp_autocast(self.device, self.amp_dtype):
            out, new_state = self._forward(obs_t, done_t, state)
        eps = None
        if epsilon is not None:
            # The K final observations (and padding rows) only give values: their epsilon
            # does not matter.
            rest = all_obs.shape[0] - batch
            eps = self._to_device(np.concatenate([epsilon, np.zeros(rest, np.float32)]))
        chosen = self.select(out, eps, self.generator)
        for table, s in zip(self._state, new_state, strict=True):
            # Under autocast a recurrent core may hand back its state in the autocast dtype
            # (CUDA runs lstm_cell in bf16/fp16); the table keeps the model's own dtype, which
            # is also what training stores and starts its sequences from.
            table[row_index] = s[:batch].to(table.dtype)
        truncation_value = torch.zeros(batch, device=self.device)
        if k:
            truncation_value[trunc] = chosen.values[batch : batch + k].float()
        self.forward_calls += 1
        self.samples += batch
        actions = chosen.actions[:batch]
        # The wire carries int32 indices or float32 vectors (seedq.messages.EnvSpec).
        actions = actions.float() if actions.is_floating_point() else actions.to(torch.int32)
        return InferenceResult(
            actions=actions.cpu().numpy(),
            behaviour=chosen.behaviour[:batch].cpu().numpy(),
            truncation_value=truncation_value.cpu().numpy(),
            input_state=tuple(s.cpu().numpy() for s in input_state),
        )


def _bucket(n: int) -> int:
    return max(8, 1 << (n - 1).bit_length())


def _pad_to_bucket(
    obs: np.ndarray, done: np.ndarray, state: tuple[torch.Tensor, ...]
) -> tuple[np.ndarray, np.ndarray, tuple[torch.Tensor, ...]]:
    """Pad the batch with zero rows up to its bucket size; callers read the first rows only."""
    n = obs.shape[0]
    extra = _bucket(n) - n
    if not extra:
        return obs, done, state
    obs = np.concatenate([obs, np.zeros((extra, *obs.shape[1:]), obs.dtype)])
    done = np.concatenate([done, np.ones(extra, bool)])
    state = tuple(torch.cat([s, s.new_zeros((extra, *s.shape[1:]))]) for s in state)
    return obs, done, state
