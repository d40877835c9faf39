"""The protocol's types and bounds: message kinds, error codes, the env spec, the messages."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

# What ``seedq.messages`` re-exports (DTYPE_CODES stays with the binary headers).
__all__ = [
    "ACTIONS", "ACTION_KINDS", "ALLOWED_DTYPES", "BYE", "CONTINUOUS", "DISCRETE", "ERROR",
    "ERROR_CODES", "HELLO", "KINDS", "MAX_ACTIONS", "MAX_ENVS", "MAX_ENV_CHARS", "MAX_FRAMES",
    "MAX_HEADER_BYTES", "MAX_OBS_DIMS", "MAX_OBS_ELEMENTS", "MAX_RUN_ID_CHARS", "PROTOCOL_VERSION",
    "STEP", "Actions", "Bye", "EnvSpec", "Error", "Frame", "Hello", "Message", "ProtocolError",
    "Step", "env_difference", "env_json", "run_tag",
]  # fmt: skip

# 3: Step and Actions travel with a fixed binary header (seedq.messages.steps); Hello, Bye and
#    Error keep their msgpack header. A Hello's optional "env" (what the envs are) came later
#    within 3: a learner without it ignores it, one with it takes a Hello without it.
# 2: Hello carries the action space; Actions are int32 [N] or float32 [N, D] to match it.
PROTOCOL_VERSION = 3

MAX_HEADER_BYTES = 64 * 1024
MAX_ENVS = 65_536
MAX_OBS_DIMS = 4
MAX_OBS_ELEMENTS = 1 << 24
MAX_ACTIONS = 1 << 16
# The wire's dtypes, in the order of their one-byte codes in a binary header.
DTYPE_CODES = (
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
)  # fmt: skip
ALLOWED_DTYPES = frozenset(DTYPE_CODES)

HELLO, STEP, ACTIONS, BYE, ERROR = "hello", "step", "actions", "bye", "error"
KINDS = (HELLO, STEP, ACTIONS, BYE, ERROR)
MAX_FRAMES = 1 + 5  # header + the most array frames any kind carries
MAX_RUN_ID_CHARS = 256
MAX_ENV_CHARS = 4096  # a Hello's env: the env section as JSON

# Every code an Error may carry; the broker counts rejected messages by these.
ERROR_CODES = frozenset(
    [
        "bad_header",  # frame 0 missing, not msgpack nor a binary header, or not a map
        "bad_version",  # another PROTOCOL_VERSION
        "bad_kind",  # unknown kind, or one the learner is not sent
        "missing_field",  # a required header field is absent
        "bad_field",  # a header field has the wrong type or is out of range
        "bad_frames",  # wrong number of frames for the kind
        "bad_dtype",  # array dtype other than the spec's
        "bad_shape",  # array shape other than the spec's (or n_envs disagrees)
        "truncated",  # a frame's byte size disagrees with its declared shape
        "too_large",  # header, message or obs shape over its bound
        "non_finite",  # NaN or inf in rewards, episode returns or float observations
        "spec_mismatch",  # Hello with another env spec than the learner's model
        "env_mismatch",  # Hello whose envs are not the learner's (another id, frame skip, ...)
        "too_many_envs",  # no free state rows left for this Hello
        "env_id_conflict",  # Hello claims env ids another actor steps
        "unknown_actor",  # Step or Bye for an actor id with no Hello (or evicted)
        "not_joined",  # Step from a connection that did not send this actor's Hello
        "stale_run",  # Step from a run other than the actor's current one
        "bad_seq",  # Step seq is not the next one
        "busy",  # Step while the actor's previous request is unanswered
        "taken_over",  # from a connection whose actor id a later Hello from another one took
        "internal",  # an unexpected exception while handling the message (a bug)
    ]
)

Frame = Any  # bytes, memoryview, numpy array or zmq.Frame


class ProtocolError(ValueError):
    """A message broke the protocol; ``code`` is a short machine-readable reason."""

    def __init__(self, code: str, message: str) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown error code {code!r}; add it to ERROR_CODES")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.detail = message


DISCRETE, CONTINUOUS = "discrete", "continuous"
ACTION_KINDS = (DISCRETE, CONTINUOUS)


@dataclass(frozen=True)
class EnvSpec:
    """What the learner's model and an actor's envs must agree on.

    ``num_actions``: the number of actions (``discrete``) or the length ``D`` of the action
    vector (``continuous``, a gymnasium ``Box``); the policy head's width either way.
    ``action_low`` / ``action_high``: ``D`` bounds of a continuous action (may be infinite);
    empty for discrete actions. Actions travel as int32 ``[N]`` or float32 ``[N, D]``.
    """

    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int
    action_kind: str = DISCRETE
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()

    @property
    def continuous(self) -> bool:
        return self.action_kind == CONTINUOUS

    @property
    def action_dtype(self) -> str:
        return "float32" if self.continuous else "int32"

    def action_shape(self, n_envs: int) -> tuple[int, ...]:
        """Shape of the actions of ``n_envs`` envs on the wire."""
        return (n_envs, self.num_actions) if self.continuous else (n_envs,)

    @property
    def obs_bytes(self) -> int:
        """Bytes of one env's observation."""
        return int(np.prod(self.obs_shape)) * np.dtype(self.obs_dtype).itemsize

    def to_dict(self) -> dict[str, Any]:
        """Plain values (checkpoints, msgpack)."""
        return {
            "obs_shape": list(self.obs_shape),
            "obs_dtype": self.obs_dtype,
            "num_actions": self.num_actions,
            "action_kind": self.action_kind,
            "action_low": list(self.action_low),
            "action_high": list(self.action_high),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnvSpec:
        """The inverse of :meth:`to_dict`; checkpoints from before action kinds are discrete."""
        return cls(
            tuple(d["obs_shape"]),
            d["obs_dtype"],
            int(d["num_actions"]),
            d.get("action_kind", DISCRETE),
            tuple(float(x) for x in d.get("action_low", ())),
            tuple(float(x) for x in d.get("action_high", ())),
        )


@dataclass
class Hello:
    """An actor (one env batch) joins; its envs are global env ids first_env .. first_env+n-1."""

    actor_id: int
    run_id: str
    n_envs: int
    spec: EnvSpec
    first_env: int = 0
    # What the envs are (EnvConfig.identity() as canonical JSON); "": not said (the learner
    # then checks the spec alone).
    env: str = ""


def env_json(identity: dict[str, Any]) -> str:
    """A Hello's ``env``: an env section's identity (``EnvConfig.identity()``) as canonical
    JSON, so that two equal sections give equal strings."""
    return json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)


