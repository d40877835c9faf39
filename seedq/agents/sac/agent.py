"""The SAC agent: what ``seedq.agents.registry`` builds for a run (the algorithm is described
in the package's docstring, kept free of torch so configs validate without it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seedq.agents.common.base import first_items_steps, from_envs
from seedq.agents.common.normalize import update_obs_norm
from seedq.agents.common.replay_agent import ReplayAgent
from seedq.agents.common.update import Placement
from seedq.agents.sac.learner import SACLearner
from seedq.agents.sac.network import SACNet, build_network
from seedq.agents.sac.transitions import TransitionSink, make_replay
from seedq.core.agent import RunContext
from seedq.core.unroll import Unroll
from seedq.messages import EnvSpec


class SACAgent(ReplayAgent):
    replay_items = "transitions"
    name = "sac"
    columns = {
        "loss/critic": "loss/critic",
        "loss/actor": "loss/actor",
        "loss/temperature": "loss/temperature",
        "train/alpha": "alpha",
        "train/entropy": "entropy",
        "train/q_mean": "q_mean",
        "train/grad_norm": "grad_norm",
        "train/lr": "lr",
        "replay/size": None,
        "replay/ratio": None,
    }

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.replay = make_replay(self.alg, ctx.spec, ctx.cfg.seed)
        self.sink = TransitionSink(self.replay, ctx.stop)

    @classmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool) -> SACNet:
        return build_network(spec, alg)

    @classmethod
    def samples_per_update(cls, alg: Any) -> int:
        return alg.batch_size

    def make_learner(self, ctx: RunContext, placement: Placement) -> SACLearner:
        return SACLearner(self.model, self.alg, placement)

    def train(self, env_steps: Callable[[], int]) -> None:
        updates = self.alg.block_updates
        # Handed None within a moment when the rate limiter allows no block, as R2D2's: with
        # several learner ranks a rank that waited on its replay until it filled held every
        # rank's training round (a rank whose actors were restarting, for up to
        # hardware.learner_timeout_s, which then ended the run).
        self.training_loop(
            lambda: self._take(updates * self.alg.batch_size),
            lambda sample: self.learner.train_block(sample, updates),
        )

    def on_unroll(self, unroll: Unroll) -> None:
        # Row 0 repeats the previous unroll's last row: merge each observation once.
        update_obs_norm(self.model, unroll.obs[1:], self.ctx.weights_lock)
        self.sink(unroll)

    def extra_metrics(self) -> dict[str, Any]:
        return {"replay/size": len(self.replay), "replay/ratio": self.replay.limiter.replay_ratio()}

    def before_training(self, envs: int = 1) -> tuple[int, str]:
        # One transition per env step.
        starts = self.alg.learning_starts
        return first_items_steps(starts, 1, envs), (
            f"its replay holds algorithm.learning_starts={starts} transitions"
            f"{from_envs(starts, envs)}"
        )

    def progress(self, row: dict[str, Any]) -> str:
        if row.get("loss/critic") is None:
            if row.get("train/updates"):
                return f"replay {row['replay/size']} | no update this interval"
            return f"replay {row['replay/size']} (training starts at {self.alg.learning_starts})"
        return (
            f"loss critic {row['loss/critic']:.3g} actor {row['loss/actor']:.3g} | alpha "
            f"{row['train/alpha']:.3g} entropy {row['train/entropy']:.3g} q "
            f"{row['train/q_mean']:.3g} | replay {row['replay/size']}"
        )
