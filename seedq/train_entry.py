"""``seedq-train``'s entry point: the stop signals are taken before :mod:`seedq.cli`'s imports
(Hydra, OmegaConf, the config schema: a second or more on a busy machine), so a SIGTERM or
SIGUSR1 at any moment of the start ends the command in one line with exit status 75, and Ctrl-C
with 130, never with a kill's silent 143 or an import's traceback."""

from __future__ import annotations

from seedq.exit_status import exit_while_starting, stop_while_starting


def main() -> None:
    stop_while_starting()
    try:
        from seedq.cli import train_main
    except KeyboardInterrupt as exc:
        exit_while_starting("seedq-train", exc)
    train_main()


if __name__ == "__main__":
    main()
