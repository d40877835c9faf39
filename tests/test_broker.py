"""The broker on a real socket: bad messages get an Error and a count; the broker lives on."""

import dataclasses
import threading

import msgpack
import numpy as np
import pytest
import zmq

from seedq.broker.batcher import Batcher
from seedq.broker.registry import ActorRegistry
from seedq.broker.router import Broker
from seedq.envs import env_config
from seedq.messages import (
    PROTOCOL_VERSION,
    Actions,
    EnvSpec,
    Hello,
    ProtocolError,
    Step,
    decode_reply,
    encode,
    env_json,
)

SPEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", num_actions=2)


class ZeroPolicy:
    """Answers every env with action 1 and remembers what it recorded."""

    def __init__(self) -> None:
        self.recorded = 0
        self.started = []

    def act(self, batch):
        return np.ones(batch.num_envs, np.int32)

    def record(self, batch):
        self.recorded += len(batch)

    def actor_started(self, slot):
        self.started.append(slot.hello.actor_id)

    def actor_left(self, slot):
        pass


@pytest.fixture()
def broker():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    policy = ZeroPolicy()
    broker = Broker(sock, SPEC, Batcher(max_batch=8, deadline_s=0.001), policy)
    stop = threading.Event()
    thread = threading.Thread(target=broker.serve, args=(stop,), daemon=True)
    thread.start()
    yield broker, f"tcp://127.0.0.1:{port}", ctx
    stop.set()
    thread.join(timeout=5)
    sock.close(linger=0)
    ctx.term()


def dealer(ctx, endpoint):
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    return sock


def hello(actor_id=0, run_id="r", n_envs=2, spec=SPEC, first_env=None):
    first_env = actor_id * n_envs if first_env is None else first_env
    return Hello(actor_id, run_id, n_envs, spec, first_env=first_env)


def step(seq=0, actor_id=0, run_id="r", n=2):
    return Step(
        actor_id=actor_id,
        run_id=run_id,
        seq=seq,
        obs=np.zeros((n, 4), np.float32),
        reward=np.zeros(n, np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        final_obs=np.zeros((0, 4), np.float32),
    )


def reply(sock):
    return decode_reply(sock.recv_multipart(), n_envs=2)


def error_code(sock, frames):
    sock.send_multipart(frames)
    return reply(sock).code


def test_well_formed_actor_gets_actions_in_lockstep(broker):
    _, endpoint, ctx = broker
    with dealer(ctx, endpoint) as sock:
        sock.send_multipart(encode(hello()))
        seqs = []
        for seq in range(3):
            sock.send_multipart(encode(step(seq)), copy=False)
            seqs.append(reply(sock).seq)
    assert seqs == [0, 1, 2]


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([b"\xc4\xffgarbage"], "bad_header"),
        ([msgpack.packb({"v": PROTOCOL_VERSION + 9, "kind": "step"})], "bad_version"),
        ([msgpack.packb({"v": PROTOCOL_VERSION, "kind": "teleport"})], "bad_kind"),
        (encode(Actions(0, 0, np.zeros(2, np.int32))), "bad_kind"),
        (encode(step(0, actor_id=42)), "unknown_actor"),
    ],
    ids=["garbage", "version", "kind", "wrong-direction", "no-hello"],
)
def test_malformed_message_gets_an_error_reply(broker, frames, code):
    _, endpoint, ctx = broker
    with dealer(ctx, endpoint) as sock:
        assert error_code(sock, frames) == code


def test_actor_with_another_env_spec_is_refused(broker):
    _, endpoint, ctx = broker
    other = EnvSpec(obs_shape=(4, 84, 84), obs_dtype="uint8", num_actions=6)
    with dealer(ctx, endpoint) as sock:
        assert error_code(sock, encode(hello(spec=other))) == "spec_mismatch"


