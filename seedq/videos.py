"""``seedq-eval video=true``: one MP4 per episode, written frame by frame as it is played.

Frames go to ffmpeg as they come, so an episode costs disk, not memory, however long it runs:
an evaluation that held each episode's frames until the episode ended grew without limit on a
policy that never ends one (a CliffWalking-v1 walk into the wall filled 23 GB and was killed by
the OOM killer), and a 27,000-step Atari episode held 9 GB of 336x336 frames.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from seedq.envs import EnvError
from seedq.schema import ConfigError


def check_video_folder(folder: Path) -> None:
    """Refuse ``video=true`` before any episode is played when ``folder`` cannot take files."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(
            f"video=true: cannot write videos into {folder} ({exc.strerror or exc}); make it a "
            "writable folder, or evaluate without video"
        ) from None


class EpisodeVideos:
    """The videos of one evaluation: ``<folder>/<stem>-episode<NNN>.mp4``, one per episode.

    ``start(episode)`` opens the episode's file, ``add(frame)`` writes one frame to it (RGB
    ``[H, W, 3]``, or what imageio's writer takes), ``finish()`` closes it and returns its
    path. ``discard()`` (an episode the env's error ended, a write that failed) removes the
    unfinished file: a partial video is no video. Until ``finish()`` the file is written in
    ``<folder>/.partial/``, so an evaluation killed mid-episode leaves no unreadable ``.mp4``
    among the videos.
    """

    def __init__(self, folder: Path, stem: str, fps: int = 30) -> None:
        self.folder = folder
        self.stem = stem
        self.fps = fps
        self._writer: Any = None
        self._path: Path | None = None

    def start(self, episode: int) -> None:
        """Open ``episode``'s file (an unfinished one before it is discarded)."""
        self.discard()
        try:
            import imageio.v2 as imageio
        except ImportError:
            raise EnvError(
                "video=true needs imageio and imageio-ffmpeg: pip install 'seedq[video]'"
            ) from None
        self._path = self.folder / f"{self.stem}-episode{episode:03d}.mp4"
        try:
            self._partial().parent.mkdir(exist_ok=True)
            self._writer = imageio.get_writer(
                self._partial(),
                format="FFMPEG",
                mode="I",
                fps=self.fps,
                codec="libx264",
                macro_block_size=1,
            )
        except OSError as exc:
            raise self._failed(exc) from None

    def add(self, frame: np.ndarray) -> None:
        try:
            self._writer.append_data(frame)
        except OSError as exc:
            raise self._failed(exc) from None

    def finish(self) -> Path:
        """Close the episode's file; its path."""
        path = self._path
        assert path is not None, "finish() before start()"
        try:
            self._writer.close()
            self._partial().replace(path)
        except OSError as exc:
            raise self._failed(exc) from None
        self._writer, self._path = None, None
        _remove_if_empty(path.parent / ".partial")
        return path

    def discard(self) -> None:
        """Close and remove an unfinished episode's file, if one is open."""
        writer, partial = self._writer, self._path and self._partial()
        self._writer, self._path = None, None
        if writer is not None:
            with contextlib.suppress(Exception):  # the file goes anyway
                writer.close()
        if partial:
            partial.unlink(missing_ok=True)
            _remove_if_empty(partial.parent)

    def _partial(self) -> Path:
        """Where the open episode's frames go until it is finished."""
        assert self._path is not None
        return self._path.parent / ".partial" / self._path.name

    def _failed(self, exc: OSError) -> ConfigError:
        """The refusal of a write that failed (a full disk), its unfinished file removed."""
        path = self._path
        self.discard()
        return ConfigError(
            f"video=true: could not write {path} ({exc.strerror or exc}); free disk space or "
            "evaluate without video"
        )


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty: another evaluation's file is being written
        folder.rmdir()
