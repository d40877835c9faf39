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
import time
from typing import Any

import torch

from seedq.agents.registry import build_agent
from seedq.arch.base import TrainingRun
from seedq.arch.rollout import DeviceRollout
from seedq.core.agent import RunContext
from seedq.core.stats import RunStats
from seedq.envs.config import resumed_seed
from seedq.envs.tensor import make_tensor_env
from seedq.launch.sizing import sized
from seedq.learner.device import AMP_DTYPES, prepare_learner_process
from seedq.messages import EnvSpec

log = logging.getLogger(__name__)

__all__ = ["AnakinRun"]

ENV_DTYPES = {"float32": torch.float32, "float64": torch.float64}


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
        self.env = make_tensor_env(
            cfg.env.id,
            anakin.num_envs,
            self.device,
            seed=env_seed,
            max_episode_steps=cfg.env.max_episode_steps,
            dtype=ENV_DTYPES[anakin.env_dtype],
        )
        self.spec = EnvSpec(
            tuple(self.env.obs_shape),
            str(self.env.obs_dtype).removeprefix("torch."),
            self.env.num_actions,
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
