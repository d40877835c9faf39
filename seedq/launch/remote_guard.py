"""Runs a command on an actor host and ends it when the ssh connection that started it ends.

``ssh HOST cmd`` without a terminal does not stop ``cmd`` when the local ``ssh`` client is
killed, nor when the learner dies: sshd only closes the channel. So the ssh launcher starts
every remote actor as ``python -m seedq.launch.remote_guard -- ACTOR ARGV`` and keeps the
client's stdin open; when stdin reaches end-of-file (the client exited, the learner died, the
network dropped) or the guard gets SIGTERM/SIGHUP/SIGINT, the actor's process group gets
SIGTERM, then SIGKILL after a grace period. When the actor exits by itself, the guard exits
with its code, which ``ssh`` passes back to the launcher.

Runs on actor hosts: standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

GRACE_S = 5.0


def _stop_group(child: subprocess.Popen, grace_s: float = GRACE_S) -> int:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            break
        try:
            return child.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    return child.wait()


def main(argv: list[str]) -> int:
    grace_s = GRACE_S
    if argv[:1] == ["--grace"] and len(argv) > 1:
        # Learner ranks get longer than actors: rank 0 writes a last checkpoint.
        grace_s, argv = float(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(
            "usage: python -m seedq.launch.remote_guard [--grace SECONDS] -- COMMAND [ARGS...]",
            file=sys.stderr,
        )
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # Its own session: stopping the group also stops anything the actor started.
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)

    def watch_stdin() -> None:
        while os.read(0, 65536):
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while not stop.wait(0.2):
        code = child.poll()
        if code is not None:
            return code
    code = _stop_group(child, grace_s)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
