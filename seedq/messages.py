"""The seedq wire format: the only module that knows how messages look on the wire.

(Over 400 lines on purpose: encoding and the validation of every field of every kind stay in
one place, so no other module can learn the wire format.)

Every message is a ZeroMQ multipart message. Frame 0 is a msgpack header
``{v, kind, actor_id, run_id, seq, n_envs, dtypes, shapes, ...}``; frames 1..k are raw array
buffers, sent without a copy (``send_multipart(copy=False)``) and read back with
``np.frombuffer``. msgpack never carries a large array.

Kinds:
- ``hello``   actor -> learner: joins with its env spec (obs shape/dtype, actions, n_envs).
- ``step``    actor -> learner: one batch step of n_envs envs; frames obs, reward, terminated,
              truncated, final_obs (rows of the truncated envs only). The request *is* the
              trajectory: the learner already knows the actions it chose.
- ``actions`` learner -> actor: the actions for a step, same seq.
- ``bye``     actor -> learner: leaving; the learner drops its partial unrolls.
- ``error``   either way: a code and a human message.

Decoding validates version, kind, dtypes, shapes and sizes against the actor's ``Hello`` and
bounds every length before allocating; any violation raises :class:`ProtocolError` carrying a
short ``code`` from :data:`ERROR_CODES` the broker counts by. Non-finite rewards, episode returns
and float observations are refused (``non_finite``): one NaN would otherwise poison a whole
training batch. The observation check costs one pass over the array (about 5 us for 32x4
float32, about the price of a copy for large float frames) and is skipped for integer dtypes,
so uint8 Atari frames pay nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

# 2: Hello carries the action space; Actions are int32 [N] or float32 [N, D] to match it.
PROTOCOL_VERSION = 2

MAX_HEADER_BYTES = 64 * 1024
MAX_ENVS = 65_536
MAX_OBS_DIMS = 4
MAX_OBS_ELEMENTS = 1 << 24
MAX_ACTIONS = 1 << 16
ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
)

HELLO, STEP, ACTIONS, BYE, ERROR = "hello", "step", "actions", "bye", "error"
KINDS = (HELLO, STEP, ACTIONS, BYE, ERROR)
MAX_FRAMES = 1 + 5  # header + the most array frames any kind carries (a Step's five)
MAX_RUN_ID_CHARS = 256

# Every code an Error may carry; the broker counts rejected messages by these.
ERROR_CODES = frozenset(
    [
        "bad_header",  # frame 0 missing, not msgpack, or not a map
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
        "too_many_envs",  # no free state rows left for this Hello
        "env_id_conflict",  # Hello claims env ids another actor steps
        "unknown_actor",  # Step or Bye for an actor id with no Hello (or evicted)
        "not_joined",  # Step from a connection that did not send this actor's Hello
        "stale_run",  # Step from a run other than the actor's current one
        "bad_seq",  # Step seq is not the next one
        "busy",  # Step while the actor's previous request is unanswered
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


def _header(kind: str, **fields: Any) -> bytes:
    return msgpack.packb({"v": PROTOCOL_VERSION, "kind": kind, **fields}, use_bin_type=True)


def _array_meta(arrays: Sequence[np.ndarray]) -> dict[str, list]:
    return {"dtypes": [a.dtype.name for a in arrays], "shapes": [list(a.shape) for a in arrays]}


def encode(msg: Message) -> list[Frame]:
    """Frames for ``send_multipart(frames, copy=False)``; arrays are passed through uncopied."""
    if isinstance(msg, Step):
        arrays = [
            np.ascontiguousarray(msg.obs),
            np.ascontiguousarray(msg.reward, dtype=np.float32),
            np.ascontiguousarray(msg.terminated, dtype=np.bool_),
            np.ascontiguousarray(msg.truncated, dtype=np.bool_),
            np.ascontiguousarray(msg.final_obs, dtype=msg.obs.dtype),
        ]
        head = _header(
            STEP,
            actor_id=msg.actor_id,
            run_id=msg.run_id,
            seq=msg.seq,
            n_envs=int(arrays[0].shape[0]),
            episode_returns=[float(r) for r in msg.episode_returns],
            episode_lengths=[int(n) for n in msg.episode_lengths],
            **_array_meta(arrays),
        )
        return [head, *arrays]
    if isinstance(msg, Actions):
        actions = np.ascontiguousarray(
            msg.actions, dtype=np.float32 if msg.actions.dtype.kind == "f" else np.int32
        )
        head = _header(
            ACTIONS,
            actor_id=msg.actor_id,
            seq=msg.seq,
            n_envs=int(actions.shape[0]),
            **_array_meta([actions]),
        )
        return [head, actions]
    if isinstance(msg, Hello):
        spec = msg.spec
        head = _header(
            HELLO,
            actor_id=msg.actor_id,
            run_id=msg.run_id,
            n_envs=msg.n_envs,
            first_env=msg.first_env,
            obs_shape=list(spec.obs_shape),
            obs_dtype=spec.obs_dtype,
            num_actions=spec.num_actions,
            action_kind=spec.action_kind,
            action_low=[float(x) for x in spec.action_low],
            action_high=[float(x) for x in spec.action_high],
        )
        return [head]
    if isinstance(msg, Bye):
        return [_header(BYE, actor_id=msg.actor_id, run_id=msg.run_id)]
    if isinstance(msg, Error):
        return [
            _header(ERROR, code=msg.code, message=msg.message, actor_id=msg.actor_id, seq=msg.seq)
        ]
    raise TypeError(f"cannot encode {type(msg).__name__}")


def _buffer(frame: Frame) -> memoryview:
    view = memoryview(getattr(frame, "buffer", frame))  # zmq.Frame exposes .buffer
    # memoryview refuses to cast a view with a zero in its shape (an empty final_obs).
    return view.cast("B") if view.nbytes else memoryview(b"")


def _field(header: dict, name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in header:
        raise ProtocolError("missing_field", f"header has no {name!r}")
    value = header[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError("bad_field", f"header field {name!r} has type {type(value).__name__}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bounded_int(header: dict, name: str, lo: int, hi: int) -> int:
    value = _field(header, name, int)
    if not lo <= value <= hi:
        raise ProtocolError("bad_field", f"{name}={value} outside [{lo}, {hi}]")
    return value


def decode_header(frame: Frame) -> dict:
    """Unpack and check frame 0: size bound, msgpack, version and kind."""
    buf = _buffer(frame)
    if len(buf) > MAX_HEADER_BYTES:
        raise ProtocolError("too_large", f"header of {len(buf)} bytes > {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(
            buf,
            raw=False,
            strict_map_key=True,
            max_str_len=4096,
            max_bin_len=0,
            max_array_len=MAX_ENVS,
            max_map_len=64,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise ProtocolError("bad_header", f"header is not valid msgpack ({exc})") from None
    if not isinstance(header, dict):
        raise ProtocolError("bad_header", "header is not a map")
    version = header.get("v")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            "bad_version",
            f"protocol version {version!r}; this build speaks {PROTOCOL_VERSION} "
            "(run actors and learner from the same seedq version)",
        )
    if header.get("kind") not in KINDS:
        raise ProtocolError("bad_kind", f"unknown message kind {header.get('kind')!r}")
    return header


def _check_dtype(name: str) -> np.dtype:
    if name not in ALLOWED_DTYPES:
        raise ProtocolError("bad_dtype", f"dtype {name!r} not in {sorted(ALLOWED_DTYPES)}")
    return np.dtype(name)


def _arrays(
    header: dict, frames: Sequence[Frame], expected: list[tuple[str, tuple[int, ...]]]
) -> list[np.ndarray]:
    """Check declared dtypes/shapes against what the spec expects, then each frame's size."""
    dtypes = _field(header, "dtypes", list)
    shapes = _field(header, "shapes", list)
    if len(frames) != len(expected) or len(dtypes) != len(expected) or len(shapes) != len(expected):
        raise ProtocolError(
            "bad_frames",
            f"expected {len(expected)} array frames, got {len(frames)} "
            f"({len(dtypes)} dtypes, {len(shapes)} shapes declared)",
        )
    out = []
    for i, (frame, (want_dtype, want_shape)) in enumerate(zip(frames, expected, strict=True)):
        if not isinstance(dtypes[i], str) or dtypes[i] != want_dtype:
            raise ProtocolError(
                "bad_dtype", f"array {i} has dtype {dtypes[i]!r}, expected {want_dtype!r}"
            )
        if not isinstance(shapes[i], list) or tuple(shapes[i]) != want_shape:
            raise ProtocolError(
                "bad_shape", f"array {i} has shape {shapes[i]!r}, expected {list(want_shape)}"
            )
        dtype = _check_dtype(want_dtype)
        buf = _buffer(frame)
        nbytes = math.prod(want_shape) * dtype.itemsize
        if len(buf) != nbytes:
            raise ProtocolError(
                "truncated", f"array {i} frame has {len(buf)} bytes, expected {nbytes}"
            )
        array = np.frombuffer(buf, dtype=dtype).reshape(want_shape)
        if dtype.kind == "f" and not np.isfinite(array).all():
            raise ProtocolError("non_finite", f"array {i} holds NaN or inf")
        out.append(array)
    return out


