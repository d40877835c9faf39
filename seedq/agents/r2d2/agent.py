"""The R2D2 agent: what ``seedq.agents.registry`` builds for a run (the algorithm is described
in the package's docstring, kept free of torch so configs validate without it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from seedq.agents.common.base import discrete_network, first_items_steps, from_envs
from seedq.agents.common.replay_agent import ReplayAgent
from seedq.agents.common.update import Placement
from seedq.agents.r2d2.acting import EpsilonGreedy
from seedq.agents.r2d2.exploration import Exploration, epsilon_ladder
from seedq.agents.r2d2.learner import R2D2Learner
from seedq.agents.r2d2.network import build_network
from seedq.agents.r2d2.sequences import ReplaySink, make_replay
from seedq.core.agent import RunContext
from seedq.messages import EnvSpec


class R2D2Agent(ReplayAgent):
    replay_items = "sequences"
    name = "r2d2"
    columns = {
        "eval/return_mean": None,
        "eval/episodes": None,
        "eval/epsilon": None,
        "loss/td": "loss/td",
        "train/q_mean": "q_mean",
        "train/grad_norm": "grad_norm",
        "train/lr": "lr",
        "replay/size": None,
        "replay/ratio": None,
        "replay/priority_mean": None,
    }

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        alg, actor = self.alg, ctx.cfg.actor
        batches = actor.num_actors * actor.batches_per_actor
        exploring_envs = (batches - alg.eval_batches) * actor.envs_per_batch
        self.exploration = Exploration(
            epsilon_ladder(exploring_envs, alg.epsilon_base, alg.epsilon_alpha), alg.eval_epsilon
        )
        # The replay is the big allocation: check it fits before anything starts.
        sizes = tuple(int(s.shape[1]) for s in self.model.initial_state(1, "cpu"))
        self.replay = make_replay(alg, ctx.spec, sizes, ctx.cfg.seed)
        self.sink = ReplaySink(self.replay, alg, ctx.stop)

    @classmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool):  # noqa: ANN206
        return discrete_network(cls, build_network, spec, alg, channels_last)

    @classmethod
    def make_selector(cls, alg: Any, *, greedy: bool = False) -> EpsilonGreedy:
        # Greedy or not is the epsilon the caller passes.
        return EpsilonGreedy(alg.value_rescale_eps)

    @classmethod
    def default_epsilon(cls, alg: Any) -> float | None:
        return float(alg.eval_epsilon)

    @classmethod
    def samples_per_update(cls, alg: Any) -> int:
        return alg.batch_size * alg.sequence_length

    def make_learner(self, ctx: RunContext, placement: Placement) -> R2D2Learner:
        return R2D2Learner(self.model, self.alg, placement)

    def unroll_layout(self) -> tuple[int, int]:
        # Consecutive sequences share burn_in + 1 rows: the next one's burn-in and the row
        # that bootstraps this one's last transition.
        return self.alg.burn_in + self.alg.sequence_length, self.alg.burn_in + 1

    def before_training(self, envs: int = 1) -> tuple[int, str]:
        # Each sequence after an env's first takes sequence_length new steps (the layout above).
        alg = self.alg
        least = alg.replay_min_size
        return first_items_steps(least, alg.sequence_length, envs), (
            f"its replay holds algorithm.replay_min_size={least} sequences of "
            f"{alg.sequence_length} new steps each{from_envs(least, envs)}"
        )

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "eval": self.exploration.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        # A resumed run judges itself by the evaluation episodes of the run so far; without
        # them its window started empty (stop_at_return waited for 100 new ones, and
        # eval/episodes went back to 0). Checkpoints before 2026-12-07 hold none.
        if "eval" in state:
            self.exploration.load_state_dict(state["eval"])

    def train_on(self, sample: Any) -> None:
        priorities = self.learner.train_step(sample)
        if priorities is not None:
            self.replay.update_priorities(sample.indices, sample.generations, priorities)

    def extra_metrics(self) -> dict[str, Any]:
        evals = list(self.exploration.eval_returns)
        return {
            "eval/return_mean": float(np.mean(evals)) if evals else None,
            "eval/episodes": self.exploration.eval_episodes,
            "eval/epsilon": self.alg.eval_epsilon,
            "replay/size": len(self.replay),
            "replay/ratio": self.replay.limiter.replay_ratio(),
            "replay/priority_mean": self.replay.mean_priority(),
        }

    def progress(self, row: dict[str, Any]) -> str:
        if row.get("loss/td") is None:
            if row.get("train/updates"):
                return f"replay {row['replay/size']} | no update this interval"
            return f"replay {row['replay/size']} (training starts at {self.alg.replay_min_size})"
        evals = row["eval/return_mean"]
        return (
            f"loss td {row['loss/td']:.3g} q {row['train/q_mean']:.3g} | replay "
            f"{row['replay/size']} ratio {row['replay/ratio']:.2f} | eval return "
            + ("n/a" if evals is None else f"{evals:.1f}")
        )

    def judged_returns(self, returns: list[float]) -> list[float]:
        # The exploring envs act with epsilon up to 0.4: judge the run by its eval episodes.
        if self.alg.eval_batches:
            return list(self.exploration.eval_returns)
        return returns
