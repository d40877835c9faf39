"""The unroll: the time-major trajectory every architecture hands an agent.

Central inference cuts one from the request stream (``seedq.learner.unroll_store``), Anakin
collects one on the device (``seedq.arch.rollout``); agents train on it. Its fields are NumPy
arrays on the SEED and Sebulba paths and device tensors under Anakin: the slicing here works on
both.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


@dataclass
class StepRows:
    """The per-step fields an unroll is made of: the arrays of :data:`TIME_FIELDS` and the
    recurrent ``core_state``. An :class:`Unroll` holds T+1 steps of them (its docstring gives
    the shapes), the learner's ``StepRecord`` one."""

    obs: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    truncated: np.ndarray
    truncation_value: np.ndarray
    action: np.ndarray
    behaviour: np.ndarray
    core_state: tuple[np.ndarray, ...]


# The fields with a time axis (a row per step); core_state has none.
TIME_FIELDS = tuple(f.name for f in fields(StepRows) if f.name != "core_state")


@dataclass
class Unroll(StepRows):
    """A time-major trajectory of T+1 steps for B env columns.

    obs: [T+1, B, *obs_shape]; reward: float32 [T+1, B] (arrived with obs[t]);
    done: bool [T+1, B] (obs[t] is the first obs of an episode); truncated: bool [T+1, B];
    truncation_value: float32 [T+1, B] (value of the true last obs where truncated, else 0);
    action: int32 [T+1, B], or float32 [T+1, B, D] for continuous actions (the policy's sample,
    before the env clips it); behaviour: float32 [T+1, B, P], what the acting network output
    (policy logits or Gaussian mean and log-std, Q-values for R2D2);
    core_state: tuple of [B, H] arrays, the recurrent state before obs[0];
    env_id: int64 [B] global env ids.
    """

    env_id: np.ndarray

    @property
    def num_columns(self) -> int:
        return int(self.env_id.shape[0])

    def columns(self, start: int, stop: int) -> Unroll:
        """Env columns [start, stop) as a new Unroll (views)."""
        sliced = {name: getattr(self, name)[:, start:stop] for name in TIME_FIELDS}
        return Unroll(
            **sliced,
            core_state=tuple(s[start:stop] for s in self.core_state),
            env_id=self.env_id[start:stop],
        )


def take_columns(unroll: Unroll, index) -> Unroll:  # noqa: ANN001 - an array or a tensor
    """The env columns ``index`` (int ``[K]``, any order) of ``unroll`` as a new Unroll of
    contiguous arrays of its own.

    ``index``: a NumPy array for an unroll of arrays, a long tensor on the unroll's device for
    one of tensors. ``np.take`` and ``index_select`` write contiguous results; ``array[:, index]``
    hands back a transposed view of its result, which every consumer then copied once more.
    """
    return Unroll(
        **{name: _take(getattr(unroll, name), index, 1) for name in TIME_FIELDS},
        core_state=tuple(_take(s, index, 0) for s in unroll.core_state),
        env_id=_take(unroll.env_id, index, 0),
    )


def _take(array, index, axis: int):  # noqa: ANN001, ANN202 - arrays or tensors alike
    if isinstance(array, np.ndarray):
        return np.take(array, index, axis=axis)
    return array.index_select(axis, index)


def concat_unrolls(unrolls: list[Unroll]) -> Unroll:
    """Concatenate along the env (column) axis."""
    if len(unrolls) == 1:
        return unrolls[0]
    joined = {
        name: np.concatenate([getattr(u, name) for u in unrolls], axis=1) for name in TIME_FIELDS
    }
    states = tuple(
        np.concatenate([u.core_state[i] for u in unrolls], axis=0)
        for i in range(len(unrolls[0].core_state))
    )
    env_id = np.concatenate([u.env_id for u in unrolls])
    return Unroll(**joined, core_state=states, env_id=env_id)
