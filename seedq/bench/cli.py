"""``seedq-bench SUBCOMMAND key=value ...``: see :mod:`seedq.bench`."""

from __future__ import annotations

import sys

from seedq.bench.common import BenchError, stop_on_sigterm, stopped_status
from seedq.config import ConfigError
from seedq.envs import EnvError

USAGE = """usage: seedq-bench SUBCOMMAND [key=value ...]

  raw-env    [env=atari env.id=ALE/Pong-v5] [seconds=5]
             the env alone with the actors' vectorisation (actor.* keys): env steps/s, frames/s
  pipeline   [obs_shape=4] [obs_dtype=float32] [actor.envs_per_batch=...] [broker.max_batch=...]
             null env + null policy through the real ZMQ broker: steps/s, messages/s, batch
             fill, request latency p50/p99
  inference  [models=mlp,nature,impala] [batch_sizes=1,16,64,256] [algorithm=r2d2] [hardware=gpu]
             the learner's batched forward pass per model and batch size
  learner    [model=zero|real] [seconds=10] [requests=8] [obs_shape=4,84,84] [num_actions=6]
             the learner's own CPU per env step on Pong-shaped data, no actors, the model's
             torso left out (model=zero): act, record, train, in one thread
  train      [env=...] [algorithm=...] [seconds=20]
             the real training loop: env steps/s, updates/s, batch fill, learner wait share
  contention [copies=2] [seconds=20] [neighbours=0] [rounds=1] [command='...' metric=|pattern=]
             one copy of `train` (or of any command) alone, then N at once: each copy's and
             the aggregate throughput vs alone, context switches per 1k env steps
  anakin     [num_envs=256,1024,4096,16384] [seconds=5] | mode=time-to-target seeds=0,1,2
             [target=475] [max_minutes=2]   arch=anakin: env steps/s while learning per
             num_envs, or the wall time to a 100-episode mean return per seed
  broker     [streams=1,16,256,1024] [envs=1,64] [obs=4:float32,84x84x4:uint8] [seconds=5]
             [report_s=30] [shards=1] [policy=null|model] | stages=true [parallel=2]
             thousands of actor streams (generator processes, real wire format) against the
             broker (or broker.shards processes): replies/s, round trips, broker CPU per
             message, RSS, open files, evictions; or the broker's cost stage by stage

Every subcommand takes seedq-train's config overrides, prints a table and, last, one JSON line.
"""


def usage_of(name: str, doc: str) -> str:
    """``name``'s lines of :data:`USAGE` (its options), then ``doc`` (its module's docstring)."""
    block, inside = [], False
    for line in USAGE.splitlines():
        if not line.startswith("   "):  # a subcommand's first line, or the text around them
            inside = line.startswith(f"  {name} ")
        if inside:
            block.append(line)
    return f"usage: seedq-bench {name} [key=value ...]\n\n" + "\n".join(block) + f"\n\n{doc}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    from seedq.bench import anakin, broker, contention, inference, learner, pipeline, raw_env, train

    commands = {
        "raw-env": raw_env.run,
        "pipeline": pipeline.run,
        "inference": inference.run,
        "learner": learner.run,
        "train": train.run,
        "anakin": anakin.run,
        "contention": contention.run,
        "broker": broker.run,
    }
    command = commands.get(argv[0])
    if command is None:
        print(
            f"seedq-bench: unknown subcommand {argv[0]!r}; choose one of {list(commands)}",
            file=sys.stderr,
        )
        return 2
    if any(arg in ("-h", "--help") for arg in argv[1:]):
        # Was refused as "'--help': arguments are key=value", exit 2.
        print(usage_of(argv[0], sys.modules[command.__module__].__doc__ or ""))
        return 0
    stop_on_sigterm()
    try:
        command(argv[1:])
    except (BenchError, ConfigError, EnvError) as exc:
        print(f"seedq-bench {argv[0]}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM: the subcommand's finally blocks ended its processes.
        return stopped_status(f"seedq-bench {argv[0]}", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
