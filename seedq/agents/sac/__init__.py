"""SAC (Haarnoja et al. 2018) on central inference, for continuous (Box) actions.

Actors only step envs. Central inference samples each action from the tanh-squashed Gaussian
policy (``seedq-eval mode=greedy`` takes its mean) and also computes the soft value of each
observation, which bootstraps a truncated episode's last transition. Completed unrolls are cut
into transitions and go to a uniform replay held at ``updates_per_step`` updates per env step by
a rate limiter; the training thread samples batches from it. Observation statistics (with
``algorithm.model.obs_norm``) are merged as transitions enter the replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from seedq.agents.base import RunContext
from seedq.agents.replay_state import ReplayCheckpointState
from seedq.agents.sac.config import SACConfig
from seedq.agents.sac.learner import SACLearner
from seedq.agents.sac.network import SACNet, build_network
from seedq.agents.sac.transitions import TransitionSink, make_replay
from seedq.learner.normalize import update_obs_norm
from seedq.learner.policy_head import SampleFromDistribution
from seedq.learner.unroll_store import Unroll
from seedq.messages import EnvSpec

_COLUMNS = {
    "loss/critic": "loss/critic",
    "loss/actor": "loss/actor",
    "loss/temperature": "loss/temperature",
    "train/alpha": "alpha",
    "train/entropy": "entropy",
    "train/q_mean": "q_mean",
    "train/grad_norm": "grad_norm",
    "train/lr": "lr",
}


class SACAgent(ReplayCheckpointState):
    replay_items: ClassVar[str] = "transitions"
    name: ClassVar[str] = "sac"
    metric_columns: ClassVar[list[str]] = [*_COLUMNS, "replay/size", "replay/ratio"]

    def __init__(self, ctx: RunContext) -> None:
        cfg, alg = ctx.cfg, ctx.cfg.algorithm
        self.ctx = ctx
        self.alg: SACConfig = alg
        self.save_replay = bool(cfg.checkpoint.replay)
        self.model = self.build_model(ctx.spec, alg, channels_last=False).to(ctx.device)
        self.selector = self.make_selector(alg)
        self.exploration = None
        self.replay = make_replay(alg, ctx.spec, cfg.seed)
        self.sink = TransitionSink(self.replay, ctx.stop)
        self.learner = SACLearner(
            self.model,
            alg,
            ctx.device,
            ctx.weights_lock,
            pin_memory=ctx.pin_memory,
            amp_dtype=ctx.amp_dtype,
        )
        self.stats = self.learner.stats

    @classmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool) -> SACNet:
        return build_network(spec, alg)

    @classmethod
    def make_selector(cls, alg: Any, *, greedy: bool = False) -> SampleFromDistribution:
        return SampleFromDistribution(greedy=greedy)

    @classmethod
    def default_epsilon(cls, alg: Any) -> float | None:
        return None

    @classmethod
    def samples_per_update(cls, alg: Any) -> int:
        return alg.batch_size

    def unroll_layout(self) -> tuple[int, int]:
        return self.alg.unroll_length, 1

    def on_unroll(self, unroll: Unroll) -> None:
        # Row 0 repeats the previous unroll's last row: merge each observation once.
        update_obs_norm(self.model, unroll.obs[1:], self.ctx.weights_lock)
        self.sink(unroll)

    def train(self, env_steps: Callable[[], int]) -> None:
        stats, stop, replay = self.stats, self.ctx.stop, self.replay
        while not stop.is_set():
            start = time.monotonic()
            sample = replay.sample(self.alg.batch_size, stop.is_set)
            stats.wait_s += time.monotonic() - start
            if sample is None:
                continue
            begin = time.monotonic()
            self.learner.train_step(sample)
            stats.busy_s += time.monotonic() - begin

    def metrics(self) -> dict[str, Any]:
        means = self.stats.pop_means()
        return {
            **{column: means.get(key) for column, key in _COLUMNS.items()},
            "replay/size": len(self.replay),
            "replay/ratio": self.replay.limiter.replay_ratio(),
        }

    def progress(self, row: dict[str, Any]) -> str:
        if row.get("loss/critic") is None:
            return f"replay {row['replay/size']} (training starts at {self.alg.learning_starts})"
        return (
            f"loss critic {row['loss/critic']:.3g} actor {row['loss/actor']:.3g} | alpha "
            f"{row['train/alpha']:.3g} entropy {row['train/entropy']:.3g} q "
            f"{row['train/q_mean']:.3g} | replay {row['replay/size']}"
        )

    def judged_returns(self, returns: list[float]) -> list[float]:
        return returns
