"""Tensor envs by gymnasium id: ``make_tensor_env("CartPole-v1", 4096, "cuda", seed=0)``.

Adding an env is one :class:`~seedq.envs.tensor.base.TensorEnvBase` subclass and one line in
``_TENSOR_ENVS``.
"""

from __future__ import annotations

import difflib

import torch

from seedq.envs.tensor.acrobot import Acrobot
from seedq.envs.tensor.base import TensorEnvBase
from seedq.envs.tensor.cartpole import CartPole
from seedq.envs.tensor.mountain_car import MountainCar

__all__ = ["make_tensor_env", "tensor_env_class", "tensor_env_ids"]

_TENSOR_ENVS: dict[str, type[TensorEnvBase]] = {
    cls.env_id: cls for cls in (CartPole, Acrobot, MountainCar)
}


def tensor_env_ids() -> list[str]:
    """The gymnasium ids that have a tensor implementation, sorted."""
    return sorted(_TENSOR_ENVS)


def make_tensor_env(
    env_id: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    seed: int = 0,
    max_episode_steps: int | None = None,
    dtype: torch.dtype = torch.float64,
) -> TensorEnvBase:
    """A batch of ``num_envs`` tensor envs on ``device``, already reset with ``seed``.

    Args:
        env_id: a gymnasium id from :func:`tensor_env_ids`, e.g. ``"CartPole-v1"``.
        num_envs: ``N``, the batch size.
        device: where the env runs; its first observations are ``env.observe()``.
        seed: seed of the env's :class:`torch.Generator` (reset draws).
        max_episode_steps: time limit; ``None`` keeps gymnasium's (500 / 500 / 200).
        dtype: the state's dtype: float64 matches gymnasium step for step, float32 suits
            devices without fast float64.

    Raises:
        ValueError: ``env_id`` has no tensor implementation (the message lists those that do),
            or an argument is out of range.
    """
    cls = tensor_env_class(env_id)
    return cls(num_envs, device=device, seed=seed, max_episode_steps=max_episode_steps, dtype=dtype)


def tensor_env_class(env_id: str) -> type[TensorEnvBase]:
    """The class of ``env_id``'s tensor env: its ``obs_shape``, ``obs_dtype``,
    ``num_actions`` and ``state_size`` before any env is built.

    Raises:
        ValueError: ``env_id`` has no tensor implementation (the message lists those that do).
    """
    try:
        return _TENSOR_ENVS[env_id]
    except KeyError:
        close = difflib.get_close_matches(str(env_id), _TENSOR_ENVS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"no tensor implementation of env {env_id!r}.{hint} Tensor envs exist for: "
            f"{', '.join(tensor_env_ids())}; other gymnasium ids run through the actor "
            "backends (arch=seed or sebulba)."
        ) from None
