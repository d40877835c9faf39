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


def _ffmpeg_writer(path: Path, first: np.ndarray, fps: int) -> Any:
    """imageio-ffmpeg's frame writer into the MP4 ``path``, sized as ``first`` ``[H, W, 3]``."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise EnvError(
            "video=true needs imageio and imageio-ffmpeg: pip install 'seedq[video]'"
        ) from None
    height, width = first.shape[:2]
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (width, height),
        fps=fps,
        codec="libx264",
        macro_block_size=1,
        output_params=["-f", "mp4"],  # the format, which the .part name does not say
    )
    writer.send(None)  # starts ffmpeg
    return writer


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

    ``start(episode)`` opens the episode's file, ``add(frame)`` writes one RGB frame
    ``[H, W, 3]`` uint8 to it, ``finish()`` closes it and returns its path. ``discard()`` (an
    episode the env's error ended, a write that failed) removes the partial file: a partial
    video is no video. Until ``finish()`` the file is named ``....mp4.part``, so an evaluation
    killed mid-episode leaves no unreadable ``.mp4``.
    """

    def __init__(self, folder: Path, stem: str, fps: int = 30) -> None:
        self.folder = folder
        self.stem = stem
        self.fps = fps
        self._writer: Any = None
        self._path: Path | None = None

    def start(self, episode: int) -> None:
        """Name ``episode``'s file (an unfinished one before it is discarded); it is opened
        at its first frame, whose size it takes."""
        self.discard()
        self._path = self.folder / f"{self.stem}-episode{episode:03d}.mp4"

    def add(self, frame: np.ndarray) -> None:
        frame = np.ascontiguousarray(frame, dtype=np.uint8)
        try:
            if self._writer is None:
                self._writer = _ffmpeg_writer(self._partial(), frame, self.fps)
            self._writer.send(frame)
        except OSError as exc:
            raise self._failed(exc) from None

    def finish(self) -> Path:
        """Close the episode's file; its path."""
        path = self._path
        assert path is not None and self._writer is not None, "finish() before a frame"
        try:
            self._writer.close()
            self._partial().replace(path)
        except OSError as exc:
            raise self._failed(exc) from None
        self._writer, self._path = None, None
        return path

    def discard(self) -> None:
        """Close and remove an unfinished episode's file, if one is open."""
        writer, path = self._writer, self._path
        self._writer, self._path = None, None
        if writer is not None:
            with contextlib.suppress(Exception):  # the file goes anyway
                writer.close()
        if path is not None:
            path.with_name(f"{path.name}.part").unlink(missing_ok=True)

    def _partial(self) -> Path:
        """Where the open episode's frames go until it is finished."""
        assert self._path is not None
        return self._path.with_name(f"{self._path.name}.part")

    def _failed(self, exc: OSError) -> ConfigError:
        """The refusal of a write that failed (a full disk), its partial file removed."""
        path = self._path
        self.discard()
        return ConfigError(
            f"video=true: could not write {path} ({exc.strerror or exc}); free disk space or "
            "evaluate without video"
        )
