"""Actor process entry point (``seedq-actor``), also run as a thread for ``inproc://`` tests."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import threading
from dataclasses import asdict

import zmq
import zmq.asyncio

from seedq.actor.loop import ActorError, ActorStats, install_event_loop_policy, run_env_batch
from seedq.envs import EnvConfig, EnvError, make_env_batch
from seedq.logging_setup import setup_logging
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
) -> None:
    envs = []
    try:
        for actor_id in actor_ids:
            envs.append(
                make_env_batch(
                    env_cfg,
                    envs_per_batch,
                    seed=seed + 1000 * actor_id,
                    env_offset=actor_id * envs_per_batch,
                )
            )
        tasks = [
            asyncio.create_task(
                run_env_batch(
                    ctx,
                    endpoint,
                    actor_id,
                    env,
                    seed=seed + 1000 * actor_id,
                    stop=stop,
                    stats=stats,
                    curve_client=curve_client,
                )
            )
            for actor_id, env in zip(actor_ids, envs, strict=True)
        ]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        stop.set()
        for task in pending:
            await task
        for task in done:
            task.result()  # re-raise the first failure
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
                actx, endpoint, actor_ids, env_cfg, envs_per_batch, seed, async_stop, ActorStats()
            )
        finally:
            async_stop.set()
            await watcher

    try:
        asyncio.run(main())
    except BaseException as exc:  # noqa: BLE001 - handed to the launcher, which reports it
        errors.append(exc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="seedq actor: steps envs for a seedq learner")
    parser.add_argument("--endpoint", required=True, help="learner address, e.g. tcp://host:port")
    parser.add_argument("--actor-ids", required=True, help="comma-separated ids, one per batch")
    parser.add_argument("--envs-per-batch", type=int, required=True)
    parser.add_argument("--env-config", required=True, help="the env section as JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-file", default=None)
    parser.add_argument(
        "--keys-dir", default="", help="CURVE keys (actor.key_secret, learner.key) from seedq-keys"
    )
    args = parser.parse_args(argv)
    setup_logging(args.log_file, role="actor")
    try:
        env_cfg = EnvConfig(**json.loads(args.env_config))
        actor_ids = [int(x) for x in args.actor_ids.split(",")]
        curve_client = client_options(args.keys_dir) if args.keys_dir else None
    except (TypeError, ValueError) as exc:
        log.error("bad actor arguments: %s", exc)
        return 2
    install_event_loop_policy()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        ctx = zmq.asyncio.Context()
        try:
            await _run(
                ctx,
                args.endpoint,
                actor_ids,
                env_cfg,
                args.envs_per_batch,
                args.seed,
                stop,
                ActorStats(),
                curve_client,
            )
        finally:
            ctx.term()

    try:
        asyncio.run(run())
    except (ActorError, EnvError) as exc:
        log.error("%s", exc)
        return 1
    log.info("actors %s stopped", args.actor_ids)
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
) -> list[str]:
    """The command line that starts an actor process (used by the launchers)."""
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
    ]


if __name__ == "__main__":
    sys.exit(main())
