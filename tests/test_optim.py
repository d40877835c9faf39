"""``seedq.agents.common.update.optimizer_step``: a fused Adam's kernel called directly,
against ``torch.optim.Adam.step``, bit for bit, and the cases it leaves to torch."""

from __future__ import annotations

import copy

import pytest
import torch

from seedq.agents.common import update
from seedq.agents.common.update import (
    load_optimizer_state,
    make_adam,
    optimizer_kind,
    optimizer_step,
)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))


def _groups(model: torch.nn.Module) -> list[dict]:
    first, second = model[0], model[2]
    return [
        {"params": list(first.parameters()), "lr": 1e-2, "weight_decay": 0.1},
        {"params": list(second.parameters()), "lr": 3e-3},
    ]


def _train(step, optimizer: torch.optim.Optimizer, model: torch.nn.Module, steps: int = 6) -> None:  # noqa: ANN001
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for group in optimizer.param_groups:  # a schedule, as linear_lr sets it
            group["lr"] *= 0.9
        model.zero_grad(set_to_none=True)
        model(torch.randn(8, 5, generator=gen)).pow(2).mean().backward()
        step(optimizer)


def _torch_step(optimizer: torch.optim.Optimizer) -> None:
    optimizer.step()


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("frozen", [False, True])
def test_direct_step_gives_the_bits_of_torchs_fused_step(monkeypatch, frozen):
    ours, theirs = _model(), _model()
    for model in (ours, theirs):
        model[0].requires_grad_(not frozen)  # frozen: parameters that never get a gradient
    direct = []
    find = update._direct_adam_groups
    monkeypatch.setattr(
        update, "_direct_adam_groups", lambda o: direct.append(find(o)) or direct[-1]
    )

    _train(optimizer_step, make_adam(_groups(ours), lr=1e-3, eps=1e-5), ours)
    _train(_torch_step, torch.optim.Adam(_groups(theirs), lr=1e-3, eps=1e-5, fused=True), theirs)

    assert _same_weights(ours, theirs)
    # The first step makes the state (torch's step); the other five call the kernel.
    assert [groups is not None for groups in direct] == [False] + [True] * 5


def test_a_state_dict_goes_both_ways_between_the_direct_step_and_torchs():
    ours, theirs = _model(), _model()
    optimizer = make_adam(_groups(ours), lr=1e-3, eps=1e-5)
    _train(optimizer_step, optimizer, ours, steps=3)
    theirs.load_state_dict(ours.state_dict())
    reference = torch.optim.Adam(_groups(theirs), lr=1e-3, eps=1e-5, fused=True)
    # A copy, as a checkpoint is: torch's load keeps the very state tensors it is given.
    reference.load_state_dict(copy.deepcopy(optimizer.state_dict()))

    _train(optimizer_step, optimizer, ours, steps=3)
    _train(_torch_step, reference, theirs, steps=3)

    assert _same_weights(ours, theirs)


@pytest.mark.parametrize(
    "setting",
    [{"amsgrad": True}, {"maximize": True}, {"fused": False}, {"fused": False, "foreach": True}],
)
def test_cases_the_direct_step_does_not_cover_take_torchs_step(setting):
    ours, theirs = _model(), _model()
    kwargs = {"lr": 1e-3, "eps": 1e-5, "fused": True} | setting

    _train(optimizer_step, torch.optim.Adam(_groups(ours), **kwargs), ours)
    _train(_torch_step, torch.optim.Adam(_groups(theirs), **kwargs), theirs)

    assert _same_weights(ours, theirs)


def test_other_optimizers_take_their_own_step():
    ours, theirs = _model(), _model()

    _train(optimizer_step, torch.optim.RMSprop(ours.parameters(), lr=1e-3), ours)
    _train(_torch_step, torch.optim.RMSprop(theirs.parameters(), lr=1e-3), theirs)

    assert _same_weights(ours, theirs)


def test_a_grad_scalers_found_inf_skips_the_step_as_torchs_does():
    model = _model()
    optimizer = make_adam(list(model.parameters()), lr=1e-2, eps=1e-5)
    _train(optimizer_step, optimizer, model, steps=1)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(2, 5)).sum().backward()

    optimizer.found_inf = torch.ones(())  # what GradScaler.step sets for a fused optimizer
    optimizer_step(optimizer)

    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))


