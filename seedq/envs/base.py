"""The contract every env backend meets: :class:`EnvBatch`, with same-step autoreset.

An actor steps ``N`` environments together and sends one message per batch step. When an env
ends an episode on a step, that step already returns the first observation of its next episode,
and the true last observation of each *truncated* env comes back separately in
``StepBatch.final_obs`` so the learner can bootstrap from it. A terminated env needs no final
observation (its value is zero).

Observations are delivered channels-first (``[C, H, W]``) for images so that models see the
same layout whatever the backend; float64 vectors are cast to float32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, Self, runtime_checkable

import numpy as np

from seedq.envs.config import MAX_SEED
from seedq.messages import CONTINUOUS, DISCRETE, EnvSpec


class EnvError(RuntimeError):
    """An environment cannot be built or stepped; the message says what to change."""


def other_family_hint(env_id: str, kind: str) -> str:
    """For the unknown-id error of ``env=<kind>``: `` '...' is an id of env=minatar: ...``
    where another family plays ``env_id`` (:func:`seedq.envs.registry.other_family_hint`,
    installed by the registry, which knows every family as no backend does); "" else."""
    return _family_hint[0](env_id, kind)


_family_hint: list[Callable[[str, str], str]] = [lambda env_id, kind: ""]


def install_family_hint(hint: Callable[[str, str], str]) -> None:
    """Have :func:`other_family_hint` ask ``hint`` (the registry's, at its import)."""
    _family_hint[0] = hint


@dataclass
class StepBatch:
    """The result of stepping every env of a batch once.

    Attributes:
        obs: ``[N, *obs_shape]``; for envs that ended this step, the first observation of their
            next episode (same-step autoreset).
        reward: float32 ``[N]``, the reward of the action just taken (for envs that ended, the
            last reward of the episode).
        terminated: bool ``[N]``, the episode reached a terminal state.
        truncated: bool ``[N]``, the episode was cut (time limit). Never True where
            ``terminated`` is: an env that does both is reported as terminated only.
        final_obs: ``[K, *obs_shape]`` with ``K = truncated.sum()``: the true last observation of
            each truncated env, in increasing env index order. ``[0, *obs_shape]`` when none.
        game_over: bool ``[N]`` where an env's episode, as its score is counted, ended; None
            when that is ``terminated | truncated``. Only a backend whose learning episodes are
            shorter than its games sets it (Atari's ``episodic_life``: a life loss terminates
            the learning episode while the game, and the score reported for it, goes on).
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray
    game_over: np.ndarray | None = None

    @property
    def episode_over(self) -> np.ndarray:
        """bool ``[N]``: where a scored episode (a whole game) ended this step."""
        if self.game_over is not None:
            return self.game_over
        return self.terminated | self.truncated


@runtime_checkable
class EnvBatch(Protocol):
    """``num_envs`` environments stepped together with same-step autoreset."""

    num_envs: int
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int
    action_kind: str  # "discrete" or "continuous" (then num_actions is the vector length D)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env; returns ``[N, *obs_shape]``."""
        ...

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step every env with integer ``actions`` ``[N]`` or continuous ones ``[N, D]``."""
        ...

    def close(self) -> None:
        """Release threads, subprocesses and emulators. Safe to call twice."""
        ...


class BatchBase:
    """Shared bookkeeping of a backend: spaces, seeding, action checks, context-manager support.

    A backend subclasses it, calls ``super().__init__`` once it knows its spaces, and implements
    ``reset``, ``step`` and ``close`` of :class:`EnvBatch`.
    """

    def __init__(
        self,
        num_envs: int,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype,
        num_actions: int,
        seed: int | None,
        env_offset: int,
    ) -> None:
        self.num_envs = num_envs
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.num_actions = int(num_actions)
        self.action_kind = DISCRETE
        self.action_low = np.zeros(0, np.float32)
        self.action_high = np.zeros(0, np.float32)
        self.env_offset = env_offset
        self._seed = seed
        self._seeded = False
        # Reused for the (common) steps on which nothing is truncated; a size-0 array cannot be
        # mutated by a consumer, so sharing it is safe.
        self._no_final_obs = np.zeros((0, *self.obs_shape), dtype=self.obs_dtype)

    def _reset_seed(self, seed: int | None) -> int | None:
        """The base seed for a reset: env ``i`` of the batch gets ``base + i``.

        An explicit ``seed`` and the construction seed both become ``seed + env_offset``, so
        batches built from one run seed with distinct offsets get distinct env seeds. Without an
        explicit seed only the first reset is seeded; later ones continue the RNG streams.
        """
        if seed is None:
            if self._seeded or self._seed is None:
                return None
            seed = self._seed
        self._seeded = True
        # Folded into the run seeds' range: a seedq-actor started by hand with a large actor id
        # (its seed + 1000 x id, its first env id as offset) or --seed passed 2^31, which ale_py
        # and MinAtar refuse at every reset; the actor rebuilt its envs until it gave up.
        return (int(seed) + self.env_offset) % (MAX_SEED + 1)

    def _final_obs(self, parts: list[np.ndarray]) -> np.ndarray:
        """``StepBatch.final_obs`` from the last observations of the envs truncated this step,
        collected in env order: one env's ``[*obs_shape]`` or a block ``[k, *obs_shape]`` each."""
        if not parts:
            return self._no_final_obs
        return np.concatenate([part.reshape(-1, *self.obs_shape) for part in parts])

    def _set_continuous(self, low: np.ndarray, high: np.ndarray) -> None:
        """Declare a continuous action space: vectors of ``len(low)`` values in ``[low, high]``."""
        self.action_kind = CONTINUOUS
        self.action_low = np.asarray(low, np.float32).reshape(-1)
        self.action_high = np.asarray(high, np.float32).reshape(-1)
        self.num_actions = int(self.action_low.shape[0])

    def _check_continuous(self, actions: np.ndarray) -> np.ndarray:
        """Validate float ``actions`` ``[N, D]`` and clip them to the env's bounds.

        Policies that are not squashed (a plain Gaussian) sample outside the bounds; clipping
        here, on the env side, keeps the unclipped sample the learner stored and computes
        log-probabilities of (cleanrl's ClipAction wrapper does the same).
        """
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs, self.num_actions) or actions.dtype.kind != "f":
            raise EnvError(
                f"actions must be a float array of shape ({self.num_envs}, {self.num_actions}); "
                f"got {actions.dtype} {actions.shape}"
            )
        if not np.isfinite(actions).all():
            raise EnvError("actions hold NaN or inf")
        return np.clip(actions, self.action_low, self.action_high).astype(np.float32)

    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        """Validate ``actions`` ``[N]`` and return them as int64.

        Checked on every step because an out-of-range action is not caught by every backend:
        ale_py's C++ vector env deadlocks on one. Continuous envs get ``_check_continuous``.
        """
        if self.action_kind == CONTINUOUS:
            return self._check_continuous(actions)
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,) or actions.dtype.kind not in "iu":
            raise EnvError(
                f"actions must be an integer array of shape ({self.num_envs},); got "
                f"{actions.dtype} {actions.shape}"
            )
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise EnvError(
                f"actions must lie in [0, {self.num_actions}); got values in "
                f"[{actions.min()}, {actions.max()}]"
            )
        return actions.astype(np.int64, copy=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Subclasses release their env here."""


def env_spec_of(env: EnvBatch) -> EnvSpec:
    """The spec an env batch's actor announces and the learner's model is built for."""
    kind = getattr(env, "action_kind", DISCRETE)
    bounds: tuple[tuple[float, ...], ...] = ((), ())
    if kind == CONTINUOUS:
        bounds = tuple(tuple(float(x) for x in b) for b in (env.action_low, env.action_high))
    return EnvSpec(
        tuple(int(d) for d in env.obs_shape),
        np.dtype(env.obs_dtype).name,
        int(env.num_actions),
        kind,
        *bounds,
    )


def split_done(terminated: np.ndarray, truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flags as bool arrays, with ``truncated`` cleared where ``terminated`` is set.

    A terminal state has value zero whatever the clock says, so terminated wins.
    """
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool) & ~terminated
    return terminated, truncated


def vector_env_threads(requested: int, num_envs: int) -> int:
    """Threads a vector env with a C++ worker pool (atari, procgen) steps its ``num_envs`` with.

    ``requested`` is ``env.num_threads``: set, or sized at start so that every env thread of
    the run together matches the cores (``seedq.launch.sizing``); 0 (an actor on another host,
    a tool building one env batch) takes one per core this process may use. Never more than
    the envs, which a thread each would already cover.
    """
    from seedq.cores import usable_cores

    return max(1, min(num_envs, requested or usable_cores()))