def test_actor_with_other_envs_of_the_same_spec_is_refused_naming_the_keys(broker):
    broker_obj, endpoint, ctx = broker
    pong = env_config({"kind": "atari", "id": "ALE/Pong-v5"})
    breakout = env_config({"kind": "atari", "id": "ALE/Breakout-v5", "frame_skip": 2})
    broker_obj.env = env_json(pong.identity())
    other = dataclasses.replace(hello(), env=env_json(breakout.identity()))
    with dealer(ctx, endpoint) as sock:
        # Accepted before: the shapes match, so a Pong learner trained on Breakout's frames.
        sock.send_multipart(encode(other))
        refused = reply(sock)
    assert refused.code == "env_mismatch"
    assert "env.frame_skip=2 (the learner's: 4), env.id='ALE/Breakout-v5' (the learner's: " in (
        refused.message
    )
    # The same envs stepped on another host's threads, and an actor that does not say, join.
    threads = env_config({"kind": "atari", "id": "ALE/Pong-v5", "num_threads": 7})
    for actor_id, env in ((1, env_json(threads.identity())), (2, "")):
        with dealer(ctx, endpoint) as sock:
            sock.send_multipart(encode(dataclasses.replace(hello(actor_id), env=env)))
            sock.send_multipart(encode(step(0, actor_id=actor_id)))
            assert isinstance(reply(sock), Actions)


def test_truncated_frames_and_bad_sequence_are_refused_without_harm(broker):
    broker_obj, endpoint, ctx = broker
    with dealer(ctx, endpoint) as sock:
        sock.send_multipart(encode(hello()))
        good = [np.asarray(f).tobytes() if not isinstance(f, bytes) else f for f in encode(step(0))]
        codes = [error_code(sock, [good[0][:-3], *good[1:]])]
        codes.append(error_code(sock, encode(step(5))))
        sock.send_multipart(encode(step(0)), copy=False)
        after = reply(sock)
    assert (codes, after.seq, sum(broker_obj.stats.bad_messages.values())) == (
        ["truncated", "bad_seq"],
        0,
        2,
    )


def test_broker_survives_a_flood_of_garbage_and_keeps_serving(broker):
    broker_obj, endpoint, ctx = broker
    rng = np.random.default_rng(0)
    with dealer(ctx, endpoint) as bad, dealer(ctx, endpoint) as good:
        for _ in range(200):
            bad.send_multipart(
                [rng.bytes(int(rng.integers(0, 64))) for _ in range(int(rng.integers(1, 5)))]
            )
        good.send_multipart(encode(hello(actor_id=1)))
        good.send_multipart(encode(step(0, actor_id=1)), copy=False)
        answer = reply(good)
    assert answer.actions.tolist() == [1, 1]


def test_reconnect_with_a_new_run_restarts_the_actor_stream(broker):
    broker_obj, endpoint, ctx = broker
    with dealer(ctx, endpoint) as sock:
        sock.send_multipart(encode(hello(run_id="first")))
        sock.send_multipart(encode(step(0, run_id="first")), copy=False)
        reply(sock)
        sock.send_multipart(encode(hello(run_id="second")))
        sock.send_multipart(encode(step(0, run_id="second")), copy=False)
        answer = reply(sock)
    assert (answer.seq, broker_obj.consumer.started) == (0, [0, 0])


class _Shard:
    def __init__(self):
        self.revoked = []

    def revoke(self, actor_id, run_id, by_run):
        self.revoked.append((actor_id, run_id, by_run))


def test_a_join_on_another_shard_revokes_the_run_the_first_shard_holds():
    registry = ActorRegistry()
    first, second = _Shard(), _Shard()
    registry.join(hello(actor_id=5, run_id="a"), first)
    registry.join(hello(actor_id=5, run_id="b"), second)
    registry.join(hello(actor_id=5, run_id="c"), first)
    assert (first.revoked, second.revoked) == ([(5, "a", "b")], [(5, "b", "c")])


def test_a_revocation_that_crossed_a_newer_run_of_the_id_leaves_that_run_alone(broker):
    # Shard 0 held run a; b joined shard 1 (revoking a on shard 0), then c joined shard 0
    # before shard 0 took the revocation: it dropped c, the newest run, by actor id alone.
    broker_obj, endpoint, ctx = broker
    with dealer(ctx, endpoint) as sock:
        sock.send_multipart(encode(hello(run_id="c")))
        broker_obj.revoke(0, "a", "b")
        sock.send_multipart(encode(step(0, run_id="c")), copy=False)
        answer = reply(sock)
    assert (type(answer), list(broker_obj.actors)) == (Actions, [0])


