"""env=gym beyond Box and Discrete: composite observation spaces flattened as gymnasium
flattens them, gymnasium.make's keyword arguments (``env.kwargs``), and Atari's RAM ids."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from test_env_config import compose_config

from seedq.cli import to_config
from seedq.command_keys import misspelt_key
from seedq.config import ConfigError, validate
from seedq.envs import GymConfig, make_env_batch
from seedq.envs.atari import atari_game
from seedq.envs.base import EnvError
from seedq.envs.gym import GymVectorBatch, check_make_kwargs
from seedq.envs.gym_ids import ram_id_hint
from seedq.envs.gym_spaces import batch_singles, obs_transform

# ------------------------------------------------------------ composite observation spaces

COMPOSITE = {
    "tuple of discretes": spaces.Tuple([spaces.Discrete(32), spaces.Discrete(11, start=1)]),
    "multi-discrete": spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [2, -3]]),
    "multi-binary": spaces.MultiBinary([2, 3]),
    "nested dict": spaces.Dict(
        {
            "pos": spaces.Box(-1.0, 1.0, (2, 2), np.float64),
            "cell": spaces.Discrete(5, start=2),
            "flags": spaces.Tuple([spaces.MultiBinary(3), spaces.MultiDiscrete([2, 4])]),
        }
    ),
}


@pytest.mark.parametrize("name", list(COMPOSITE))
def test_composite_observations_flatten_as_gymnasium_flattens_them(name: str) -> None:
    space = COMPOSITE[name]
    space.seed(3)
    singles = [space.sample() for _ in range(7)]
    fn, shape, dtype = obs_transform("x", space)
    got = fn(batch_singles(space, singles))
    reference = np.stack([spaces.flatten(space, obs) for obs in singles]).astype(np.float64)
    assert got.shape == (7, *shape) == reference.shape
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), reference, rtol=1e-6)


@pytest.mark.parametrize(("name", "indicator"), [(n, n != "nested dict") for n in COMPOSITE])
def test_flattened_indicators_stay_bool_and_box_parts_make_floats(name, indicator) -> None:
    # All 0/1 parts: bool, which the models read unnormalised, as Discrete's one-hots; a Box
    # part beside them makes the whole vector float32, normalised with the rest.
    _, _, dtype = obs_transform("x", COMPOSITE[name])
    assert dtype == (np.bool_ if indicator else np.float32)


def test_an_observation_space_seedq_cannot_flatten_is_named() -> None:
    space = spaces.Dict({"ok": spaces.Discrete(2), "note": spaces.Text(8)})
    with pytest.raises(EnvError, match=r"Text\(.*Tuple or Dict of those"):
        obs_transform("Talk-v0", space)


class _StepTuple(gym.Env):
    """Observations ``(step, Box[index, step])``: the step as a Discrete, then as floats."""

    def __init__(self, index: int = 0) -> None:
        self.observation_space = spaces.Tuple(
            [spaces.Discrete(8), spaces.Box(0.0, 100.0, (2,), np.float32)]
        )
        self.action_space = spaces.Discrete(2)
        self.index, self.t = index, 0

    def _obs(self) -> tuple:
        return self.t, np.array([self.index, self.t], np.float32)

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN202
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):  # noqa: ANN001, ANN202
        self.t += 1
        return self._obs(), 1.0, False, False, {}


def _make_step_tuple(env_id: str, max_episode_steps: int | None, **kwargs) -> gym.Env:  # noqa: ANN003
    env = _StepTuple(**kwargs)
    return gym.wrappers.TimeLimit(env, max_episode_steps) if max_episode_steps else env


def test_a_truncated_tuple_envs_final_observation_is_flattened_too() -> None:
    env = GymVectorBatch(
        "CartPole-v1",  # only checked to exist: _make_step_tuple builds the envs
        3,
        seed=0,
        max_episode_steps=3,
        make_one=_make_step_tuple,
        make_kwargs={"index": 7},
    )
    try:
        assert (env.obs_shape, env.obs_dtype) == ((10,), np.dtype(np.float32))
        obs = env.reset()
        np.testing.assert_array_equal(obs[:, :8].argmax(1), 0)
        for _ in range(3):
            step = env.step(np.zeros(3, np.int64))
        # Step 3 truncated every env: its final observation is step 3's, flattened; the env
        # restarted at step 0.
        assert step.truncated.all()
        np.testing.assert_array_equal(step.final_obs[:, :8].argmax(1), 3)
        np.testing.assert_array_equal(step.final_obs[:, 8:], [[7, 3]] * 3)
        np.testing.assert_array_equal(step.obs[:, 8:], [[7, 0]] * 3)
    finally:
        env.close()


def test_blackjack_trains_its_tuple_observations_as_indicators() -> None:
    env = make_env_batch(GymConfig(id="Blackjack-v1"), 4, seed=0)
    try:
        obs = env.reset()
        # (player's sum in 32, dealer's card in 11, usable ace in 2): one 1 in each part.
        assert env.obs_shape == (45,) and obs.dtype == np.bool_
        np.testing.assert_array_equal(obs.sum(1), 3)
        np.testing.assert_array_equal(obs[:, :32].sum(1), 1)
    finally:
        env.close()


# ------------------------------------------------------------------------------ env.kwargs


def test_env_kwargs_reach_gymnasium_make() -> None:
    for slippery in (True, False):
        cfg = GymConfig(id="FrozenLake-v1", kwargs={"is_slippery": slippery})
        env = make_env_batch(cfg, 2, seed=0)
        try:
            # FrozenLake's transition table: three outcomes for an action on ice, one without.
            outcomes = len(env._env.envs[0].unwrapped.P[0][2])
            assert outcomes == (3 if slippery else 1)
        finally:
            env.close()


def test_env_kwargs_reach_async_workers() -> None:
    cfg = GymConfig(id="FrozenLake-v1", vectorization="async", kwargs={"is_slippery": False})
    env = make_env_batch(cfg, 2, seed=0)
    try:
        env.reset()
        for _ in range(3):  # right, right, right: deterministic without ice
            step = env.step(np.full(2, 2, np.int64))
        np.testing.assert_array_equal(step.obs.argmax(1), 3)
    finally:
        env.close()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"foo": 1}, r"env\.kwargs=\{'foo': 1\}: TypeError: .*foo"),
        ({"map_name": "9x9"}, r"env\.kwargs=\{'map_name': '9x9'\}: KeyError: '9x9'"),
    ],
)
def test_an_argument_the_env_refuses_is_an_env_error_naming_env_kwargs(kwargs, error) -> None:
    with pytest.raises(EnvError, match=error):
        make_env_batch(GymConfig(id="FrozenLake-v1", kwargs=kwargs), 1, seed=0)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_episode_steps": 9}, "set env.max_episode_steps instead"),
        ({"not a name": 1}, "no keyword name"),
        (["is_slippery"], "not a mapping"),
    ],
)
def test_env_kwargs_that_are_not_the_envs_to_take_are_refused(kwargs, error) -> None:
    with pytest.raises(ConfigError, match=error):
        check_make_kwargs(kwargs)


@pytest.mark.parametrize(
    "override", ["+env.kwargs.is_slippery=false", "+env.kwargs={is_slippery: false}"]
)
def test_env_kwargs_compose_from_the_command_line(override: str) -> None:
    argv = ["env=gym", "env.id=FrozenLake-v1", override]
    assert misspelt_key(argv) is None
    config = to_config(compose_config(*argv))
    validate(config)
    assert config.env.kwargs == {"is_slippery": False}


def test_mujoco_runs_take_env_kwargs_too() -> None:
    config = to_config(compose_config("env=mujoco", "+env.kwargs.ctrl_cost_weight=0.2"))
    assert config.env.kwargs == {"ctrl_cost_weight": 0.2}


def test_seedq_eval_builds_the_env_with_its_runs_kwargs(monkeypatch) -> None:
    from seedq import eval_episodes

    made = []
    real_make = gym.make

    def make(env_id, **kwargs):  # noqa: ANN001, ANN003, ANN202
        made.append(kwargs)
        return real_make(env_id, **kwargs)

    class Right:
        def reset(self) -> None:
            pass

        def act(self, obs: np.ndarray) -> int:
            assert obs.shape == (16,)
            return 2

    monkeypatch.setattr(gym, "make", make)
    cfg = GymConfig(id="FrozenLake-v1", max_episode_steps=5, kwargs={"is_slippery": False})
    returns = [total for total, _ in eval_episodes.gym_episodes(Right(), cfg, 1, 0, False)]
    assert made[-1] == {"is_slippery": False, "max_episode_steps": 5}
    assert returns == [0.0]  # the top row's end, (0, 3), is ice: the episode times out


# ------------------------------------------------------------------------- Atari RAM ids


@pytest.mark.parametrize(
    "env_id", ["ALE/Breakout-ram-v5", "Breakout-ramNoFrameskip-v4", "Breakout-ram-v4"]
)
def test_atari_ram_ids_point_to_the_ram_obs_type(env_id: str) -> None:
    hint = "env=gym env.id=ALE/Breakout-v5 +env.kwargs.obs_type=ram"
    assert hint in ram_id_hint(env_id)
    with pytest.raises(EnvError, match=hint.replace("+", r"\+")):
        atari_game(env_id)
    with pytest.raises(EnvError, match=hint.replace("+", r"\+")):
        make_env_batch(GymConfig(id=env_id), 1, seed=0)


def test_ids_that_are_not_ram_ids_get_no_ram_hint() -> None:
    assert ram_id_hint("ALE/Pong-v5") == ram_id_hint("Random-v0") == ""


def test_an_atari_games_ram_steps_through_env_gym() -> None:
    env = make_env_batch(GymConfig(id="ALE/Breakout-v5", kwargs={"obs_type": "ram"}), 1, seed=0)
    try:
        obs = env.reset()
        assert (obs.shape, obs.dtype) == ((1, 128), np.uint8)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["Pong-v4", "Breakout-v0", "ALE/Pong-v5"])
def test_every_atari_id_ale_py_registers_is_known_to_env_gym_in_a_fresh_process(env_id) -> None:
    # Only ALE/ and NoFrameskip ids had ale_py registered first: env=gym env.id=Pong-v4 was an
    # "unknown gymnasium env id" (unless another id had registered them in that process).
    code = f"from seedq.envs.gym_ids import gym_spec; print(gym_spec({env_id!r}).entry_point)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert (result.returncode, result.stdout.strip()) == (0, "ale_py.env:AtariEnv")


@pytest.mark.parametrize(
    ("env_id", "kwargs", "frames"),
    [
        ("ALE/Pong-v5", {}, 4),
        ("Pong-v4", {}, 3),  # 2, 3 or 4 frames, drawn each step
        ("PongNoFrameskip-v4", {}, 1),
        ("ALE/Pong-v5", {"frameskip": 2}, 2),
        ("CartPole-v1", {}, 1),
    ],
)
def test_an_atari_id_through_env_gym_counts_the_frames_it_skips(env_id, kwargs, frames) -> None:
    # seedq-bench raw-env env=gym env.id=ALE/Pong-v5 reported frames/s equal to steps/s.
    assert GymConfig(id=env_id, kwargs=kwargs).frames_per_step() == frames


# ------------------------------------------------------------ MultiDiscrete, MultiBinary actions


class _EchoAction(gym.Env):
    """Observes the action it was last given (as floats) and pays 1 for ``target``."""

    def __init__(self, action_space: spaces.Space, target: object = None) -> None:
        self.action_space = action_space
        size = int(np.prod(action_space.shape)) or 1
        self.observation_space = spaces.Box(-100.0, 100.0, (size,), np.float32)
        self.target = target

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN202
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN202
        seen = np.asarray(action, np.float32).reshape(-1)
        reward = float(np.array_equal(np.asarray(action), np.asarray(self.target)))
        return seen, reward, False, False, {}


def _make_echo(env_id: str, max_episode_steps: int | None, **kwargs) -> gym.Env:  # noqa: ANN003
    return _EchoAction(**kwargs)


@pytest.mark.parametrize(
    "space",
    [
        spaces.MultiDiscrete([3, 4, 2], start=[0, -1, 5]),
        spaces.MultiDiscrete([[2, 3], [2, 2]]),
        spaces.MultiBinary(5),
        spaces.Discrete(4, start=-2),
    ],
    ids=["multi-discrete", "multi-discrete-2d", "multi-binary", "discrete-start"],
)
def test_every_joint_action_reaches_the_env_once(space: spaces.Space) -> None:
    n = int(np.prod(space.nvec)) if hasattr(space, "nvec") else getattr(space, "n", 0)
    n = 2**space.n if isinstance(space, spaces.MultiBinary) else n
    env = GymVectorBatch(
        "CartPole-v1", n, seed=0, make_one=_make_echo, make_kwargs={"action_space": space}
    )
    try:
        assert (env.action_kind, env.num_actions) == ("discrete", n)
        env.reset()
        step = env.step(np.arange(n))
        seen = {tuple(row) for row in step.obs.astype(np.int64)}
        assert len(seen) == n  # one env action per index, each in the space
        assert all(
            space.contains(np.asarray(row, space.dtype).reshape(space.shape)) for row in seen
        )
    finally:
        env.close()


def test_joint_actions_follow_c_order_over_the_entries() -> None:
    from seedq.envs.gym_spaces import joint_actions

    n, fn = joint_actions("x", spaces.MultiDiscrete([3, 4], start=[1, 0]))
    assert n == 12
    np.testing.assert_array_equal(fn(np.array([0, 1, 4, 11])), [[1, 0], [1, 1], [2, 0], [3, 3]])


def test_a_multi_discrete_space_too_large_to_enumerate_is_refused() -> None:
    with pytest.raises(EnvError, match=r"65,536 joint actions; .* at most 4,096"):
        GymVectorBatch(
            "CartPole-v1",
            1,
            seed=0,
            make_one=_make_echo,
            make_kwargs={"action_space": spaces.MultiBinary(16)},
        )


def test_a_box_of_no_action_values_is_refused() -> None:
    # PPO built a policy head of no outputs and seedq-train ended in a ValueError traceback.
    with pytest.raises(EnvError, match=r"Box\(.*\(0,\), float32\): no values to act with"):
        GymVectorBatch(
            "CartPole-v1",
            1,
            seed=0,
            make_one=_make_echo,
            make_kwargs={"action_space": spaces.Box(-1.0, 1.0, (0,), np.float32)},
        )


def test_seedq_eval_maps_the_policys_index_as_training_does(monkeypatch) -> None:
    from seedq import eval_episodes

    space = spaces.MultiDiscrete([3, 4], start=[1, 0])
    monkeypatch.setattr(
        gym, "make", lambda env_id, **kwargs: gym.wrappers.TimeLimit(_EchoAction(space, [2, 3]), 4)
    )
    monkeypatch.setattr(
        eval_episodes,
        "make_env_batch",
        lambda *a, **k: GymVectorBatch(
            "CartPole-v1", 1, seed=0, make_one=_make_echo, make_kwargs={"action_space": space}
        ),
    )

    class Index7:  # entries (1, 3) + start (1, 0) = (2, 3), the paying action
        def reset(self) -> None:
            pass

        def act(self, obs: np.ndarray) -> int:
            return 7

    cfg = GymConfig(id="CartPole-v1")
    assert [total for total, _ in eval_episodes.gym_episodes(Index7(), cfg, 1, 0, False)] == [4.0]


class _ContainsOnly(_EchoAction):
    """Refuses an action outside its space, as envs that assert ``action_space.contains`` do."""

    def step(self, action):  # noqa: ANN001, ANN202
        if not self.action_space.contains(action):
            raise ValueError(f"{action!r} is not in {self.action_space}")
        self.last_action = action
        return super().step(action)


def _make_contains_only(env_id: str, max_episode_steps: int | None, **kwargs) -> gym.Env:  # noqa: ANN003
    return _ContainsOnly(**kwargs)


@pytest.mark.parametrize(
    ("space", "sent", "taken"),
    [
        # float32's 0.3 and -0.1 lie outside a float64 Box of those bounds
        (spaces.Box(-0.1, 0.3, (2,), np.float64), [5.0, -5.0], [0.3, -0.1]),
        (spaces.Box(0, 10, (3,), np.int64), [9.6, 0.4, 6.5], [10, 0, 6]),
    ],
    ids=["float64-box", "integer-box"],
)
def test_box_actions_reach_the_env_inside_its_box(space, sent, taken) -> None:
    env = GymVectorBatch(
        "CartPole-v1", 1, seed=0, make_one=_make_contains_only, make_kwargs={"action_space": space}
    )
    try:
        env.reset()
        env.step(np.array([sent], np.float32))
        action = env._env.envs[0].last_action
        assert action.dtype == space.dtype and action.tolist() == taken
    finally:
        env.close()


class _EndsAt(_EchoAction):
    """Ends its episode at step ``length`` and not before: no time limit of its own."""

    def __init__(self, length: int) -> None:
        super().__init__(spaces.Discrete(2))
        self.length, self.t = length, 0

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN202
        self.t = 0
        return super().reset(seed=seed)

    def step(self, action):  # noqa: ANN001, ANN202
        self.t += 1
        obs, reward, _, _, info = super().step(action)
        return obs, reward, self.t >= self.length, False, info


def test_seedq_eval_says_when_an_episode_without_a_time_limit_runs_long(
    monkeypatch, caplog
) -> None:
    # A policy that never ends an episode of such an env ran silently for good; then it said
    # so every 10,000 steps (203 lines for one CliffWalking episode): now at 10 x, 100 x, ...
    from seedq import eval_episodes

    monkeypatch.setattr(gym, "make", lambda env_id, **kwargs: _EndsAt(520))
    monkeypatch.setattr(
        eval_episodes, "make_env_batch", lambda *a, **k: GymVectorBatch("CartPole-v1", 1, 0)
    )
    monkeypatch.setattr(eval_episodes, "LONG_EPISODE_STEPS", 5)

    class First:
        def reset(self) -> None:
            pass

        def act(self, obs: np.ndarray) -> int:
            return 0

    cfg = GymConfig(id="Endless-v0")
    with caplog.at_level("WARNING", logger="seedq.eval_episodes"):
        assert len(list(eval_episodes.gym_episodes(First(), cfg, 1, 0, False))) == 1
    said = [r.getMessage() for r in caplog.records if r.name == "seedq.eval_episodes"]
    assert said == [
        f"episode 1 of 1: {steps} steps and not ended; Endless-v0 has no time limit, "
        "env.max_episode_steps=N ends each episode after N steps"
        for steps in (5, 50, 500)
    ]


def _make_without_box2d(env_id: str, max_episode_steps: int | None, **kwargs) -> gym.Env:  # noqa: ANN003
    # gymnasium's own line when Box2D is missing (LunarLander-v3, CarRacing-v3, BipedalWalker-v3)
    raise gym.error.DependencyNotInstalled(
        "Box2D is not installed, you can install it by run `pip install swig` followed by "
        '`pip install "gymnasium[box2d]"`'
    )


def test_a_box2d_env_without_its_package_names_seedqs_extra() -> None:
    with pytest.raises(EnvError, match=r"Box2D is not installed.*pip install 'seedq\[box2d\]'$"):
        GymVectorBatch("LunarLander-v3", 1, seed=0, make_one=_make_without_box2d)


@pytest.mark.parametrize(
    ("env_id", "why"),
    [
        ("space_envs:TinyFrames-v0", r"made with .* raised TypeError: .*render_mode"),  # none taken
        ("space_envs:Unrendered-v0", r"its render_modes: \[\], without 'rgb_array'"),
    ],
)
def test_seedq_eval_video_of_an_env_that_renders_no_frames_is_refused_in_one_line(
    env_id, why, tmp_path
) -> None:
    # Both ended the evaluation in a traceback (exit 1).
    from seedq import eval_episodes
    from seedq.videos import EpisodeVideos

    class First:
        def reset(self) -> None:
            pass

        def act(self, obs: np.ndarray) -> int:
            return 0

    videos = EpisodeVideos(tmp_path, "ckpt")
    episodes = eval_episodes.gym_episodes(First(), GymConfig(id=env_id), 1, 0, videos)
    with pytest.raises(EnvError, match=rf"^video=true: {env_id} renders no frames \({why}.*\); "):
        next(episodes)


def test_seedq_eval_clips_box_actions_to_the_bounds_as_training_does(monkeypatch) -> None:
    from seedq import eval_episodes

    space = spaces.Box(-1.0, 1.0, (2,), np.float64)
    monkeypatch.setattr(
        gym, "make", lambda env_id, **kwargs: gym.wrappers.TimeLimit(_EchoAction(space, [1, -1]), 4)
    )
    monkeypatch.setattr(
        eval_episodes,
        "make_env_batch",
        lambda *a, **k: GymVectorBatch(
            "CartPole-v1", 1, seed=0, make_one=_make_echo, make_kwargs={"action_space": space}
        ),
    )

    class OutOfBounds:  # an unsquashed Gaussian's sample: (1, -1) once clipped, the paying one
        def reset(self) -> None:
            pass

        def act(self, obs: np.ndarray) -> np.ndarray:
            return np.array([5.0, -5.0], np.float32)

    cfg = GymConfig(id="Pendulum-v1")
    episodes = eval_episodes.gym_episodes(OutOfBounds(), cfg, 1, 0, False)
    assert [total for total, _ in episodes] == [4.0]
