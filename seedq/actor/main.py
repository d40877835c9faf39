"""Actor process entry point (``seedq-actor``), also run as a thread for ``inproc://`` tests."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import zmq
import zmq.asyncio

from seedq.actor.arguments import (
    check_endpoints,
    check_patience,
    parse_actor_ids,
    unresolved_hosts,
)
from seedq.actor.loop import (
    ActorError,
    ActorTakenOver,
    Patience,
    install_event_loop_policy,
    run_env_batch,
)
from seedq.actor.stepping import ActorStats, TooManyEnvFailures, hung_env_call
from seedq.envs import EnvConfig, EnvError, env_config, make_env_batch
from seedq.envs.base import EnvBatch
from seedq.envs.config import MAX_SEED
from seedq.exit_status import EXIT_ACTOR_TAKEN_OVER
from seedq.limits import raise_open_file_limit
from seedq.logging_setup import setup_logging
from seedq.messages import MAX_ENVS, env_json
from seedq.processes import (
    PARENT_DEATH_SIGNAL,
    PARENT_EXIT_WAIT_S,
    exit_with_parent,
    leave_notices_to_the_learner,
)
from seedq.security import client_options

log = logging.getLogger(__name__)


async def _run(
    ctx: zmq.asyncio.Context,
    endpoint: str,
    actor_ids: list[int],
    env_cfg: EnvConfig,
    envs_per_batch: int,
    seed: int,
    stop: asyncio.Event,
    stats: ActorStats,
    curve_client: dict | None = None,
    patience: Patience | None = None,
) -> None:
    envs = []
    # A sharded learner listens on several endpoints; actor a dials shard a % shards.
    endpoints = endpoint.split(",")
    try:
        # What each env batch is built by, again when its envs raise (run_env_batch's rebuild).
        builders = [
            functools.partial(
                make_env_batch,
                env_cfg,
                envs_per_batch,
                seed=seed + 1000 * actor_id,
                env_offset=actor_id * envs_per_batch,
            )
            for actor_id in actor_ids
        ]
        for build in builders:
            envs.append(build())
        taken: list[ActorTakenOver] = []

        async def run_batch(actor_id: int, env: EnvBatch, build: Callable[[], EnvBatch]) -> None:
            try:
                await run_env_batch(
                    ctx,
                    endpoints[actor_id % len(endpoints)],
                    actor_id,
                    env,
                    seed=seed + 1000 * actor_id,
                    stop=stop,
                    stats=stats,
                    curve_client=curve_client,
                    patience=patience,
                    env_identity=env_json(env_cfg.identity()),
                    rebuild=build,
                )
            except ActorTakenOver as exc:
                # Another process now steps this id's envs; this process's other ids go on.
                if len(taken) + 1 < len(actor_ids):
                    log.error("%s; this process's other actor ids go on", exc)
                taken.append(exc)

        tasks = [
            asyncio.create_task(run_batch(actor_id, env, build))
            for actor_id, env, build in zip(actor_ids, envs, builders, strict=True)
        ]
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        stop.set()
        # Every batch's end is collected (one that failed while the others stopped is not left
        # to asyncio's "Task exception was never retrieved"); the first failure is raised.
        ends = await asyncio.gather(*tasks, return_exceptions=True)
        failed = [(t not in done, e) for t, e in zip(tasks, ends, strict=True)]
        failed = [(later, e) for later, e in failed if isinstance(e, BaseException)]
        if failed:
            raise min(failed, key=lambda f: f[0])[1]  # one that ended the wait, if any
        if len(taken) == len(actor_ids):
            raise taken[-1]  # every id of this process is stepped by another one now
    finally:
        for env in envs:
            env.close()


def run_actor_thread(
    ctx: zmq.Context,
    endpoint: str,
    actor_ids: list[int],
    env_cfg: EnvConfig,
    envs_per_batch: int,
    seed: int,
    stop: threading.Event,
    errors: list[BaseException],
    patience: Patience | None = None,
) -> None:
    """Run actors in this thread, sharing ``ctx`` (required for ``inproc://``)."""

    async def main() -> None:
        async_stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set() and not async_stop.is_set():
                await asyncio.sleep(0.05)
            async_stop.set()

        watcher = asyncio.create_task(watch())
        actx = zmq.asyncio.Context.shadow(ctx)
        try:
            await _run(
                actx,
                endpoint,
                actor_ids,
                env_cfg,
                envs_per_batch,
                seed,
                async_stop,
                ActorStats(),
                patience=patience,
            )
        finally:
            async_stop.set()
            await watcher

    try:
        asyncio.run(main())
    except BaseException as exc:  # noqa: BLE001 - handed to the launcher, which reports it
        errors.append(exc)


REPORT_EVERY_S = 10.0
# How often, at most, the watchdog looks at the env call in progress (actor.env_timeout_s).
WATCH_EVERY_S = 1.0


async def _report(actor_ids: str, stats: ActorStats) -> None:
    """A progress line now and then: what this process stepped, for a run's log (and the soak
    test, which checks it against the learner's count)."""
    while True:
        await asyncio.sleep(REPORT_EVERY_S)
        log.info(
            "actors %s: %d env steps, %d rejoins, %d env failures",
            actor_ids,
            stats.env_steps,
            stats.rejoins,
            stats.env_failures,
        )


def watch_env_calls(stats: ActorStats, patience: Patience, loop_thread: int) -> None:
    """Thread body: once an env call (a batch's reset or step) has run for
    ``patience.env_timeout_s``, log where the loop thread is stuck and end the process, exit
    status 1: a crash, which a launcher restarts. A hung simulator cannot be interrupted, and
    the process steps nothing else while it hangs (the learner evicts its batches after
    broker.silent_timeout_s)."""
    timeout_s, setting = patience.env_timeout_s, patience.name_of("env_timeout_s")
    while True:
        time.sleep(min(WATCH_EVERY_S, timeout_s / 4))
        call = stats.env_call
        who = f"actor {call[0]}" if call else ""
        if why := hung_env_call(stats, timeout_s, loop_thread, who, setting):
            log.error(
                "%s; exiting%s",
                why,
                "" if patience.by_hand else " for the launcher to restart this actor process",
            )
            for child in multiprocessing.active_children():  # async env workers, stuck or not
                child.kill()
            logging.shutdown()
            os._exit(1)


def _dead(pid: int) -> bool:
    """``pid`` has exited (a zombie not yet reaped, or gone); False where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] in (["Z"], ["X"])


def parent_gone(parent_pid: int, wait_s: float = 0.0) -> bool:
    """Whether ``parent_pid`` is no longer our live parent, waiting up to ``wait_s`` for it to
    become so (the learner's threads finishing their exit)."""
    deadline = time.monotonic() + wait_s
    while os.getppid() == parent_pid and not _dead(parent_pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="seedq actor: steps envs for a seedq learner")
    parser.add_argument(
        "--endpoint",
        required=True,
        help="learner address, e.g. tcp://host:port; a comma-separated list for a learner with "
        "several broker shards (actor a dials the (a mod n)-th)",
    )
    parser.add_argument("--actor-ids", required=True, help="comma-separated ids, one per batch")
    parser.add_argument("--envs-per-batch", type=int, required=True)
    parser.add_argument("--env-config", required=True, help="the env section as JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-file", default=None)
    parser.add_argument(
        "--keys-dir", default="", help="CURVE keys (actor.key_secret, learner.key) from seedq-keys"
    )
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=0,
        help="exit when this process (the learner that started us, our parent) dies",
    )
    parser.add_argument("--reply-timeout-s", type=float, default=Patience.reply_timeout_s)
    parser.add_argument("--learner-lost-s", type=float, default=Patience.learner_lost_s)
    parser.add_argument("--max-rejoins", type=int, default=Patience.max_rejoins)
    parser.add_argument("--env-timeout-s", type=float, default=Patience.env_timeout_s)
    parser.add_argument(
        "--launched",
        action="store_true",
        help="started by seedq-train's launcher, which gives the flags above from its actor.* "
        "keys: messages name those keys",
    )
    args = parser.parse_args(argv)
    try:
        setup_logging(args.log_file, role="actor")
    except OSError as exc:  # a folder, a read-only place: was the traceback of logging's open
        print(
            f"seedq-actor: cannot write --log-file {args.log_file} ({exc.strerror or exc}); give "
            "a file path this user can write",
            file=sys.stderr,
        )
        return 2
    if args.launched:
        leave_notices_to_the_learner()
    if args.parent_pid and not exit_with_parent(args.parent_pid):
        log.error("the learner (pid %d) that started this actor is gone; exiting", args.parent_pid)
        return 1
    raise_open_file_limit()
    try:
        patience = Patience(
            args.reply_timeout_s,
            args.learner_lost_s,
            args.max_rejoins,
            args.env_timeout_s,
            by_hand=not args.launched,
        )
        check_patience(patience)
        check_endpoints(args.endpoint)
        try:
            env_section = json.loads(args.env_config)
        except ValueError as exc:
            raise ValueError(f"--env-config is not JSON ({exc})") from None
        if not isinstance(env_section, dict):
            raise ValueError(
                f"--env-config {args.env_config!r} is not the env section as a JSON object, "
                'e.g. {"kind": "cartpole"}'
            )
        env_cfg = env_config(env_section)
        if not 1 <= args.envs_per_batch <= MAX_ENVS:
            # Past the bound the learner refuses the Hello, after the envs were built.
            raise ValueError(
                f"--envs-per-batch {args.envs_per_batch} is out of range; it must be in "
                f"[1, {MAX_ENVS}] (the envs one Step carries)"
            )
        actor_ids = parse_actor_ids(args.actor_ids, args.envs_per_batch)
        if not 0 <= args.seed <= MAX_SEED:
            # As seedq-train's seed: env seeds are seed + 1000 x actor id, envs take none below
            # 0, and ale_py none from 2^31.
            raise ValueError(f"--seed {args.seed} is out of range; it must be in [0, {MAX_SEED}]")
        curve_client = client_options(args.keys_dir) if args.keys_dir else None
    except (TypeError, ValueError) as exc:
        log.error("bad actor arguments: %s", exc)
        return 2
    for host in unresolved_hosts(check_endpoints(args.endpoint)):
        # Not refused: a cluster's DNS may come up after its actors. It waited in silence,
        # then said only "no connection" every minute for --reply-timeout-s.
        log.warning(
            "--endpoint: the host name %s does not resolve here; waiting for it up to %s s",
            host,
            patience.named("reply_timeout_s"),
        )
    install_event_loop_policy()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, PARENT_DEATH_SIGNAL):
            loop.add_signal_handler(sig, _on_signal, sig, stop)
        ctx = zmq.asyncio.Context()
        # Each env batch holds a DEALER and its monitor socket.
        ctx.set(zmq.MAX_SOCKETS, max(1024, 2 * len(actor_ids) + 64))
        reporter = asyncio.create_task(_report(args.actor_ids, stats))
        try:
            await _run(
                ctx,
                args.endpoint,
                actor_ids,
                env_cfg,
                args.envs_per_batch,
                args.seed,
                stop,
                stats,
                curve_client,
                patience,
            )
        finally:
            reporter.cancel()
            # Closes what an error left open: term() alone would wait on it for ever.
            ctx.destroy(linger=0)

    stats = ActorStats()
    signals: set[int] = set()

    def _on_signal(sig: int, stop: asyncio.Event) -> None:
        if not stop.is_set():
            why = " (the learner's parent-death signal)" if sig == PARENT_DEATH_SIGNAL else ""
            log.info("%s%s: stopping", signal.Signals(sig).name, why)
        signals.add(sig)
        stop.set()

    if patience.env_timeout_s > 0:
        threading.Thread(
            target=watch_env_calls,
            args=(stats, patience, threading.get_ident()),
            name="env-watch",
            daemon=True,
        ).start()
    try:
        asyncio.run(run())
    except ActorTakenOver as exc:
        log.error("%s", exc)
        return EXIT_ACTOR_TAKEN_OVER
    except (ActorError, EnvError, TooManyEnvFailures) as exc:
        log.error("%s", exc)
        return 1
    except zmq.ZMQError as exc:
        log.error(
            "actors %s: ZeroMQ failed (%s) with --endpoint %s", args.actor_ids, exc, args.endpoint
        )
        return 1
    except Exception as exc:  # an env's own error (its step or reset raised), or a bug of ours
        # The launcher drops an actor's stderr (it repeats the log), so the traceback goes to
        # the log, and its last line says what failed: the run's error quotes the log's end.
        log.error("actors %s failed; the traceback:", args.actor_ids, exc_info=True)
        log.error("actors %s failed: %s: %s", args.actor_ids, type(exc).__name__, exc)
        return 1
    log.info(
        "actors %s stopped after %d env steps (%d rejoins, %d env failures)",
        args.actor_ids,
        stats.env_steps,
        stats.rejoins,
        stats.env_failures,
    )
    if not args.parent_pid:
        return 0
    death_signal = PARENT_DEATH_SIGNAL in signals
    if parent_gone(args.parent_pid, PARENT_EXIT_WAIT_S if death_signal else 0.0):
        log.error("the learner (pid %d) died; actors %s exiting", args.parent_pid, args.actor_ids)
        return 1
    if death_signal:
        log.error(
            "the learner thread that started actors %s exited, though the learner (pid %d) "
            "still runs; exiting for the launcher to restart them",
            args.actor_ids,
            args.parent_pid,
        )
        return 1
    return 0


