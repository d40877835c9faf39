"""``seedq-bench broker``: how many actor streams one learner's broker serves, and at what cost.

A real :class:`~seedq.broker.router.Broker` with its size-or-deadline batcher runs in this
process with a *null policy* (zero actions, nothing stored), or ``shards=N`` broker processes
answered by the learner's hub (``broker.shards``); generator processes
(:mod:`seedq.bench.broker_load`) open one DEALER socket per actor stream and speak seedq's wire
format over TCP, one Step in flight per stream, as actors do. Per point (streams x envs per
message x observation) it prints replies/s, env steps/s, round trip p50/p99/max, the broker's
CPU time per message and per env step, the broker process's RSS and open files, and the streams
evicted or refused.

CPU per message is the CPU clock of the threads running broker loops (this process's broker
thread, or each shard process's main thread) over the replies, so it holds on a shared machine;
``process_us`` adds ZeroMQ's I/O threads and the hub. Generators dial shard ``a % N`` as actors
do, and raise their open-file limit and ZeroMQ's socket limit to hold thousands of sockets.
Throughput and round trips depend on the cores the generators leave free: on a 2-core box they
share the broker's cores.

``seconds=600 report_s=30 streams=4096`` is the soak: one point, a line every ``report_s``.
``policy=model`` answers with central inference and the configured algorithm's network (CPU,
one thread; unrolls cut and dropped) instead of zeros. ``stages=true`` times the broker's
stages one by one instead (:mod:`seedq.bench.broker_stages`).
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import numpy as np

from seedq.bench.broker_load import generate
from seedq.bench.broker_setup import BrokerUnderTest
from seedq.bench.common import (
    BenchError,
    compose,
    one_of,
    only_in_mode,
    positive_sizes,
    print_json,
    print_table,
    split_args,
)
from seedq.limits import raise_open_file_limit
from seedq.messages import ALLOWED_DTYPES, EnvSpec

OPTIONS = {
    "streams": [1, 16, 256, 1024],
    "envs": [1],
    "obs": ["4:float32"],
    "seconds": 5.0,
    "warmup_s": 2.0,
    "report_s": 0.0,
    "generators": 0,
    "max_inflight_mb": 512.0,
    "shards": 1,
    "policy": "null",
    "stages": False,
    "rounds": 200,
    "parallel": 0,
}
COLUMNS = [
    "shards", "streams", "envs", "obs", "replies/s", "env steps/s", "rtt p50 ms", "rtt p99 ms",
    "rtt max ms", "broker us/msg", "us/env step", "process us/msg", "RSS MB", "fds",
    "evicted", "refused", "starved",
]  # fmt: skip


def parse_obs(text: str) -> EnvSpec:
    """``4:float32`` or ``84x84x4:uint8`` -> the spec of a 2-action env with that observation."""
    shape, _, dtype = text.partition(":")
    try:
        dims = tuple(int(d) for d in shape.split("x"))
        name = np.dtype(dtype or "float32").name
        if name not in ALLOWED_DTYPES:
            raise TypeError(name)
    except (TypeError, ValueError):
        raise BenchError(
            f"obs={text!r}: give SHAPE:DTYPE like 4:float32 or 84x84x4:uint8"
        ) from None
    if not dims or min(dims) < 1:
        raise BenchError(f"obs={text!r}: dimensions must be positive")
    return EnvSpec(dims, name, 2)


def window_figures(
    before: dict[str, Any], after: dict[str, Any], rtts: np.ndarray, refused: int
) -> dict[str, Any]:
    dt = after["wall"] - before["wall"]
    replies = max(after["replies"] - before["replies"], 1)
    steps = max(after["env_steps"] - before["env_steps"], 1)
    cpu = after["broker_cpu"] - before["broker_cpu"]
    ms = rtts * 1e3

    def pct(q: float) -> float | None:
        return round(float(np.percentile(ms, q)), 3) if ms.size else None

    figures = {
        "replies_per_s": round(replies / dt, 1),
        "env_steps_per_s": round(steps / dt, 1),
        "rtt_ms_p50": pct(50),
        "rtt_ms_p99": pct(99),
        "rtt_ms_max": round(float(ms.max()), 3) if ms.size else None,
        "broker_us_per_msg": round(cpu / replies * 1e6, 2),
        "broker_us_per_env_step": round(cpu / steps * 1e6, 3),
        "process_us_per_msg": round(
            (after["process_cpu"] - before["process_cpu"]) / replies * 1e6, 2
        ),
        "broker_cpu_share": round(cpu / dt, 3),
        "rss_mb": round(after["rss_mb"], 1),
        "open_files": after["open_files"],
        "evicted": int(after["evicted"] - before["evicted"]),
        "refused": int(after["refused"] - before["refused"]) + refused,
    }
    if after["shard_cpu"]:
        figures["shard_cpu_share"] = [
            round((b - a) / dt, 3)
            for a, b in zip(before["shard_cpu"], after["shard_cpu"], strict=True)
        ]
        figures["hub_us_per_msg"] = round((after["hub_cpu"] - before["hub_cpu"]) / replies * 1e6, 2)
    return figures


def run_point(
    cfg: Any, options: dict[str, Any], streams: int, n_envs: int, spec: EnvSpec
) -> list[dict[str, Any]]:
    """One load point: its figures per measuring window (one window unless ``report_s``)."""
    seconds, report_s = options["seconds"], options["report_s"] or options["seconds"]
    broker = BrokerUnderTest(cfg, spec, options["shards"], options["policy"])
    gens = options["generators"] or min(4, streams)
    mp = multiprocessing.get_context("spawn")
    control = {"stop": mp.Event(), "window": mp.Value("i", 0)}
    results = mp.Queue()
    procs = []
    ids = np.array_split(np.arange(streams), gens)
    for part in ids:
        args = (broker.endpoints, part.tolist(), n_envs, spec.to_dict(), control, results)
        procs.append(mp.Process(target=generate, args=args, daemon=True))
        procs[-1].start()
    rows, measured = [], False
    try:
        deadline = time.monotonic() + 60 + streams / 50
        while broker.connected_streams < streams:
            if time.monotonic() > deadline or not all(p.is_alive() for p in procs):
                exits = [p.exitcode for p in procs if not p.is_alive()]
                raise BenchError(
                    f"{broker.connected_streams} of {streams} streams joined the broker"
                    + (f"; a generator process exited (code {exits[0]})" if exits else "")
                )
            time.sleep(0.05)
        time.sleep(options["warmup_s"])
        control["window"].value += 1  # generators drop the warm-up's round trips
        start = time.monotonic()
        before = broker.counters()
        while time.monotonic() - start < seconds - 1e-6:
            time.sleep(min(report_s, seconds - (time.monotonic() - start)))
            after = broker.counters()
            window = control["window"].value
            control["window"].value += 1
            rtts, refused, served = gather(results, window, gens)
            rows.append(
                {
                    "shards": options["shards"],
                    "streams": streams,
                    "envs": n_envs,
                    "obs": f"{'x'.join(map(str, spec.obs_shape))}:{spec.obs_dtype}",
                    "t_s": round(time.monotonic() - start, 1),
                    **window_figures(before, after, rtts, refused),
                    "starved": streams - served,
                }
            )
            before = after
            if options["report_s"]:
                print_json("broker-window", rows[-1])
        measured = True
    finally:
        control["stop"].set()
        for proc in procs:
            if not measured:
                # Ctrl-C, SIGTERM, a generator that died: the others' last report (every
                # round trip since the warm-up) is never read, and a generator whose report
                # fills its queue's pipe waits for a reader at its exit, here 20 s each.
                proc.terminate()
            proc.join(timeout=20)
            if proc.is_alive():
                proc.kill()
        broker.close()
    return rows


def gather(results: Any, window: int, gens: int) -> tuple[np.ndarray, int, int]:
    """Round trips, refusals and streams served in ``window``, from every generator (older
    windows are dropped)."""
    parts, refused, served, got = [], 0, 0, 0
    deadline = time.monotonic() + 30
    while got < gens and time.monotonic() < deadline:
        try:
            w, rtts, refusals, answered = results.get(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting until the deadline
            continue
        if w == window:
            parts.append(rtts)
            refused += sum(refusals.values())
            served += answered
            got += 1
    return (np.concatenate(parts) if parts else np.zeros(0)), refused, served


def run(argv: list[str]) -> dict[str, Any]:
    options, overrides = split_args(argv, OPTIONS)
    cfg = compose(overrides)
    specs = [parse_obs(text) for text in options["obs"]]
    one_of("policy", options["policy"], ("null", "model"))
    # shards=0 ran the in-process broker labelled "0 broker shard processes"; rounds=0 ended in
    # a ZeroDivisionError, generators and parallel below 0 in ValueErrors.
    positive_sizes("shards", options["shards"], "1")
    positive_sizes("rounds", options["rounds"], "200")
    for key in ("generators", "parallel"):
        if options[key] < 0:
            raise BenchError(f"{key}={options[key]} is not allowed; it must be >= 0")
    positive_sizes("streams", options["streams"], "1,16,256")
    positive_sizes("envs", options["envs"], "16")
    only_in_mode(
        argv,
        "stages",
        options["stages"],
        {
            True: ("rounds", "parallel"),
            False: ("seconds", "warmup_s", "report_s", "generators", "max_inflight_mb", "shards",
                    "policy"),
        },
    )  # fmt: skip
    if options["stages"]:
        return stages(options, specs, cfg.broker.max_batch)
    plan, limit = [], options["max_inflight_mb"]
    for spec in specs:
        obs_bytes = int(np.prod(spec.obs_shape)) * np.dtype(spec.obs_dtype).itemsize
        for n_envs in options["envs"]:
            for streams in options["streams"]:
                inflight_mb = streams * n_envs * obs_bytes / 2**20
                if inflight_mb > limit:
                    print(f"skipped {streams} streams x {n_envs} envs: {inflight_mb:,.3g} MB")
                    continue
                plan.append((streams, n_envs, spec))
    if not plan:
        # A table of no points ended in a TypeError.
        raise BenchError(
            f"every point's observations in flight exceed max_inflight_mb={limit:g}; raise it, "
            "or give fewer streams= or envs="
        )
    raise_open_file_limit()
    points = []
    for streams, n_envs, spec in plan:
        rows = run_point(cfg, options, streams, n_envs, spec)
        points.append(rows[-1] if not options["report_s"] else summarize(rows))
    print_table(
        f"broker: {where(options['shards'])}, {options['policy']} policy, max_batch "
        f"{cfg.broker.max_batch}, "
        f"deadline {cfg.broker.deadline_ms} ms, {options['seconds']} s per point",
        COLUMNS,
        [[p[k] for k in FIELDS] for p in points],
    )
    figures = {
        "shards": options["shards"],
        "policy": options["policy"],
        "max_batch": cfg.broker.max_batch,
        "deadline_ms": cfg.broker.deadline_ms,
        "seconds": options["seconds"],
        "points": points,
    }
    print_json("broker", figures)
    return figures


FIELDS = [
    "shards", "streams", "envs", "obs", "replies_per_s", "env_steps_per_s", "rtt_ms_p50",
    "rtt_ms_p99", "rtt_ms_max", "broker_us_per_msg", "broker_us_per_env_step", "process_us_per_msg",
    "rss_mb", "open_files", "evicted", "refused", "starved",
]  # fmt: skip


def where(shards: int) -> str:
    return "in-process broker" if shards == 1 else f"{shards} broker shard processes"


def stages(options: dict[str, Any], specs: list[EnvSpec], max_batch: int) -> dict[str, Any]:
    from seedq.bench.broker_stages import STAGES, parallel_rates, run_stages

    rows = run_stages(options, specs, max_batch)
    columns = ["obs", "envs", "streams", *STAGES, "total"]
    print_table(
        f"broker stages: CPU us per message, max_batch {max_batch}, {options['rounds']} rounds",
        columns,
        [[row[c] for c in columns] for row in rows],
    )
    figures = {"max_batch": max_batch, "rounds": options["rounds"], "stages": rows}
    if options["parallel"]:
        rates = parallel_rates(specs[0], options["rounds"], max_batch, options["parallel"])
        print_table(
            f"the stage loop alone, then {rates['copies']} copies as threads and as processes "
            "(messages/s, wall clock)",
            ["alone", "threads", "processes"],
            [
                [
                    rates["alone_msgs_per_s"],
                    rates["threads_msgs_per_s"],
                    rates["processes_msgs_per_s"],
                ]
            ],
        )
        figures["parallel"] = rates
    print_json("broker-stages", figures)
    return figures


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A soak's windows as one point: medians of rates and costs, the worst round trips, and
    RSS and open files at the first and last window (flat means no leak)."""
    out = dict(rows[-1])
    for key in (
        "replies_per_s", "env_steps_per_s", "broker_us_per_msg", "broker_us_per_env_step",
        "process_us_per_msg",
    ):  # fmt: skip
        out[key] = round(float(np.median([r[key] for r in rows])), 3)
    for key in ("rtt_ms_p50", "rtt_ms_p99", "rtt_ms_max"):
        out[key] = max((r[key] for r in rows if r[key] is not None), default=None)
    out["evicted"] = sum(r["evicted"] for r in rows)
    out["starved"] = max(r["starved"] for r in rows)
    out["refused"] = sum(r["refused"] for r in rows)
    out["rss_mb_first_last"] = [rows[0]["rss_mb"], rows[-1]["rss_mb"]]
    out["open_files_first_last"] = [rows[0]["open_files"], rows[-1]["open_files"]]
    out["windows"] = len(rows)
    return out
