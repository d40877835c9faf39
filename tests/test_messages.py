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
    StepLayout,
    decode_actions,
    decode_bye,
    decode_error,
    decode_header,
    decode_hello,
    decode_reply,
    decode_step,
    encode,
)
from seedq.messages.batch import decode_steps, encode_replies
from seedq.messages.steps import STEP_HEAD

SPEC = EnvSpec(obs_shape=(4, 84, 84), obs_dtype="uint8", num_actions=6)
HELLO = Hello(actor_id=3, run_id="run-a", n_envs=5, spec=SPEC)
STEP_FIELDS = (
    "mark", "version", "kind", "dtype", "actor_id", "n_envs", "n_final", "n_episodes", "seq",
    "run_tag",
)  # fmt: skip


def make_step(truncated=(False, True, False, False, True), seq=7, actor_id=3) -> Step:
    rng = np.random.default_rng(seq)
    truncated = np.array(truncated)
    return Step(
        actor_id=actor_id,
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


def _frames(step: Step) -> list[bytes]:
    return [f if isinstance(f, bytes) else np.asarray(f).tobytes() for f in encode(step)]


def _patched(frames: list[bytes], **changes) -> list[bytes]:
    """The frames with header fields changed (the binary header's struct fields by name)."""
    fields = dict(zip(STEP_FIELDS, STEP_HEAD.unpack_from(frames[0]), strict=True))
    fields.update(changes)
    head = STEP_HEAD.pack(*(fields[name] for name in STEP_FIELDS))
    return [head + frames[0][STEP_HEAD.size :], *frames[1:]]


def _code(frames: list, hello: Hello = HELLO) -> str:
    with pytest.raises(ProtocolError) as info:
        decode_step(frames, hello)
    return info.value.code


def test_step_roundtrip_preserves_every_array_and_field():
    step = make_step()
    got = decode_step(_frames(step), HELLO)
    for name in ("obs", "reward", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(getattr(got, name), getattr(step, name))
    assert (got.seq, got.run_id, got.episode_returns, got.episode_lengths) == (
        7,
        "run-a",
        [1.5, -2.0],
        [10, 20],
    )


def test_step_without_truncation_or_episodes_sends_two_frames_or_one_when_small():
    step = make_step(truncated=(False,) * 5)
    step.episode_returns, step.episode_lengths = [], []
    frames = _frames(step)
    got = decode_step(frames, HELLO)
    small = Step(3, "r", 0, np.zeros((2, 4), np.float32), np.zeros(2, np.float32),
                 np.zeros(2, bool), np.zeros(2, bool), np.zeros((0, 4), np.float32))  # fmt: skip
    assert (len(frames), got.final_obs.shape, got.episode_returns, len(encode(small))) == (
        2,
        (0, 4, 84, 84),
        [],
        1,
    )


def test_array_frames_are_sent_without_copy():
    step = make_step()
    frames = encode(step)
    assert frames[1] is step.obs  # contiguous arrays pass straight through to ZMQ


def test_hello_actions_bye_error_roundtrip():
    hello = decode_hello(decode_header(encode(HELLO)[0]))
    actions = decode_actions(
        encode(Actions(actor_id=3, seq=9, actions=np.array([0, 5, 2, 1, 3]))), 5
    )
    bye = decode_bye(decode_header(encode(Bye(3, "run-a"))[0]))
    error = decode_error(decode_header(encode(Error("bad_shape", "details", 3, 9))[0]))
    assert (hello, actions.seq, actions.actions.tolist(), bye, error) == (
        HELLO,
        9,
        [0, 5, 2, 1, 3],
        Bye(3, "run-a"),
        Error("bad_shape", "details", 3, 9),
    )


def test_a_reply_is_actions_or_the_error_that_refused_the_step():
    actions = decode_reply(encode(Actions(3, 9, np.arange(5))), 5)
    error = decode_reply(encode(Error("busy", "wait", 3, 9)), 5)
    assert (actions.seq, error.code) == (9, "busy")


def test_roundtrip_over_a_real_zmq_socket_pair():
    with zmq.Context() as ctx, ctx.socket(zmq.PAIR) as a, ctx.socket(zmq.PAIR) as b:
        a.bind("inproc://codec")
        b.connect("inproc://codec")
        step = make_step()
        a.send_multipart(encode(step), copy=False)
        got = decode_step(b.recv_multipart(copy=False), HELLO)
    np.testing.assert_array_equal(got.obs, step.obs)


def test_truncated_array_frame_is_rejected():
    frames = _frames(make_step())
    frames[1] = frames[1][:-1]
    assert _code(frames) == "truncated"


def test_missing_frame_is_rejected():
    assert _code(_frames(make_step())[:-1]) == "bad_frames"


def test_wrong_protocol_version_is_rejected():
    assert _code(_patched(_frames(make_step()), version=PROTOCOL_VERSION + 1)) == "bad_version"


def test_a_step_of_protocol_2_gets_a_clear_version_error():
    old = msgpack.packb({"v": 2, "kind": "step", "actor_id": 3, "seq": 0, "n_envs": 5})
    with pytest.raises(ProtocolError, match="protocol version 2; this build speaks 3") as info:
        decode_header(old)
    assert info.value.code == "bad_version"


def test_a_msgpack_step_header_of_this_version_is_refused():
    header = msgpack.packb({"v": PROTOCOL_VERSION, "kind": "step", "actor_id": 3})
    with pytest.raises(ProtocolError, match="binary") as info:
        decode_header(header)
    assert info.value.code == "bad_header"


def test_unknown_kind_is_rejected():
    with pytest.raises(ProtocolError) as info:
        decode_header(msgpack.packb({"v": PROTOCOL_VERSION, "kind": "launch_missiles"}))
    assert (info.value.code, _code(_patched(_frames(make_step()), kind=9))) == (
        "bad_kind",
        "bad_kind",
    )


def test_garbage_and_short_binary_headers_are_rejected():
    with pytest.raises(ProtocolError) as info:
        decode_header(b"\xc2\xff not msgpack")
    frames = _frames(make_step())
    assert (info.value.code, _code([frames[0][:20], *frames[1:]])) == ("bad_header", "bad_header")


def test_oversized_header_is_rejected_before_unpacking():
    with pytest.raises(ProtocolError) as info:
        decode_header(b"\x00" * (MAX_HEADER_BYTES + 1))
    assert info.value.code == "too_large"


def test_wrong_dtype_is_rejected():
    assert _code(_patched(_frames(make_step()), dtype=7)) == "bad_dtype"


def test_obs_of_another_shape_is_rejected_by_its_size():
    frames = _frames(make_step())
    frames[1] = frames[1][: 5 * 4 * 84 * 83]
    assert _code(frames) == "truncated"


def test_step_with_other_n_envs_than_hello_is_rejected():
    assert _code(_patched(_frames(make_step()), n_envs=6)) == "bad_shape"


def test_oversized_length_claim_is_rejected_before_allocating():
    assert _code(_patched(_frames(make_step()), n_envs=2**32 - 1)) == "bad_shape"


def test_final_obs_rows_must_match_truncated_count():
    step = make_step()
    step.final_obs = step.final_obs[:1]
    assert _code(_frames(step)) == "bad_shape"


def test_step_from_an_old_run_is_rejected():
    old = make_step()
    old.run_id = "run-old"
    assert _code(_frames(old)) == "stale_run"


def test_negative_seq_is_rejected():
    assert _code(_patched(_frames(make_step()), seq=-1)) == "bad_field"


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


def test_boolean_is_not_accepted_as_an_integer_field_of_a_hello():
    header = msgpack.unpackb(encode(HELLO)[0])
    header["n_envs"] = True
    with pytest.raises(ProtocolError) as info:
        decode_hello(header)
    assert info.value.code == "bad_field"


def test_a_hellos_env_round_trips_and_is_bounded():
    said = Hello(0, "r", 2, HELLO.spec, env='{"id":"ALE/Pong-v5"}')
    assert decode_hello(decode_header(encode(said)[0])) == said
    assert "env" not in msgpack.unpackb(encode(HELLO)[0])  # not said: nothing on the wire
    assert decode_hello(msgpack.unpackb(encode(HELLO)[0])).env == ""
    for bad in (7, "x" * 5000):
        header = msgpack.unpackb(encode(HELLO)[0])
        header["env"] = bad
        with pytest.raises(ProtocolError) as info:
            decode_hello(header)
        assert info.value.code == "bad_field"


def test_continuous_hello_and_actions_round_trip_and_a_spec_mismatch_is_refused():
    spec = EnvSpec((3,), "float32", 2, "continuous", (-1.0, -2.0), (1.0, 2.0))
    hello = decode_hello(decode_header(encode(Hello(1, "r", 4, spec))[0]))
    assert hello.spec == spec
    actions = np.arange(8, dtype=np.float32).reshape(4, 2)
    assert (decode_actions(encode(Actions(1, 0, actions)), 4, spec).actions == actions).all()
    # Integer actions for a continuous actor (or the reverse) are refused.
    with pytest.raises(ProtocolError, match="bad_dtype"):
        decode_actions(encode(Actions(1, 0, np.zeros(4, np.int32))), 4, spec)
    discrete = EnvSpec((3,), "float32", 2)
    assert hello.spec != discrete  # the broker's spec_mismatch check compares specs whole


VECTOR = EnvSpec((4,), "float32", 2)


def _request(step: Step) -> tuple:
    frames = _frames(step)  # small observations: inline in frame 0
    n_final = int(np.sum(step.truncated))
    final = frames[1] if n_final else b""
    episodes = frames[-1] if step.episode_returns else b""
    return frames[0], b"", final, episodes, n_final


def _vector_step(actor_id: int, n: int, seq: int = 0, **arrays) -> Step:
    truncated = arrays.get("truncated", np.zeros(n, bool))
    return Step(
        actor_id, "r", seq, arrays.get("obs", np.full((n, 4), actor_id, np.float32)),
        arrays.get("reward", np.full(n, actor_id, np.float32)), np.zeros(n, bool), truncated,
        np.full((int(truncated.sum()), 4), -actor_id, np.float32),
        arrays.get("returns", []), [1] * len(arrays.get("returns", [])),
    )  # fmt: skip


def _decode_many(steps: list[Step]):
    requests = [_request(s) for s in steps]
    sizes = [len(s.reward) for s in steps]
    layout = StepLayout(Hello(0, "r", sizes[0], VECTOR))
    return decode_steps(layout, sizes, *(list(x) for x in zip(*requests, strict=True)))


@pytest.mark.parametrize("sizes", [[2, 2, 2], [1, 3, 2]], ids=["uniform", "mixed"])
def test_many_steps_decode_to_the_concatenation_of_each(sizes):
    steps = [
        _vector_step(i, n, truncated=np.arange(n) == i % n, returns=[float(i)] * (i % 2))
        for i, n in enumerate(sizes)
    ]
    got = _decode_many(steps)
    one_by_one = [
        decode_step(_frames(s), Hello(s.actor_id, "r", len(s.reward), VECTOR)) for s in steps
    ]
    cat = {name: np.concatenate([getattr(s, name) for s in one_by_one]) for name in
           ("obs", "reward", "terminated", "truncated", "final_obs")}  # fmt: skip
    for name, want in cat.items():
        np.testing.assert_array_equal(getattr(got, name), want, err_msg=name)
    assert (got.truncated_index.tolist(), got.episodes, got.errors) == (
        np.flatnonzero(cat["truncated"]).tolist(),
        [(1, [1.0], [1])],
        [],
    )


def test_a_bad_value_flags_only_its_own_request():
    steps = [
        _vector_step(0, 2),
        _vector_step(1, 2, reward=np.array([0.0, np.nan], np.float32)),
        _vector_step(2, 2),
        _vector_step(3, 2, obs=np.full((2, 4), np.inf, np.float32)),
        _vector_step(4, 2, returns=[float("nan")]),
    ]
    got = _decode_many(steps)
    assert [(i, e.code) for i, e in got.errors] == [
        (1, "non_finite"),
        (3, "non_finite"),
        (4, "non_finite"),
    ]


@pytest.mark.parametrize("count", [3, 12], ids=["packed-one-by-one", "structured"])
def test_replies_encoded_together_decode_one_by_one(count):
    actions = np.arange(count * 2, dtype=np.int32)
    replies = encode_replies(list(range(count)), [7] * count, [2] * count, actions)
    got = [decode_actions([bytes(r)], 2) for r in replies]
    assert [(a.actor_id, a.seq, a.actions.tolist()) for a in got] == [
        (i, 7, [2 * i, 2 * i + 1]) for i in range(count)
    ]


def test_large_observations_are_joined_when_read_and_still_checked():
    spec = EnvSpec((3000,), "float32", 2)  # 3 envs x 12 KB: a frame of their own
    steps = []
    for i in range(3):
        obs = np.full((3, 3000), i, np.float32)
        if i == 1:
            obs[2, 7] = np.nan
        steps.append(Step(i, "r", 0, obs, np.zeros(3, np.float32), np.zeros(3, bool),
                          np.zeros(3, bool), obs[:0]))  # fmt: skip
    frames = [_frames(s) for s in steps]
    layout = StepLayout(Hello(0, "r", 3, spec))
    got = decode_steps(
        layout, [3] * 3, [f[0] for f in frames], [f[1] for f in frames], [b""] * 3, [b""] * 3,
        [0] * 3,
    )  # fmt: skip
    joined = got.obs.join()
    assert (
        [(i, e.code) for i, e in got.errors],
        joined.shape,
        joined[:, 0].tolist(),
    ) == ([(1, "non_finite")], (9, 3000), [0.0] * 3 + [1.0] * 3 + [2.0] * 3)
