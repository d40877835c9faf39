"""Step and Actions: the two messages of every env step, with a fixed binary header.

They are most of the traffic (one each per env batch and step), so their header is a C struct
read with one ``struct.unpack_from`` instead of a msgpack map, and whatever a Hello already fixed
(obs shape and dtype, n_envs, the run) is not sent again: the receiver checks each Step against
a :class:`StepLayout` decoded once, at Hello.

A binary header starts with byte ``0xC1``, the one byte msgpack never uses, so a receiver tells
it from a msgpack header (Hello, Bye, Error, and every message of protocol 2) by its first byte.

Step frames (little-endian)::

    0  header  mark u8 = 0xC1, version u8, kind u8 = 1, obs dtype code u8,
               actor_id u32, n_envs u32, n_final u32, n_episodes u32, seq i64, run tag u64
               then reward f32 [N], terminated u8 [N], truncated u8 [N]
               then obs [N, *obs_shape] when its N x obs bytes <= INLINE_OBS_BYTES
    1  obs         [N, *obs_shape]                 when larger (sent and received uncopied)
    .  final_obs   [K, *obs_shape]                 only when K = n_final > 0
    .  episodes    returns f64 [E], lengths i64 [E]  only when E = n_episodes > 0

A small Step (CartPole's, one Atari frame) is therefore one frame: every frame costs the
broker a ZeroMQ call or two, about a microsecond each, and copying a few kilobytes costs less.

Actions: one frame, header ``mark, version, kind = 2, action dtype code, actor_id u32, n_envs
u32, seq i64`` then the actions (int32 [N] or float32 [N, D]).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from seedq.messages.protocol import (
    DTYPE_CODES,
    PROTOCOL_VERSION,
    Actions,
    EnvSpec,
    Frame,
    Hello,
    ProtocolError,
    Step,
    run_tag,
)

BINARY_MARK = 0xC1
STEP_KIND, ACTIONS_KIND = 1, 2
STEP_HEAD = struct.Struct("<BBBBIIIIqQ")
ACTIONS_HEAD = struct.Struct("<BBBBIIq")
ENV_BYTES = 6  # reward f32 + terminated u8 + truncated u8 of each env, in frame 0
EPISODE_BYTES = 16  # return f64 + length i64 of each finished episode
_CODE = {name: code for code, name in enumerate(DTYPE_CODES)}
# Observations up to this size travel inside frame 0; larger ones in a frame of their own, which
# the broker keeps in ZeroMQ's buffer, uncopied.
INLINE_OBS_BYTES = 32 * 1024


def buffer(frame: Frame) -> memoryview:
    view = memoryview(getattr(frame, "buffer", frame))  # zmq.Frame exposes .buffer
    # memoryview refuses to cast a view with a zero in its shape (an empty final_obs).
    return view.cast("B") if view.nbytes else memoryview(b"")


def dtype_code(name: str) -> int:
    if name not in _CODE:
        raise ValueError(f"dtype {name!r} cannot travel; use one of {list(DTYPE_CODES)}")
    return _CODE[name]


def encode_step(msg: Step) -> list[Frame]:
    """Frames for ``send_multipart(frames, copy=False)``; the observation is not copied."""
    obs = np.ascontiguousarray(msg.obs)
    n = obs.shape[0]
    final = np.ascontiguousarray(msg.final_obs, dtype=obs.dtype)
    returns, lengths = msg.episode_returns, msg.episode_lengths
    head = STEP_HEAD.pack(
        BINARY_MARK, PROTOCOL_VERSION, STEP_KIND, dtype_code(obs.dtype.name), msg.actor_id,
        n, final.shape[0], len(returns), msg.seq, run_tag(msg.run_id),
    )  # fmt: skip
    parts = [
        head,
        np.asarray(msg.reward, "<f4").tobytes(),
        np.asarray(msg.terminated, np.bool_).tobytes(),
        np.asarray(msg.truncated, np.bool_).tobytes(),
    ]
    inline = obs.nbytes <= INLINE_OBS_BYTES
    frames: list[Frame] = [b"".join([*parts, obs.tobytes()] if inline else parts)]
    if not inline:
        frames.append(obs)
    if final.shape[0]:
        frames.append(final)
    if returns:
        frames.append(np.asarray(returns, "<f8").tobytes() + np.asarray(lengths, "<i8").tobytes())
    return frames


def encode_actions(msg: Actions) -> list[Frame]:
    actions = np.ascontiguousarray(
        msg.actions, dtype="<f4" if msg.actions.dtype.kind == "f" else "<i4"
    )
    head = ACTIONS_HEAD.pack(
        BINARY_MARK, PROTOCOL_VERSION, ACTIONS_KIND, dtype_code(actions.dtype.name),
        msg.actor_id, actions.shape[0], msg.seq,
    )  # fmt: skip
    return [head + actions.tobytes()]


def _check_mark(head: Any, kind: int, size: int) -> None:
    if len(head) < 3:
        raise ProtocolError("bad_header", f"binary header of {len(head)} bytes")
    if head[1] != PROTOCOL_VERSION:
        raise ProtocolError(
            "bad_version",
            f"protocol version {head[1]}; this build speaks {PROTOCOL_VERSION} "
            "(run actors and learner from the same seedq version)",
        )
    if head[2] != kind:
        raise ProtocolError("bad_kind", f"binary message kind {head[2]}, expected {kind}")
    if len(head) < size:
        raise ProtocolError("bad_header", f"binary header of {len(head)} bytes < {size}")


def parse_step_head(head: Any) -> tuple:
    """The fields of a Step's binary header: ``(mark, version, kind, dtype code, actor_id,
    n_envs, n_final, n_episodes, seq, run tag)``; version and kind checked."""
    _check_mark(head, STEP_KIND, STEP_HEAD.size)
    return STEP_HEAD.unpack_from(head)


class StepLayout:
    """What an actor's Hello fixes about its Steps, decoded once: the broker checks each Step
    against it with integer comparisons only."""

    __slots__ = (
        "n_envs", "obs_shape", "obs_dtype", "obs_code", "obs_bytes", "head_bytes", "run_tag",
        "inline", "float_obs",
    )  # fmt: skip

    def __init__(self, hello: Hello) -> None:
        spec = hello.spec
        self.n_envs = hello.n_envs
        self.obs_shape = tuple(spec.obs_shape)
        self.obs_dtype = np.dtype(spec.obs_dtype)
        self.obs_code = dtype_code(spec.obs_dtype)
        self.obs_bytes = spec.obs_bytes  # of one env
        self.inline = self.n_envs * self.obs_bytes <= INLINE_OBS_BYTES
        self.head_bytes = STEP_HEAD.size + ENV_BYTES * hello.n_envs
        if self.inline:
            self.head_bytes += self.n_envs * self.obs_bytes
        self.run_tag = run_tag(hello.run_id)
        self.float_obs = self.obs_dtype.kind == "f"

    @property
    def least_bytes(self) -> int:
        """The bytes of every Step of this actor, one without final observations or episodes."""
        return self.head_bytes + (0 if self.inline else self.n_envs * self.obs_bytes)

    def most_envs_within(self, limit: int) -> int:
        """The most envs per Step whose largest one (every env's final observation and
        finished episode too) fits ``limit`` bytes."""
        per_env = ENV_BYTES + 2 * self.obs_bytes + EPISODE_BYTES
        return max(0, (limit - STEP_HEAD.size) // per_env)

    def check_head(self, fields: tuple, head_size: int, next_seq: int) -> tuple[int, int, int]:
        """``(seq, n_final, n_episodes)`` of a parsed header that fits this actor, or raise."""
        _, _, _, code, actor_id, n, n_final, n_episodes, seq, tag = fields
        if n != self.n_envs:
            raise ProtocolError("bad_shape", f"step has n_envs={n}, hello declared {self.n_envs}")
        if tag != self.run_tag:
            raise ProtocolError(
                "stale_run", f"step of another run than actor {actor_id}'s; send Hello again"
            )
        if code != self.obs_code:
            raise ProtocolError(
                "bad_dtype", f"obs dtype code {code}, expected {self.obs_code} ({self.obs_dtype})"
            )
        if n_final > n:
            raise ProtocolError("bad_shape", f"{n_final} final observations for {n} envs")
        if n_episodes > n:
            raise ProtocolError("bad_field", f"{n_episodes} finished episodes for {n} envs")
        if seq < 0:
            raise ProtocolError("bad_field", f"seq={seq} is negative")
        if head_size != self.head_bytes:
            raise ProtocolError(
                "truncated", f"step header frame has {head_size} bytes, expected {self.head_bytes}"
            )
        if seq != next_seq:
            raise ProtocolError("bad_seq", f"actor {actor_id} sent seq {seq}, expected {next_seq}")
        return seq, n_final, n_episodes

    def check_sizes(self, obs: int, final: int, episodes: int, n_final: int, n_episodes: int):
        """Byte sizes of the array frames (0 for those not sent) against the header's counts."""
        for name, got, want in (
            ("obs", obs, 0 if self.inline else self.n_envs * self.obs_bytes),
            ("final_obs", final, n_final * self.obs_bytes),
            ("episodes", episodes, n_episodes * EPISODE_BYTES),
        ):
            if got != want:
                raise ProtocolError("truncated", f"{name} frame has {got} bytes, expected {want}")

    def frame_count(self, n_final: int, n_episodes: int) -> int:
        """Frames after the header: obs unless inline, then final_obs and episodes if any."""
        return (not self.inline) + (n_final > 0) + (n_episodes > 0)