def test_the_env_ids_of_the_runs_own_actors_are_kept_for_them():
    # Launched ids 0..3 step env ids 0..63. A hand-started actor 20 of 3 envs claimed 60..62
    # while actor 3 was evicted for a stall; actor 3, refused env_id_conflict on its return,
    # crashed and was restarted until the run ended (exit 3).
    registry = ActorRegistry(launched=(4, 16))
    shard = _Shard()
    with pytest.raises(ProtocolError) as refused:
        registry.join(hello(actor_id=20, n_envs=3), shard)
    registry.join(hello(actor_id=22, n_envs=3), shard)  # 66..68: past the kept ids
    registry.join(hello(actor_id=3, n_envs=16), shard)  # the launched actor is back: 48..63
    assert refused.value.code == "env_id_conflict"
    assert refused.value.detail.endswith(
        "env ids 0..63 are kept for this run's own actors (ids 0..3); start it with "
        "--actor-ids 22 or higher (its envs start at actor id x 3)"
    ), refused.value.detail


def test_an_env_id_conflict_names_the_actor_ids_that_fit():
    """A hand-started actor whose envs overlap a joined actor's was told "give each actor its
    own first_env", a field seedq-actor has no option for; its remedy is --actor-ids."""
    registry = ActorRegistry()
    shard = _Shard()
    registry.join(hello(actor_id=0, n_envs=16), shard)  # 0..15
    with pytest.raises(ProtocolError) as refused:
        registry.join(hello(actor_id=1, n_envs=3), shard)  # 3..5
    registry.join(hello(actor_id=6, n_envs=3), shard)  # the ids it names fit: 18..20
    assert refused.value.detail.endswith(
        "actor 0 already steps 0..15; start it with --actor-ids 6 or higher "
        "(its envs start at actor id x 3)"
    ), refused.value.detail


def test_an_id_of_the_runs_own_actors_with_other_envs_is_refused_not_taken_over():
    # seedq-actor --actor-ids 0 --envs-per-batch 8 took launched actor 0's id over; the launched
    # batch, refused taken_over, ended for the rest of the run.
    registry = ActorRegistry(launched=(4, 16))
    shard = _Shard()
    registry.join(hello(actor_id=0, n_envs=16), shard)  # the launched actor: 0..15
    with pytest.raises(ProtocolError) as refused:
        registry.join(hello(actor_id=0, n_envs=8), shard)
    assert (refused.value.code, refused.value.detail) == (
        "env_id_conflict",
        "actor 0 claims env ids 0..7, but actor ids 0..3 are this run's own actors, each on 16 "
        "envs from env id actor id x 16; start it with --actor-ids 8 or higher (its envs start "
        "at actor id x 8)",
    )
    registry.join(hello(actor_id=0, n_envs=16), shard)  # the launched actor rejoins as before


def test_a_seed_run_keeps_the_env_ids_of_the_actors_it_launches(tmp_path):
    from fault_helpers import FAKE, make_run

    run = make_run(tmp_path, *FAKE, "actor.num_actors=2")
    per_process = run.cfg.actor.batches_per_actor
    assert (run.registry.launched_ids, run.registry.launched_envs) == (
        2 * per_process,
        2 * per_process * 8,
    )
    assert run.broker.registry is run.registry


def test_actors_claiming_the_same_env_ids_are_refused(broker):
    broker_obj, endpoint, ctx = broker
    with dealer(ctx, endpoint) as first, dealer(ctx, endpoint) as second:
        first.send_multipart(encode(hello(actor_id=0, first_env=10)))
        first.send_multipart(encode(step(0)), copy=False)
        reply(first)
        code = error_code(second, encode(hello(actor_id=1, first_env=11)))
    slot = broker_obj.actors[0]
    assert (code, slot.env_ids.tolist(), list(broker_obj.actors)) == (
        "env_id_conflict",
        [10, 11],
        [0],
    )
