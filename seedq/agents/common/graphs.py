"""CUDA graphs of a minibatch update (``hardware.cuda_graphs``): its forward, loss, backward
and gradient clip recorded once per input shape and replayed as one launch.

A V-trace minibatch update of the Atari preset runs ~360 small ops. On a GPU each is a kernel
launch plus some µs of Python and autograd on the host, so the training thread, not the GPU,
set the pace: 132 updates/s with the GPU 10 % busy on one H200 (benchmarks/RESULTS.md,
2026-11-28). Replayed from a graph, an update costs the host a few copies into the graph's
inputs and one launch.

Outside the graph stay the gather of each minibatch into the graph's input tensors, the
finiteness check and the optimizer step (:meth:`GradientStep.step_prepared_deferred`), taken
under the weights lock as an eager update takes it: inference still reads whole sets of
weights, a non-finite update is still skipped (on the device, by the fused Adam's
``found_inf``: the batch's norms are read once, after its last update, so the host need not
wait for each replay), and the learning-rate schedule still applies.

The graphs are recorded before the run goes live (:meth:`GraphedUpdate.record`, from the
learner's constructor, on zero inputs of the shapes its minibatches will have), never while
inference runs beside: a capture that overlapped inference on one H200 failed (``operation
would make the legacy stream depend on a capturing blocking stream``, 2026-11-30). Inputs of a
shape nothing was recorded for are computed eagerly.

``emulate=True`` runs the same input and output tensors, gradient hand-over and step, with the
update computed eagerly at each call instead of replayed: the CPU tests check that plumbing
against eager updates; a test marked ``cuda`` checks the capture itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from seedq.agents.common.update import GradientStep
from seedq.core.tensors import recording

log = logging.getLogger(__name__)

# An update: (inputs) -> (loss terms, the gradient norm before clipping), having run its
# backward and clipped the gradients of the step's parameters.
Update = Callable[..., tuple[tuple[torch.Tensor, ...], torch.Tensor]]


@dataclass
class _Graph:
    inputs: list[torch.Tensor]  # what each call's inputs are copied into
    terms: tuple[torch.Tensor, ...]  # the loss terms the graph writes
    grad_norm: torch.Tensor
    grads: list[torch.Tensor | None]  # the gradients the graph writes, per parameter
    graph: torch.cuda.CUDAGraph | None  # None: emulated


@dataclass(frozen=True)
class Prepared:
    """An update whose backward and clip have run: its loss terms and gradient norm (a
    graph's own tensors, overwritten by the next call: copy what is kept), and its gradients."""

    terms: tuple[torch.Tensor, ...]
    grad_norm: torch.Tensor
    grads: list[torch.Tensor | None]


class GraphedUpdate:
    """``update`` replayed from CUDA graphs recorded up front, one per input shape
    (:meth:`record`); inputs of another shape are computed eagerly."""

    WARMUP = 3  # eager runs on a side stream before a capture, as torch's docs ask

    def __init__(self, step: GradientStep, update: Update, *, emulate: bool = False) -> None:
        if not emulate and step.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; the update runs on {step.device}")
        self.step, self.update, self.emulate = step, update, emulate
        self._graphs: dict[tuple, _Graph] = {}
        self._unrecorded: set[tuple] = set()
        self.replays = 0  # calls answered from a recorded graph

    @property
    def captured(self) -> int:
        """How many graphs were recorded."""
        return len(self._graphs)

    @staticmethod
    def _key(inputs: tuple[torch.Tensor, ...]) -> tuple:
        return tuple((tuple(x.shape), x.dtype) for x in inputs)

    def record(self, *inputs: torch.Tensor) -> None:
        """Record the update for inputs shaped as these (their values do not matter: the
        warm-up runs' gradients are dropped and no step is taken). Call it before any other
        thread uses the device: nothing else may run on it while a graph is captured."""
        key = self._key(inputs)
        if key not in self._graphs:
            self._graphs[key] = self._record(inputs)
            log.info("cuda graphs: recorded an update for inputs %s", [k[0] for k in key])

    def __call__(self, *inputs: torch.Tensor) -> Prepared:
        key = self._key(inputs)
        entry = self._graphs.get(key)
        if entry is None:
            if key not in self._unrecorded:
                self._unrecorded.add(key)
                log.warning(
                    "cuda graphs: no graph was recorded for update inputs %s; these run eagerly",
                    [k[0] for k in key],
                )
            return self._eager(inputs)
        for held, x in zip(entry.inputs, inputs, strict=True):
            held.copy_(x)
        self.replays += 1
        if entry.graph is None:
            self._run_emulated(entry)
        else:
            entry.graph.replay()
        return Prepared(entry.terms, entry.grad_norm, entry.grads)

    def _eager(self, inputs: tuple[torch.Tensor, ...]) -> Prepared:
        self.step.zero_grad()
        terms, grad_norm = self.update(*inputs)
        return Prepared(terms, grad_norm, [p.grad for p in self.step.parameters])

    def _record(self, inputs: tuple[torch.Tensor, ...]) -> _Graph:
        held = [x.clone() for x in inputs]
        if self.emulate:
            # Output tensors of the update's shapes, which each call then writes.
            with recording():
                first = self._eager(held)
            self.step.zero_grad()
            terms = tuple(t.detach().clone() for t in first.terms)
            return _Graph(held, terms, first.grad_norm.detach().clone(), [], None)
        device = self.step.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), recording():
            for _ in range(self.WARMUP):
                self._eager(held)
        torch.cuda.current_stream(device).wait_stream(side)
        # Gradients of None, so the recorded backward writes them into the graph's own memory.
        self.step.zero_grad()
        graph = torch.cuda.CUDAGraph()
        # Recorded before inference starts (the module's doc says why).
        with torch.cuda.graph(graph, capture_error_mode="thread_local"), recording():
            terms, grad_norm = self.update(*held)
        grads = [p.grad for p in self.step.parameters]
        # The update has not run yet (a capture only records it): nothing to step.
        return _Graph(held, tuple(terms), grad_norm, grads, graph)

    def _run_emulated(self, entry: _Graph) -> None:
        with recording():
            prepared = self._eager(entry.inputs)
        with torch.no_grad():
            for out, term in zip(entry.terms, prepared.terms, strict=True):
                out.copy_(term)
            entry.grad_norm.copy_(prepared.grad_norm)
        entry.grads = prepared.grads
