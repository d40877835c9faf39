"""Hello, Bye and Error: the rare messages, with a msgpack header; and the entry points that
take any message (``encode``, ``decode_header``).

A msgpack header is a map ``{v, kind, actor_id, run_id, ...}`` in frame 0; these kinds carry no
array frames. Decoding bounds every length before allocating (``max_*_len``) and checks every
field's type and range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgpack

from seedq.messages.protocol import (
    ACTION_KINDS,
    ACTIONS,
    ALLOWED_DTYPES,
    BYE,
    CONTINUOUS,
    ERROR,
    HELLO,
    KINDS,
    MAX_ACTIONS,
    MAX_ENV_CHARS,
    MAX_ENVS,
    MAX_HEADER_BYTES,
    MAX_OBS_DIMS,
    MAX_OBS_ELEMENTS,
    MAX_RUN_ID_CHARS,
    PROTOCOL_VERSION,
    STEP,
    Actions,
    Bye,
    EnvSpec,
    Error,
    Frame,
    Hello,
    Message,
    ProtocolError,
    Step,
)
from seedq.messages.steps import (
    BINARY_MARK,
    binary_header_fields,
    buffer,
    decode_actions,
    encode_actions,
    encode_step,
)


def _header(kind: str, **fields: Any) -> bytes:
    return msgpack.packb({"v": PROTOCOL_VERSION, "kind": kind, **fields}, use_bin_type=True)


def encode(msg: Message) -> list[Frame]:
    """Frames for ``send_multipart(frames, copy=False)``; arrays are passed through uncopied."""
    if isinstance(msg, Step):
        return encode_step(msg)
    if isinstance(msg, Actions):
        return encode_actions(msg)
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
            **({"env": msg.env} if msg.env else {}),
        )
        return [head]
    if isinstance(msg, Bye):
        return [_header(BYE, actor_id=msg.actor_id, run_id=msg.run_id)]
    if isinstance(msg, Error):
        return [
            _header(ERROR, code=msg.code, message=msg.message, actor_id=msg.actor_id, seq=msg.seq)
        ]
    raise TypeError(f"cannot encode {type(msg).__name__}")


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
    """Unpack and check frame 0 of any message: size bound, msgpack or binary, version, kind.

    A binary header (Step, Actions) comes back as a map of its fields too.
    """
    buf = buffer(frame)
    if len(buf) and buf[0] == BINARY_MARK:
        return binary_header_fields(buf)
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
    kind = header.get("kind")
    if kind not in KINDS:
        raise ProtocolError("bad_kind", f"unknown message kind {kind!r}")
    if kind in (STEP, ACTIONS):
        raise ProtocolError("bad_header", f"a {kind!r} header is binary since protocol 3")
    return header


def _check_dtype(name: str) -> None:
    if name not in ALLOWED_DTYPES:
        raise ProtocolError("bad_dtype", f"dtype {name!r} not in {sorted(ALLOWED_DTYPES)}")


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
        env=_env(header),
    )


def _env(header: dict) -> str:
    if "env" not in header:
        return ""
    env = _field(header, "env", str)
    if len(env) > MAX_ENV_CHARS:
        raise ProtocolError("bad_field", f"env longer than {MAX_ENV_CHARS} characters")
    return env


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
    return sum(buffer(frame).nbytes for frame in frames)


def decode_reply(
    frames: Sequence[Frame], n_envs: int, spec: EnvSpec | None = None
) -> Actions | Error:
    """The learner's answer to a Step: its Actions, or the Error that refused it."""
    if not frames:
        raise ProtocolError("bad_frames", "empty reply")
    header = decode_header(frames[0])
    if header["kind"] == ERROR:
        return decode_error(header)
    if header["kind"] != ACTIONS:
        raise ProtocolError("bad_kind", f"a {header['kind']!r} message is no reply to a step")
    return decode_actions(frames, n_envs, spec)
