"""R2D2 on the central-inference pipeline: sequences into prioritised replay, and the update.

The learner acts epsilon-greedily with the online network, and the request stream becomes
sequences of ``burn_in + sequence_length + 1`` rows, consecutive ones overlapping by
``burn_in + 1`` rows (``UnrollStore`` with a longer overlap). Each sequence keeps the LSTM state
the inference path had before its first row. A new sequence enters the replay with a priority
computed from the Q-values inference already produced (no extra forward pass); training
replaces it with the priority of its latest TD errors.

Row convention (as for V-trace unrolls): row t holds obs t, the reward that arrived with it,
``done[t]`` (obs t starts an episode) and the action taken at obs t. Transition t -> t+1 earns
``reward[t+1]`` and does not bootstrap through obs t+1 when ``done[t+1]``; a truncated
episode's reward carries ``gamma * V(final obs)`` instead (value from the acting network).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time

import numpy as np
import torch

from seedq.config import ConfigError, R2D2Config
from seedq.learner.losses.r2d2 import n_step_double_q_targets, sequence_priorities
from seedq.learner.models import RecurrentQNet
from seedq.learner.replay import RateLimiter, SampledSequences, SequenceReplay
from seedq.learner.tensors import to_device
from seedq.learner.train import TrainStats, clip_rewards
from seedq.learner.unroll_store import Unroll
from seedq.messages import EnvSpec

log = logging.getLogger(__name__)

Fields = dict[str, tuple[tuple[int, ...], np.dtype]]


def sequence_rows(cfg: R2D2Config) -> int:
    return cfg.burn_in + cfg.sequence_length + 1


def replay_fields(cfg: R2D2Config, spec: EnvSpec, state_sizes: tuple[int, ...]) -> Fields:
    rows = sequence_rows(cfg)
    return {
        "obs": ((rows, *spec.obs_shape), np.dtype(spec.obs_dtype)),
        "action": ((rows,), np.dtype(np.int32)),
        "reward": ((rows,), np.dtype(np.float32)),
        "done": ((rows,), np.dtype(bool)),
        "truncated": ((rows,), np.dtype(bool)),
        "truncation_value": ((rows,), np.dtype(np.float32)),
        "core_state": ((len(state_sizes), max(state_sizes, default=0)), np.dtype(np.float32)),
        "env_id": ((), np.dtype(np.int64)),
    }


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_replay_fits(cfg: R2D2Config, fields: Fields, available: int | None) -> int:
    """Bytes the replay needs; ConfigError naming the figures when it does not fit."""
    needed = SequenceReplay.bytes_needed(cfg.replay_capacity, fields)
    if available is None:
        log.warning("cannot read available memory; replay needs %.2f GiB", needed / 2**30)
        return needed
    budget = cfg.replay_memory_fraction * available
    if needed > budget:
        per_sequence = needed / cfg.replay_capacity
        fits = int(budget // per_sequence)
        raise ConfigError(
            f"algorithm.replay_capacity={cfg.replay_capacity} sequences need "
            f"{needed / 2**30:.2f} GiB ({per_sequence / 2**20:.2f} MiB per sequence of "
            f"{sequence_rows(cfg)} steps of {fields['obs'][0][1:]} {fields['obs'][1]} "
            f"observations), but algorithm.replay_memory_fraction="
            f"{cfg.replay_memory_fraction} of the {available / 2**30:.2f} GiB available is "
            f"{budget / 2**30:.2f} GiB; use algorithm.replay_capacity={fits} or less"
        )
    return needed


def transition_inputs(
    reward: torch.Tensor,
    done: torch.Tensor,
    truncated: torch.Tensor,
    truncation_value: torch.Tensor,
    *,
    burn_in: int,
    gamma: float,
    reward_clip: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards and dones ``[L, B]`` of the trained transitions from sequence rows ``[R, B]``."""
    r = clip_rewards(reward[burn_in + 1 :], reward_clip)
    r = r + gamma * truncation_value[burn_in + 1 :] * truncated[burn_in + 1 :].to(r.dtype)
    return r, done[burn_in + 1 :].to(r.dtype)


def insertion_priorities(unroll: Unroll, cfg: R2D2Config) -> np.ndarray:
    """Priorities ``[N]`` of new sequences from the Q-values inference computed for them."""
    q = torch.from_numpy(unroll.behaviour[cfg.burn_in :]).double()  # [L+1, N, A]
    rewards, dones = transition_inputs(
        torch.from_numpy(unroll.reward).double(),
        torch.from_numpy(unroll.done),
        torch.from_numpy(unroll.truncated),
        torch.from_numpy(unroll.truncation_value).double(),
        burn_in=cfg.burn_in,
        gamma=cfg.gamma,
        reward_clip=cfg.reward_clip,
    )
    y = n_step_double_q_targets(
        q, q, rewards, dones, gamma=cfg.gamma, n=cfg.n_step, eps=cfg.value_rescale_eps
    )
    actions = torch.from_numpy(unroll.action[cfg.burn_in : -1]).long().unsqueeze(-1)
    td = y - q[:-1].gather(-1, actions).squeeze(-1)
    return sequence_priorities(td, cfg.priority_eta).numpy()


