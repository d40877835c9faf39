"""Anakin (Podracer, Hessel et al. 2021): envs as tensor code on the learner's device, acting
and learning in one loop.

    seedq-train arch=anakin env=cartpole
    seedq-train arch=anakin env=gym env.id=Acrobot-v1 hardware=gpu

Each iteration collects one unroll of ``T`` steps from ``arch.anakin.num_envs`` envs
(:class:`~seedq.arch.rollout.DeviceRollout`) and trains on it at once with the agent's own
update, ``Agent.learn`` (``arch.anakin.minibatches`` calls on equal column shares): any agent
whose config does not declare it cannot learn that way (V-trace, PPO). Nothing crosses to the
host per step; counters are read once per logging interval. The run writes the SEED path's
metrics rows (through :class:`~seedq.arch.monitor.Monitor`), progress line, stop rules and
checkpoints, so ``seedq-eval``, ``seedq-plot`` and ``seedq-train resume=`` work unchanged;
``seedq-eval`` plays the gymnasium env of the same id, which the tensor env reproduces.

In the metrics, ``perf/learner_wait_frac`` is the share of time spent acting (the learner
waiting for its unroll) and ``perf/batch_fill`` stays empty (there is no broker). On resume the
envs start fresh episodes from a seed derived from the run's seed and step count.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import torch

from seedq.agents.registry import build_agent
from seedq.arch.base import TrainingRun
from seedq.arch.rollout import DeviceRollout
from seedq.core.agent import RunContext
from seedq.core.stats import RunStats
from seedq.envs.config import resumed_seed
from seedq.envs.tensor import make_tensor_env, tensor_env_class
from seedq.launch.sizing import sized
from seedq.learner.device import AMP_DTYPES, prepare_learner_process
from seedq.limits import available_memory_bytes
from seedq.messages import EnvSpec
from seedq.schema import ConfigError

log = logging.getLogger(__name__)

__all__ = ["AnakinRun"]

ENV_DTYPES = {"float32": torch.float32, "float64": torch.float64}
# Bytes of the fields an unroll row holds beside its two observations (reward, done, truncated,
# truncation value, action; the behaviour logits are per action): DeviceRollout's buffers.
ROW_FIELD_BYTES = 4 + 1 + 1 + 4 + 8
# Float32 copies of each activation an update holds (bytes_per_env).
TYPICAL_COPIES = 3


def available_bytes(device: torch.device) -> int | None:
    """Memory free for the run on ``device``: the GPU's free memory, or the host's
    MemAvailable; None where it cannot be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory_bytes()


def bytes_per_env(
    env_class: type,
    model: torch.nn.Module,
    unroll_length: int,
    minibatches: int,
    env_bytes: int,
    copies: int = 1,
) -> int:
    """The memory one env of an Anakin run takes: its state and its column of the rollout
    (``unroll_length + 1`` rows of two observations and the step's fields), and its share of
    an update's activations (an update trains ``1 / minibatches`` of the columns): ``copies``
    float32 values of each linear layer's output for every row. One copy, what autograd keeps
    at the least, makes this a floor; an update holds about three (the output, its gradient,
    the next layer's saved input: CartPole's 32-32 MLP took 11.9 KiB per env with one
    minibatch, against 14.3 estimated with three)."""
    rows = unroll_length + 1
    obs = math.prod(env_class.obs_shape) * env_class.obs_dtype.itemsize
    row = 2 * obs + ROW_FIELD_BYTES + 4 * env_class.num_actions
    widths = sum(m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))
    activations = rows * 4 * copies * widths / minibatches
    return int(env_class.state_size * env_bytes + rows * row + activations)


def check_envs_fit(
    anakin: Any,
    env_class: type,
    model: torch.nn.Module,
    unroll_length: int,
    available: int | None,
    device: torch.device,
) -> None:
    """Refuse ``arch.anakin.num_envs`` when even the floor of :func:`bytes_per_env` passes the
    memory ``available`` on ``device``: the kernel would kill the run without a word (1e9
    CartPole envs were an OOM kill, exit 137, an empty log)."""
    if available is None:
        return
    env_bytes = ENV_DTYPES[anakin.env_dtype].itemsize
    per_env = bytes_per_env(env_class, model, unroll_length, anakin.minibatches, env_bytes)
    needed = anakin.num_envs * per_env
    if needed <= available:
        return
    # The suggestion must run, so it counts the copies an update holds, not the floor's one.
    typical = bytes_per_env(
        env_class, model, unroll_length, anakin.minibatches, env_bytes, TYPICAL_COPIES
    )
    fits = available // typical // anakin.minibatches * anakin.minibatches
    where = "GPU" if device.type == "cuda" else "host"
    raise ConfigError(
        f"arch.anakin.num_envs={anakin.num_envs} needs at least {needed / 2**30:.2f} GiB "
        f"({per_env / 2**10:.3g} KiB per env: its state, its {unroll_length + 1}-row column of "
        f"the unroll and its share of an update), but the {where} has "
        f"{available / 2**30:.2f} GiB free; use arch.anakin.num_envs={fits} or fewer (a "
        f"multiple of arch.anakin.minibatches={anakin.minibatches}; more minibatches shrink "
        "an update's share)"
    )


