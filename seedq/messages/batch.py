"""Many Steps decoded at once, and their replies encoded at once: the broker's batch path.

Receiving a Step checks only what its header and frame sizes say (``StepLayout``); what the
arrays hold (finite rewards and float observations, flags that are 0 or 1, as many truncated
envs as final observations, finite episode returns and lengths >= 0) is checked here, with a
few numpy calls per batch instead of per message. A request that fails is returned in
``errors`` with its code, and the caller answers it and decodes the rest again: one bad
message still costs one message.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from seedq.messages.protocol import PROTOCOL_VERSION, Frame, Hello, ProtocolError, Step
from seedq.messages.steps import (
    ACTIONS_HEAD,
    ACTIONS_KIND,
    BINARY_MARK,
    EPISODE_BYTES,
    STEP_HEAD,
    StepLayout,
    buffer,
    dtype_code,
    parse_step_head,
)

_H = STEP_HEAD.size
# Inline observations up to this many bytes are gathered with the rest of the header.
_SMALL_OBS = 1024
# Structured arrays replace per-request struct packing from this many replies on.
_VECTOR_REPLIES = 8


class ObsParts(NamedTuple):
    """Observations of several requests that came in frames of their own (large ones), joined
    into one ``[B, *obs_shape]`` array only when something reads them: a copy of megabytes per
    batch that a consumer which never looks at observations does not pay."""

    parts: list
    dtype: np.dtype
    shape: tuple[int, ...]

    def join(self) -> np.ndarray:
        return np.frombuffer(_join(self.parts), self.dtype).reshape(self.shape)


class DecodedSteps(NamedTuple):
    """The arrays of R requests of B envs in all, requests in order, envs in order within each.

    obs: [B, *obs_shape] (or :class:`ObsParts` to join); reward: float32 [B];
    terminated, truncated: bool [B];
    final_obs: [K, *obs_shape], the final observations of the truncated envs, in batch order;
    truncated_index: int64 [K], their positions in the batch; episodes: ``(request, returns,
    lengths)`` of the requests that finished episodes; errors: ``(request, ProtocolError)``.
    """

    obs: np.ndarray | ObsParts
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray
    truncated_index: np.ndarray
    episodes: list[tuple[int, list[float], list[int]]]
    errors: list[tuple[int, ProtocolError]]


def _all_finite(obs: np.ndarray | ObsParts) -> bool:
    if isinstance(obs, ObsParts):
        return all(np.isfinite(np.frombuffer(p, obs.dtype)).all() for p in obs.parts)
    return bool(np.isfinite(obs).all())


def _join(frames: Sequence[Frame]) -> bytearray:
    return bytearray().join(frames)  # one copy, and writable (torch wants writable arrays)


def decode_steps(
    layout: StepLayout,
    sizes: Sequence[int],
    heads: Sequence[bytes],
    obs: Sequence[Frame],
    finals: Sequence[Frame],
    episodes: Sequence[Frame],
    n_finals: Sequence[int],
) -> DecodedSteps:
    """Decode requests whose headers and frame sizes were checked on receipt.

    ``layout``: any of their actors' (they share the learner's env spec); ``sizes``: n_envs of
    each; ``finals`` / ``episodes``: ``b""`` where a request has none.
    """
    count, n = len(heads), sizes[0]
    uniform = sizes.count(n) == count
    total = n * count if uniform else sum(sizes)
    shape, dtype = layout.obs_shape, layout.obs_dtype
    inline_obs = layout.inline
    if uniform and not (inline_obs and n * layout.obs_bytes > _SMALL_OBS):
        # The usual case: every request's header (with its tiny observation) is a row of one
        # matrix, and each array is a column range of it.
        raw = np.frombuffer(heads[0] if count == 1 else b"".join(heads), np.uint8)
        raw = raw.reshape(count, -1)
        reward = np.ascontiguousarray(raw[:, _H : _H + 4 * n]).view("<f4").reshape(total)
        flags = raw[:, _H + 4 * n : _H + 6 * n]
        flags_ok = flags.max() <= 1
        terminated, truncated = flags[:, :n].reshape(total), flags[:, n:].reshape(total)
        if inline_obs:  # copied: a writable, contiguous array for the model
            obs_array = raw[:, _H + 6 * n :].copy().view(dtype)
    else:
        pairs = list(zip(heads, sizes, strict=True))
        reward = np.frombuffer(b"".join([h[_H : _H + 4 * k] for h, k in pairs]), "<f4")
        terminated = np.frombuffer(b"".join([h[_H + 4 * k : _H + 5 * k] for h, k in pairs]), "u1")
        truncated = np.frombuffer(b"".join([h[_H + 5 * k : _H + 6 * k] for h, k in pairs]), "u1")
        flags_ok = max(terminated.max(), truncated.max()) <= 1
        if inline_obs:  # larger observations: gathered on their own, one copy
            obs_array = np.frombuffer(_join([memoryview(h)[_H + 6 * k :] for h, k in pairs]), dtype)
    if not inline_obs and count > 1:
        obs_array = ObsParts(list(obs), dtype, (total, *shape))
    elif not inline_obs:  # a single large observation stays in ZeroMQ's (writable) buffer
        whole = obs[0] if not isinstance(obs[0], bytes) else _join(obs)
        obs_array = np.frombuffer(whole, dtype).reshape(total, *shape)
    else:
        obs_array = obs_array.reshape(total, *shape)

    errors: dict[int, ProtocolError] = {}
    owner = _Owners(sizes)
    if not np.isfinite(reward).all():
        owner.flag(errors, ~np.isfinite(reward), "non_finite", "reward holds NaN or inf")
    if not flags_ok:
        owner.flag(errors, (terminated > 1) | (truncated > 1), "bad_field", "flags are not 0/1")
    if layout.float_obs and not _all_finite(obs_array):
        whole = obs_array.join() if isinstance(obs_array, ObsParts) else obs_array
        rows = ~np.isfinite(whole.reshape(total, -1)).all(axis=1)
        owner.flag(errors, rows, "non_finite", "obs holds NaN or inf")
    n_final = sum(n_finals)
    if n_final or np.count_nonzero(truncated):
        final_obs, truncated_index = _finals(
            layout, finals, n_finals, n_final, truncated, owner, errors
        )
    else:
        final_obs, truncated_index = _no_finals(shape, dtype), _NO_INDEX
    finished = []
    if any(episodes):
        for i, frame in enumerate(episodes):
            if len(frame):
                result = _episodes(frame)
                if isinstance(result, ProtocolError):
                    errors.setdefault(i, result)
                else:
                    finished.append((i, *result))
    return DecodedSteps(
        obs_array,
        reward,
        terminated.view(np.bool_),
        truncated.view(np.bool_),
        final_obs,
        truncated_index,
        finished,
        sorted(errors.items()),
    )


_NO_INDEX = np.zeros(0, np.int64)
_NO_INDEX.setflags(write=False)


@functools.lru_cache(maxsize=16)
def _no_finals(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    empty = np.zeros((0, *shape), dtype)
    empty.setflags(write=False)
    return empty


def _finals(
    layout: StepLayout,
    finals: Sequence[Frame],
    n_finals: Sequence[int],
    n_final: int,
    truncated: np.ndarray,
    owner: _Owners,
    errors: dict[int, ProtocolError],
) -> tuple[np.ndarray, np.ndarray]:
    """The final observations and where they belong; their count and values checked."""
    shape, dtype = layout.obs_shape, layout.obs_dtype
    if n_final:
        final_obs = np.frombuffer(_join([f for f in finals if len(f)]), dtype)
        final_obs = final_obs.reshape(n_final, *shape)
    else:
        final_obs = _no_finals(shape, dtype)
    counts = np.add.reduceat(truncated.astype(np.int64), owner.starts())
    for i in np.flatnonzero(counts != np.asarray(n_finals)).tolist():
        errors.setdefault(
            i,
            ProtocolError(
                "bad_shape", f"{counts[i]} envs truncated but {n_finals[i]} final_obs rows"
            ),
        )
    if n_final and layout.float_obs and not np.isfinite(final_obs).all():
        rows = ~np.isfinite(final_obs.reshape(n_final, -1)).all(axis=1)
        _Owners(n_finals).flag(errors, rows, "non_finite", "final_obs holds NaN or inf")
    return final_obs, np.flatnonzero(truncated)


class _Owners:
    """Which request each of B envs (rows) belongs to, for turning a bad-row mask into codes."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = sizes

    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sizes[:-1], dtype=np.int64)])

    def flag(self, errors: dict, bad_rows: np.ndarray, code: str, detail: str) -> None:
        owners = np.repeat(np.arange(len(self.sizes)), self.sizes)
        for i in np.unique(owners[bad_rows]).tolist():
            errors.setdefault(i, ProtocolError(code, detail))