class ReplaySink:
    """Completed sequences -> replay (batch-major), waiting when the rate limiter says so."""

    def __init__(self, replay: SequenceReplay, cfg: R2D2Config, stop: threading.Event) -> None:
        self.replay = replay
        self.cfg = cfg
        self.stop = stop

    def __call__(self, unroll: Unroll) -> None:
        # (h, c) -> [N, 2, H]; a net without LSTM stores an empty [N, 0, 0].
        state = (
            np.stack(unroll.core_state, axis=1)
            if unroll.core_state
            else np.zeros((unroll.num_columns, 0, 0), np.float32)
        )
        data = {
            "obs": np.swapaxes(unroll.obs, 0, 1),
            "action": unroll.action.T,
            "reward": unroll.reward.T,
            "done": unroll.done.T,
            "truncated": unroll.truncated.T,
            "truncation_value": unroll.truncation_value.T,
            "core_state": state,
            "env_id": unroll.env_id,
        }
        self.replay.insert(data, insertion_priorities(unroll, self.cfg), self.stop.is_set)


def make_replay(cfg: R2D2Config, spec: EnvSpec, model: RecurrentQNet, seed: int) -> SequenceReplay:
    sizes = tuple(int(s.shape[1]) for s in model.initial_state(1, "cpu"))
    fields = replay_fields(cfg, spec, sizes)
    needed = check_replay_fits(cfg, fields, available_memory_bytes())
    log.info(
        "replay: %d sequences of %d steps, %.2f GiB",
        cfg.replay_capacity,
        sequence_rows(cfg),
        needed / 2**30,
    )
    limiter = RateLimiter(
        samples_per_insert=cfg.replay_ratio,
        min_size=cfg.replay_min_size,
        max_credit=cfg.replay_slack_batches * cfg.batch_size,
    )
    return SequenceReplay(
        cfg.replay_capacity,
        fields,
        alpha=cfg.priority_exponent,
        beta=cfg.importance_exponent,
        limiter=limiter,
        seed=seed,
    )


class R2D2Learner:
    """One R2D2 update on sampled sequences; keeps the target network."""

    def __init__(
        self,
        model: RecurrentQNet,
        cfg: R2D2Config,
        device: torch.device,
        weights_lock: threading.Lock,
        *,
        pin_memory: bool = False,
        amp_dtype: torch.dtype | None = None,
    ) -> None:
        self.model = model
        self.target = copy.deepcopy(model).requires_grad_(False)
        self.amp_dtype = amp_dtype
        # fp16 needs loss scaling; bf16 has fp32's range and does not.
        self.scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
        self.cfg = cfg
        self.device = device
        self.weights_lock = weights_lock
        self.pin_memory = pin_memory and device.type == "cuda"
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
        self.stats = TrainStats()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return to_device(array, self.device, self.pin_memory)

    def train_step(self, sample: SampledSequences) -> np.ndarray:
        """Update on B sequences; returns their new priorities ``[B]``."""
        cfg, data = self.cfg, sample.data
        burn = cfg.burn_in
        obs = self._tensor(data["obs"]).transpose(0, 1)  # [R, B, ...]
        done = self._tensor(data["done"]).T
        core = self._tensor(data["core_state"])  # [B, k, H]
        state = tuple(core[:, i] for i in range(core.shape[1]))  # (h, c), each [B, H]
        autocast = (
            torch.autocast(self.device.type, dtype=self.amp_dtype)
            if self.amp_dtype is not None
            else contextlib.nullcontext()
        )
        with torch.no_grad(), autocast:
            online_state, target_state = state, state
            if burn:
                _, online_state = self.model(obs[:burn], done[:burn], state)
                _, target_state = self.target(obs[:burn], done[:burn], state)
            q_target = self.target(obs[burn:], done[burn:], target_state)[0].q.float()
        with autocast:
            q_online = self.model(obs[burn:], done[burn:], online_state)[0].q.float()
        rewards, dones = transition_inputs(
            self._tensor(data["reward"]).T,
            done,
            self._tensor(data["truncated"]).T,
            self._tensor(data["truncation_value"]).T,
            burn_in=burn,
            gamma=cfg.gamma,
            reward_clip=cfg.reward_clip,
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
        actions = self._tensor(data["action"]).T[burn:-1].long().unsqueeze(-1)
        q_taken = q_online[:-1].gather(-1, actions).squeeze(-1)
        td = y - q_taken  # [L, B]; y carries no gradient
        weights = self._tensor(sample.weights)
        loss = (weights * (0.5 * td.pow(2)).mean(0)).mean()
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        with self.weights_lock:
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.stats.updates += 1
            # Under the lock too, so a checkpoint never copies a half-updated target network.
            if self.stats.updates % cfg.target_update_period == 0:
                self.target.load_state_dict(self.model.state_dict())
        priorities = sequence_priorities(td.detach(), cfg.priority_eta)
        self.stats.samples += int(td.numel())
        self.stats.add(
            {
                "loss/td": float(loss.detach()),
                "q_mean": float(q_taken.detach().mean()),
                "grad_norm": float(grad_norm),
                "lr": self.optimizer.param_groups[0]["lr"],
            }
        )
        return priorities.cpu().numpy()


def run_r2d2_training(
    learner: R2D2Learner,
    replay: SequenceReplay,
    stop: threading.Event,
    errors: list[BaseException],
) -> None:
    """Thread body: sample, update, write back priorities, until ``stop``."""
    try:
        while not stop.is_set():
            start = time.monotonic()
            sample = replay.sample(learner.cfg.batch_size, stop.is_set)
            learner.stats.wait_s += time.monotonic() - start
            if sample is None:
                continue
            begin = time.monotonic()
            priorities = learner.train_step(sample)
            replay.update_priorities(sample.indices, sample.generations, priorities)
            learner.stats.busy_s += time.monotonic() - begin
    except BaseException as exc:  # noqa: BLE001 - reported by the run loop, which stops the run
        log.exception("training thread failed")
        errors.append(exc)
        stop.set()
