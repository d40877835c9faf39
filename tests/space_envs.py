"""gymnasium envs with observation spaces seedq must lay out or refuse, for the tests that run
``seedq-train`` on them (``env.id=space_envs:TinyFrames-v0``, this folder on the path of the
learner and its actors).

Importing this module registers ``TinyFrames-v0``: float32 frames ``(2, 2, 2)``, smaller than
any conv torso's kernel; ``NoValues-v0``: observations of shape ``(0,)``; and
``Unrendered-v0``: vectors ``(3,)``, an env that takes gymnasium's ``render_mode`` but renders
nothing; two actions, episodes of 10 steps.
"""

import gymnasium as gym
import numpy as np


class Observes(gym.Env):
    """Samples of ``observation_space``; two actions, reward 0, episodes of 10 steps."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, observation_space: gym.spaces.Space) -> None:
        self.observation_space = observation_space
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), 0.0, False, self.t >= 10, {}


gym.register(
    "TinyFrames-v0",
    entry_point=lambda: Observes(gym.spaces.Box(0.0, 1.0, (2, 2, 2), np.float32)),
)
gym.register(
    "NoValues-v0", entry_point=lambda: Observes(gym.spaces.Box(0.0, 1.0, (0,), np.float32))
)


class Unrendered(Observes):
    """Takes gymnasium's ``render_mode`` but renders nothing: ``metadata`` names no modes."""

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(gym.spaces.Box(0.0, 1.0, (3,), np.float32))
        self.render_mode = render_mode


gym.register("Unrendered-v0", entry_point=Unrendered)
