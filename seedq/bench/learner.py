"""``seedq-bench learner``: the learner's own CPU time per env step, the model's left out.

Pong-shaped requests (uint8 observations ``[4, 84, 84]``, 6 actions: ``obs_shape=`` and
``num_actions=`` change them) go through everything the learner does for an env step once the
broker hands it a batch: central inference (``act``: batch assembly, recurrent rows, the
selector, the replies' arrays; ``record``: the unroll store), the agent's sink (unrolls cut into
training batches) and its update (host arrays to tensors, targets, loss, backward, optimizer
step) — on one thread, in a loop, as fast as it goes, so no actor, socket or scheduler is
counted. With ``model=zero`` (the default) every torso and LSTM core of the network is replaced
by zeros of its output width and only the heads compute: the selector, the loss and the
optimizer see the shapes they always do, and what is left is the learner's own work per env
step, which a faster device does not shrink. ``model=real`` keeps the network, for its share.

Figures are CPU seconds of the loop's thread (``time.thread_time``) per env step, by stage:
``act`` and ``record`` per env step answered, ``train`` per env step of the batches trained
(they complete in bursts); the broker's own cost per message is ``seedq-bench broker
stages=true``'s.

``mode=run`` measures the whole learner process instead: a real ``arch=seed`` run (broker
thread, central inference, training thread, GIL hand-offs, torch's threads) fed by actor
processes stepping ``env.kind=fake`` envs with Pong-shaped observations, and the same
zero-cost model; the figure is the learner process's CPU time per env step (the actors' own
CPU is theirs). Its absolute value depends on how fast the actors feed it; compare it only side
by side.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seedq.agents.common.models import RecurrentBody
from seedq.agents.common.onpolicy import OnPolicyAgent
from seedq.agents.registry import agent_class, agent_names, build_agent
from seedq.bench.common import (
    CONF_DIR,
    BenchError,
    check_not_stopped,
    compose,
    one_of,
    only_in_mode,
    positive_sizes,
    print_json,
    print_table,
    scratch_dir,
    split_args,
)
from seedq.broker.batch import ActorSlot, RequestBatch
from seedq.core.agent import RunContext
from seedq.learner.central_inference import CentralInference
from seedq.learner.device import AMP_DTYPES, prepare_learner_process
from seedq.learner.inference import InferenceEngine
from seedq.messages import EnvSpec, Hello, Step

OPTIONS = {
    "mode": "loop",
    "seconds": 10.0,
    "warmup_s": 2.0,
    "model": "zero",
    "obs_shape": [4, 84, 84],
    "num_actions": 6,
    "requests": 8,
    # > 0: after the timed window, train this many more batches under torch.profiler and print
    # the ops that took the most CPU (mode=loop).
    "profile": 0,
}
STAGES = ("act", "record", "train")


def zero_embed(body: RecurrentBody, obs: torch.Tensor, done: torch.Tensor, core_state: Any):
    """:meth:`RecurrentBody.embed` at no cost: zero features ``[T * B, core_out]``, the state as
    it came (no torso, no core)."""
    rows = obs.shape[0] * obs.shape[1]
    return obs.new_zeros((rows, body.core_out), dtype=torch.float32), core_state


def zero_cost(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every body's torso and core skipped (its heads still learn)."""
    for module in model.modules():
        if isinstance(module, RecurrentBody):
            module.embed = functools.partial(zero_embed, module)
    return model


def request_slots(count: int, n_envs: int, spec: EnvSpec) -> list[tuple[ActorSlot, Step]]:
    """``count`` actors of ``n_envs`` envs each and the Step each sends, every step the same."""
    rng = np.random.default_rng(0)
    slots = []
    for i in range(count):
        hello = Hello(i, uuid.uuid4().hex, n_envs, spec, first_env=i * n_envs)
        rows = np.arange(i * n_envs, (i + 1) * n_envs, dtype=np.int64)
        slot = ActorSlot(hello=hello, identity=b"", rows=rows, env_ids=rows.copy())
        obs = rng.integers(0, 256, (n_envs, *spec.obs_shape), dtype=np.uint8)
        step = Step.first(hello, obs.astype(spec.obs_dtype))
        step.seq = 1  # a step inside an episode: nothing resets
        step.reward = rng.choice(np.array([-1.0, 0.0, 0.0, 1.0], np.float32), n_envs)
        slots.append((slot, step))
    return slots


