"""The torso registry: every torso name a config may use, written once (no torch here, so
configs compose and validate without it; ``seedq.agents.common.torsos`` holds the classes).

Adding a torso is a class with ``build(obs_shape, settings)`` and ``out_size`` plus one line in
:data:`TORSOS`; ``algorithm.model.torso=<name>`` then works for every algorithm.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from seedq.schema import ConfigError

# The Nature CNN's convs need frames of at least 36x36; torso=auto picks the minatar torso for
# smaller ones.
NATURE_MIN_SIZE = 36
# The MLP torso's nonlinearities: config name -> torch.nn class name.
ACTIVATIONS = {"relu": "ReLU", "tanh": "Tanh"}


@dataclass(frozen=True)
class TorsoEntry:
    cls: str  # "module:Class"
    obs_rank: int  # 1: feature vectors (D,); 3: frames (C, H, W)
    summary: str

    @property
    def input(self) -> str:
        return "1-D observations (D,)" if self.obs_rank == 1 else "3-D (C, H, W) frames"


@dataclass(frozen=True)
class TorsoSettings:
    """What a torso may take from ``algorithm.model`` besides the observation shape."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "relu"
    channels_last: bool = False


_MODULE = "seedq.agents.common.torsos"
TORSOS: dict[str, TorsoEntry] = {
    "mlp": TorsoEntry(f"{_MODULE}:MLPTorso", 1, "linear layers over feature vectors"),
    "nature": TorsoEntry(f"{_MODULE}:NatureTorso", 3, "the DQN Nature CNN (84x84 frames)"),
    "impala": TorsoEntry(f"{_MODULE}:ImpalaTorso", 3, "IMPALA's residual CNN"),
    "minatar": TorsoEntry(f"{_MODULE}:MinAtarTorso", 3, "one small conv, for 10x10 frames"),
}
# What algorithm.model.torso accepts.
TORSO_CHOICES = ("auto", *TORSOS)


def auto_torso(obs_shape: tuple[int, ...]) -> str:
    """``torso=auto``: mlp for vectors, nature for frames, minatar for frames under 36x36."""
    if len(obs_shape) == 1:
        return "mlp"
    if len(obs_shape) != 3:
        # A ConfigError, not a traceback: seedq-train refuses the run with this one line.
        raise ConfigError(
            f"observation shape {tuple(obs_shape)} is not supported: the torsos take 1-D "
            "feature vectors (D,) or 3-D frames (C, H, W); have the env deliver one of those "
            "(env=gym flattens other Box shapes and folds frame stacks into channels)"
        )
    return "minatar" if min(obs_shape[1:]) < NATURE_MIN_SIZE else "nature"


def torso_class(name: str) -> Any:
    """The torso class registered as ``name`` (imports torch)."""
    module, _, attr = TORSOS[name].cls.partition(":")
    return getattr(importlib.import_module(module), attr)
