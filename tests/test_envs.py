"""Env batches: same-step autoreset, terminated vs truncated, final_obs rows, errors."""

from __future__ import annotations

import numpy as np
import pytest

from seedq.envs import (
    AtariConfig,
    EnvBatch,
    EnvConfig,
    EnvError,
    FakeConfig,
    GymConfig,
    StepBatch,
    make_env_batch,
)
from seedq.envs.base import env_spec_of
from seedq.envs.fake import FakeEnvBatch
from seedq.envs.gym import CartPoleNativeBatch, GymVectorBatch
from seedq.envs.gym_spaces import obs_transform


def _check_batch(out: StepBatch, env: EnvBatch) -> None:
    """Shapes and dtypes every backend must honour."""
    n = env.num_envs
    assert out.obs.shape == (n, *env.obs_shape) and out.obs.dtype == env.obs_dtype
    assert out.reward.shape == (n,) and out.reward.dtype == np.float32
    assert out.terminated.shape == (n,) and out.terminated.dtype == bool
    assert out.truncated.shape == (n,) and out.truncated.dtype == bool
    assert not (out.terminated & out.truncated).any()
    k = int(out.truncated.sum())
    assert out.final_obs.shape == (k, *env.obs_shape) and out.final_obs.dtype == env.obs_dtype


def _balance(obs: np.ndarray) -> np.ndarray:
    """A linear CartPole controller that keeps the pole up for 500 steps."""
    return (obs @ np.array([0.0, 0.1, 1.0, 0.5], np.float32) > 0).astype(np.int64)


# ---------------------------------------------------------------------------------- fake


def test_fake_reset_encoding() -> None:
    cfg = FakeConfig(obs_shape=[2, 3], obs_dtype="float32", num_actions=3)
    env = make_env_batch(cfg, 5, seed=0, env_offset=10)
    assert isinstance(env, FakeEnvBatch) and isinstance(env, EnvBatch)
    assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((2, 3), np.float32, 3)
    obs = env.reset()
    assert obs.shape == (5, 2, 3) and obs.dtype == np.float32
    flat = obs.reshape(5, -1)
    np.testing.assert_array_equal(flat[:, 0], np.arange(10, 15))
    np.testing.assert_array_equal(flat[:, 1:3], 0)
    np.testing.assert_array_equal(flat[:, 3], -1)  # no action led here: a reset
    np.testing.assert_array_equal(flat[:, 4:], 0)


