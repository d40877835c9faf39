"""Environments as batched tensor code on the learner's device, for ``arch=anakin``.

* :mod:`~seedq.envs.tensor.base`: the :class:`TensorEnv` protocol (how to plug in your own GPU
  simulator, with an example), :class:`TensorStep`, and :class:`TensorEnvBase`, which handles
  auto-reset, time limits and episode statistics around three pure functions.
* :mod:`~seedq.envs.tensor.cartpole`, :mod:`~seedq.envs.tensor.acrobot`,
  :mod:`~seedq.envs.tensor.mountain_car`: gymnasium's CartPole-v1, Acrobot-v1 and
  MountainCar-v0, step for step.
* :func:`make_tensor_env` / :func:`tensor_env_ids`: the registry, keyed by gymnasium id.
"""

from seedq.envs.tensor.acrobot import Acrobot
from seedq.envs.tensor.base import EpisodeStats, TensorEnv, TensorEnvBase, TensorStep
from seedq.envs.tensor.cartpole import CartPole
from seedq.envs.tensor.mountain_car import MountainCar
from seedq.envs.tensor.registry import make_tensor_env, tensor_env_class, tensor_env_ids

__all__ = [
    "Acrobot",
    "CartPole",
    "EpisodeStats",
    "MountainCar",
    "TensorEnv",
    "TensorEnvBase",
    "TensorStep",
    "make_tensor_env",
    "tensor_env_class",
    "tensor_env_ids",
]