def decode_hello(header: dict) -> Hello:
    shape = _field(header, "obs_shape", list)
    if not 1 <= len(shape) <= MAX_OBS_DIMS or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
    ):
        raise ProtocolError("bad_shape", f"obs_shape {shape!r} must be 1-{MAX_OBS_DIMS} dims > 0")
    if math.prod(shape) > MAX_OBS_ELEMENTS:
        raise ProtocolError("too_large", f"obs_shape {shape} exceeds {MAX_OBS_ELEMENTS} elements")
    dtype = _field(header, "obs_dtype", str)
    _check_dtype(dtype)
    num_actions = _bounded_int(header, "num_actions", 1, MAX_ACTIONS)
    kind = _field(header, "action_kind", str)
    if kind not in ACTION_KINDS:
        raise ProtocolError("bad_field", f"action_kind {kind!r} not in {list(ACTION_KINDS)}")
    low, high = _action_bounds(header, kind, num_actions)
    return Hello(
        actor_id=_bounded_int(header, "actor_id", 0, 2**31 - 1),
        run_id=_run_id(header),
        n_envs=_bounded_int(header, "n_envs", 1, MAX_ENVS),
        spec=EnvSpec(
            obs_shape=tuple(shape),
            obs_dtype=dtype,
            num_actions=num_actions,
            action_kind=kind,
            action_low=low,
            action_high=high,
        ),
        first_env=_bounded_int(header, "first_env", 0, 2**31 - 1),
    )


