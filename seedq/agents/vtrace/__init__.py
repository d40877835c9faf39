"""IMPALA / V-trace (Espeholt et al. 2018) on central inference.

Completed unrolls are cut into batches of ``batch_size`` env columns for a small bounded queue
(fresh, nearly on-policy data); the training thread takes one batch per update. When training
falls behind, the queue fills, the sink blocks, the broker stops answering and the actors wait.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from typing import Any, ClassVar

from seedq.agents.base import ModelAndLearnerState, RunContext, require_discrete
from seedq.agents.vtrace.acting import SampleFromPolicy
from seedq.agents.vtrace.config import VTraceConfig
from seedq.agents.vtrace.learner import VTraceLearner
from seedq.agents.vtrace.network import build_network
from seedq.learner.unroll_store import BatchAssembler, Unroll
from seedq.messages import EnvSpec

log = logging.getLogger(__name__)


class VTraceAgent(ModelAndLearnerState):
    name: ClassVar[str] = "vtrace"
    metric_columns: ClassVar[list[str]] = [
        "loss/total",
        "loss/pg",
        "loss/baseline",
        "loss/entropy",
        "train/grad_norm",
        "train/lr",
    ]

    def __init__(self, ctx: RunContext) -> None:
        cfg, alg = ctx.cfg, ctx.cfg.algorithm
        self.ctx = ctx
        self.alg: VTraceConfig = alg
        self.model = self.build_model(ctx.spec, alg, channels_last=cfg.hardware.channels_last).to(
            ctx.device
        )
        self.selector = self.make_selector(alg)
        self.exploration = None
        self.learner = VTraceLearner(
            self.model,
            alg,
            ctx.device,
            ctx.weights_lock,
            total_env_steps=cfg.total_env_steps,
            pin_memory=ctx.pin_memory,
            amp_dtype=ctx.amp_dtype,
        )
        self.stats = self.learner.stats
        self.train_queue: queue.Queue[Unroll] = queue.Queue(maxsize=alg.train_queue_batches)
        self.assembler = BatchAssembler(alg.batch_size)

    @classmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool):  # noqa: ANN206
        require_discrete(spec, cls.name)
        return build_network(
            spec.obs_shape, spec.num_actions, alg.model, channels_last=channels_last
        )

    @classmethod
    def make_selector(cls, alg: Any, *, greedy: bool = False) -> SampleFromPolicy:
        return SampleFromPolicy(greedy=greedy)

    @classmethod
    def default_epsilon(cls, alg: Any) -> float | None:
        return None

    @classmethod
    def samples_per_update(cls, alg: Any) -> int:
        return alg.batch_size * alg.unroll_length

    def unroll_layout(self) -> tuple[int, int]:
        # One row of overlap: an unroll's last row bootstraps it and is the next one's first.
        return self.alg.unroll_length, 1

    def on_unroll(self, unroll: Unroll) -> None:
        for batch in self.assembler.add(unroll):
            while not self.ctx.stop.is_set():
                try:
                    self.train_queue.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    continue

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
            self.learner.train_step(batch)
            stats.busy_s += time.monotonic() - begin

    def metrics(self) -> dict[str, Any]:
        means = self.stats.pop_means()
        return {
            "loss/total": means.get("loss/total"),
            "loss/pg": means.get("loss/pg"),
            "loss/baseline": means.get("loss/baseline"),
            "loss/entropy": means.get("loss/entropy"),
            "train/grad_norm": means.get("grad_norm"),
            "train/lr": means.get("lr"),
        }

    def progress(self, row: dict[str, Any]) -> str:
        if row.get("loss/pg") is None:
            return "no update this interval"
        return (
            f"loss pg {row['loss/pg']:.3g} baseline {row['loss/baseline']:.3g} "
            f"entropy {row['loss/entropy']:.3g}"
        )
