"""The wire format: round trips, and rejection of every kind of malformed message."""

import msgpack
import numpy as np
import pytest
import zmq

from seedq.messages import (
    MAX_HEADER_BYTES,
    PROTOCOL_VERSION,
    Actions,
    Bye,
    EnvSpec,
    Error,
    Hello,
    ProtocolError,
    Step,
    decode_actions,
    decode_bye,
    decode_error,
    decode_header,
    decode_hello,
    decode_step,
    encode,
)

SPEC = EnvSpec(obs_shape=(4, 84, 84), obs_dtype="uint8", num_actions=6)
HELLO = Hello(actor_id=3, run_id="run-a", n_envs=5, spec=SPEC)


def make_step(truncated=(False, True, False, False, True), seq=7) -> Step:
    rng = np.random.default_rng(0)
    truncated = np.array(truncated)
    return Step(
        actor_id=3,
        run_id="run-a",
        seq=seq,
        obs=rng.integers(0, 255, (5, 4, 84, 84), dtype=np.uint8),
        reward=rng.normal(size=5).astype(np.float32),
        terminated=np.array([True, False, False, False, False]),
        truncated=truncated,
        final_obs=rng.integers(0, 255, (int(truncated.sum()), 4, 84, 84), dtype=np.uint8),
        episode_returns=[1.5, -2.0],
        episode_lengths=[10, 20],
    )


def roundtrip_step(step: Step, hello: Hello = HELLO) -> Step:
    frames = _frames(step)
    return decode_step(decode_header(frames[0]), frames[1:], hello)


