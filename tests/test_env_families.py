"""Env families: MinAtar, Procgen, MuJoCo (and gymnasium's Box2D LunarLander).

Each kind is tested with its real package where installed (MinAtar and Box2D are in the test
extra), else skipped with its install line; Procgen, which has no PyPI wheel for this Python,
is also tested against a fake of its gym3 API, and the MuJoCo adapter's Box-action plumbing
against gymnasium's Pendulum, which needs no MuJoCo.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

import seedq
from seedq.cli import to_config
from seedq.config import ConfigError, register_configs
from seedq.envs import (
    EnvBatch,
    EnvError,
    GymConfig,
    MinAtarConfig,
    MujocoConfig,
    ProcgenConfig,
    StepBatch,
    make_env_batch,
)
from seedq.envs.minatar import GAMES, MINATAR_MAX_EPISODE_STEPS, minatar_game
from seedq.envs.mujoco import MujocoBatch
from seedq.envs.procgen import ProcgenBatch, procgen_game


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_minatar = pytest.mark.skipif(not _installed("minatar"), reason="pip install 'seedq[minatar]'")
needs_mujoco = pytest.mark.skipif(not _installed("mujoco"), reason="pip install 'seedq[mujoco]'")
needs_procgen = pytest.mark.skipif(
    not _installed("procgen"),
    reason="pip install 'seedq[procgen]' && pip install --no-deps procgen-mirror==0.10.7 "
    "gym3==0.3.3",
)
needs_box2d = pytest.mark.skipif(not _installed("Box2D"), reason="pip install 'seedq[box2d]'")


def _check_batch(out: StepBatch, env: EnvBatch) -> None:
    """Shapes and dtypes every backend must honour."""
    n = env.num_envs
    assert out.obs.shape == (n, *env.obs_shape) and out.obs.dtype == env.obs_dtype
    assert out.reward.shape == (n,) and out.reward.dtype == np.float32
    assert out.terminated.dtype == bool and out.truncated.dtype == bool
    assert not (out.terminated & out.truncated).any()
    k = int(out.truncated.sum())
    assert out.final_obs.shape == (k, *env.obs_shape) and out.final_obs.dtype == env.obs_dtype


def _rollout(env: EnvBatch, steps: int, seed: int = 0) -> tuple[np.ndarray, list[StepBatch]]:
    rng = np.random.default_rng(seed)
    first = env.reset()
    outs = [env.step(rng.integers(0, env.num_actions, env.num_envs)) for _ in range(steps)]
    return first, outs


# ---------------------------------------------------------------------------------- minatar


def test_minatar_ids() -> None:
    assert [minatar_game(i) for i in ("breakout", "SpaceInvaders", "MinAtar/Seaquest-v1")] == [
        "breakout",
        "space_invaders",
        "seaquest",
    ]
    with pytest.raises(EnvError, match="Did you mean breakout"):
        minatar_game("breakot")


@needs_minatar
@pytest.mark.parametrize("game", GAMES)
def test_minatar_games(game: str) -> None:
    """Channels-first 0/255 frames, the minimal action set, episodes that end."""
    env = make_env_batch(MinAtarConfig(id=game), 4, seed=0)
    first, outs = _rollout(env, 300)
    channels = {"asterix": 4, "breakout": 4, "freeway": 7, "seaquest": 10, "space_invaders": 6}
    actions = {"asterix": 5, "breakout": 3, "freeway": 3, "seaquest": 6, "space_invaders": 4}
    assert (env.obs_shape, env.obs_dtype, env.num_actions) == (
        (channels[game], 10, 10),
        np.uint8,
        actions[game],
    )
    assert first.shape == (4, channels[game], 10, 10)
    for out in outs:
        _check_batch(out, env)
    frames = np.concatenate([first, *(o.obs for o in outs)])
    assert set(np.unique(frames)) <= {0, 255} and frames.max() == 255
    if game != "freeway":  # Freeway's clock runs 2500 steps; a random player survives the rest
        assert sum(o.terminated.sum() for o in outs) > 0
    assert not any(o.truncated.any() for o in outs)


@needs_minatar
def test_a_minatar_v0_id_played_with_the_minimal_set_says_so(monkeypatch, caplog) -> None:
    # MinAtar registers its -v0 ids with all 6 actions; env=minatar played them with the
    # minimal set without a word.
    from seedq.envs import minatar

    monkeypatch.setattr(minatar, "_WARNED", set())
    for cfg in (
        MinAtarConfig(id="MinAtar/Breakout-v0"),
        MinAtarConfig(id="MinAtar/Breakout-v1"),
        MinAtarConfig(id="MinAtar/Asterix-v0", full_action_space=True),
    ):
        make_env_batch(cfg, 1, seed=0).close()
    warned = [r.getMessage() for r in caplog.records if "registered" in r.getMessage()]
    assert [w.split()[0] for w in warned] == ["MinAtar/Breakout-v0"]


@needs_minatar
def test_minatar_time_limit_truncates_with_final_obs() -> None:
    cfg = MinAtarConfig(id="freeway", max_episode_steps=7)
    env = make_env_batch(cfg, 3, seed=1)
    obs = env.reset()
    for step in range(1, 15):
        out = env.step(np.ones(3, np.int64))  # "up": Freeway never terminates this early
        _check_batch(out, env)
        assert not out.terminated.any()
        assert out.truncated.all() == (step % 7 == 0) and out.truncated.any() == (step % 7 == 0)
        if step % 7 == 0:
            # The last frame of the old episode (the chicken moved up), a fresh start in obs:
            # the chicken back on the bottom row, as after the first reset.
            assert not np.array_equal(out.final_obs, out.obs)
            np.testing.assert_array_equal(out.obs[:, 0], obs[:, 0])
    assert (
        MINATAR_MAX_EPISODE_STEPS
        == make_env_batch(MinAtarConfig(id="breakout"), 1, seed=0).max_episode_steps
    )


@needs_minatar
def test_minatar_seeds_reproduce() -> None:
    cfg = MinAtarConfig(id="asterix")
    a = [o.obs for o in _rollout(make_env_batch(cfg, 2, seed=3), 50)[1]]
    b = [o.obs for o in _rollout(make_env_batch(cfg, 2, seed=3), 50)[1]]
    c = [o.obs for o in _rollout(make_env_batch(cfg, 2, seed=4), 50)[1]]
    np.testing.assert_array_equal(np.stack(a), np.stack(b))
    assert not np.array_equal(np.stack(a), np.stack(c))


@needs_minatar
def test_minatar_full_action_space_and_no_ramping() -> None:
    cfg = MinAtarConfig(id="breakout", full_action_space=True, difficulty_ramping=False)
    env = make_env_batch(cfg, 2, seed=0)
    assert env.num_actions == 6
    with pytest.raises(EnvError, match=r"\[0, 6\)"):
        env.step(np.full(2, 6))


@needs_minatar
def test_minatar_frames_fit_the_auto_torso() -> None:
    """torso=auto picks the small conv net for 10x10 frames; one pass gives policy and value."""
    import torch

    from seedq.agents.vtrace.network import ActorCriticNet

    env = make_env_batch(MinAtarConfig(id="seaquest"), 2, seed=0)
    net = ActorCriticNet(env.obs_shape, env.num_actions)
    assert net.torso_name == "minatar"
    obs = torch.as_tensor(env.reset())[None]
    out, _ = net(obs, torch.zeros(1, 2, dtype=torch.bool), net.initial_state(2))
    assert (out.logits.shape, out.baseline.shape) == ((1, 2, env.num_actions), (1, 2))


@needs_minatar
def test_a_package_s_gymnasium_entry_point_ids_are_registered_for_env_gym() -> None:
    # MinAtar declares the gymnasium.envs entry point "MinAtar", which gymnasium 1.x no longer
    # calls: MinAtar/Breakout-v1 was "Namespace MinAtar not found", whatever the docs said.
    env = make_env_batch(GymConfig(id="MinAtar/Breakout-v1"), 2, seed=0)
    assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((4, 10, 10), np.bool_, 3)


@pytest.mark.parametrize(
    ("shape", "torso"),
    [((4, 10, 10), "minatar"), ((3, 35, 64), "minatar"), ((3, 36, 36), "nature")],
)
def test_auto_torso_picks_minatar_below_the_nature_cnn_minimum(shape: tuple, torso: str) -> None:
    from seedq.agents.vtrace.network import ActorCriticNet

    assert ActorCriticNet(shape, 3).torso_name == torso


@pytest.mark.slow  # ~35 s on the shared 2-core box, almost all of it process start-up
@needs_minatar
def test_minatar_trains_and_evaluates_with_video(tmp_path: Path) -> None:
    """A short V-trace run on MinAtar Breakout, then seedq-eval plays its checkpoint with video
    (the agent's view: coloured object planes, 320x320)."""
    import imageio.v3 as iio
    from cli_helpers import run_cli

    from seedq.evaluate import main

    result = run_cli(
        "env=minatar",
        "total_env_steps=1000",
        "actor.num_actors=1",
        "actor.envs_per_batch=16",
        f"hydra.run.dir={tmp_path}",
        timeout=180,
    )
    assert result.returncode == 0, result.stdout
    assert (
        main([f"checkpoint={tmp_path}", "episodes=1", "video=true", "env.max_episode_steps=50"])
        == 0
    )
    (video,) = (tmp_path / "videos").glob("*.mp4")
    assert iio.imread(video).shape[1:] == (320, 320, 3)


# ---------------------------------------------------------------------------------- procgen


class FakeProcgenGym3Env:
    """procgen's ``ProcgenGym3Env`` as seedq uses it: gym3's act/observe, ``ob_space["rgb"]``,
    ``ac_space.eltype.n``. Env ``i``'s frames are filled with its episode step; its episodes
    last ``5 + (rand_seed + i) % 3`` steps and pay reward 10 at their end."""

    built: list[dict] = []

    def __init__(self, num: int, env_name: str, rand_seed: int, **options: object) -> None:
        FakeProcgenGym3Env.built.append(dict(num=num, env_name=env_name, rand_seed=rand_seed))
        self.num = num
        self.options = options
        self.ob_space = {"rgb": SimpleNamespace(shape=(64, 64, 3))}
        self.ac_space = SimpleNamespace(eltype=SimpleNamespace(n=15))
        self.lengths = 5 + (rand_seed + np.arange(num)) % 3
        self.t = np.zeros(num, np.int64)
        self.reward = np.zeros(num, np.float32)
        self.first = np.ones(num, bool)
        self.closed = False

    def act(self, actions: np.ndarray) -> None:
        assert actions.dtype == np.int32 and actions.shape == (self.num,)
        self.t += 1
        done = self.t >= self.lengths
        self.reward = np.where(done, 10.0, 0.0).astype(np.float32)
        self.first = done
        self.t[done] = 0

    def observe(self) -> tuple[np.ndarray, dict, np.ndarray]:
        rgb = np.broadcast_to(self.t[:, None, None, None], (self.num, 64, 64, 3)).astype(np.uint8)
        return self.reward, {"rgb": rgb}, self.first

    def close(self) -> None:
        self.closed = True


def _fake_procgen(num_envs: int, seed: int | None, **kwargs: object) -> ProcgenBatch:
    return ProcgenBatch("coinrun", num_envs, seed, make_env=FakeProcgenGym3Env, **kwargs)


def test_procgen_ids_and_config_checks() -> None:
    assert procgen_game("procgen-coinrun-v0") == procgen_game("coinrun") == "coinrun"
    with pytest.raises(EnvError, match="Did you mean coinrun"):
        procgen_game("coinrum")
    with pytest.raises(EnvError, match="procgen-mirror"):
        if _installed("procgen"):
            raise EnvError("procgen-mirror (installed here)")
        make_env_batch(ProcgenConfig(id="coinrun"), 1, seed=0)


def test_procgen_adapter_on_a_fake_gym3_env() -> None:
    """Layout [3, 64, 64], same-step autoreset reported as terminated, options passed on."""
    FakeProcgenGym3Env.built.clear()
    env = _fake_procgen(3, 7, distribution_mode="easy", num_levels=200, start_level=5)
    assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((3, 64, 64), np.uint8, 15)
    assert env._env.options["distribution_mode"] == "easy"
    assert (env._env.options["num_levels"], env._env.options["start_level"]) == (200, 5)
    obs = env.reset()
    assert len(FakeProcgenGym3Env.built) == 1  # the env built with the seed is reused
    assert obs.shape == (3, 3, 64, 64) and obs.flags.c_contiguous and not obs.any()
    lengths = 5 + (7 + np.arange(3)) % 3
    for step in range(1, 13):
        out = env.step(np.zeros(3, np.int64))
        _check_batch(out, env)
        ended = step % lengths == 0
        np.testing.assert_array_equal(out.terminated, ended)
        np.testing.assert_array_equal(out.reward, np.where(ended, 10.0, 0.0))
        np.testing.assert_array_equal(out.obs[:, 0, 0, 0], step % lengths)
        assert not out.truncated.any()
    with pytest.raises(EnvError, match=r"\[0, 15\)"):
        env.step(np.full(3, 15))
    old = env._env
    env.reset(seed=11)  # a whole-batch reset is a new vector env with the new seed
    assert old.closed and FakeProcgenGym3Env.built[-1]["rand_seed"] == 11
    env.close()
    env.close()


def test_procgen_unseeded_resets_follow_the_construction_seed() -> None:
    FakeProcgenGym3Env.built.clear()
    for _ in range(2):
        env = _fake_procgen(2, None)
        env.reset()
    seeds = [b["rand_seed"] for b in FakeProcgenGym3Env.built]
    assert len(set(seeds)) > 1  # no seed: fresh entropy each time
    FakeProcgenGym3Env.built.clear()
    for _ in range(2):
        env = _fake_procgen(2, 3)
        env.reset()
        env.step(np.zeros(2, np.int64))
        env.reset()
    seeds = [b["rand_seed"] for b in FakeProcgenGym3Env.built]
    assert seeds[0] == 3 and seeds[:2] == seeds[2:]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"distribution_mode": "medium"}, "env.distribution_mode"),
        ({"num_levels": -1}, "env.num_levels"),
        ({"max_episode_steps": 100}, "env.max_episode_steps"),
        ({"id": "pong"}, "not a Procgen game"),
    ],
)
def test_procgen_config_errors_name_the_key(override: dict, key: str) -> None:
    from seedq.envs import validate_env

    env = ProcgenConfig(**{"id": "coinrun", **override})
    with pytest.raises(ConfigError, match=key):
        validate_env(env, SimpleNamespace(envs_per_batch=8))