def actor_command(
    python: str,
    endpoint: str,
    actor_ids: list[int],
    env_cfg: EnvConfig,
    envs_per_batch: int,
    seed: int,
    log_file: str,
    keys_dir: str = "",
    patience: Patience | None = None,
    parent_pid: int = 0,
) -> list[str]:
    """The command line that starts an actor process (used by the launchers).

    ``parent_pid``: the pid of the process that will be the actor's parent (a local launcher's
    own); the actor then exits when it dies. 0 for actors started elsewhere (ssh, srun), which
    notice a dead learner by its dropped connection instead.
    """
    patience = patience or Patience()
    return [
        python or sys.executable,
        "-m",
        "seedq.actor.main",
        "--endpoint",
        endpoint,
        "--actor-ids",
        ",".join(str(a) for a in actor_ids),
        "--envs-per-batch",
        str(envs_per_batch),
        "--env-config",
        json.dumps(asdict(env_cfg)),
        "--seed",
        str(seed),
        "--log-file",
        log_file,
        *(["--keys-dir", keys_dir] if keys_dir else []),
        *(["--parent-pid", str(parent_pid)] if parent_pid else []),
        "--reply-timeout-s",
        str(patience.reply_timeout_s),
        "--learner-lost-s",
        str(patience.learner_lost_s),
        "--max-rejoins",
        str(patience.max_rejoins),
        "--env-timeout-s",
        str(patience.env_timeout_s),
        "--launched",
    ]


if __name__ == "__main__":
    sys.exit(main())