class AnakinRun(TrainingRun):
    """One Anakin training run; ``run()`` blocks until a stop condition."""

    def __init__(self, cfg: Any, run_dir: str, *, resume: dict | None = None) -> None:
        """``resume``: a loaded checkpoint (already checked against ``cfg``) to continue."""
        super().__init__()
        self.cfg = cfg = sized(cfg)
        self.run_dir = run_dir
        hw, anakin = cfg.hardware, cfg.arch.anakin
        self.device = prepare_learner_process(cfg)
        self.unroll_length = anakin.unroll_length or cfg.algorithm.unroll_length
        self.stats = RunStats()
        env_seed = cfg.seed
        if resume is not None:
            # Fresh episodes on resume, from a seed no earlier start of this run used.
            env_seed = resumed_seed(cfg.seed, int(resume["env_steps"]))
        env_class = tensor_env_class(cfg.env.id)
        self.spec = EnvSpec(
            tuple(env_class.obs_shape),
            str(env_class.obs_dtype).removeprefix("torch."),
            env_class.num_actions,
        )
        self.agent = build_agent(
            RunContext(
                cfg,
                self.spec,
                self.device,
                self.weights_lock,
                self.stop,
                AMP_DTYPES[hw.amp],
                compile_training=hw.compile,
                collective=self.dist.collective,
            )
        )
        check_envs_fit(
            anakin,
            env_class,
            self.agent.model,
            self.unroll_length,
            available_bytes(self.device),
            self.device,
        )
        self.env = make_tensor_env(
            cfg.env.id,
            anakin.num_envs,
            self.device,
            seed=env_seed,
            max_episode_steps=cfg.env.max_episode_steps,
            dtype=ENV_DTYPES[anakin.env_dtype],
        )
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        if resume is not None:
            self.restore(resume)
        self.rollout = DeviceRollout(
            self.env,
            self.agent.model,
            self.agent.selector,
            self.unroll_length,
            self.generator,
            compile_mode=hw.compile,
        )

    def train_iteration(self) -> None:
        """Collect one unroll, then train on it: the act-and-learn step."""
        stats = self.agent.stats
        begin = time.monotonic()
        unroll = self.rollout.collect()
        self.stats.env_steps += self.unroll_length * self.env.num_envs
        self.dist.sync_env_steps()
        acted = time.monotonic()
        share = self.env.num_envs // self.cfg.arch.anakin.minibatches
        for start in range(0, self.env.num_envs, share):
            self.agent.learn(unroll.columns(start, start + share), self.training_env_steps())
        stats.wait_s += acted - begin
        stats.busy_s += time.monotonic() - acted

    def _drain_episodes(self) -> None:
        self.stats.record_episodes(*self.rollout.episodes.drain())

    def _wait(self) -> None:
        # No threads: the loop itself acts and learns between metrics rows.
        self.train_iteration()
        if self.cfg.stop_at_return is not None:
            # The stop rule is checked between rows (Monitor.target_met) on the episodes the
            # stats hold; drained only with each row, they left CartPole training past 475
            # until the next row (5 s, twice the steps) and timed the target at 5 s.
            self._drain_episodes()

    def _before_row(self) -> None:
        self._drain_episodes()

    def _before_training(self) -> tuple[int, str]:
        # Each block acts an unroll of every env and trains on it: a run that steps trains
        # (it overshoots total_env_steps to the end of its first block).
        return 0, f"a block of {self.unroll_length} steps of each env ends"

    def _announce_budget(self, env_steps_done: int) -> None:
        super()._announce_budget(env_steps_done)
        # The run stops after the round of blocks (one per rank) that reaches the budget.
        ranks = 1 if self.dist.group is None else self.dist.group.world_size
        block = self.unroll_length * self.env.num_envs * ranks
        left = self.cfg.total_env_steps - env_steps_done
        if self.dist.is_writer and left > 0 and left % block:
            on_ranks = f" x {ranks} learner ranks" if ranks > 1 else ""
            log.info(
                "arch=anakin acts in whole blocks of %d env steps (%d envs x unroll %d%s): "
                "the run ends at %d env steps, past total_env_steps=%d",
                block,
                self.env.num_envs,
                self.unroll_length,
                on_ranks,
                env_steps_done + -(-left // block) * block,
                self.cfg.total_env_steps,
            )

    def describe(self) -> str:
        return f"arch=anakin, {self.env.num_envs} tensor envs"
