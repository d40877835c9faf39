"""PPO (Schulman et al. 2017) on central inference, for discrete and continuous actions.

On-policy through SEED's pipeline: completed unrolls are gathered into a batch of
``batch_size`` env columns; with ``pause_acting`` the sink then blocks central inference until
the training thread has finished its epochs on that batch, so the actors' next steps are taken
by the new policy (the broker stops answering meanwhile: backpressure, not lost data). Unrolls
that straddle an update carry the old policy's parameters as behaviour, so their importance
ratios start away from 1 and the clipped objective treats them as it should.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from seedq.agents.base import ModelAndLearnerState, RunContext
from seedq.agents.ppo.config import PPOConfig
from seedq.agents.ppo.learner import PPOLearner
from seedq.agents.ppo.network import build_network
from seedq.learner.policy_head import SampleFromDistribution
from seedq.learner.unroll_store import BatchAssembler, Unroll
from seedq.messages import EnvSpec

_COLUMNS = {
    "loss/total": "loss/total",
    "loss/pg": "loss/pg",
    "loss/value": "loss/value",
    "loss/entropy": "loss/entropy",
    "train/approx_kl": "loss/approx_kl",
    "train/clip_fraction": "loss/clip_fraction",
    "train/grad_norm": "grad_norm",
    "train/lr": "lr",
}


class PPOAgent(ModelAndLearnerState):
    name: ClassVar[str] = "ppo"
    metric_columns: ClassVar[list[str]] = list(_COLUMNS)

    def __init__(self, ctx: RunContext) -> None:
        cfg, alg = ctx.cfg, ctx.cfg.algorithm
        self.ctx = ctx
        self.alg: PPOConfig = alg
        self.model = self.build_model(ctx.spec, alg, channels_last=cfg.hardware.channels_last).to(
            ctx.device
        )
        self.selector = self.make_selector(alg)
        self.exploration = None
        self.learner = PPOLearner(
            self.model,
            alg,
            ctx.device,
            ctx.weights_lock,
            total_env_steps=cfg.total_env_steps,
            seed=cfg.seed,
            pin_memory=ctx.pin_memory,
            amp_dtype=ctx.amp_dtype,
        )
        self.stats = self.learner.stats
        self.train_queue: queue.Queue[Unroll] = queue.Queue(maxsize=1)
        self.assembler = BatchAssembler(alg.batch_size)
        self._trained = threading.Event()

    @classmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool):  # noqa: ANN206
        return build_network(spec, alg, channels_last=channels_last)

    @classmethod
    def make_selector(cls, alg: Any, *, greedy: bool = False) -> SampleFromDistribution:
        return SampleFromDistribution(greedy=greedy)

    @classmethod
    def default_epsilon(cls, alg: Any) -> float | None:
        return None

    @classmethod
    def samples_per_update(cls, alg: Any) -> int:
        return alg.batch_size * alg.unroll_length // alg.minibatches

    def unroll_layout(self) -> tuple[int, int]:
        return self.alg.unroll_length, 1

    def on_unroll(self, unroll: Unroll) -> None:
        stop = self.ctx.stop
        for batch in self.assembler.add(unroll):
            self._trained.clear()
            while not stop.is_set():
                try:
                    self.train_queue.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if self.alg.pause_acting:
                while not stop.is_set() and not self._trained.wait(0.1):
                    pass

    def train(self, env_steps: Callable[[], int]) -> None:
        stats, stop = self.stats, self.ctx.stop
        while not stop.is_set():
            start = time.monotonic()
            try:
                batch = self.train_queue.get(timeout=0.1)
            except queue.Empty:
                stats.wait_s += time.monotonic() - start
                continue
            begin = time.monotonic()
            stats.wait_s += begin - start
            self.learner.set_progress(env_steps())
            try:
                self.learner.train_batch(batch)
            finally:
                self._trained.set()
            stats.busy_s += time.monotonic() - begin

    def metrics(self) -> dict[str, Any]:
        means = self.stats.pop_means()
        return {column: means.get(key) for column, key in _COLUMNS.items()}

    def progress(self, row: dict[str, Any]) -> str:
        if row.get("loss/pg") is None:
            return "no update this interval"
        return (
            f"loss pg {row['loss/pg']:.3g} value {row['loss/value']:.3g} "
            f"entropy {row['loss/entropy']:.3g} kl {row['train/approx_kl']:.2g}"
        )
