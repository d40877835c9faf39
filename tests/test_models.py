"""Tests for seedq.agents.common.models: shapes, recurrence, memory format and gradients."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from seedq.agents.common.models import RecurrentBody, body_kwargs
from seedq.agents.common.torsos import MLPTorso
from seedq.agents.config import ModelConfig
from seedq.agents.torsos import TORSOS as REGISTERED
from seedq.agents.torsos import TorsoEntry, torso_class
from seedq.agents.vtrace.network import ActorCriticNet, AgentOutput, build_network
from seedq.schema import ConfigError

VEC_SHAPE = (4,)
FRAME_SHAPE = (4, 84, 84)
# Semantics tests use smaller frames: same code paths, a fraction of the cost (the nature fc
# layer for 84x84 is 3136x512), and it exercises the "any screen size" fc sizing.
SMALL_FRAME = (4, 44, 44)
NUM_ACTIONS = 3
LSTM_SIZE = 32  # small core keeps the tests quick; the semantics do not depend on its width


@pytest.fixture(autouse=True, scope="module")
def _single_thread() -> Iterator[None]:
    """Run this module single-threaded, restoring the setting afterwards.

    The batches here are tiny, so intra-op threads buy nothing, while on a busy 2-core box an
    OpenMP barrier waiting for a preempted thread turns a 10 ms conv pass into 500 ms.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_obs(shape: tuple[int, ...], T: int, B: int, seed: int = 0) -> torch.Tensor:
    """Random observations ``[T, B, *shape]``: float32 vectors or uint8 frames."""
    gen = torch.Generator().manual_seed(seed)
    if len(shape) == 1:
        return torch.randn(T, B, *shape, generator=gen)
    return torch.randint(0, 256, (T, B, *shape), generator=gen, dtype=torch.uint8)


