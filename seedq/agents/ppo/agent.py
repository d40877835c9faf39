"""The PPO agent: what ``seedq.agents.registry`` builds for a run (the algorithm is described
in the package's docstring, kept free of torch so configs validate without it)."""

from __future__ import annotations

from typing import Any

from seedq.agents.common.onpolicy import OnPolicyAgent
from seedq.agents.common.update import Placement
from seedq.agents.ppo.learner import PPOLearner
from seedq.agents.ppo.network import build_network
from seedq.core.agent import RunContext
from seedq.messages import EnvSpec


class PPOAgent(OnPolicyAgent):
    name = "ppo"
    columns = {
        "loss/total": "loss/total",
        "loss/pg": "loss/pg",
        "loss/value": "loss/value",
        "loss/entropy": "loss/entropy",
        "train/approx_kl": "loss/approx_kl",
        "train/clip_fraction": "loss/clip_fraction",
        "train/grad_norm": "grad_norm",
        "train/lr": "lr",
    }

    @classmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool):  # noqa: ANN206
        return build_network(spec, alg, channels_last=channels_last)

    def make_learner(self, ctx: RunContext, placement: Placement) -> PPOLearner:
        return PPOLearner(
            self.model,
            self.alg,
            placement,
            total_env_steps=ctx.cfg.total_env_steps,
            seed=ctx.cfg.seed,
            spec=ctx.spec,
        )

    def progress(self, row: dict[str, Any]) -> str:
        if row.get("loss/pg") is None:
            return "no update this interval"
        return (
            f"loss pg {row['loss/pg']:.3g} value {row['loss/value']:.3g} "
            f"entropy {row['loss/entropy']:.3g} kl {row['train/approx_kl']:.2g}"
        )
