"""Central inference: one batched forward pass for the requests of many actors.

The learner owns the recurrent state of every env, indexed by a global env row. A request
marks the envs whose observation starts a new episode (``done``); the model resets their state
before reading the observation. For envs that were *truncated* this step, the true last
observation also goes through the model (with the state from before the reset), so training
can bootstrap from its value instead of from the next episode's first observation.
"""

from __future__ import annotations

import contextlib
import threading
from typing import NamedTuple

import numpy as np
import torch

from seedq.learner.models import ActorCriticNet


class InferenceResult(NamedTuple):
    actions: np.ndarray  # int32 [B]
    logits: np.ndarray  # float32 [B, A]
    truncation_value: np.ndarray  # float32 [B], V(final obs) where truncated, else 0
    input_state: tuple[np.ndarray, ...]  # each [B, H]: state before this step (pre-reset)


class InferenceEngine:
    """Batched policy evaluation over global env rows, sharing weights with training."""

    def __init__(
        self,
        model: ActorCriticNet,
        device: torch.device,
        weights_lock: threading.Lock,
        *,
        seed: int = 0,
        pin_memory: bool = False,
        amp_dtype: torch.dtype | None = None,
    ) -> None:
        self.model = model
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
        tensor = torch.from_numpy(array)
        if self.device.type == "cpu":
            return tensor
        if self.pin_memory:
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    @torch.no_grad()
    def infer(
        self,
        obs: np.ndarray,
        done: np.ndarray,
        rows: np.ndarray,
        truncated_index: np.ndarray,
        final_obs: np.ndarray,
    ) -> InferenceResult:
        """Act for B envs.

        obs: [B, *obs_shape]; done: bool [B]; rows: int [B] global env rows;
        truncated_index: int [K] positions in the batch whose env was truncated;
        final_obs: [K, *obs_shape] their true last observations.
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
        obs_t = self._to_device(np.ascontiguousarray(all_obs))[None]
        done_t = self._to_device(np.ascontiguousarray(all_done))[None]
        with self.weights_lock, self._autocast():
            out, new_state = self.model(obs_t, done_t, state)
        logits = out.logits[0].float()
        # Gumbel-max sampling: one kernel, and reproducible through our own generator.
        noise = torch.rand(logits.shape, generator=self.generator, device=self.device)
        actions = torch.argmax(logits[:batch] - torch.log(-torch.log(noise[:batch] + 1e-20)), -1)
        for table, s in zip(self._state, new_state, strict=True):
            table[row_index] = s[:batch]
        truncation_value = torch.zeros(batch, device=self.device)
        if k:
            truncation_value[trunc] = out.baseline[0, batch:].float()
        self.forward_calls += 1
        self.samples += batch
        return InferenceResult(
            actions=actions.to(torch.int32).cpu().numpy(),
            logits=logits[:batch].cpu().numpy(),
            truncation_value=truncation_value.cpu().numpy(),
            input_state=tuple(s.cpu().numpy() for s in input_state),
        )