def _action_bounds(
    header: dict, kind: str, num_actions: int
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``action_low``/``action_high``: D numbers each (infinite allowed, NaN not), low <= high;
    empty for discrete actions."""
    want = num_actions if kind == CONTINUOUS else 0
    bounds = []
    for name in ("action_low", "action_high"):
        values = _field(header, name, list)
        if len(values) != want or not all(_is_real(x) and not math.isnan(x) for x in values):
            raise ProtocolError(
                "bad_field", f"{name} must hold {want} numbers for {kind} actions, got {values!r}"
            )
        bounds.append(tuple(float(x) for x in values))
    if any(lo > hi for lo, hi in zip(*bounds, strict=True)):
        raise ProtocolError("bad_field", "action_low exceeds action_high")
    return bounds[0], bounds[1]


def _declared_rows(shapes: list, *, index: int, limit: int) -> int:
    """Leading dimension the header declares for array ``index``, bounded by ``limit``."""
    shape = shapes[index] if len(shapes) > index else None
    rows = shape[0] if isinstance(shape, list) and shape else None
    if not isinstance(rows, int) or isinstance(rows, bool) or not 0 <= rows <= limit:
        raise ProtocolError("bad_shape", f"array {index} rows {rows!r} outside [0, {limit}]")
    return rows


def decode_step(header: dict, frames: Sequence[Frame], hello: Hello) -> Step:
    """Decode a Step against the Hello its actor sent; ``frames`` excludes the header."""
    n = _bounded_int(header, "n_envs", 1, MAX_ENVS)
    if n != hello.n_envs:
        raise ProtocolError("bad_shape", f"step has n_envs={n}, hello declared {hello.n_envs}")
    run_id = _run_id(header)
    if run_id != hello.run_id:
        raise ProtocolError(
            "stale_run",
            f"step from run {run_id!r}, actor joined as {hello.run_id!r}; send Hello again",
        )
    final_rows = _declared_rows(_field(header, "shapes", list), index=4, limit=n)
    obs_shape, obs_dtype = hello.spec.obs_shape, hello.spec.obs_dtype
    obs, reward, terminated, truncated, final_obs = _arrays(
        header,
        frames,
        [
            (obs_dtype, (n, *obs_shape)),
            ("float32", (n,)),
            ("bool", (n,)),
            ("bool", (n,)),
            (obs_dtype, (final_rows, *obs_shape)),
        ],
    )
    if int(truncated.sum()) != final_rows:
        raise ProtocolError(
            "bad_shape",
            f"{int(truncated.sum())} envs truncated but {final_rows} final_obs rows sent",
        )
    returns = _field(header, "episode_returns", list)
    lengths = _field(header, "episode_lengths", list)
    if len(returns) != len(lengths) or len(returns) > n:
        raise ProtocolError("bad_field", "episode_returns/lengths disagree or exceed n_envs")
    if not all(_is_real(r) for r in returns):
        raise ProtocolError("bad_field", "episode_returns must be numbers")
    if not all(math.isfinite(r) for r in returns):
        raise ProtocolError("non_finite", "episode_returns holds NaN or inf")
    if not all(_is_int(x) and 0 <= x <= 2**63 - 1 for x in lengths):
        raise ProtocolError("bad_field", "episode_lengths must be ints >= 0")
    return Step(
        actor_id=hello.actor_id,
        run_id=run_id,
        seq=_bounded_int(header, "seq", 0, 2**63 - 1),
        obs=obs,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        final_obs=final_obs,
        episode_returns=[float(r) for r in returns],
        episode_lengths=[int(x) for x in lengths],
    )


def decode_actions(
    header: dict, frames: Sequence[Frame], n_envs: int, spec: EnvSpec | None = None
) -> Actions:
    """Decode the reply to an actor of ``n_envs`` envs whose Hello sent ``spec`` (None:
    discrete); continuous actions must be finite float32 ``[N, D]``."""
    n = _bounded_int(header, "n_envs", 1, MAX_ENVS)
    if n != n_envs:
        raise ProtocolError("bad_shape", f"actions for {n} envs, actor has {n_envs}")
    expected = ("int32", (n,)) if spec is None else (spec.action_dtype, spec.action_shape(n))
    (actions,) = _arrays(header, frames, [expected])
    return Actions(
        actor_id=_bounded_int(header, "actor_id", 0, 2**31 - 1),
        seq=_bounded_int(header, "seq", 0, 2**63 - 1),
        actions=actions,
    )


def decode_error(header: dict) -> Error:
    actor_id, seq = header.get("actor_id", -1), header.get("seq", -1)
    return Error(
        code=_field(header, "code", str),
        message=_field(header, "message", str),
        actor_id=actor_id if _is_int(actor_id) else -1,
        seq=seq if _is_int(seq) else -1,
    )


def decode_bye(header: dict) -> Bye:
    return Bye(actor_id=_bounded_int(header, "actor_id", 0, 2**31 - 1), run_id=_run_id(header))


def _run_id(header: dict) -> str:
    run_id = _field(header, "run_id", str)
    if len(run_id) > MAX_RUN_ID_CHARS:
        raise ProtocolError("bad_field", f"run_id longer than {MAX_RUN_ID_CHARS} characters")
    return run_id


def reply_address(header: dict) -> tuple[int, int]:
    """``(actor_id, seq)`` of a header for an Error reply; -1 where absent or not an int."""
    actor_id, seq = header.get("actor_id", -1), header.get("seq", -1)
    return (actor_id if _is_int(actor_id) else -1, seq if _is_int(seq) else -1)


def frames_size(frames: Sequence[Frame]) -> int:
    """Total bytes of a multipart message's frames."""
    return sum(_buffer(frame).nbytes for frame in frames)
