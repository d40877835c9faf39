"""``seedq-eval video=true`` writes each episode's frames to its MP4 as the episode is played
(``seedq.videos.EpisodeVideos``), so a long or endless episode costs disk, not memory."""

from __future__ import annotations

import signal
import subprocess
import sys
import tracemalloc

import gymnasium as gym
import imageio.v3 as iio
import numpy as np
from gymnasium import spaces
from test_evaluate_actions import untrained_run

from seedq import eval_episodes, evaluate
from seedq.envs.gym import GymConfig
from seedq.videos import EpisodeVideos

ENV = "SeedqBigFrames-v0"
STEPS, SIDE = 400, 128
FRAME_BYTES = SIDE * SIDE * 3


class BigFrames(gym.Env):
    """An episode of STEPS steps, each rendered as a SIDE x SIDE RGB frame of its step."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.t = 0

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN202
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN202
        self.t += 1
        return np.zeros(1, np.float32), 1.0, False, False, {}

    def render(self) -> np.ndarray:
        return np.full((SIDE, SIDE, 3), self.t % 256, np.uint8)


gym.register(ENV, entry_point=BigFrames, max_episode_steps=STEPS)


class First:
    """A policy that always takes action 0."""

    def reset(self) -> None:
        pass

    def act(self, obs: np.ndarray) -> int:
        return 0


def test_an_episode_video_is_written_while_it_plays_not_held_in_memory(tmp_path) -> None:
    # Every frame of an episode was held until it ended: an endless CliffWalking-v1 episode
    # grew seedq-eval to 23 GB before the OOM killer ended it.
    videos = EpisodeVideos(tmp_path, "ckpt")
    tracemalloc.start()
    try:
        [(total, path)] = list(eval_episodes.gym_episodes(First(), GymConfig(id=ENV), 1, 0, videos))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    frames = iio.imread(path)
    assert (total, frames.shape, peak < STEPS * FRAME_BYTES / 4) == (
        STEPS,
        (STEPS + 1, SIDE, SIDE, 3),
        True,
    )


def test_an_episode_the_env_ended_with_an_error_leaves_no_partial_video(tmp_path) -> None:
    videos = EpisodeVideos(tmp_path, "ckpt")
    videos.start(0)
    videos.add(np.zeros((16, 16, 3), np.uint8))
    videos.discard()
    assert list(tmp_path.iterdir()) == []


STOPPABLE = """
import sys
from pathlib import Path
from seedq import eval_episodes
from seedq.envs.gym import GymConfig
from seedq.videos import EpisodeVideos

class Ready:
    def reset(self):
        pass

    def act(self, obs):
        print("ready", flush=True)  # pygame is rendering
        return 0

videos = EpisodeVideos(Path(sys.argv[1]), "ckpt")
for _ in eval_episodes.gym_episodes(Ready(), GymConfig(id="CartPole-v1"), 10**6, 0, videos):
    pass
"""


def test_an_evaluation_rendering_with_pygame_stops_on_sigterm(tmp_path) -> None:
    # SDL took SIGTERM for a quit event that no one reads: `kill`, `timeout` and a scheduler's
    # SIGTERM left seedq-eval video=true running (CartPole, CliffWalking, LunarLander).
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPABLE, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert returncode == -signal.SIGTERM


def test_an_atari_video_in_rgb_shows_the_frames_in_colour(tmp_path) -> None:
    # env.grayscale=false: the video showed the newest frame's blue channel alone, as grey.
    run = untrained_run(tmp_path, "env=atari", "env.grayscale=false", "env.max_episode_steps=3")
    _, [video] = evaluate.evaluate(run, episodes=1, video=True)
    red, _, blue = iio.imread(video)[0].reshape(-1, 3).mean(axis=0)
    assert red - blue > 50  # Pong's brown field: (144, 72, 17)


def test_frames_rendered_as_floats_are_written_scaled_to_bytes(tmp_path) -> None:
    # MinAtar's gymnasium env renders float RGB in [0, 1]; cast to bytes it was black.
    videos = EpisodeVideos(tmp_path, "ckpt")
    videos.start(0)
    videos.add(np.full((16, 16, 3), 0.8))
    videos.add(np.full((16, 16, 3), 0.8))
    frames = iio.imread(videos.finish())
    assert (frames.shape, abs(frames.mean() - 204) < 8) == ((2, 16, 16, 3), True)
