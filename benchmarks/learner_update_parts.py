"""Where one V-trace batch update's host time goes, by part (issue 34 probe).

Drives the real learner of ``seedq-bench learner`` (the Atari preset, Pong-shaped data, the
zero-cost model by default) through one training batch by hand and times each part with the
thread's CPU clock: the upload, the V-trace targets of each pass, each minibatch's gather +
forward + loss (the learner's own ``_transition_losses``), backward, clip, Adam, the
observation statistics. ``python benchmarks/learner_update_parts.py [zero|real] [repeats]``.
A third argument ``ops`` also counts the aten ops of each part of one minibatch update
(``torch.profiler``): the op count that eager PyTorch pays a few µs of host time for each.
"""

from __future__ import annotations

import argparse
import queue
import sys
import time

from seedq.agents.common.normalize import update_obs_norm
from seedq.agents.common.update import clip_grad_norm, optimizer_step
from seedq.agents.vtrace.learner import device_unroll
from seedq.bench.learner import LearnerLoop, compose
from seedq.messages import EnvSpec


def first_batch(model: str) -> tuple[object, object]:
    cfg = compose(["env=atari"])
    cfg.algorithm.train_queue_batches = 1024
    loop = LearnerLoop(cfg, EnvSpec((4, 84, 84), "uint8", 6), model, 8)
    while True:
        requests = loop._batch()
        loop.consumer.act(requests)
        loop.consumer.record(requests)
        try:
            return loop.agent.learner, loop.agent.train_queue.get_nowait()
        except queue.Empty:
            continue


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default="zero", choices=["zero", "real"])
    parser.add_argument("repeats", nargs="?", default=5, type=int, help="batches timed")
    parser.add_argument(
        "ops", nargs="?", choices=["ops"], help="also count each part's aten ops (torch.profiler)"
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args(sys.argv[1:])
    model, repeats = args.model, args.repeats
    learner, batch = first_batch(model)
    cfg, clock, spent = learner.cfg, time.thread_time, {}

    def timed(part: str, fn, *args):  # noqa: ANN001, ANN202
        start = clock()
        result = fn(*args)
        spent[part] = spent.get(part, 0.0) + clock() - start
        return result

    for _ in range(repeats):
        on = timed("upload + transitions", device_unroll, batch, learner.step.tensor)
        transitions = timed("upload + transitions", learner.transitions, batch, on.done)
        for _ in range(cfg.epochs):
            targets = timed("V-trace targets (per pass)", learner._batch_targets, on, transitions)
            losses = learner._transition_losses(on, transitions, targets)
            while (loss := timed("gather + forward + loss", next, losses, None)) is not None:
                learner.step.zero_grad()
                timed("backward", loss.total.backward)
                timed("clip", clip_grad_norm, learner.step.parameters, cfg.grad_clip)
                timed("adam", optimizer_step, learner.optimizer)
        timed(
            "obs statistics",
            update_obs_norm,
            learner.model,
            on.obs[1:],
            learner.step.weights_lock,
            None,
        )
    steps = repeats * batch.num_columns * (int(batch.action.shape[0]) - 1)
    total = sum(spent.values())
    print(f"{model} model, {repeats} batches of {steps // repeats} env steps; thread CPU")
    for part, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"{part:28s} {seconds / steps * 1e6:7.1f} µs/step {100 * seconds / total:5.1f} %")
    print(f"{'total':28s} {total / steps * 1e6:7.1f} µs/step")
    start = clock()
    for _ in range(repeats):
        learner.train_batch(batch)
    print(f"{'train_batch itself':28s} {(clock() - start) / steps * 1e6:7.1f} µs/step")
    if args.ops:
        count_ops(learner, batch)


def count_ops(learner, batch) -> None:  # noqa: ANN001
    """The aten ops of each part of one minibatch update, counted by ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    on = device_unroll(batch, learner.step.tensor)
    transitions = learner.transitions(batch, on.done)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        targets = learner._batch_targets(on, transitions)
    ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    every = learner.cfg.minibatches
    print(f"{'V-trace targets (per pass)':28s} {ops:5d} aten ops, once per {every} updates")
    losses = learner._transition_losses(on, transitions, targets)
    parts = {
        "gather + forward + loss": lambda: next(losses),
        "backward": lambda: loss.total.backward(),
        "clip": lambda: clip_grad_norm(learner.step.parameters, learner.cfg.grad_clip),
        "adam": lambda: optimizer_step(learner.optimizer),
    }
    learner.step.zero_grad()
    total = 0
    for part, fn in parts.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            result = fn()
        if part == "gather + forward + loss":
            loss = result
        ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
        total += ops
        print(f"{part:28s} {ops:5d} aten ops")
    print(f"{'one minibatch update':28s} {total:5d} aten ops")


if __name__ == "__main__":
    main()
