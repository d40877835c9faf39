"""The seedq wire format: the only package that knows how messages look on the wire.

Every message is a ZeroMQ multipart message whose frame 0 is its header; array frames follow,
sent without a copy (``send_multipart(copy=False)``) and read back with ``np.frombuffer``.

Kinds:
- ``hello``   actor -> learner: joins with its env spec (obs shape/dtype, actions, n_envs), its
              run id and what its envs are (the env section less its host keys, refused as
              ``env_mismatch`` when not the learner's). msgpack header
              (:mod:`seedq.messages.control`).
- ``step``    actor -> learner: one batch step of n_envs envs: obs, reward, terminated,
              truncated, final_obs (rows of the truncated envs only), finished episodes. The
              request *is* the trajectory: the learner already knows the actions it chose.
              Fixed binary header (:mod:`seedq.messages.steps`), checked against the Hello.
- ``actions`` learner -> actor: the actions for a step, same seq. Binary, one frame.
- ``bye``     actor -> learner: leaving; the learner drops its partial unrolls. msgpack.
- ``error``   either way: a code and a human message. msgpack.

Decoding validates version, kind, dtypes, shapes and sizes against the actor's ``Hello`` and
bounds every length before allocating; any violation raises :class:`ProtocolError` carrying a
short ``code`` from :data:`ERROR_CODES` the broker counts by. Non-finite rewards, episode
returns and float observations are refused (``non_finite``): one NaN would otherwise poison a
whole training batch. The broker checks array values once per batch
(:mod:`seedq.messages.batch`); integer observations (uint8 Atari frames) pay nothing for it.

A peer of protocol 2 (msgpack Step headers) is answered ``bad_version``.
"""

from seedq.messages import protocol
from seedq.messages.batch import decode_step
from seedq.messages.control import (
    decode_bye,
    decode_error,
    decode_header,
    decode_hello,
    decode_reply,
    encode,
    frames_size,
    reply_address,
)
from seedq.messages.protocol import *  # noqa: F403 - the types and bounds of protocol.__all__
from seedq.messages.steps import BINARY_MARK, StepLayout, decode_actions

__all__ = [
    *protocol.__all__,
    "BINARY_MARK", "StepLayout", "decode_actions", "decode_bye", "decode_error", "decode_header",
    "decode_hello", "decode_reply", "decode_step", "encode", "frames_size", "reply_address",
]  # fmt: skip
