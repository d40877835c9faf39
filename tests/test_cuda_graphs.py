"""hardware.cuda_graphs: V-trace's minibatch updates recorded and replayed.

On the CPU the recorded path's plumbing runs emulated (``graphs="emulate"``: the same input and
output tensors, gradient hand-over, finiteness check and step, the update computed eagerly at
each call) and must train bit for bit as the eager updates do. The tests marked ``cuda`` record
real graphs and compare them with eager updates on the GPU (scripts/gpu_check.sh runs them).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_arch_agents import ALGORITHM, ARCH
from test_cuda import short_run

from seedq.agents.common.graphs import GraphedUpdate
from seedq.agents.common.update import GradientStep, Placement, clip_grad_norm
from seedq.agents.common.value_norm import value_norm_of
from seedq.agents.vtrace.agent import VTraceAgent, graph_mode
from seedq.agents.vtrace.config import VTraceConfig
from seedq.agents.vtrace.learner import VTraceLearner
from seedq.bench.common import compose
from seedq.core.agent import RunContext
from seedq.core.tensors import capturing, recording
from seedq.core.unroll import Unroll
from seedq.messages import EnvSpec
from seedq.schema import ConfigError

OBS, ACTIONS, T, B = 5, 3, 8, 8
SPEC = EnvSpec((OBS,), "float32", ACTIONS)
CPU = torch.device("cpu")


def config(**changes) -> VTraceConfig:
    """The Atari preset's update on small batches: 4 minibatches of shuffled transitions, 2
    epochs, PopArt, the clipped surrogate, standardised advantages and an active clip."""
    cfg = VTraceConfig(
        batch_size=B,
        unroll_length=T,
        value_norm=True,
        minibatches=4,
        epochs=2,
        clip_eps=0.2,
        normalize_advantages=True,
        grad_clip=0.5,
        reward_scaling=False,
        lambda_=0.95,
    )
    return dataclasses.replace(cfg, **changes)


def learner(graphs: str, cfg: VTraceConfig, device=CPU, amp=None, lstm=False) -> VTraceLearner:
    torch.manual_seed(5)
    alg = SimpleNamespace(**dataclasses.asdict(cfg))
    alg.model = SimpleNamespace(**{**alg.model, "use_lstm": lstm})
    model = VTraceAgent.build_model(SPEC, alg, channels_last=False).to(device)
    placement = Placement(device, threading.Lock(), amp_dtype=amp)
    return VTraceLearner(
        model, cfg, placement, total_env_steps=10_000, spec=SPEC, seed=1, graphs=graphs
    )


def batches(n: int, *, nan_obs_at: int | None = None) -> list[Unroll]:
    rng = np.random.default_rng(11)
    out = []
    for i in range(n):
        done = rng.random((T + 1, B)) < 0.1
        obs = rng.normal(size=(T + 1, B, OBS)).astype(np.float32)
        if i == nan_obs_at:
            obs[2, 3] = np.nan
        out.append(
            Unroll(
                obs=obs,
                reward=rng.normal(size=(T + 1, B)).astype(np.float32),
                done=done,
                truncated=np.zeros((T + 1, B), bool),
                truncation_value=np.zeros((T + 1, B), np.float32),
                action=rng.integers(0, ACTIONS, size=(T + 1, B)).astype(np.int32),
                behaviour=rng.normal(size=(T + 1, B, ACTIONS)).astype(np.float32),
                core_state=(),
                env_id=np.arange(B, dtype=np.int64),
            )
        )
    return out


def train(learn: VTraceLearner, data: list[Unroll]) -> list[dict]:
    return [learn.train_batch(batch) for batch in data]


def weights(learn: VTraceLearner) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in learn.model.state_dict().items()}


@pytest.mark.parametrize(
    "variant",
    [{}, {"fixed_targets": True}, {"proximal_policy": "batch_start"}, {"value_norm": False}],
    ids=["preset", "fixed-targets", "batch-start", "no-popart"],
)
def test_the_recorded_path_trains_bit_for_bit_as_eager_updates(variant):
    data = batches(3)
    eager, graphed = learner("none", config(**variant)), learner("emulate", config(**variant))
    want, got = train(eager, data), train(graphed, data)
    assert graphed.graphed.captured == 1  # 4 minibatches of 16 transitions: one shape
    assert graphed.graphed.replays == 3 * 2 * 4  # every update of 3 batches x 2 epochs
    assert got == want
    for name, tensor in weights(eager).items():
        assert torch.equal(weights(graphed)[name], tensor), name
    # The optimizer took the same steps from the same gradients.
    assert (
        eager.optimizer.state_dict()["state"][0]["step"]
        == graphed.optimizer.state_dict()["state"][0]["step"]
    )


def test_non_finite_updates_are_skipped_as_eager_updates_skip_them():
    # A NaN observation: the minibatches holding it (or a target it reached) are skipped.
    data = batches(3, nan_obs_at=1)
    eager, graphed = learner("none", config()), learner("emulate", config())
    assert train(graphed, data) == train(eager, data)
    assert graphed.stats.skipped_updates == eager.stats.skipped_updates > 0
    for name, tensor in weights(eager).items():
        assert torch.equal(weights(graphed)[name], tensor), name
        assert torch.isfinite(tensor).all(), name


@pytest.mark.parametrize("graphs", ["none", "emulate"])
def test_updates_skipped_on_the_device_train_as_updates_checked_on_the_host(graphs):
    # A NaN observation in the second batch: the minibatches it reaches are skipped by the
    # fused Adam's found_inf, the norms read once a batch; the same skips, statistics, weights
    # and step counts as reading each update's loss and norm before its step.
    data = batches(3, nan_obs_at=1)
    on_device, on_host = learner(graphs, config()), learner(graphs, config())
    assert not on_device.step.defers  # on the CPU the host checks; forced here as on CUDA
    on_device.step.defers = True
    assert train(on_device, data) == train(on_host, data)
    assert on_device.stats.skipped_updates == on_host.stats.skipped_updates > 0
    assert on_device.stats.updates == on_host.stats.updates
    for name, tensor in weights(on_host).items():
        assert torch.equal(weights(on_device)[name], tensor), name
    assert (
        on_device.optimizer.state_dict()["state"][0]["step"]
        == on_host.optimizer.state_dict()["state"][0]["step"]
    )


def test_column_updates_run_eagerly_with_a_warning(caplog):
    # One minibatch of whole columns: nothing is recorded, the updates are eager ones.
    data = batches(2)
    eager, graphed = (
        learner("none", config(minibatches=1)),
        learner("emulate", config(minibatches=1)),
    )
    with caplog.at_level(logging.WARNING):
        assert train(graphed, data) == train(eager, data)
    assert graphed.graphed.captured == 0
    assert "run eagerly" in caplog.text


def _linear_step(device=CPU) -> tuple[torch.nn.Linear, GradientStep]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    step = GradientStep(
        layer.parameters(), optimizer, Placement(device, threading.Lock()), grad_clip=1.0
    )
    return layer, step


def test_inputs_of_a_shape_not_recorded_are_computed_eagerly(caplog):
    layer, step = _linear_step()

    def update(x):
        loss = layer(x).pow(2).mean()
        loss.backward()
        return (loss,), clip_grad_norm(step.parameters, step.grad_clip)

    graphed = GraphedUpdate(step, update, emulate=True)
    graphed.record(torch.zeros(3, 4))
    assert all(p.grad is None for p in step.parameters)  # recording takes no step
    with caplog.at_level(logging.WARNING):
        for rows in (3, 5, 3, 5):
            x = torch.full((rows, 4), float(rows))
            prepared = graphed(x)
            with torch.no_grad():
                want = layer(x).pow(2).mean()
            assert prepared.terms[0].item() == pytest.approx(want.item())
            assert step.step_prepared(prepared.terms[0], prepared.grad_norm, prepared.grads) > 0
    assert graphed.captured == 1
    assert caplog.text.count("no graph was recorded") == 1


def test_the_learner_records_its_minibatch_shapes_before_it_trains():
    # 8 x 8 transitions in 4 minibatches of 16; in 3 minibatches: 22, 22 and 20 (torch.chunk).
    assert learner("emulate", config()).graphed.captured == 1
    assert learner("emulate", config(minibatches=3)).graphed.captured == 2
    data = batches(2)
    odd = learner("emulate", config(minibatches=3))
    assert train(odd, data) == train(learner("none", config(minibatches=3)), data)
    assert odd.graphed.replays == 2 * 2 * 3


@pytest.mark.parametrize(
    "case",
    [
        {"cfg": {"batch_size": 0}},
        {"cfg": {"shuffle_transitions": False}},
        {"cfg": {}, "lstm": True},  # whole columns through the core: never recorded
    ],
    ids=["no-batch-size", "columns", "lstm"],
)
def test_updates_that_cannot_be_recorded_run_eagerly_and_say_so(caplog, case):
    with caplog.at_level(logging.WARNING):
        learn = learner("emulate", config(**case["cfg"]), lstm=case.get("lstm", False))
    assert learn.graphed.captured == 0
    assert "nothing recorded" in caplog.text
    if case.get("lstm"):
        return  # its batches need a core state: trained eagerly in the recurrent tests
    data = batches(2)
    want = train(learner("none", config(**case["cfg"])), data)
    assert train(learn, data) == want


def test_a_real_graph_needs_a_cuda_device():
    _, step = _linear_step()
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedUpdate(step, lambda x: x)


def test_cached_buffer_tensors_are_computed_afresh_while_recording():
    learn = learner("none", config())
    norm = value_norm_of(learn.model)
    assert norm.std() is norm.std()  # cached between calls
    assert not capturing()
    with recording():
        assert capturing()
        # A graph must read the moments themselves: a cached tensor would be replayed for ever.
        assert norm.std() is not norm.std()
    assert not capturing()


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["hardware.cuda_graphs=true"], "needs a CUDA device"),
        (["hardware=gpu", "hardware.cuda_graphs=true", "hardware.amp=fp16"], "amp=fp16"),
        (["hardware=gpu", "hardware.cuda_graphs=true", "hardware.learners=2"], "learners=2"),
        (["hardware=gpu", "hardware.cuda_graphs=true", "algorithm=ppo"], "algorithm=ppo"),
    ],
)
def test_a_run_that_cannot_record_its_updates_is_refused(overrides, says):
    with pytest.raises(ConfigError, match=says):
        compose(overrides)


def _context(*overrides: str, device: str = "cuda", amp=None, compile_training="none"):
    cfg = compose(["hardware=gpu", *overrides])
    return RunContext(
        cfg,
        SPEC,
        torch.device(device),
        threading.Lock(),
        threading.Event(),
        amp,
        compile_training=compile_training,
    )


def test_auto_records_where_graphs_apply_and_nowhere_else():
    assert graph_mode(_context()) == "auto"  # hardware=gpu's default
    assert graph_mode(_context("hardware.cuda_graphs=true")) == "cuda"
    assert graph_mode(_context("hardware.cuda_graphs=false")) == "none"
    assert graph_mode(_context(device="cpu")) == "none"
    assert graph_mode(_context(amp=torch.float16)) == "none"  # its grad scaler reads the host
    assert graph_mode(_context("arch=anakin")) == "none"
    assert graph_mode(_context(compile_training="default")) == "none"
    assert graph_mode(_context("hardware.cuda_graphs=true", compile_training="default")) == "none"


def test_the_setting_takes_auto_true_and_false_in_any_spelling():
    assert compose(["hardware=gpu", "hardware.cuda_graphs=False"]).hardware.cuda_graphs in (
        "False",
        "false",
    )
    assert graph_mode(_context("hardware.cuda_graphs=False")) == "none"
    assert graph_mode(_context("hardware.cuda_graphs=TRUE")) == "cuda"
    with pytest.raises(ConfigError, match="auto, true, false"):
        compose(["hardware.cuda_graphs=maybe"])


# ------------------------------------------------------------------ on a GPU


def _max_difference(a: VTraceLearner, b: VTraceLearner) -> float:
    wa, wb = weights(a), weights(b)
    return max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)


@pytest.mark.cuda
@pytest.mark.parametrize("amp", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_recorded_updates_train_as_eager_ones_on_cuda(amp):
    cuda = torch.device("cuda")
    data = batches(4)
    eager = learner("none", config(), cuda, amp)
    graphed = learner("cuda", config(), cuda, amp)
    want, got = train(eager, data[:2]), train(graphed, data[:2])
    # An eager update in between (it sets the gradients afresh): the graph's own must be stepped.
    for p in graphed.step.parameters:
        p.grad = None
    want += train(eager, data[2:])
    got += train(graphed, data[2:])
    assert graphed.graphed.captured == 1
    assert graphed.graphed.replays == 4 * 2 * 4
    tol = 1e-4 if amp is None else 2e-2
    for w, g in zip(want, got, strict=True):
        for key in ("loss/total", "loss/pg", "loss/baseline", "loss/entropy", "grad_norm"):
            assert g[key] == pytest.approx(w[key], rel=tol, abs=tol), key
    assert _max_difference(eager, graphed) < tol
    norm_e, norm_g = value_norm_of(eager.model), value_norm_of(graphed.model)
    assert float(norm_g.mean) == pytest.approx(float(norm_e.mean), rel=tol)


@pytest.mark.cuda
@pytest.mark.parametrize("setting", ["true", "auto"])
def test_a_run_with_cuda_graphs_records_its_updates(tmp_path, setting):
    run, summary = short_run(
        tmp_path,
        "algorithm=vtrace",
        "arch=seed",
        *ARCH["seed"],
        *ALGORITHM["vtrace"],  # 4 unrolls of 5 steps a batch
        "algorithm.minibatches=2",
        "total_env_steps=20000",
        f"hardware.cuda_graphs={setting}",
        "hardware.amp=bf16",
    )
    assert summary.updates > 0
    assert run.agent.learner.graphed.captured == 1  # 2 minibatches of 10 transitions
    assert run.agent.learner.graphed.replays > 0
    assert run.agent.stats.skipped_updates == 0