def _episodes(frame: Frame) -> tuple[list[float], list[int]] | ProtocolError:
    count = len(frame) // EPISODE_BYTES
    returns = np.frombuffer(frame, "<f8", count)
    lengths = np.frombuffer(frame, "<i8", count, offset=8 * count)
    if not np.isfinite(returns).all():
        return ProtocolError("non_finite", "episode_returns holds NaN or inf")
    if (lengths < 0).any():
        return ProtocolError("bad_field", "episode_lengths must be ints >= 0")
    return returns.tolist(), lengths.tolist()


def encode_replies(
    actor_ids: Sequence[int], seqs: Sequence[int], sizes: Sequence[int], actions: np.ndarray
) -> list:
    """One Actions frame per request, for ``actions`` ``[B]`` or ``[B, D]`` in request order."""
    actions = np.ascontiguousarray(actions, dtype="<f4" if actions.dtype.kind == "f" else "<i4")
    code = dtype_code(actions.dtype.name)
    count = len(actor_ids)
    if count >= _VECTOR_REPLIES and sizes.count(sizes[0]) == count:
        per = actions.reshape(count, -1)
        record = np.dtype(
            [("head", "u1", 4), ("actor", "<u4"), ("n", "<u4"), ("seq", "<i8"),
             ("actions", per.dtype, (per.shape[1],))]
        )  # fmt: skip
        replies = np.empty(count, record)
        replies["head"] = (BINARY_MARK, PROTOCOL_VERSION, ACTIONS_KIND, code)
        replies["actor"] = actor_ids
        replies["n"] = sizes[0]
        replies["seq"] = seqs
        replies["actions"] = per
        raw, size = memoryview(replies.tobytes()), record.itemsize
        return [raw[i * size : (i + 1) * size] for i in range(count)]
    out, offset = [], 0
    version = PROTOCOL_VERSION
    for actor_id, seq, n in zip(actor_ids, seqs, sizes, strict=True):
        head = ACTIONS_HEAD.pack(BINARY_MARK, version, ACTIONS_KIND, code, actor_id, n, seq)
        out.append(head + actions[offset : offset + n].tobytes())
        offset += n
    return out


