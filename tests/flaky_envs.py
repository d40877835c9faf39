"""A gymnasium env that raises, for the env-failure tests (``env.id=flaky_envs:Flaky-v0``, this
folder on the path of the learner and its actors).

Importing this module registers ``Flaky-v0``: episodes of ``episode_length`` steps whose
observation is ``[env's step in its episode, number of steps since it was built]``, 2 actions,
reward 1 a step. It raises ``RuntimeError`` on its ``fail_every``-th step since it was built
(0: never) and, with ``fail_reset``, at every reset: a simulator that crashes now and then,
and one that never works. On its ``hang_every``-th step it sleeps for an hour: one that hangs.
"""

import time

import gymnasium as gym
import numpy as np


class Flaky(gym.Env):
    observation_space = gym.spaces.Box(0, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(
        self,
        fail_every: int = 0,
        fail_reset: bool = False,
        episode_length: int = 10,
        hang_every: int = 0,
    ):
        self.fail_every = fail_every
        self.hang_every = hang_every
        self.fail_reset = fail_reset
        self.episode_length = episode_length
        self.t = 0
        self.lived = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fail_reset:
            raise RuntimeError("flaky env: its reset always fails")
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.lived += 1
        if self.fail_every and self.lived % self.fail_every == 0:
            raise RuntimeError(f"flaky env: crashed at its step {self.lived}")
        if self.hang_every and self.lived % self.hang_every == 0:
            time.sleep(3600)
        return self._obs(), 1.0, False, self.t >= self.episode_length, {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.lived], np.float32)


gym.register("Flaky-v0", entry_point=Flaky)
