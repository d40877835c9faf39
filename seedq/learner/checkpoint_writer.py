"""The checkpoint writer: serialises, syncs and renames checkpoints on a thread of its own, so
that the run pauses only to copy its tensors (:func:`seedq.learner.checkpoint.copy_tensors`),
never for the disk.

One checkpoint is written at a time. A snapshot handed over while another is being written
waits; a newer one handed over before it started replaces it (the newer holds everything the
older did). A failed write (disk full, read-only folder) is logged and counted, the previous
checkpoint stays intact, and the run goes on; any other error is a bug, kept and raised in the
run's own thread at the next :meth:`CheckpointWriter.submit` or :meth:`CheckpointWriter.flush`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from seedq.learner.checkpoint import CheckpointWriteError, save_checkpoint

log = logging.getLogger(__name__)


class CheckpointWriter:
    """Writes the snapshots given to :meth:`submit` into ``<run_dir>/checkpoints``."""

    def __init__(
        self,
        run_dir: str,
        keep: int,
        write: Callable[..., str] = save_checkpoint,
    ) -> None:
        self.run_dir, self.keep, self._write = run_dir, keep, write
        self.failures = 0  # writes that failed with an OSError (the previous checkpoint kept)
        self.written = 0
        self.last_ok: bool | None = None  # whether the newest write went through (None: none)
        self.last_error: CheckpointWriteError | None = None  # why the newest write failed
        self.replaced = 0  # snapshots superseded by a newer one before their turn came
        self.write_s = 0.0  # the last write's seconds: serialise, fsync, rename
        self._cond = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._busy = False
        self._error: BaseException | None = None
        self._spare: dict[str, Any] | None = None  # a written snapshot, to be filled again
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="checkpoint-writer", daemon=True)
        self._thread.start()

    def submit(self, state: dict[str, Any]) -> None:
        """Queue ``state`` (already a copy: nothing in it may change) for writing."""
        with self._cond:
            self._raise_error()
            if self._pending is not None:
                self.replaced += 1
                self._spare = self._pending
            self._pending = state
            self._cond.notify_all()

    def take_spare(self) -> dict[str, Any] | None:
        """A snapshot already written (or superseded), whose tensors the next snapshot may
        fill in place (:func:`~seedq.learner.checkpoint.copy_tensors`'s ``into``); None if
        there is none. Each is handed out once."""
        with self._cond:
            spare, self._spare = self._spare, None
            return spare

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted snapshot is written (or failed); False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._pending is not None or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            self._raise_error()
            return True

    def close(self, timeout_s: float | None = None) -> bool:
        """Write what is queued, then end the thread; False if the write outlasted ``timeout_s``
        (the thread is a daemon: a stuck disk never keeps the process alive)."""
        done = self.flush(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if done:
            self._thread.join(timeout=1.0)
        return done

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                state, self._pending = self._pending, None
                self._busy = True
            try:
                self._write_one(state)
            finally:
                with self._cond:
                    self._busy = False
                    self._spare = state
                    self._cond.notify_all()

    def _write_one(self, state: dict[str, Any]) -> None:
        start = time.monotonic()
        try:
            self._write(self.run_dir, state, keep=self.keep)
        except CheckpointWriteError as exc:
            self.failures += 1
            self.last_ok, self.last_error = False, exc
            log.error("checkpoint failed (%d so far): %s", self.failures, exc)
        except BaseException as exc:  # noqa: BLE001 - a bug: raised in the run's thread
            log.exception("the checkpoint writer failed")
            with self._cond:
                self._error = exc
        else:
            self.written += 1
            self.last_ok, self.last_error = True, None
        self.write_s = time.monotonic() - start