def decode_actions(frames: Sequence[Frame], n_envs: int, spec: EnvSpec | None = None) -> Actions:
    """Decode the reply to an actor of ``n_envs`` envs whose Hello sent ``spec`` (None:
    discrete); continuous actions must be finite float32 ``[N, D]``."""
    if len(frames) != 1:
        raise ProtocolError("bad_frames", f"an Actions message is one frame, got {len(frames)}")
    buf = buffer(frames[0])
    _check_mark(buf, ACTIONS_KIND, ACTIONS_HEAD.size)
    _, _, _, code, actor_id, n, seq = ACTIONS_HEAD.unpack_from(buf)
    if n != n_envs:
        raise ProtocolError("bad_shape", f"actions for {n} envs, actor has {n_envs}")
    dtype, shape = ("int32", (n,)) if spec is None else (spec.action_dtype, spec.action_shape(n))
    if code != _CODE[dtype]:
        raise ProtocolError("bad_dtype", f"actions dtype code {code}, expected {dtype}")
    nbytes = math.prod(shape) * 4
    if len(buf) - ACTIONS_HEAD.size != nbytes:
        raise ProtocolError(
            "truncated", f"actions of {len(buf) - ACTIONS_HEAD.size} bytes, expected {nbytes}"
        )
    actions = np.frombuffer(buf, dtype, offset=ACTIONS_HEAD.size).reshape(shape)
    if dtype == "float32" and not np.isfinite(actions).all():
        raise ProtocolError("non_finite", "actions hold NaN or inf")
    return Actions(actor_id=actor_id, seq=seq, actions=actions)


def binary_header_fields(buf: memoryview) -> dict[str, Any]:
    """A binary header as the map :func:`seedq.messages.decode_header` returns for any kind."""
    from seedq.messages.protocol import ACTIONS, STEP

    if len(buf) >= 3 and buf[2] == ACTIONS_KIND:
        _check_mark(buf, ACTIONS_KIND, ACTIONS_HEAD.size)
        _, version, _, _, actor_id, n, seq = ACTIONS_HEAD.unpack_from(buf)
        return {"v": version, "kind": ACTIONS, "actor_id": actor_id, "n_envs": n, "seq": seq}
    _, version, _, _, actor_id, n, n_final, n_episodes, seq, _ = parse_step_head(buf)
    return {
        "v": version, "kind": STEP, "actor_id": actor_id, "n_envs": n, "seq": seq,
        "n_final": n_final, "n_episodes": n_episodes,
    }  # fmt: skip