def test_step_roundtrip_preserves_every_array_and_field():
    step = make_step()
    got = roundtrip_step(step)
    for name in ("obs", "reward", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(getattr(got, name), getattr(step, name))
    assert (got.seq, got.run_id, got.episode_returns, got.episode_lengths) == (
        7,
        "run-a",
        [1.5, -2.0],
        [10, 20],
    )


def test_step_without_truncation_sends_an_empty_final_obs():
    got = roundtrip_step(make_step(truncated=(False,) * 5))
    assert got.final_obs.shape == (0, 4, 84, 84)


def test_array_frames_are_sent_without_copy():
    step = make_step()
    frames = encode(step)
    assert frames[1] is step.obs  # contiguous arrays pass straight through to ZMQ


def test_hello_actions_bye_error_roundtrip():
    hello = decode_hello(decode_header(encode(HELLO)[0]))
    frames = encode(Actions(actor_id=3, seq=9, actions=np.array([0, 5, 2, 1, 3])))
    actions = decode_actions(decode_header(frames[0]), frames[1:], n_envs=5)
    bye = decode_bye(decode_header(encode(Bye(3, "run-a"))[0]))
    error = decode_error(decode_header(encode(Error("bad_shape", "details", 3, 9))[0]))
    assert (hello, actions.seq, actions.actions.tolist(), bye, error) == (
        HELLO,
        9,
        [0, 5, 2, 1, 3],
        Bye(3, "run-a"),
        Error("bad_shape", "details", 3, 9),
    )


def test_roundtrip_over_a_real_zmq_socket_pair():
    with zmq.Context() as ctx, ctx.socket(zmq.PAIR) as a, ctx.socket(zmq.PAIR) as b:
        a.bind("inproc://codec")
        b.connect("inproc://codec")
        step = make_step()
        a.send_multipart(encode(step), copy=False)
        frames = b.recv_multipart(copy=False)
        got = decode_step(decode_header(frames[0]), frames[1:], HELLO)
    np.testing.assert_array_equal(got.obs, step.obs)


def _frames(step: Step) -> list[bytes]:
    return [f if isinstance(f, bytes) else np.asarray(f).tobytes() for f in encode(step)]


def _with_header(frames: list[bytes], **changes) -> list[bytes]:
    header = msgpack.unpackb(frames[0])
    header.update(changes)
    return [msgpack.packb(header), *frames[1:]]


def _code(frames: list, hello: Hello = HELLO) -> str:
    with pytest.raises(ProtocolError) as info:
        decode_step(decode_header(frames[0]), frames[1:], hello)
    return info.value.code


def test_truncated_array_frame_is_rejected():
    frames = _frames(make_step())
    frames[1] = frames[1][:-1]
    assert _code(frames) == "truncated"


def test_missing_frame_is_rejected():
    assert _code(_frames(make_step())[:-1]) == "bad_frames"


def test_wrong_protocol_version_is_rejected():
    frames = _with_header(_frames(make_step()), v=PROTOCOL_VERSION + 1)
    with pytest.raises(ProtocolError) as info:
        decode_header(frames[0])
    assert info.value.code == "bad_version"


def test_unknown_kind_is_rejected():
    with pytest.raises(ProtocolError) as info:
        decode_header(msgpack.packb({"v": PROTOCOL_VERSION, "kind": "launch_missiles"}))
    assert info.value.code == "bad_kind"


def test_garbage_header_is_rejected():
    with pytest.raises(ProtocolError) as info:
        decode_header(b"\xc1\xff not msgpack")
    assert info.value.code == "bad_header"


def test_oversized_header_is_rejected_before_unpacking():
    with pytest.raises(ProtocolError) as info:
        decode_header(b"\x00" * (MAX_HEADER_BYTES + 1))
    assert info.value.code == "too_large"


def test_wrong_dtype_is_rejected():
    frames = _frames(make_step())
    header = msgpack.unpackb(frames[0])
    header["dtypes"][0] = "float32"
    assert _code([msgpack.packb(header), *frames[1:]]) == "bad_dtype"


def test_wrong_obs_shape_is_rejected():
    frames = _frames(make_step())
    header = msgpack.unpackb(frames[0])
    header["shapes"][0] = [5, 4, 84, 83]
    assert _code([msgpack.packb(header), *frames[1:]]) == "bad_shape"


def test_step_with_other_n_envs_than_hello_is_rejected():
    assert _code(_with_header(_frames(make_step()), n_envs=6)) == "bad_shape"


def test_oversized_length_claim_is_rejected_before_allocating():
    assert _code(_with_header(_frames(make_step()), n_envs=2**40)) == "bad_field"


def test_final_obs_rows_must_match_truncated_count():
    step = make_step()
    step.final_obs = step.final_obs[:1]
    assert _code(_frames(step)) == "bad_shape"


def test_step_from_an_old_run_is_rejected():
    assert _code(_with_header(_frames(make_step()), run_id="run-old")) == "stale_run"


def test_hello_with_absurd_obs_shape_is_rejected():
    header = msgpack.unpackb(encode(HELLO)[0])
    header["obs_shape"] = [100000, 100000, 100000]
    with pytest.raises(ProtocolError) as info:
        decode_hello(header)
    assert info.value.code == "too_large"


def test_hello_with_unknown_dtype_is_rejected():
    header = msgpack.unpackb(encode(HELLO)[0])
    header["obs_dtype"] = "object"
    with pytest.raises(ProtocolError) as info:
        decode_hello(header)
    assert info.value.code == "bad_dtype"


def test_boolean_is_not_accepted_as_an_integer_field():
    assert _code(_with_header(_frames(make_step()), seq=True)) == "bad_field"


def test_continuous_hello_and_actions_round_trip_and_a_spec_mismatch_is_refused():
    from seedq.messages import (
        Actions,
        EnvSpec,
        Hello,
        ProtocolError,
        decode_actions,
        decode_header,
        decode_hello,
        encode,
    )

    spec = EnvSpec((3,), "float32", 2, "continuous", (-1.0, -2.0), (1.0, 2.0))
    hello = decode_hello(decode_header(encode(Hello(1, "r", 4, spec))[0]))
    assert hello.spec == spec
    actions = np.arange(8, dtype=np.float32).reshape(4, 2)
    frames = encode(Actions(1, 0, actions))
    assert (decode_actions(decode_header(frames[0]), frames[1:], 4, spec).actions == actions).all()
    # Integer actions for a continuous actor (or the reverse) are refused.
    ints = encode(Actions(1, 0, np.zeros(4, np.int32)))
    with pytest.raises(ProtocolError, match="bad_dtype"):
        decode_actions(decode_header(ints[0]), ints[1:], 4, spec)
    discrete = EnvSpec((3,), "float32", 2)
    assert hello.spec != discrete  # the broker's spec_mismatch check compares specs whole