def check_on_policy(algorithm: str) -> None:
    """A BenchError unless ``algorithm`` trains on-policy, as the loop does."""
    if algorithm in agent_names() and not issubclass(agent_class(algorithm), OnPolicyAgent):
        raise BenchError(
            f"learner: algorithm={algorithm} is not on-policy; this loop trains each batch of "
            "fresh unrolls as it completes: algorithm=vtrace or algorithm=ppo"
        )


class LearnerLoop:
    """The learner's per-step work for ``requests`` env batches, driven by one thread."""

    def __init__(self, cfg: Any, spec: EnvSpec, model: str, requests: int) -> None:
        check_on_policy(cfg.algorithm.name)
        hw = cfg.hardware
        if getattr(cfg.algorithm, "pause_acting", False):
            # One thread acts, records and trains in turn, so the sink must not wait for a
            # training thread (there is none): the next act already follows the updates.
            cfg.algorithm.pause_acting = False
        # The process-wide settings of a learner process too (its allocator's among them).
        self.device = prepare_learner_process(cfg)
        ctx = RunContext(
            cfg, spec, self.device, threading.Lock(), threading.Event(), AMP_DTYPES[hw.amp]
        )
        self.agent = build_agent(ctx)
        # Unbounded: one record can complete several batches (every env batch's unrolls end
        # on the same step), and the loop trains them all right after it; a bounded queue
        # would block the only thread in the sink.
        self.agent.train_queue = queue.Queue()
        if model == "zero":
            zero_cost(self.agent.model)
        self.engine = InferenceEngine(
            self.agent.model,
            self.device,
            ctx.weights_lock,
            select=self.agent.selector,
            amp_dtype=ctx.amp_dtype,
        )
        self.consumer = CentralInference.for_agent(self.engine, self.agent)
        self.requests = request_slots(requests, cfg.actor.envs_per_batch, spec)
        for slot, _ in self.requests:
            self.consumer.actor_started(slot)
        self.per_batch = max(1, cfg.broker.max_batch // cfg.actor.envs_per_batch)
        self.cpu = dict.fromkeys(STAGES, 0.0)
        self.env_steps = 0
        self.updates = 0
        self.batches = 0
        self.trained_steps = 0
        self._next = 0

    def _batch(self) -> RequestBatch:
        take = [self.requests[(self._next + i) % len(self.requests)] for i in range(self.per_batch)]
        self._next = (self._next + self.per_batch) % len(self.requests)
        return RequestBatch.from_steps(take)

    def _train_queued(self) -> None:
        train_queue = self.agent.train_queue
        while True:
            try:
                batch = train_queue.get_nowait()
            except queue.Empty:
                return
            before = self.agent.stats.updates
            self.agent.learn(batch, self.env_steps)
            # Gradient steps, as a run's train/updates counts them (a batch takes
            # epochs x minibatches of them).
            self.updates += self.agent.stats.updates - before
            self.batches += 1
            self.trained_steps += batch.num_columns * (int(batch.action.shape[0]) - 1)

    def step(self) -> None:
        """One inference batch, its record, and the updates it completed."""
        clock = time.thread_time
        t0 = clock()
        batch = self._batch()
        self.consumer.act(batch)
        t1 = clock()
        self.consumer.record(batch)
        t2 = clock()
        self._train_queued()
        t3 = clock()
        self.cpu["act"] += t1 - t0
        self.cpu["record"] += t2 - t1
        self.cpu["train"] += t3 - t2
        self.env_steps += batch.num_envs

    def reset_counts(self) -> None:
        self.cpu = dict.fromkeys(STAGES, 0.0)
        self.env_steps = self.updates = self.batches = self.trained_steps = 0


def run_config(options: dict[str, Any], overrides: list[str], run_dir: str) -> Any:
    """``mode=run``'s config: fake envs of the Pong shape, with Atari's preset of the algorithm
    (``tuning/<algorithm>_atari``) where it has one, since ``env=fake`` selects none."""
    algorithm = next(
        (o.split("=", 1)[1] for o in overrides if o.startswith("algorithm=")), "vtrace"
    )
    preset = f"{algorithm}_atari"
    tuning = [f"tuning={preset}"] if (Path(CONF_DIR) / "tuning" / f"{preset}.yaml").exists() else []
    shape = ",".join(str(d) for d in options["obs_shape"])
    return compose(
        [
            "env=fake",
            *tuning,
            f"env.obs_shape=[{shape}]",
            "env.obs_dtype=uint8",
            f"env.num_actions={options['num_actions']}",
            "env.episode_length=1000",
            f"max_minutes={(options['seconds'] + options['warmup_s'] + 30) / 60}",
            "total_env_steps=1000000000000",
            "log_interval_s=1",
            "checkpoint.every_minutes=0",
            *overrides,
        ],
        run_dir=run_dir,
    )


def run_process(options: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``mode=run``: the learner process's CPU per env step in a real ``arch=seed`` run."""
    from seedq.arch.seed import SeedRun

    seconds, warmup_s = options["seconds"], options["warmup_s"]
    run_dir = scratch_dir("seedq-bench-learner-")
    cfg = run_config(options, overrides, run_dir)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    run = SeedRun(cfg, run_dir)
    if options["model"] == "zero":
        zero_cost(run.agent.model)
    marks: list[tuple[float, float, int, int]] = []

    def sample() -> None:
        # From the first env step on (actor processes start in a few seconds), then after
        # the warm-up and after the measured seconds.
        while run.stats.env_steps == 0 and not run.stop.wait(0.05):
            pass
        for wait in (warmup_s, seconds):
            if run.stop.wait(wait):
                return
            steps = run.stats.env_steps
            marks.append((time.perf_counter(), time.process_time(), steps, run.agent.stats.updates))
        run.stop.set()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    summary = run.run()
    check_not_stopped(run)
    if len(marks) < 2:
        raise BenchError(
            f"mode=run: the run stopped ({summary.stop_reason}) before {seconds:g} s were "
            "measured after the warm-up; let it go on (the bench sets total_env_steps and "
            "max_minutes itself)"
        )
    (w0, c0, s0, u0), (w1, c1, s1, u1) = marks
    steps = max(s1 - s0, 1)
    figures = {
        "mode": "run",
        "algorithm": cfg.algorithm.name,
        "model": options["model"],
        "obs_shape": list(options["obs_shape"]),
        "device": cfg.hardware.device,
        "actor_envs": cfg.actor.num_actors * cfg.actor.batches_per_actor * cfg.actor.envs_per_batch,
        "env_steps": s1 - s0,
        "updates": u1 - u0,
        "env_steps_per_s": round(steps / (w1 - w0), 1),
        "us_per_step": round((c1 - c0) / steps * 1e6, 2),
        "learner_cpu_share": round((c1 - c0) / (w1 - w0), 3),
        "wall_s": round(w1 - w0, 2),
    }
    print_table(
        f"learner (mode=run): the learner process of an arch=seed run, {options['model']} model, "
        f"fake envs uint8{list(options['obs_shape'])}, {figures['actor_envs']} actor envs",
        ["CPU µs per env step", "env steps/s", "learner cores busy", "updates"],
        [[figures["us_per_step"], figures["env_steps_per_s"], figures["learner_cpu_share"],
          figures["updates"]]],
    )  # fmt: skip
    print_json("learner", figures)
    return figures


def run(argv: list[str]) -> dict[str, Any]:
    options, overrides = split_args(argv, OPTIONS)
    one_of("model", options["model"], ("zero", "real"))
    one_of("mode", options["mode"], ("loop", "run"))
    only_in_mode(argv, "mode", options["mode"], {"loop": ("requests", "profile")})
    positive_sizes("num_actions", options["num_actions"], "6")
    positive_sizes("obs_shape", options["obs_shape"], "4,84,84")
    if options["requests"] < 1:
        raise BenchError(f"requests={options['requests']}: the env batches a step takes, >= 1")
    if options["mode"] == "run":
        return run_process(options, overrides)
    # The loop's own reason before the config's: SAC's refusal of env=atari suggested
    # env=mujoco, for a loop that trains no off-policy algorithm on any env.
    chosen = [o.partition("=")[2] for o in overrides if o.startswith("algorithm=")]
    if chosen:
        check_on_policy(chosen[-1])
    # Atari's presets (tuning/<algorithm>_atari) by default: the data is Pong-shaped.
    cfg = compose(["env=atari", *overrides])
    spec = EnvSpec(tuple(options["obs_shape"]), "uint8", int(options["num_actions"]))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    loop = LearnerLoop(cfg, spec, options["model"], int(options["requests"]))
    for budget in (options["warmup_s"], options["seconds"]):
        loop.reset_counts()
        start, process0 = time.perf_counter(), time.process_time()
        while time.perf_counter() - start < budget:
            loop.step()
        wall, process = time.perf_counter() - start, time.process_time() - process0
    if not loop.trained_steps:
        raise BenchError(f"learner: no batch was trained in {options['seconds']} s; give it more")
    steps = max(loop.env_steps, 1)
    # Training per env step it trained on: the envs step in lockstep, so batches complete in
    # bursts (8 at once with the Atari preset, every 4,096 env steps), and a window that holds
    # one burst more or less would swing a per-env-step-entered figure by tens of percent.
    per = {"act": steps, "record": steps, "train": loop.trained_steps}
    us = {stage: loop.cpu[stage] / per[stage] * 1e6 for stage in STAGES}
    thread_cpu = sum(loop.cpu.values())
    figures = {
        "algorithm": cfg.algorithm.name,
        "model": options["model"],
        "obs_shape": list(spec.obs_shape),
        "num_actions": spec.num_actions,
        "device": cfg.hardware.device,
        "batch_envs": loop.per_batch * cfg.actor.envs_per_batch,
        "train_batch": cfg.algorithm.batch_size,
        "unroll_length": cfg.algorithm.unroll_length,
        "env_steps": loop.env_steps,
        "batches": loop.batches,
        "updates": loop.updates,
        "trained_steps": loop.trained_steps,
        "us_per_step": round(sum(us.values()), 2),
        **{f"us_{stage}": round(value, 2) for stage, value in us.items()},
        # Other threads of the process (torch's intra-op pool) would show as process > thread.
        "process_cpu_over_thread": round(process / max(thread_cpu, 1e-9), 3),
        "steps_per_cpu_s": round(steps / max(thread_cpu, 1e-9), 1),
        "wall_s": round(wall, 2),
    }
    print_table(
        f"learner: {cfg.algorithm.name}, {options['model']} model, obs uint8"
        f"{list(spec.obs_shape)}, {figures['batch_envs']} envs per inference batch, training batch "
        f"{cfg.algorithm.batch_size} x {cfg.algorithm.unroll_length}; CPU µs per env step",
        ["total", *STAGES, "env steps", "updates"],
        [[figures["us_per_step"], *(figures[f"us_{s}"] for s in STAGES), steps, loop.updates]],
    )
    if int(options["profile"]) > 0:
        # Before the JSON line, which is the last line of every subcommand (contention and
        # scripts/bench_seedq.py read it there).
        print(profile_batches(loop, int(options["profile"])))
    print_json("learner", figures)
    return figures


def profile_batches(loop: LearnerLoop, batches: int, rows: int = 25) -> str:
    """Where the learner thread's CPU goes: ``batches`` more training batches (and the acting
    and recording that feed them) under torch.profiler, its ops by their own CPU time."""
    from torch.profiler import ProfilerActivity, profile

    loop.reset_counts()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        while loop.batches < batches:
            loop.step()
    title = (
        f"torch.profiler: {loop.batches} batches ({loop.updates} updates), {loop.env_steps} env "
        f"steps acted, {loop.trained_steps} trained; ops by self CPU time"
    )
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
    return f"{title}\n{table}"