@pytest.mark.parametrize("truncate", [False, True])
def test_fake_episodes(truncate: bool) -> None:
    """Lengths L + (global id) % 3; terminated or truncated ends; final_obs rows in order."""
    n, length = 5, 3
    cfg = FakeConfig(
        obs_shape=[4],
        obs_dtype="int32",
        episode_length=length,
        truncate_episodes=truncate,
    )
    env = make_env_batch(cfg, n, seed=0, env_offset=7)
    np.testing.assert_array_equal(env.episode_lengths, [4, 5, 3, 4, 5])
    env.reset()
    lengths = length + (7 + np.arange(n)) % 3
    t = np.zeros(n, np.int64)
    episode = np.zeros(n, np.int64)
    ends = 0
    for step in range(13):
        actions = (np.arange(n) + step) % 2
        out = env.step(actions)
        _check_batch(out, env)
        t += 1
        done = t >= lengths
        np.testing.assert_array_equal(out.reward, t)
        np.testing.assert_array_equal(out.truncated if truncate else out.terminated, done)
        assert not (out.terminated if truncate else out.truncated).any()
        if truncate:
            # One row per truncated env, increasing env index, holding the step-L_i observation.
            expected = np.stack([np.arange(7, 7 + n), t, episode, actions], 1)[done]
            np.testing.assert_array_equal(out.final_obs, expected)
        else:
            assert out.final_obs.shape == (0, 4)
        ends += done.sum()
        t[done] = 0
        episode += done
        # Same-step autoreset: ended envs already show step 0 of their next episode.
        # Element 3 is the action that led here, -1 where the env was reset.
        last_action = np.where(done, -1, actions)
        np.testing.assert_array_equal(
            out.obs, np.stack([np.arange(7, 7 + n), t, episode, last_action], 1)
        )
    # Different lengths put episode ends on different batch steps.
    assert ends == sum(13 // L for L in lengths)


def test_fake_errors() -> None:
    with pytest.raises(EnvError, match="at least 3"):
        make_env_batch(FakeConfig(obs_shape=[2]), 2, seed=0)
    env = make_env_batch(FakeConfig(num_actions=2), 3, seed=0)
    env.reset()
    with pytest.raises(EnvError, match="shape"):
        env.step(np.zeros(2, np.int64))
    with pytest.raises(EnvError, match=r"\[0, 2\)"):
        env.step(np.array([0, 1, 2]))
    with pytest.raises(EnvError, match="env.kind"):
        make_env_batch(EnvConfig(kind="nope"), 2, seed=0)


def test_fake_long_run_counts_steps_and_episodes() -> None:
    """After S steps env g is at step S % L_g of episode S // L_g, each end truncated once."""
    n, length, steps = 64, 5, 300
    env = make_env_batch(FakeConfig(episode_length=length, truncate_episodes=True), n, seed=0)
    env.reset()
    truncations = 0
    for _ in range(steps):
        out = env.step(np.zeros(n, np.int64))
        truncations += len(out.final_obs)
    lengths = length + np.arange(n) % 3
    expected = np.stack([steps % lengths, steps // lengths], 1)
    assert (out.obs[:, 1:3].tolist(), truncations) == (expected.tolist(), expected[:, 1].sum())


# ---------------------------------------------------------------------------------- cartpole


def test_cartpole_native_truncation_matches_reference() -> None:
    """Truncation gives truncated + the true last obs, then a fresh episode on the same step."""
    import gymnasium as gym

    n, limit = 3, 5
    env = make_env_batch(EnvConfig(max_episode_steps=limit), n, seed=3)
    assert isinstance(env, CartPoleNativeBatch)
    # The unmodified next-step env, same seed and actions, shows the last obs of each episode.
    ref = gym.make_vec(
        "CartPole-v1", n, vectorization_mode="vector_entry_point", max_episode_steps=limit
    )
    obs = env.reset()
    ref_obs, _ = ref.reset(seed=3)
    # Exact: both sides run gymnasium's own CartPoleVectorEnv code on the same machine.
    np.testing.assert_array_equal(obs, ref_obs)
    for step in range(1, 2 * limit + 1):
        actions = _balance(obs)
        out = env.step(actions)
        _check_batch(out, env)
        ref_obs, *_ = ref.step(actions)
        assert not out.terminated.any()
        np.testing.assert_array_equal(out.reward, 1.0)  # no zero-reward reset steps
        if step % limit:
            assert not out.truncated.any()
        else:
            assert out.truncated.all()
            if step == limit:
                np.testing.assert_array_equal(out.final_obs, ref_obs)
            assert not np.allclose(out.final_obs, out.obs)
            assert np.abs(out.obs).max() <= 0.05  # reset bounds
        obs = out.obs
    ref.close()
    env.close()


def test_cartpole_v1_truncates_at_500() -> None:
    env = make_env_batch(EnvConfig(), 4, seed=0)
    obs = env.reset()
    for step in range(1, 501):
        out = env.step(_balance(obs))
        assert not out.terminated.any()
        assert out.truncated.all() == (step == 500) and out.truncated.any() == (step == 500)
        obs = out.obs
    _check_batch(out, env)
    assert out.final_obs.shape == (4, 4)
    assert np.abs(out.final_obs - out.obs).max() > 0.01
    env.close()


def test_cartpole_terminated_gives_reset_obs() -> None:
    env = make_env_batch(EnvConfig(), 2, seed=1)
    env.reset()
    for _ in range(100):
        out = env.step(np.ones(2, np.int64))  # always push right: the pole falls quickly
        _check_batch(out, env)
        if out.terminated.any():
            break
    assert out.terminated.any() and not out.truncated.any()
    assert out.final_obs.shape == (0, 4)
    np.testing.assert_array_equal(out.reward, 1.0)
    assert np.abs(out.obs[out.terminated]).max() <= 0.05
    # The reset env runs on normally: reward 1, not the zero of a next-step reset.
    nxt = env.step(np.zeros(2, np.int64))
    np.testing.assert_array_equal(nxt.reward, 1.0)
    env.close()


def test_cartpole_seeding() -> None:
    cfg = EnvConfig()
    a = make_env_batch(cfg, 2, seed=5).reset()
    b = make_env_batch(cfg, 2, seed=5).reset()
    c = make_env_batch(cfg, 2, seed=5, env_offset=2).reset()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_cartpole_kind_falls_back_to_sync() -> None:
    env = make_env_batch(EnvConfig(id="Acrobot-v1"), 2, seed=0)
    assert isinstance(env, GymVectorBatch)
    env.close()


# ---------------------------------------------------------------------------------- gym


@pytest.mark.parametrize(
    ("env_id", "vectorization"), [("Acrobot-v1", "sync"), ("MountainCar-v0", "async")]
)
def test_gym_truncation(env_id: str, vectorization: str) -> None:
    cfg = GymConfig(id=env_id, vectorization=vectorization, max_episode_steps=3)
    env = make_env_batch(cfg, 2, seed=0)
    try:
        assert env.obs_dtype == np.float32 and len(env.obs_shape) == 1
        obs = env.reset()
        assert obs.shape == (2, *env.obs_shape)
        for step in range(1, 7):
            out = env.step(np.full(2, env.num_actions - 1, np.int64))
            _check_batch(out, env)
            assert not out.terminated.any()
            assert out.truncated.all() == (step % 3 == 0)
            if step % 3 == 0:
                # The last obs continues from the previous one; the new one is a fresh reset.
                assert not np.allclose(out.final_obs, out.obs)
            obs = out.obs
    finally:
        env.close()


def test_gym_discrete_observations_are_bool_one_hots() -> None:
    env = make_env_batch(GymConfig(id="FrozenLake-v1"), 2, seed=0)
    obs = env.reset()
    # bool: the models read indicators as 0/1 and never standardise them (RunningNorm).
    assert env.obs_shape == (16,) and obs.dtype == np.bool_
    np.testing.assert_array_equal(obs.sum(1), 1)
    np.testing.assert_array_equal(obs.argmax(1), 0)  # FrozenLake starts in state 0
    _check_batch(env.step(np.zeros(2, np.int64)), env)
    env.close()


def test_image_observations_become_channels_first() -> None:
    from gymnasium import spaces

    fn, shape, dtype = obs_transform("x", spaces.Box(0, 255, (6, 5, 3), np.uint8))
    assert shape == (3, 6, 5) and dtype == np.uint8
    x = np.arange(2 * 6 * 5 * 3, dtype=np.uint8).reshape(2, 6, 5, 3)
    y = fn(x)
    assert y.shape == (2, 3, 6, 5) and y.flags.c_contiguous
    assert y[1, 2, 4, 3] == x[1, 4, 3, 2]
    fn, shape, _ = obs_transform("x", spaces.Box(0, 255, (6, 5), np.uint8))
    assert shape == (1, 6, 5) and fn(x[..., 0]).shape == (2, 1, 6, 5)
    with pytest.raises(EnvError, match="observation spaces"):
        obs_transform("x", spaces.Text(4))


def test_gym_box_actions_are_continuous_and_clipped_to_bounds() -> None:
    env = make_env_batch(GymConfig(id="Pendulum-v1"), 2, seed=0)
    try:
        spec = env_spec_of(env)
        assert (spec.action_kind, spec.num_actions) == ("continuous", 1)
        assert (spec.action_low, spec.action_high) == ((-2.0,), (2.0,))
        env.reset()
        _check_batch(env.step(np.array([[5.0], [-0.5]], np.float32)), env)
        # Out-of-bounds torque is clipped, not refused: 5 acts as the bound 2.
        assert env._env.envs[0].unwrapped.last_u == pytest.approx(2.0)
        with pytest.raises(EnvError, match=r"float array of shape \(2, 1\)"):
            env.step(np.array([0, 1]))
        with pytest.raises(EnvError, match="NaN"):
            env.step(np.array([[np.nan], [0.0]], np.float32))
    finally:
        env.close()


def test_fake_continuous_actions_show_in_the_next_obs() -> None:
    cfg = FakeConfig(obs_shape=[4], num_actions=2, continuous_actions=True)
    env = make_env_batch(cfg, 3, seed=0)
    assert env_spec_of(env).action_low == (-1.0, -1.0)
    env.reset()
    out = env.step(np.array([[0.25, 0.0], [-3.0, 0.0], [1.0, 1.0]], np.float32))
    assert out.obs[:, 3].tolist() == [0.25, -1.0, 1.0]


def test_gym_unknown_id() -> None:
    with pytest.raises(EnvError, match=r"NoSuchEnv-v0.*pprint_registry"):
        make_env_batch(GymConfig(id="NoSuchEnv-v0"), 2, seed=0)


def test_gym_deprecated_id_names_the_version_to_use() -> None:
    # Was "unknown gymnasium env id 'Taxi-v3'": the id is known, only its version is retired.
    import gymnasium

    deprecated = next(
        (
            f"{s.name}-v{s.version - 1}"
            for s in gymnasium.registry.values()
            if s.name in ("Taxi", "CliffWalking") and s.version and s.version > 0
        ),
        None,
    )
    if deprecated is None:
        pytest.skip("this gymnasium retires no version of Taxi or CliffWalking")
    with pytest.raises(EnvError, match=rf"{deprecated}' is deprecated: .*Please use"):
        make_env_batch(GymConfig(id=deprecated), 2, seed=0)


# ---------------------------------------------------------------------------------- atari


def test_atari_pong() -> None:
    pytest.importorskip("ale_py")
    env = make_env_batch(AtariConfig(id="ALE/Pong-v5"), 4, seed=0)
    try:
        assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((4, 84, 84), np.uint8, 6)
        obs = env.reset()
        assert obs.shape == (4, 4, 84, 84) and obs.dtype == np.uint8
        for _ in range(5):
            out = env.step(np.random.default_rng(0).integers(0, 6, 4))
            _check_batch(out, env)
        with pytest.raises(EnvError, match=r"\[0, 6\)"):
            env.step(np.full(4, 6))  # would deadlock ale_py's C++ threads if let through
    finally:
        env.close()


def test_atari_batch_of_a_large_actor_id_resets() -> None:
    # seedq-actor seeds a batch with seed + 1000 x actor id, offset by its first env id: for
    # --actor-ids 3000000 ale_py refused the seed (past 2^31) at every reset.
    pytest.importorskip("ale_py")
    env = make_env_batch(AtariConfig(id="ALE/Pong-v5"), 2, seed=1000 * 3_000_000, env_offset=2**30)
    try:
        assert env.reset().shape == (2, 4, 84, 84)
    finally:
        env.close()


def test_atari_truncation_final_obs() -> None:
    pytest.importorskip("ale_py")
    cfg = AtariConfig(id="ALE/Pong-v5", max_episode_steps=5, noop_max=0)
    env = make_env_batch(cfg, 2, seed=0)
    try:
        obs = env.reset()
        for step in range(1, 6):
            out = env.step(np.zeros(2, np.int64))
            _check_batch(out, env)
            assert out.truncated.all() == (step == 5) and not out.terminated.any()
            if step < 5:
                obs = out.obs
        assert out.final_obs.shape == (2, 4, 84, 84)
        # The true last obs continues the frame stack of the previous one...
        np.testing.assert_array_equal(out.final_obs[:, :3], obs[:, 1:])
        # ...while the returned obs starts a new episode.
        assert not np.array_equal(out.final_obs, out.obs)
    finally:
        env.close()


def test_atari_unknown_game() -> None:
    pytest.importorskip("ale_py")
    with pytest.raises(EnvError, match=r"NotAGame.*get_all_rom_ids"):
        make_env_batch(AtariConfig(id="ALE/NotAGame-v5"), 2, seed=0)


def test_atari_episodic_life_continues_the_game() -> None:
    """A life loss reports terminated but the game goes on (DeepMind), not a full reset."""
    pytest.importorskip("ale_py")
    cfg = AtariConfig(id="ALE/Breakout-v5", episodic_life=True, repeat_action_probability=0.0)
    env = make_env_batch(cfg, 2, seed=0)
    try:
        obs = env.reset()
        rng = np.random.default_rng(0)
        for _ in range(300):
            out = env.step(rng.integers(0, env.num_actions, 2))
            if out.terminated.any():
                break
            obs = out.obs
        assert out.terminated.any()
        i = int(np.flatnonzero(out.terminated)[0])
        # The frame stack shifts on, as on any ordinary step.
        np.testing.assert_array_equal(out.obs[i, :3], obs[i, 1:])
    finally:
        env.close()


def _noop_game_overs(fire_after_life_loss: bool, game: str = "ALE/Breakout-v5") -> tuple:
    """Game overs and lost lives of 2 envs sent NOOP for 600 steps, and every observation."""
    cfg = AtariConfig(
        id=game,
        repeat_action_probability=0.0,
        noop_max=0,
        fire_after_life_loss=fire_after_life_loss,
    )
    env = make_env_batch(cfg, 2, seed=0)
    try:
        frames = [env.reset()]
        game_overs = lives_lost = 0
        for _ in range(600):
            out = env.step(np.zeros(2, np.int64))
            frames.append(out.obs)
            game_overs += int(out.game_over.sum())
            lives_lost += int((out.terminated & ~out.game_over).sum())
        return game_overs, lives_lost, np.stack(frames)
    finally:
        env.close()


def test_atari_fire_after_life_loss_serves_for_an_agent_that_never_fires() -> None:
    """Breakout waits for FIRE after each lost life: an agent sending NOOP loses one life and
    then nothing happens; with fire_after_life_loss every life is served and the games end."""
    pytest.importorskip("ale_py")
    stuck = _noop_game_overs(False)
    served = _noop_game_overs(True)

    assert stuck[:2] == (0, 2)  # one life each (the reset's FIRE served it), then a wait
    assert served[0] >= 2 and served[1] >= 8  # five lives a game, every one of them served


def test_atari_fire_after_life_loss_changes_nothing_in_a_game_without_lives() -> None:
    pytest.importorskip("ale_py")
    *_, plain = _noop_game_overs(False, "ALE/Pong-v5")
    *_, fired = _noop_game_overs(True, "ALE/Pong-v5")

    np.testing.assert_array_equal(plain, fired)


def test_atari_rejects_non_atari_id() -> None:
    pytest.importorskip("ale_py")
    with pytest.raises(EnvError, match="not an Atari id"):
        make_env_batch(AtariConfig(id="CartPole-v1"), 2, seed=0)


@pytest.mark.parametrize(
    ("env_id", "overrides", "warned"),
    [
        # A NoFrameskip-v4 id has no sticky actions; env=atari's default has them (ALE v5's).
        ("PongNoFrameskip-v4", {}, "add env.repeat_action_probability=0.0 to play it as"),
        ("Breakout-v4", {}, "add env.repeat_action_probability=0.0 to play it as"),
        ("PongNoFrameskip-v4", {"repeat_action_probability": 0.0}, None),
        ("ALE/Pong-v5", {}, None),
        # A key the user changed is chosen, whatever the id's registration says.
        ("ALE/Pong-v5", {"repeat_action_probability": 0.0}, None),
        ("pong", {}, None),  # a ROM name registers nothing
    ],
)
def test_atari_names_the_keys_that_play_an_id_otherwise_than_registered(
    caplog, monkeypatch, env_id, overrides, warned
) -> None:
    pytest.importorskip("ale_py")
    from seedq.envs import atari

    monkeypatch.setattr(atari, "_WARNED", set())  # a process warns once an id
    with caplog.at_level("WARNING", logger="seedq.envs.atari"):
        for _ in range(2):  # two env batches of one process: one warning
            make_env_batch(AtariConfig(id=env_id, **overrides), 1, seed=0).close()
    warnings = [r.getMessage() for r in caplog.records if "registered with" in r.getMessage()]
    assert [warned in w for w in warnings] == ([] if warned is None else [True]), warnings


@pytest.mark.parametrize(
    ("env_id", "atari"), [("PongNoFrameskip-v4", True), ("CartPole-v1", False)]
)
def test_env_gym_points_an_atari_id_to_env_atari(caplog, env_id, atari) -> None:
    pytest.importorskip("ale_py")
    with caplog.at_level("WARNING", logger="seedq.envs.gym"):
        make_env_batch(GymConfig(id=env_id), 1, seed=0).close()
    hint = f"env=atari env.id={env_id} adds DeepMind's preprocessing"
    assert [hint in r.getMessage() for r in caplog.records] == ([True] if atari else [])


@pytest.mark.parametrize(
    ("config", "env_id", "family"),
    [
        ("AtariConfig", "MinAtar/Breakout-v1", "minatar"),
        ("AtariConfig", "coinrun", "procgen"),
        ("AtariConfig", "HalfCheetah-v5", "mujoco"),
        ("AtariConfig", "Acrobot-v1", "gym"),
        ("MinAtarConfig", "ALE/Pong-v5", "atari"),
        ("ProcgenConfig", "space_invaders", "minatar"),
    ],
)
def test_an_id_of_another_env_family_is_refused_naming_that_family(config, env_id, family):
    # env=atari env.id=MinAtar/Breakout-v1 was "unknown Atari env id ... Did you mean
    # ALE/Breakout-v5?": the id is fine, the family is not.
    pytest.importorskip("ale_py")
    import seedq.envs as envs

    with pytest.raises(EnvError, match=rf"env={family} env\.id={env_id} runs it"):
        make_env_batch(getattr(envs, config)(id=env_id), 2, seed=0)


def test_minatars_gymnasium_ids_are_no_atari_games_once_registered():
    # MinAtar registers MinAtar/Breakout-v1 with a "game" keyword, which env=atari took for
    # ALE's Breakout once anything had imported minatar (env=gym of a MinAtar id, its entry
    # point): it played Atari Breakout without a word.
    pytest.importorskip("ale_py")
    pytest.importorskip("minatar")
    from seedq.envs.gym_ids import gym_spec

    gym_spec("MinAtar/Breakout-v1")  # registered, as env=gym registers it
    with pytest.raises(EnvError, match=r"env=minatar env\.id=MinAtar/Breakout-v1 runs it"):
        make_env_batch(AtariConfig(id="MinAtar/Breakout-v1"), 2, seed=0)


def test_an_id_no_family_has_is_not_given_one():
    from seedq.envs.registry import other_family_hint

    assert other_family_hint("NoSuchEnv-v0", "atari") == ""
    assert other_family_hint("NoSuchEnv-v0", "minatar") == ""
    assert other_family_hint("CartPole-v1", "gym") == ""  # gymnasium's ids are env=gym's
    assert other_family_hint("CartPole-v1", "mujoco") == ""
