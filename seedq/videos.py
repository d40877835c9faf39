"""``seedq-eval video=true``: one MP4 per episode, written frame by frame as it is played.

Frames go to ffmpeg as they come, so an episode costs disk, not memory, however long it runs:
an evaluation that held each episode's frames until the episode ended grew without limit on a
policy that never ends one (a CliffWalking-v1 walk into the wall filled 23 GB and was killed by
the OOM killer), and a 27,000-step Atari episode held 9 GB of 336x336 frames.

The frames are the rendered screen of a gymnasium env (:func:`make_rendering`, :func:`render`)
or, for seedq's own env batches, the agent's view of its observations (:func:`agent_view`).
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from seedq.envs import EnvConfig, EnvError, minatar, procgen
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


def make_rendering(env_id: str, kwargs: dict[str, Any]) -> Any:
    """``gymnasium.make(env_id, **kwargs)`` (``render_mode="rgb_array"`` among them) for
    ``video=true``, or an EnvError before any episode when the env renders no frames: one that
    takes no ``render_mode`` (a user's env) or names no ``rgb_array`` among its
    ``metadata["render_modes"]`` ended the evaluation in a traceback."""
    import gymnasium as gym

    refusal = f"video=true: {env_id} renders no frames"
    try:
        with warnings.catch_warnings():
            # gymnasium's warning that the mode is not the env's: the refusal below says it.
            warnings.filterwarnings("ignore", message=".*render_mode.*")
            env = gym.make(env_id, **kwargs)
    except Exception as exc:
        plain = {k: v for k, v in kwargs.items() if k != "render_mode"}
        try:
            gym.make(env_id, **plain).close()
        except Exception:
            raise exc from None  # not the render mode: the env's own error
        raise EnvError(
            f"{refusal} (made with render_mode='rgb_array' it raised {type(exc).__name__}: "
            f"{exc}); evaluate without video"
        ) from None
    modes = list(env.metadata.get("render_modes") or [])
    if "rgb_array" not in modes:
        env.close()
        raise EnvError(
            f"{refusal} (its render_modes: {modes}, without 'rgb_array'); evaluate without video"
        )
    return env


def render(env: Any) -> np.ndarray:
    """The frame ``env`` renders, or an EnvError naming the extra that renders it."""
    import gymnasium as gym

    try:
        return env.render()
    except gym.error.DependencyNotInstalled as exc:
        raise EnvError(f"video=true: {exc}; pip install 'seedq[video]'") from None


def _agent_view(obs: np.ndarray) -> np.ndarray:
    """The newest grey frame of a stack ``[K, H, W]``, 4x larger, as RGB."""
    frame = obs[-1] if obs.ndim == 3 else obs
    frame = np.kron(frame, np.ones((4, 4), dtype=frame.dtype))
    return np.repeat(frame[..., None], 3, axis=-1)


def _rgb_agent_view(obs: np.ndarray) -> np.ndarray:
    """The newest RGB frame of a stack ``[3 * K, H, W]`` (each frame's channels together, as
    ``env.grayscale=false`` lays them out), 4x larger."""
    frame = obs[-3:].transpose(1, 2, 0)
    return np.kron(frame, np.ones((4, 4, 1), dtype=frame.dtype))


# Kinds whose observations are not Atari-style stacks of grey frames.
_AGENT_VIEWS = {"minatar": minatar.rgb_frame, "procgen": procgen.rgb_frame}


def agent_view(env_cfg: EnvConfig) -> Callable[[np.ndarray], np.ndarray]:
    """How a video shows one observation of ``env_cfg``'s env batch: Atari's newest frame, in
    colour with ``env.grayscale=false`` (its blue channel alone was shown, as grey)."""
    if env_cfg.kind in _AGENT_VIEWS:
        return _AGENT_VIEWS[env_cfg.kind]
    return _agent_view if getattr(env_cfg, "grayscale", True) else _rgb_agent_view
