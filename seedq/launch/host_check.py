"""The start-up check the ssh launcher runs on every actor host before anything starts.

``python -m seedq.launch.host_check --protocol N --env-config JSON`` proves, on that host, that
the interpreter runs, seedq imports, its wire protocol is the learner's, and the env can be
built. It prints one line of JSON on success; on failure it explains on stderr and exits 1.
Imports nothing heavy (no torch), like an actor.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="can this host run seedq actors?")
    parser.add_argument("--protocol", type=int, required=True, help="the learner's protocol")
    parser.add_argument("--env-config", required=True, help="the env section as JSON")
    args = parser.parse_args(argv)

    import seedq
    from seedq.envs import EnvError, env_config, make_env_batch
    from seedq.messages import PROTOCOL_VERSION
    from seedq.schema import ConfigError

    if PROTOCOL_VERSION != args.protocol:
        print(
            f"seedq at {seedq.__file__} speaks protocol {PROTOCOL_VERSION}, the learner "
            f"{args.protocol}: install the learner's seedq version on this host",
            file=sys.stderr,
        )
        return 1
    try:
        env = make_env_batch(env_config(json.loads(args.env_config)), 1, seed=0)
    except (EnvError, ConfigError) as exc:
        # Said as it would be at the learner (a package or ROM missing here, an env module
        # this host cannot import): one line, no traceback.
        print(f"cannot build the env on this host: {exc}", file=sys.stderr)
        return 1
    env.close()
    print(
        json.dumps(
            {
                "host": platform.node(),
                "python": sys.executable,
                "seedq": seedq.__file__,
                "protocol": PROTOCOL_VERSION,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
