"""Indicator observations (bool: the one-hots of a ``Discrete`` space, binary flags) and the
learning rate of the weights that read them.

A one-hot selects one column of the first layer's weight: that layer is an embedding table whose
row for a state is trained only by the samples that visit it, and Adam moves it by about the
learning rate per optimizer step whatever the batch size. An on-policy learner that takes few
large steps (PPO's default: 16 minibatch steps per 2,048 env steps; V-trace: one per 640) then
moves a state's row too slowly to tell states apart, and the policy learns only what holds in
every state. On Taxi-v4 both settled on never picking up (return -200 for 0.5-1.2 M env
steps); SB3's PPO, with 20x the optimizer steps per env step (10 epochs of 64-sample
minibatches), learns it. Scaling the learning rate of those weights alone by
``indicator_lr_scale`` gives the table rows that pace and leaves the shared layers, and the
throughput, as they are (benchmarks/RESULTS.md, "seedq vs Stable-Baselines3").

Observation normalisation never touches indicators (``seedq.agents.common.normalize``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from seedq.agents.common.torsos import MLPTorso
from seedq.messages import EnvSpec


def is_indicator(spec: EnvSpec) -> bool:
    """Whether ``spec``'s observations are indicators (bool arrays)."""
    return np.dtype(spec.obs_dtype) == np.bool_


def input_weights(model: nn.Module) -> list[nn.Parameter]:
    """The first layer's weight of every MLP torso of ``model`` (PPO has two bodies)."""
    weights = []
    for module in model.modules():
        if isinstance(module, MLPTorso):
            first = next((m for m in module.net if isinstance(m, nn.Linear)), None)
            if first is not None:
                weights.append(first.weight)
    return weights


def param_groups(model: nn.Module, spec: EnvSpec | None, lr: float, scale: float) -> list[dict]:
    """Optimizer parameter groups of ``model``: all of it at ``lr``, except, for indicator
    observations, the weights that read them at ``lr * scale`` (their group keeps
    ``lr_scale``, which :func:`seedq.agents.common.update.linear_lr` honours)."""
    scaled = input_weights(model) if spec is not None and is_indicator(spec) else []
    if not scaled or scale == 1.0:
        return [{"params": list(model.parameters())}]
    ids = {id(p) for p in scaled}
    rest = [p for p in model.parameters() if id(p) not in ids]
    group: dict[str, Any] = {"params": scaled, "lr": lr * scale, "lr_scale": scale}
    return [{"params": rest}, group]