def decode_step(frames: Sequence[Frame], hello: Hello, next_seq: int | None = None) -> Step:
    """Decode and check one whole Step (header frame first) against its actor's Hello.

    The broker checks the same things, split between receiving (the header, the sizes) and
    :func:`decode_steps` (the values, once per batch); this is the
    one-message form, for tests and tools. ``next_seq``: the seq expected (None: any).
    """
    if not frames:
        raise ProtocolError("bad_frames", "message has no header frame")
    head = bytes(buffer(frames[0]))
    if not head or head[0] != BINARY_MARK:
        raise ProtocolError("bad_header", "a Step header is binary (first byte 0xC1)")
    layout = StepLayout(hello)
    fields = parse_step_head(head)
    seq = fields[8] if next_seq is None else next_seq
    seq, n_final, n_episodes = layout.check_head(fields, len(head), seq)
    rest = list(frames[1:])
    if len(rest) != layout.frame_count(n_final, n_episodes):
        raise ProtocolError(
            "bad_frames",
            f"expected {layout.frame_count(n_final, n_episodes)} array frames, got {len(rest)}",
        )
    obs = b"" if layout.inline else rest[0]
    final = rest[int(not layout.inline)] if n_final else b""
    episodes = rest[-1] if n_episodes else b""
    layout.check_sizes(len(buffer(obs)), len(buffer(final)), len(buffer(episodes)),
                       n_final, n_episodes)  # fmt: skip
    decoded = decode_steps(layout, [layout.n_envs], [head], [obs], [final], [episodes], [n_final])
    if decoded.errors:
        raise decoded.errors[0][1]
    returns, lengths = decoded.episodes[0][1:] if decoded.episodes else ([], [])
    return Step.of_batch(hello.actor_id, hello.run_id, seq, decoded, returns, lengths)