@needs_procgen
def test_procgen_coinrun() -> None:
    cfg = ProcgenConfig(id="coinrun", distribution_mode="easy", num_levels=10)
    env = make_env_batch(cfg, 4, seed=0)
    try:
        first, outs = _rollout(env, 300)
        assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((3, 64, 64), np.uint8, 15)
        assert first.shape == (4, 3, 64, 64) and first.any()
        for out in outs:
            _check_batch(out, env)
        assert sum(o.terminated.sum() for o in outs) > 0
        again, outs2 = _rollout(make_env_batch(cfg, 4, seed=0), 300)
        np.testing.assert_array_equal(first, again)
        np.testing.assert_array_equal(outs[-1].obs, outs2[-1].obs)
    finally:
        env.close()


# ---------------------------------------------------------------------------------- mujoco


def test_box_action_batch_on_pendulum() -> None:
    """The MuJoCo adapter's plumbing on a Box env without MuJoCo: bounds, clipping, truncation."""
    env = MujocoBatch("Pendulum-v1", 2, seed=0, max_episode_steps=4)
    try:
        assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((3,), np.float32, 1)
        assert env.action_kind == "continuous" and env.action_shape == (1,)
        np.testing.assert_array_equal(env.action_high, [2.0])
        np.testing.assert_array_equal(env.action_low, [-2.0])
        env.reset()
        for step in range(1, 9):
            out = env.step(np.full((2, 1), 100.0, np.float32))  # clipped to 2
            _check_batch(out, env)
            assert out.truncated.all() == (step % 4 == 0) and not out.terminated.any()
            assert out.reward.min() > -17  # a torque of 100 would not be bounded like this
        with pytest.raises(EnvError, match=r"float array of shape \(2, 1\)"):
            env.step(np.zeros(2, np.int64))
        with pytest.raises(EnvError, match="NaN"):
            env.step(np.full((2, 1), np.nan, np.float32))
    finally:
        env.close()


