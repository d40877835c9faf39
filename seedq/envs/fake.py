"""``env.kind=fake``: deterministic numpy envs whose observations say who and when they are.

Pipeline tests and ``seedq-bench pipeline`` use them to check that every transition arrives, in
order, paired with the right action; nothing is random and nothing needs installing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from seedq.envs.base import BatchBase, EnvError, StepBatch
from seedq.envs.config import EnvConfig, kind_setting
from seedq.messages.protocol import DTYPE_CODES
from seedq.schema import ConfigError, check_positive, positive, setting


@dataclass
class FakeConfig(EnvConfig):
    """``env=fake``: the observation and action layout, episode ends and injected faults."""

    kind: str = kind_setting("fake")
    id: str = setting("fake", "Names the run directory; the fake env has one layout, set below.")
    obs_shape: list[int] = setting(
        help="Observation shape; at least 3 elements (env id, step, episode).",
        factory=lambda: [4],
    )
    obs_dtype: str = setting("float32", "Observation numpy dtype, e.g. float32 or uint8.")
    num_actions: int = setting(
        2, "Size of the discrete action space, or length of the continuous one (> 0)."
    )
    continuous_actions: bool = setting(
        False, "Actions are float vectors of num_actions values in [-1, 1]."
    )
    episode_length: int = setting(
        10, "Steps per episode of env 0; env g runs episode_length + g % 3 (> 0)."
    )
    truncate_episodes: bool = setting(
        False, "Episodes end truncated (true, with a final observation) or terminated."
    )
    nan_every: int = setting(
        0,
        "Every nan_every-th step of a batch gives env 0 a NaN reward and, for float "
        "observations, a NaN observation (fault-injection tests; 0: never).",
    )
    crash_every: int = setting(
        0,
        "The crash_every-th step of a batch since it was built, and every one after as many, "
        "raises RuntimeError: a simulator that crashes (fault-injection tests; 0: never).",
    )
    hang_every: int = setting(
        0,
        "The hang_every-th step of a batch since it was built, and every one after as many, "
        "sleeps for an hour: a simulator that hangs (fault-injection tests; 0: never).",
    )

    def check(self) -> None:
        super().check()
        check_positive(self, "env", ["num_actions", "episode_length"])
        positive("env.nan_every", self.nan_every, zero_ok=True)
        positive("env.crash_every", self.crash_every, zero_ok=True)
        positive("env.hang_every", self.hang_every, zero_ok=True)
        # The wire carries these dtypes only: another one (complex64, a typo) would be refused
        # by every actor as it encodes its first step, and the actor restarted in a loop.
        try:
            name = np.dtype(self.obs_dtype).name
        except TypeError:
            name = None
        if name not in DTYPE_CODES:
            raise ConfigError(
                f"env.obs_dtype={self.obs_dtype!r} cannot travel to the learner; use one of "
                f"{', '.join(DTYPE_CODES)}"
            )


class FakeEnvBatch(BatchBase):
    """Deterministic numpy envs whose observations say who and when they are.

    The flattened observation of env ``i`` is ``[env_offset + i, t, e, a, 0, ...]`` where ``t`` is
    the step within the episode (0 right after a reset) and ``e`` the number of episodes env
    ``i`` has finished. The reward of a step is the new ``t`` (so ordering errors show up as
    wrong rewards). Global env ``g = env_offset + i`` ends its episodes after
    ``episode_length + (g % 3)`` steps, so every observation describes itself; the lengths
    differ so that episode ends fall on different batch steps, as in real envs. They end as
    truncated if ``truncate_episodes``, else as terminated; ``final_obs`` of a truncated env has
    ``t == episode_length + (g % 3)``.

    With ``continuous_actions`` the actions are float vectors of ``num_actions`` values in
    ``[-1, 1]`` and ``a`` is the first value of the (clipped) action vector.

    Integer dtypes wrap the encoded values (e.g. env ids beyond 255 in uint8); float32 is exact
    up to 2**24.
    """

    def __init__(
        self,
        num_envs: int,
        obs_shape: tuple[int, ...] = (4,),
        obs_dtype: np.dtype | str = "float32",
        num_actions: int = 2,
        episode_length: int = 10,
        truncate_episodes: bool = False,
        env_offset: int = 0,
        nan_every: int = 0,
        continuous_actions: bool = False,
        crash_every: int = 0,
        hang_every: int = 0,
    ) -> None:
        obs_shape = tuple(int(d) for d in obs_shape)
        try:
            dtype = np.dtype(obs_dtype)
        except TypeError as exc:
            raise EnvError(f"fake env: env.obs_dtype={obs_dtype!r} is not a numpy dtype") from exc
        flat = int(np.prod(obs_shape)) if obs_shape else 1
        if flat < 3:
            raise EnvError(
                f"fake env: env.obs_shape={list(obs_shape)} has {flat} element(s); it needs at "
                "least 3 to encode (env id, step, episode)"
            )
        if episode_length < 1 or num_actions < 1:
            raise EnvError(
                f"fake env: episode_length={episode_length} and num_actions={num_actions} must "
                "both be >= 1"
            )
        super().__init__(num_envs, obs_shape, dtype, num_actions, None, env_offset)
        if continuous_actions:
            self._set_continuous(-np.ones(num_actions), np.ones(num_actions))
        self._flat = flat
        self._truncate = bool(truncate_episodes)
        self.env_ids = np.arange(env_offset, env_offset + num_envs, dtype=np.int64)
        self.episode_lengths = (
            episode_length + (env_offset + np.arange(num_envs, dtype=np.int64)) % 3
        )
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._episode = np.zeros(num_envs, dtype=np.int64)
        self._no_done = np.zeros(num_envs, dtype=bool)
        self._nan_every = int(nan_every)
        self._crash_every = int(crash_every)
        self._hang_every = int(hang_every)
        self._steps = 0

    def _encode(
        self, ids: np.ndarray, t: np.ndarray, episode: np.ndarray, last_action: np.ndarray | int
    ) -> np.ndarray:
        """``[len(ids), *obs_shape]`` observations for the given rows (all 1-D, same length).

        With 4+ elements, element 3 is the action that led to this observation (-1 after a
        reset), so a test can check that the learner pairs each action with the right step.
        """
        out = np.zeros((len(ids), self._flat), dtype=self.obs_dtype)
        # Array-to-array assignment casts unsafely, which is the documented wrap-around.
        out[:, 0] = ids
        out[:, 1] = t
        out[:, 2] = episode
        if self._flat >= 4:
            out[:, 3] = np.asarray(last_action)  # an int -1 would not wrap: numpy refuses it
        return out.reshape(len(ids), *self.obs_shape)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start episode 0 at step 0 in every env (``seed`` is ignored: nothing is random)."""
        self._t[:] = 0
        self._episode[:] = 0
        return self._encode(self.env_ids, self._t, self._episode, -1)

    def step(self, actions: np.ndarray) -> StepBatch:
        actions = self._check_actions(actions)
        if self._crash_every and (self._steps + 1) % self._crash_every == 0:
            self._steps += 1
            raise RuntimeError(
                f"fake env: crashed at step {self._steps} of its batch (env.crash_every)"
            )
        if self._hang_every and (self._steps + 1) % self._hang_every == 0:
            time.sleep(3600)
        if actions.ndim == 2:
            actions = actions[:, 0]  # the first value stands for the vector in the obs
        self._t += 1
        reward = self._t.astype(np.float32)
        done = self._t >= self.episode_lengths
        if self._truncate:
            terminated, truncated = self._no_done.copy(), done
        else:
            terminated, truncated = done, self._no_done.copy()
        if done.any():
            final_obs = (
                self._encode(self.env_ids[done], self._t[done], self._episode[done], actions[done])
                if self._truncate
                else self._no_final_obs
            )
            self._t[done] = 0
            self._episode += done
        else:
            final_obs = self._no_final_obs
        obs = self._encode(self.env_ids, self._t, self._episode, np.where(done, -1, actions))
        self._steps += 1
        if self._nan_every and self._steps % self._nan_every == 0:
            reward[0] = np.nan
            if np.issubdtype(obs.dtype, np.floating):
                obs[0] = np.nan
        return StepBatch(obs, reward, terminated, truncated, final_obs)

    def close(self) -> None:
        pass


def make_fake(cfg: FakeConfig, num_envs: int, seed: int, env_offset: int) -> FakeEnvBatch:
    """The registry's factory: ``obs_shape``, ``obs_dtype``, ``num_actions``, ``episode_length``,
    ``truncate_episodes``, ``nan_every``, ``crash_every`` and ``hang_every`` of ``cfg``
    (``seed`` is unused: nothing is random)."""
    return FakeEnvBatch(
        num_envs,
        tuple(cfg.obs_shape),
        cfg.obs_dtype,
        cfg.num_actions,
        cfg.episode_length,
        cfg.truncate_episodes,
        env_offset,
        cfg.nan_every,
        cfg.continuous_actions,
        cfg.crash_every,
        cfg.hang_every,
    )
