"""R2D2's sequences: their replay layout, the memory check, insertion priorities, the sink.

The request stream becomes sequences of ``burn_in + sequence_length + 1`` rows, consecutive ones
overlapping by ``burn_in + 1`` rows (``UnrollStore`` with a longer overlap). Each keeps the LSTM
state the inference path had before its first row. A new sequence enters the replay with a
priority computed from the Q-values inference already produced (no extra forward pass);
training replaces it with the priority of its latest TD errors. Rows follow
``seedq.agents.common.targets``' convention.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import torch

from seedq.agents.common.replay import RateLimiter, SequenceReplay, check_fits
from seedq.agents.common.targets import transition_rewards
from seedq.agents.r2d2.config import R2D2Config
from seedq.agents.r2d2.loss import n_step_double_q_targets, sequence_priorities
from seedq.core.unroll import Unroll, take_columns
from seedq.limits import available_memory_bytes
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


def check_replay_fits(cfg: R2D2Config, fields: Fields, available: int | None) -> int:
    """Bytes the replay needs; ConfigError naming the figures when it does not fit."""
    return check_fits(
        SequenceReplay.bytes_needed(cfg.replay_capacity, fields),
        available,
        capacity=cfg.replay_capacity,
        items="sequences",
        each=f"sequence of {sequence_rows(cfg)} steps of {fields['obs'][0][1:]} "
        f"{fields['obs'][1]} observations",
        fraction=cfg.replay_memory_fraction,
        fraction_key="algorithm.replay_memory_fraction",
    )


def make_replay(
    cfg: R2D2Config, spec: EnvSpec, state_sizes: tuple[int, ...], seed: int
) -> SequenceReplay:
    """The prioritised replay for ``cfg``; ConfigError first if it would not fit in memory."""
    fields = replay_fields(cfg, spec, state_sizes)
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


def trained_transitions(
    reward: torch.Tensor,
    done: torch.Tensor,
    truncated: torch.Tensor,
    truncation_value: torch.Tensor,
    cfg: R2D2Config,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards and dones ``[L, B]`` of the trained transitions of sequence rows ``[R, B]``."""
    first = cfg.burn_in + 1
    rewards = transition_rewards(
        reward,
        truncated,
        truncation_value,
        first=first,
        gamma=cfg.gamma,
        reward_clip=cfg.reward_clip,
    )
    return rewards, done[first:].to(rewards.dtype)


def insertion_priorities(unroll: Unroll, cfg: R2D2Config) -> np.ndarray:
    """Priorities ``[N]`` of new sequences from the Q-values inference computed for them."""
    q = torch.from_numpy(unroll.behaviour[cfg.burn_in :]).double()  # [L+1, N, A]
    rewards, dones = trained_transitions(
        torch.from_numpy(unroll.reward).double(),
        torch.from_numpy(unroll.done),
        torch.from_numpy(unroll.truncated),
        torch.from_numpy(unroll.truncation_value).double(),
        cfg,
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
        priorities = insertion_priorities(unroll, self.cfg)
        finite = np.isfinite(priorities)
        if not finite.all():
            # Q-values that overflowed at inference: trained on, such a sequence's loss is not
            # finite and every update it is sampled into is skipped. The others are stored.
            log.warning(
                "replay: %d sequence(s) left out, the Q-values inference computed for them are "
                "not finite (env ids %s)",
                int((~finite).sum()),
                unroll.env_id[~finite].tolist(),
            )
            if not finite.any():
                return
            unroll = take_columns(unroll, np.flatnonzero(finite))
            priorities = priorities[finite]
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
        self.replay.insert(data, priorities, self.stop.is_set)
