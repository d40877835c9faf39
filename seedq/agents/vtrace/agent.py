"""The V-trace agent: what ``seedq.agents.registry`` builds for a run (the algorithm is described
in the package's docstring, kept free of torch so configs validate without it)."""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from seedq.agents.common.base import discrete_network
from seedq.agents.common.onpolicy import OnPolicyAgent
from seedq.agents.common.update import Placement
from seedq.agents.vtrace.acting import SampleFromPolicy
from seedq.agents.vtrace.learner import VTraceLearner
from seedq.agents.vtrace.network import build_network
from seedq.core.agent import RunContext
from seedq.learner.config import graphs_setting
from seedq.messages import EnvSpec

log = logging.getLogger(__name__)


class VTraceAgent(OnPolicyAgent):
    name = "vtrace"
    columns = {
        "loss/total": "loss/total",
        "loss/pg": "loss/pg",
        "loss/baseline": "loss/baseline",
        "loss/entropy": "loss/entropy",
        "train/approx_kl": "loss/approx_kl",
        "train/clip_fraction": "loss/clip_fraction",
        "train/grad_norm": "grad_norm",
        "train/lr": "lr",
    }

    @classmethod
    def build_model(cls, spec: EnvSpec, alg: Any, *, channels_last: bool):  # noqa: ANN206
        # A config saved before algorithm.value_norm existed built its network without it.
        build = functools.partial(build_network, value_norm=bool(getattr(alg, "value_norm", False)))
        return discrete_network(cls, build, spec, alg, channels_last)

    @classmethod
    def make_selector(cls, alg: Any, *, greedy: bool = False) -> SampleFromPolicy:
        return SampleFromPolicy(greedy=greedy)

    def make_learner(self, ctx: RunContext, placement: Placement) -> VTraceLearner:
        return VTraceLearner(
            self.model,
            self.alg,
            placement,
            total_env_steps=ctx.cfg.total_env_steps,
            spec=ctx.spec,
            seed=ctx.cfg.seed,
            graphs=graph_mode(ctx),
        )

    def progress(self, row: dict[str, Any]) -> str:
        if row.get("loss/pg") is None:
            return "no update this interval"
        return (
            f"loss pg {row['loss/pg']:.3g} baseline {row['loss/baseline']:.3g} "
            f"entropy {row['loss/entropy']:.3g} kl {row['train/approx_kl']:.2g}"
        )


def graph_mode(ctx: RunContext) -> str:
    """The learner's ``graphs`` from ``hardware.cuda_graphs``: ``cuda`` when asked for (true),
    ``auto`` where they apply (auto: a CUDA device, one learner rank without a grad scaler, and
    an architecture that feeds batches of ``batch_size`` unrolls), else ``none``. A compiled
    learner forward (arch=anakin's ``hardware.compile``) is never recorded."""
    hardware = getattr(ctx.cfg, "hardware", None)
    setting = graphs_setting(getattr(hardware, "cuda_graphs", "false"))
    if setting == "false":
        return "none"
    if ctx.compile_training != "none":
        if setting == "true":
            log.warning(
                "hardware.cuda_graphs: the learner's forward is compiled (hardware.compile=%s); "
                "its updates run as compiled, not recorded",
                ctx.compile_training,
            )
        return "none"
    if setting == "true":
        return "cuda"
    arch = getattr(getattr(ctx.cfg, "arch", None), "name", "seed")
    usable = (
        ctx.device.type == "cuda"
        and ctx.collective is None
        and ctx.amp_dtype != torch.float16
        and arch != "anakin"  # its batches are all its envs, not batch_size unrolls
    )
    return "auto" if usable else "none"
