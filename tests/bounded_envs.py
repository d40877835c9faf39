"""A gymnasium env whose continuous action range excludes 0, for the action-bounds tests
(``env.id=bounded_envs:Target-v0``, this folder on the path of the learner and its actors).

Importing this module registers ``Target-v0``: one-step episodes whose action lies in
``[10, 20]`` and whose reward is ``-|a - 15| / 5`` (0 at the centre, -1 at either bound). A
policy centred at 0 sees every action clipped to 10 and a reward of -1 whatever it does.
"""

import gymnasium as gym
import numpy as np

LOW, HIGH, TARGET = 10.0, 20.0, 15.0


class Target(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Box(LOW, HIGH, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        miss = abs(float(np.asarray(action).reshape(-1)[0]) - TARGET)
        return np.zeros(2, np.float32), -miss / (TARGET - LOW), True, False, {}


gym.register("Target-v0", entry_point=Target)