def test_a_parameter_without_a_gradient_is_left_alone():
    model = _model()
    optimizer = make_adam(list(model.parameters()), lr=1e-2, eps=1e-5)
    _train(optimizer_step, optimizer, model, steps=2)
    frozen = model[0].weight.detach().clone()
    model.zero_grad(set_to_none=True)
    model(torch.ones(2, 5)).sum().backward()
    model[0].weight.grad = None

    optimizer_step(optimizer)

    assert torch.equal(model[0].weight, frozen)


def test_step_hooks_run_once_a_step():
    model = _model()
    optimizer = make_adam(list(model.parameters()), lr=1e-2, eps=1e-5)
    seen = []
    optimizer.register_step_post_hook(lambda *_: seen.append(1))

    _train(optimizer_step, optimizer, model, steps=3)

    assert len(seen) == 3


def test_make_adam_fuses_floating_parameters_on_the_cpu():
    assert make_adam(list(_model().parameters()), lr=1e-3, eps=1e-5).defaults["fused"]
    assert make_adam(_groups(_model()), lr=1e-3, eps=1e-5).defaults["fused"]


def _step(model: torch.nn.Module) -> update.GradientStep:
    optimizer = make_adam(list(model.parameters()), lr=1e-2, eps=1e-5)
    step = update.GradientStep(model.parameters(), optimizer, update.Placement.cpu(), grad_clip=0.5)
    step.defers = True  # what a fused Adam on CUDA does; the CPU checks on the host
    return step


def _no_host_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args, **_kwargs):
        raise AssertionError("a host read of a tensor")

    for name in ("item", "tolist", "__float__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize("first", [True, False], ids=["first-step", "later-step"])
def test_a_deferred_step_skips_a_non_finite_update_without_reading_it(monkeypatch, first):
    # The first step runs torch's own (no Adam state yet), later ones the kernel directly.
    model = _model()
    step = _step(model)
    if not first:
        step.apply(model(torch.ones(2, 5)).sum())
    before = copy.deepcopy((model.state_dict(), step.optimizer.state_dict()))
    loss = model(torch.full((2, 5), float("nan"))).sum()

    with monkeypatch.context() as patch:
        _no_host_reads(patch)
        norm = step.apply_deferred(loss)

    assert norm.isnan()
    after = (model.state_dict(), step.optimizer.state_dict())
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])
    for key, state in before[1]["state"].items():
        assert all(torch.equal(v, after[1]["state"][key][n]) for n, v in state.items())


def test_a_deferred_step_takes_the_bits_of_a_step_checked_on_the_host():
    deferred, checked = _model(), _model()
    steps = _step(deferred), _step(checked)
    gen = torch.Generator().manual_seed(3)
    for _ in range(4):
        x = torch.randn(8, 5, generator=gen)
        norm = steps[0].apply_deferred(deferred(x).pow(2).mean())
        assert float(norm) == steps[1].apply(checked(x).pow(2).mean())
    assert _same_weights(deferred, checked)


def test_a_step_that_cannot_skip_on_the_device_checks_on_the_host():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = update.GradientStep(model.parameters(), optimizer, update.Placement.cpu(), grad_clip=1)
    before = copy.deepcopy(model.state_dict())
    assert not step.defers
    assert step.apply_deferred(model(torch.full((2, 5), float("inf"))).sum()).isnan()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_an_optimizer_state_of_another_kind_is_not_loaded():
    weights = torch.nn.Linear(3, 2)
    adam = make_adam(list(weights.parameters()), lr=1e-3, eps=1e-8)
    weights(torch.ones(1, 3)).sum().backward()
    adam.step()
    rmsprop = torch.optim.RMSprop(weights.parameters(), lr=1e-3)
    assert optimizer_kind(adam.state_dict()) == "Adam"
    assert not load_optimizer_state(rmsprop, adam.state_dict())
    rmsprop.step()  # its own groups and state: steps as a fresh RMSprop does
    assert "square_avg" in next(iter(rmsprop.state.values()))
    again = make_adam(list(weights.parameters()), lr=1e-3, eps=1e-8)
    assert load_optimizer_state(again, adam.state_dict())
    assert float(next(iter(again.state.values()))["step"]) == 1