def env_difference(theirs: str, ours: str) -> str:
    """The keys on which two Hello ``env`` strings differ, as ``env.KEY=THEIRS (the learner's:
    OURS)``; a string that is not a JSON object is named whole."""
    try:
        a, b = json.loads(theirs), json.loads(ours)
    except ValueError:
        a, b = None, None
    if not isinstance(a, dict) or not isinstance(b, dict):
        return f"env {theirs[:200]!r} (the learner's: {ours[:200]!r})"
    keys = [k for k in sorted({*a, *b}) if a.get(k, "<unset>") != b.get(k, "<unset>")]
    return ", ".join(
        f"env.{k}={a.get(k, '<unset>')!r} (the learner's: {b.get(k, '<unset>')!r})" for k in keys
    )


@dataclass
class Step:
    """One batch step of an actor's envs.

    obs: [N, *obs_shape] (for envs that ended, the first obs of the next episode);
    reward: float32 [N]; terminated, truncated: bool [N];
    final_obs: [K, *obs_shape], K = truncated.sum(), the last obs of each truncated env in env
    order; episode_returns / episode_lengths: raw stats of the episodes that ended at this step.
    """

    actor_id: int
    run_id: str
    seq: int
    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)

    @classmethod
    def first(cls, hello: Hello, obs: np.ndarray) -> Step:
        """The request that follows ``hello``: its envs' reset observations ``obs`` as seq 0, with
        no reward yet and no episode ended."""
        n = hello.n_envs
        return cls(
            actor_id=hello.actor_id,
            run_id=hello.run_id,
            seq=0,
            obs=obs,
            reward=np.zeros(n, np.float32),
            terminated=np.zeros(n, bool),
            truncated=np.zeros(n, bool),
            final_obs=obs[:0],
        )

    @classmethod
    def of_batch(
        cls,
        actor_id: int,
        run_id: str,
        seq: int,
        batch: Any,
        returns: list[float],
        lengths: list[int],
    ) -> Step:
        """The Step of a batch step's arrays: ``batch`` has ``obs``, ``reward``, ``terminated``,
        ``truncated`` and ``final_obs`` (an env batch's ``StepBatch``, a decoded message)."""
        return cls(
            actor_id=actor_id,
            run_id=run_id,
            seq=seq,
            obs=batch.obs,
            reward=batch.reward,
            terminated=batch.terminated,
            truncated=batch.truncated,
            final_obs=batch.final_obs,
            episode_returns=returns,
            episode_lengths=lengths,
        )


@dataclass
class Actions:
    actor_id: int
    seq: int
    actions: np.ndarray  # int32 [N] (discrete) or float32 [N, D] (continuous)


@dataclass
class Bye:
    actor_id: int
    run_id: str


@dataclass
class Error:
    code: str
    message: str
    actor_id: int = -1
    seq: int = -1


Message = Hello | Step | Actions | Bye | Error


@lru_cache(maxsize=4096)
def run_tag(run_id: str) -> int:
    """The 64-bit tag of a run id that every binary Step carries (the run id itself travels in
    the Hello only): a Step of an older run of the same actor is refused by it (``stale_run``)."""
    digest = hashlib.blake2b(run_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")