@needs_mujoco
def test_mujoco_rejects_non_mujoco_ids() -> None:
    with pytest.raises(EnvError, match="not a gymnasium MuJoCo env"):
        make_env_batch(MujocoConfig(id="Pendulum-v1"), 1, seed=0)


@needs_mujoco
@pytest.mark.parametrize(
    ("env_id", "obs", "act"), [("HalfCheetah-v5", 17, 6), ("Hopper-v5", 11, 3)]
)
def test_mujoco_envs(env_id: str, obs: int, act: int) -> None:
    cfg = MujocoConfig(id=env_id, max_episode_steps=50)
    env = make_env_batch(cfg, 2, seed=0)
    try:
        assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((obs,), np.float32, act)
        np.testing.assert_array_equal(env.action_low, -1.0)
        env.reset()
        rng = np.random.default_rng(0)
        truncations = terminations = 0
        for _ in range(200):
            out = env.step(rng.uniform(-1, 1, (2, act)).astype(np.float32))
            _check_batch(out, env)
            truncations += out.truncated.sum()
            terminations += out.terminated.sum()
            if out.truncated.any():
                assert not np.allclose(out.final_obs, out.obs[out.truncated])
        if env_id == "HalfCheetah-v5":  # never terminates: cut at 50 steps
            assert (terminations, truncations) == (0, 8)
        else:  # a random Hopper falls over
            assert terminations > 0
    finally:
        env.close()