def assert_close(
    actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """``torch.allclose`` with a useful message (``torch.testing`` costs ~2 s to import)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    max_diff = (actual - expected).abs().max().item()
    assert torch.allclose(actual, expected, rtol=rtol, atol=atol), f"max abs diff {max_diff}"


@functools.cache
def _cached_net(
    torso: str, use_lstm: bool, channels_last: bool, frame_shape: tuple[int, ...]
) -> ActorCriticNet:
    torch.manual_seed(0)
    shape = VEC_SHAPE if torso == "mlp" else frame_shape
    return ActorCriticNet(
        shape,
        NUM_ACTIONS,
        torso=torso,
        use_lstm=use_lstm,
        lstm_size=LSTM_SIZE,
        channels_last=channels_last,
    )


def make_net(
    torso: str,
    use_lstm: bool,
    channels_last: bool = False,
    frame_shape: tuple[int, ...] = SMALL_FRAME,
) -> ActorCriticNet:
    """A fresh copy of a seeded net (orthogonal init of the big fc layers is the slow part of
    building one, so each configuration is built once per session)."""
    return copy.deepcopy(_cached_net(torso, use_lstm, channels_last, frame_shape))


TORSOS = ["mlp", "nature", "impala"]
CASES = [(torso, lstm) for torso in TORSOS for lstm in (False, True)]


@pytest.mark.parametrize(("torso", "use_lstm"), CASES)
def test_output_shapes(torso: str, use_lstm: bool) -> None:
    net = make_net(torso, use_lstm, frame_shape=FRAME_SHAPE)
    T, B = 3, 2
    state = net.initial_state(B)
    obs = make_obs(net.obs_shape, T, B)
    done = torch.zeros(T, B, dtype=torch.bool)
    with torch.no_grad():
        out, new_state = net(obs, done, state)
    assert isinstance(out, AgentOutput)
    assert out.logits.shape == (T, B, NUM_ACTIONS)
    assert out.baseline.shape == (T, B)
    assert out.logits.dtype == torch.float32
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.baseline).all()
    if use_lstm:
        assert len(state) == 2 and len(new_state) == 2
        for s, ns in zip(state, new_state, strict=True):
            assert s.shape == ns.shape == (B, LSTM_SIZE)
            assert not s.any()  # initial state is zeros
    else:
        assert state == () and new_state == ()


def test_auto_torso() -> None:
    assert ActorCriticNet(VEC_SHAPE, 2).torso_name == "mlp"
    assert ActorCriticNet(SMALL_FRAME, 2).torso_name == "nature"


@pytest.mark.parametrize(
    ("torso", "shape"),
    [
        ("mlp", FRAME_SHAPE),
        ("nature", VEC_SHAPE),
        ("impala", VEC_SHAPE),
        ("auto", (4, 84)),
        ("resnet", VEC_SHAPE),
        ("nature", (1, 8, 8)),  # too small for the 8x8/4 conv stack
    ],
)
def test_bad_torso_obs_combinations_raise(torso: str, shape: tuple[int, ...]) -> None:
    # A ConfigError (seedq-train's one-line refusal), not a bare ValueError's traceback.
    with pytest.raises(ConfigError):
        ActorCriticNet(shape, 2, torso=torso)


def test_wrong_obs_shape_in_forward_raises() -> None:
    net = make_net("mlp", False)
    with pytest.raises(ValueError, match="obs must have shape"):
        net(torch.zeros(1, 2, 5), torch.zeros(1, 2, dtype=torch.bool), ())


@pytest.mark.parametrize(("torso", "use_lstm"), CASES)
def test_unroll_equals_step_by_step(torso: str, use_lstm: bool) -> None:
    """One T-step call == T one-step calls carrying the state (inference vs training)."""
    net = make_net(torso, use_lstm)
    T, B = 5, 3
    obs = make_obs(net.obs_shape, T, B, seed=1)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[0, 1] = done[2, 0] = done[3, 2] = done[4, 0] = True
    # A non-zero starting state, as for an unroll that begins mid-episode.
    state = tuple(torch.randn_like(s) for s in net.initial_state(B))
    with torch.no_grad():
        full, full_state = net(obs, done, state)
        logits, baselines = [], []
        step_state = state
        for t in range(T):
            out, step_state = net(obs[t : t + 1], done[t : t + 1], step_state)
            logits.append(out.logits)
            baselines.append(out.baseline)
    assert_close(full.logits, torch.cat(logits))
    assert_close(full.baseline, torch.cat(baselines))
    for a, b in zip(full_state, step_state, strict=True):
        assert_close(a, b)


@pytest.mark.parametrize("torso", ["mlp", "nature"])
def test_lstm_state_resets_on_done(torso: str) -> None:
    net = make_net(torso, True)
    T, B = 4, 2
    obs = make_obs(net.obs_shape, T, B, seed=2)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = True  # env 0 starts a new episode at step 2; env 1 carries on
    state = tuple(torch.randn_like(s) for s in net.initial_state(B))
    with torch.no_grad():
        out, _ = net(obs, done, state)
        fresh, _ = net(obs[2:3], torch.zeros(1, B, dtype=torch.bool), net.initial_state(B))
        # done at t=0 must discard whatever state is passed in.
        reset_first, _ = net(obs[2:3], torch.ones(1, B, dtype=torch.bool), state)
    assert_close(out.logits[2, 0], fresh.logits[0, 0])
    assert_close(out.baseline[2, 0], fresh.baseline[0, 0])
    assert_close(reset_first.baseline, fresh.baseline)
    # Env 1 did not reset, so its history must still matter.
    assert not torch.allclose(out.baseline[2, 1], fresh.baseline[0, 1])


def test_lstm_reset_ignores_non_finite_state() -> None:
    net = make_net("mlp", True)
    state = tuple(torch.full_like(s, float("nan")) for s in net.initial_state(2))
    obs = make_obs(VEC_SHAPE, 1, 2)
    with torch.no_grad():
        out, new_state = net(obs, torch.ones(1, 2, dtype=torch.bool), state)
    assert torch.isfinite(out.logits).all()
    assert all(torch.isfinite(s).all() for s in new_state)


@pytest.mark.parametrize(("torso", "use_lstm"), [("nature", False), ("impala", True)])
def test_channels_last_matches_contiguous(torso: str, use_lstm: bool) -> None:
    net_cl = make_net(torso, use_lstm, channels_last=True, frame_shape=FRAME_SHAPE)
    net_nchw = make_net(torso, use_lstm, channels_last=False, frame_shape=FRAME_SHAPE)
    # Same weights by construction (same seed); loading also keeps each net's own layout.
    net_nchw.load_state_dict(net_cl.state_dict())
    conv_w = (
        net_cl.torso.convs[0].weight if torso == "nature" else net_cl.torso.convs[0].conv.weight
    )
    assert conv_w.is_contiguous(memory_format=torch.channels_last)
    assert not conv_w.is_contiguous()
    assert next(net_nchw.torso.convs.parameters()).is_contiguous()

    T, B = 2, 3
    obs = make_obs(FRAME_SHAPE, T, B, seed=3)
    done = torch.zeros(T, B, dtype=torch.bool)
    with torch.no_grad():
        a, _ = net_cl(obs, done, net_cl.initial_state(B))
        b, _ = net_nchw(obs, done, net_nchw.initial_state(B))
    assert_close(a.logits, b.logits, rtol=1e-4, atol=1e-5)
    assert_close(a.baseline, b.baseline, rtol=1e-4, atol=1e-5)


def test_channels_last_ignored_for_vectors() -> None:
    assert not ActorCriticNet(VEC_SHAPE, 2, channels_last=True).channels_last


@pytest.mark.parametrize(("torso", "use_lstm"), CASES)
def test_gradients_reach_all_parameters(torso: str, use_lstm: bool) -> None:
    net = make_net(torso, use_lstm, channels_last=torso != "mlp")
    T, B = 4, 2  # training shape: unroll_length + 1 steps
    obs = make_obs(net.obs_shape, T, B, seed=4)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[1, 0] = True
    out, _ = net(obs, done, net.initial_state(B))
    # Entropy-like term for the policy head plus a value regression term for the baseline.
    log_probs = torch.log_softmax(out.logits, dim=-1)
    loss = (log_probs.exp() * log_probs).sum() + out.baseline.pow(2).sum()
    loss.backward()
    for name, param in net.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_initial_policy_is_near_uniform() -> None:
    net = make_net("mlp", False)
    with torch.no_grad():
        out, _ = net(make_obs(VEC_SHAPE, 2, 8), torch.zeros(2, 8, dtype=torch.bool), ())
    assert out.logits.abs().max() < 0.1


@pytest.mark.parametrize("name", list(REGISTERED))
def test_every_registered_torso_builds_for_its_input_rank(name: str) -> None:
    shape = VEC_SHAPE if REGISTERED[name].obs_rank == 1 else (4, 84, 84)
    body = RecurrentBody(shape, 3, torso=name, channels_last=False)
    features, _ = body.embed(make_obs(shape, 1, 2), torch.zeros(1, 2, dtype=torch.bool), ())
    assert (body.torso_name, tuple(features.shape)) == (name, (2, body.torso.out_size))


def test_a_torso_registered_by_one_line_is_built_by_name(monkeypatch) -> None:
    import seedq.agents.common.torsos as torsos

    class Linear1(nn.Module):
        out_size = 5

        def __init__(self, in_features: int) -> None:
            super().__init__()
            self.fc = nn.Linear(in_features, 5)

        @classmethod
        def build(cls, obs_shape, settings):  # noqa: ANN001, ANN206
            return cls(obs_shape[0])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.float())

    monkeypatch.setattr(torsos, "Linear1", Linear1, raising=False)
    monkeypatch.setitem(REGISTERED, "linear1", TorsoEntry(f"{torsos.__name__}:Linear1", 1, "test"))
    body = RecurrentBody(VEC_SHAPE, 2, torso="linear1")
    assert torso_class("linear1") is Linear1 and isinstance(body.torso, Linear1)


@pytest.mark.parametrize(
    ("torso", "shape", "fits"),
    [
        ("nature", VEC_SHAPE, "auto or mlp"),
        ("mlp", FRAME_SHAPE, "auto or nature or impala or minatar"),
    ],
)
def test_a_torso_for_the_wrong_input_names_the_key_and_the_ones_that_fit(
    torso: str, shape: tuple[int, ...], fits: str
) -> None:
    needs = f"algorithm.model.torso={torso} needs .* use algorithm.model.torso={fits}$"
    with pytest.raises(ConfigError, match=needs):
        RecurrentBody(shape, 2, torso=torso)


def test_tanh_torso_features_stay_bounded_on_clipped_normalised_observations() -> None:
    """obs_norm clips inputs to +-10; a tanh MLP keeps its features in [-1, 1] whatever the
    input, a ReLU MLP lets them grow with it (the PPO-on-Acrobot collapse, RESULTS)."""
    torch.manual_seed(0)
    obs = torch.full((1, 6), 10.0)
    tanh, relu = MLPTorso(6, (64, 64), "tanh"), MLPTorso(6, (64, 64), "relu")
    with torch.no_grad():
        assert tanh(obs).abs().max() <= 1.0 < relu(obs).abs().max()


def test_model_config_without_activation_builds_the_relu_mlp_of_old_checkpoints() -> None:
    old = SimpleNamespace(torso="mlp", hidden_sizes=[8], use_lstm=False, lstm_size=1)
    assert body_kwargs(old, channels_last=False)["activation"] == "relu"


def test_build_model_from_config() -> None:
    cfg = ModelConfig(torso="auto", hidden_sizes=[32], use_lstm=True, lstm_size=16)
    net = build_network([4], 2, cfg, channels_last=True)
    assert net.torso_name == "mlp" and net.use_lstm and net.lstm_size == 16
    assert [m.out_features for m in net.torso.net if isinstance(m, torch.nn.Linear)] == [32]
    frames = build_network(
        (4, 84, 84),
        6,
        SimpleNamespace(torso="impala", hidden_sizes=[], use_lstm=False, lstm_size=1),
        channels_last=False,
    )
    assert frames.torso_name == "impala" and not frames.channels_last


def test_deepcopy_and_state_dict_roundtrip() -> None:
    """The actor-side copy of the learner's net (deepcopy or load_state_dict) acts identically."""
    net = make_net("nature", True, channels_last=True)
    clone = copy.deepcopy(net)
    torch.manual_seed(123)  # different init, then overwritten by the learner's weights
    loaded = ActorCriticNet(SMALL_FRAME, NUM_ACTIONS, use_lstm=True, lstm_size=LSTM_SIZE)
    loaded.load_state_dict(net.state_dict())
    obs = make_obs(SMALL_FRAME, 1, 2)
    done = torch.ones(1, 2, dtype=torch.bool)
    with torch.no_grad():
        a, _ = net(obs, done, net.initial_state(2))
        for other in (clone, loaded):
            b, _ = other(obs, done, other.initial_state(2))
            assert_close(a.logits, b.logits)
            assert_close(a.baseline, b.baseline)


def test_policy_init_gain_sets_the_policy_heads_initial_weights_of_vtrace_and_ppo() -> None:
    """``algorithm.model.policy_init_gain`` reaches V-trace's and PPO's policy heads: an
    orthogonal ``[A, F]`` matrix with gain ``g`` has every row of norm ``g``; the default keeps
    the 0.01 of every run before the key, and the value heads keep gain 1."""
    from seedq.agents.ppo.config import PPOConfig
    from seedq.agents.ppo.network import build_network as build_ppo
    from seedq.messages import EnvSpec

    def row_norms(layer: nn.Linear) -> torch.Tensor:
        return layer.weight.detach().norm(dim=1)

    spec = EnvSpec(obs_shape=(8,), obs_dtype="float32", num_actions=NUM_ACTIONS)
    for gain in (0.01, 1.0):
        vtrace = build_network(
            [8], NUM_ACTIONS, ModelConfig(policy_init_gain=gain), channels_last=False
        )
        assert_close(row_norms(vtrace.policy), torch.full((NUM_ACTIONS,), gain), rtol=1e-4)
        assert_close(row_norms(vtrace.baseline), torch.ones(1), rtol=1e-4)
        alg = PPOConfig(model=ModelConfig(policy_init_gain=gain))
        ppo = build_ppo(spec, alg, channels_last=False)
        assert_close(row_norms(ppo.policy_head.out), torch.full((NUM_ACTIONS,), gain), rtol=1e-4)
    assert ModelConfig().policy_init_gain == 0.01
    old = SimpleNamespace(torso="mlp", hidden_sizes=[8], use_lstm=False, lstm_size=1)
    assert_close(
        row_norms(build_network([8], 2, old, channels_last=False).policy),
        torch.full((2,), 0.01),
        rtol=1e-4,
    )


def test_a_policy_init_gain_that_is_not_positive_is_refused_by_name() -> None:
    from seedq.agents.config import validate_common
    from seedq.agents.ppo.config import PPOConfig
    from seedq.schema import ConfigError

    for gain in (0.0, -1.0):
        with pytest.raises(ConfigError, match="algorithm.model.policy_init_gain"):
            validate_common(PPOConfig(model=ModelConfig(policy_init_gain=gain)))


def test_norm_clip_reaches_every_normaliser_and_old_configs_keep_ten() -> None:
    """``algorithm.model.norm_clip`` is the clip of frame_norm and obs_norm: a frame whose
    pixels sit far from the statistics comes out of V-trace's network at exactly the clip
    (PPO's and R2D2's bodies take the same ``body_kwargs``), SAC's own normaliser gets it too;
    a config without the key (an old checkpoint's) keeps 10; 0 is refused by name."""
    from seedq.agents.config import validate_common
    from seedq.agents.ppo.config import PPOConfig
    from seedq.agents.sac.config import SACConfig
    from seedq.agents.sac.network import build_network as build_sac
    from seedq.messages import EnvSpec
    from seedq.schema import ConfigError

    frames = (2, 36, 36)
    far = torch.full((1, 1, *frames), 255, dtype=torch.uint8)
    for clip in (5.0, 10.0):
        net = build_network(frames, 3, ModelConfig(norm_clip=clip), channels_last=False)
        net.obs_norm.update(torch.zeros(4, *frames, dtype=torch.uint8))
        assert net.obs_norm(far).max().item() == clip
        sac = build_sac(
            EnvSpec((3,), "float32", 2, "continuous", (-1.0, -1.0), (1.0, 1.0)),
            SACConfig(model=ModelConfig(obs_norm=True, norm_clip=clip)),
        )
        assert sac.obs_norm.clip == clip
    old = SimpleNamespace(torso="auto", hidden_sizes=[8], use_lstm=False, lstm_size=1)
    assert body_kwargs(old, channels_last=False)["norm_clip"] == 10.0
    assert ModelConfig().norm_clip == 10.0
    with pytest.raises(ConfigError, match="algorithm.model.norm_clip"):
        validate_common(PPOConfig(model=ModelConfig(norm_clip=0.0)))
