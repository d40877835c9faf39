"""The link between a broker shard process and the learner's hub: one ZeroMQ PAIR per shard over
``ipc://``, multipart messages whose frame 0 names the operation.

It is internal to one learner host (shards and hub are started together, from one seedq), so it
is not versioned like the actors' wire format; arrays travel as raw frames, uncopied.

shard -> hub: ``ready`` (the shard's bound endpoint) or ``refused`` (why it could not bind),
``join`` (a Hello to register; the hub answers ``rows`` or ``refused``), ``started`` / ``left``
(an actor run began or ended), ``release`` (its rows are free), ``act`` (a batch; the hub
answers ``actions``), ``count`` (messages, rejections, evictions).
hub -> shard: ``rows``, ``refused``, ``actions``, ``revoke`` (an actor joined another shard),
``flush`` (send your counts now, marked ``flushed``: the run stops), ``stop``.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from seedq.broker.batch import Episodes, RequestBatch

READY, JOIN, STARTED, LEFT, RELEASE = b"ready", b"join", b"started", b"left", b"release"
ACT, COUNTERS = b"act", b"count"
ROWS, REFUSED, ACTIONS, REVOKE, STOP = b"rows", b"refused", b"actions", b"revoke", b"stop"
FLUSH = b"flush"


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def unpack(frame: Any) -> Any:
    return msgpack.unpackb(getattr(frame, "buffer", frame), raw=False, strict_map_key=False)


def int_array(frame: Any) -> np.ndarray:
    return np.frombuffer(getattr(frame, "buffer", frame), np.int64)


def encode_batch(batch: RequestBatch) -> list:
    """An ``act`` message: the batch's arrays as frames, its requests as actor ids, seqs and
    sizes (the hub knows each actor's slot)."""
    meta = {
        "final_shape": list(batch.final_obs.shape),
        "episodes": [list(e) for e in batch.episodes],
    }
    return [
        ACT,
        pack(meta),
        np.asarray([s.hello.actor_id for s in batch.slots], np.int64),
        np.asarray(batch.seqs, np.int64),
        np.asarray(batch.sizes, np.int64),
        np.ascontiguousarray(batch.rows, np.int64),
        np.ascontiguousarray(batch.obs),
        np.ascontiguousarray(batch.reward),
        np.ascontiguousarray(batch.truncated),
        np.ascontiguousarray(batch.done),
        np.ascontiguousarray(batch.final_obs),
        np.ascontiguousarray(batch.truncated_index, np.int64),
    ]


def decode_batch(frames: list, slots: list, obs_shape: tuple, obs_dtype: np.dtype) -> RequestBatch:
    """The hub's view of an ``act`` message; ``slots``: its requests' learner-side slots."""
    meta = unpack(frames[1])
    sizes = int_array(frames[4]).tolist()
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])

    def array(frame: Any, dtype: Any, shape: tuple) -> np.ndarray:
        return np.frombuffer(getattr(frame, "buffer", frame), dtype).reshape(shape)

    total = int(offsets[-1])
    return RequestBatch(
        slots=slots,
        seqs=int_array(frames[3]).tolist(),
        sizes=sizes,
        offsets=offsets,
        rows=int_array(frames[5]),
        observations=array(frames[6], obs_dtype, (total, *obs_shape)),
        reward=array(frames[7], np.float32, (total,)),
        truncated=array(frames[8], np.bool_, (total,)),
        done=array(frames[9], np.bool_, (total,)),
        final_obs=array(frames[10], obs_dtype, tuple(meta["final_shape"])),
        truncated_index=int_array(frames[11]),
        episodes=[Episodes(*e) for e in meta["episodes"]],
    )