@needs_mujoco
def test_mujoco_seeds_reproduce() -> None:
    cfg = MujocoConfig(id="Hopper-v5")
    a = make_env_batch(cfg, 2, seed=5)
    b = make_env_batch(cfg, 2, seed=5)
    np.testing.assert_array_equal(a.reset(), b.reset())
    action = np.full((2, 3), 0.3, np.float32)
    np.testing.assert_array_equal(a.step(action).obs, b.step(action).obs)
    a.close()
    b.close()


# ---------------------------------------------------------------------------------- box2d


@needs_box2d
def test_gym_lunar_lander() -> None:
    env = make_env_batch(GymConfig(id="LunarLander-v3"), 2, seed=0)
    try:
        first, outs = _rollout(env, 300)
        assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((8,), np.float32, 4)
        for out in outs:
            _check_batch(out, env)
        assert sum(o.terminated.sum() for o in outs) > 0  # random landers crash
    finally:
        env.close()


# ---------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        ("minatar", ("minatar", "breakout", MinAtarConfig, "auto")),
        ("procgen", ("procgen", "coinrun", ProcgenConfig, "impala")),
        ("mujoco", ("mujoco", "HalfCheetah-v5", MujocoConfig, "auto")),
    ],
)
def test_env_groups_compose(group: str, expected: tuple) -> None:
    """env=<group> composes and validates; env=procgen brings the vtrace_procgen preset."""
    register_configs()
    conf = str(Path(seedq.__file__).parent / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["run_dir=/tmp/seedq-test", f"env={group}"])
    config = to_config(cfg)
    env = config.env
    assert (env.kind, env.id, type(env), config.algorithm.model.torso) == expected
