"""The checkpoint error, apart from the checkpoint code (and torch), so the command line can
refuse a run without importing either."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint cannot be used; the message names the file and what is wrong."""
