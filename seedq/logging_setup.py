"""One logging format for the learner, broker and actor processes."""

from __future__ import annotations

import logging
import os
import sys

FORMAT = "%(asctime)s %(levelname)s [%(role)s %(process)d] %(name)s: %(message)s"


class _RoleFilter(logging.Filter):
    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def filter(self, record: logging.LogRecord) -> bool:
        record.role = self.role
        return True


def setup_logging(log_file: str | None = None, *, role: str, level: int = logging.INFO) -> None:
    """Log to stderr (and ``log_file`` if given) with the shared format, tagged with ``role``."""
    root = logging.getLogger()
    root.setLevel(level)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        handlers.append(logging.FileHandler(log_file))
    for handler in handlers:
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.addFilter(_RoleFilter(role))
        root.addHandler(handler)
    quiet_file_errors(root)


def quiet_file_errors(root: logging.Logger | None = None) -> None:
    """A log file that cannot be written (a full disk) costs one line on stderr, not a
    traceback per record: the file handlers of ``root`` say so once and drop what they cannot
    write; the console keeps every line."""
    for handler in (root or logging.getLogger()).handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handleError = _once_per_handler(handler)  # type: ignore[method-assign]


def _once_per_handler(handler: logging.FileHandler):
    told = []

    def handle_error(record: logging.LogRecord) -> None:
        if not told:
            told.append(True)
            error = sys.exc_info()[1]
            sys.stderr.write(
                f"seedq: cannot write the log file {handler.baseFilename} ({error}); its "
                "lines go to the terminal only from here\n"
            )

    return handle_error
