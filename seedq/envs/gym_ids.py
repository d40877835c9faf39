"""gymnasium ids: each one's registered spec, and one env made from it.

:func:`gym_spec` finds an id's registration, registering on demand what gymnasium 1.x no longer
registers by itself: ale_py's Atari ids, the envs of packages' ``gymnasium.envs`` entry points
(MinAtar's), and the module that gymnasium's ``module:EnvName-v0`` form names; an unknown id is
an :class:`EnvError` that says where the id is played or how to list the registered ones.
:func:`make_single_env` builds one env as the backends vectorise it (module level, so async
workers can pickle it); :func:`single_action_space` reads an id's action space.

gymnasium is imported when an id is looked up, not with this module.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any

from seedq.envs.base import EnvError, other_family_hint
from seedq.envs.mujoco_import import import_mujoco


def import_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise EnvError('gymnasium is not installed; run: pip install "gymnasium>=1.1,<2"') from exc
    return gymnasium


def ram_id_hint(env_id: str) -> str:
    """How to step a game's RAM, for an Atari ``-ram`` id (``ALE/Breakout-ram-v5``,
    ``Breakout-ramNoFrameskip-v4``), which ale_py no longer registers; else ""."""
    ram = re.fullmatch(r"(?:ALE/)?(\w+?)-ram(?:NoFrameskip)?(?:-v\d+)?", env_id)
    if ram is None:
        return ""
    game = ram.group(1)
    return (
        f"for the {game} RAM (128 bytes) use env=gym env.id=ALE/{game}-v5 +env.kwargs.obs_type=ram"
    )


def _import_env_module(env_id: str) -> str:
    """gymnasium's ``module:EnvName-v0`` form: import ``module`` (which registers the env, as
    ``gymnasium.make`` does for such an id) and return the id it registers."""
    module, _, name = env_id.partition(":")
    if not module or not name:
        raise EnvError(
            f"env.id={env_id!r}: an id with a ':' is gymnasium's module:EnvName-v0 form, the "
            "module that registers the env, then its id"
        )
    where = (
        "install it, or add its folder to PYTHONPATH, wherever the learner and actors run "
        "(seedq-eval too)"
    )
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module or module.startswith(f"{exc.name}."):
            raise EnvError(
                f"env.id={env_id!r} names the module {module!r} to import first, which is not "
                f"importable here ({exc}): {where}"
            ) from exc
        raise EnvError(f"importing {module!r} for env.id={env_id!r} failed: {exc!r}") from exc
    except Exception as exc:  # the user's module: whatever its import raises
        raise EnvError(f"importing {module!r} for env.id={env_id!r} failed: {exc!r}") from exc
    return name


def gym_spec(env_id: str) -> Any:
    """The registered spec of ``env_id`` (``module:EnvName-v0`` imports ``module`` first), or
    an EnvError naming it."""
    gym = import_gymnasium()
    if ":" in env_id:
        name = _import_env_module(env_id)
        try:
            return gym.spec(name)
        except gym.error.Error as exc:
            module = env_id.partition(":")[0]
            raise EnvError(
                f"env.id={env_id!r}: the module {module!r} imported, but no env {name!r} is "
                f"registered ({exc}); it must call gymnasium.register({name!r}, ...) when "
                "imported"
            ) from exc
    try:
        try:
            return gym.spec(env_id)
        except gym.error.Error:
            # Registered only once asked for: ale_py's Atari ids (Pong-v4 as well as
            # ALE/Pong-v5 and PongNoFrameskip-v4, which alone were registered before) and
            # those of packages' gymnasium.envs entry points.
            if not (_register_ale_envs() | _register_plugin_envs(env_id)):
                raise
            return gym.spec(env_id)  # or the error of the registry they filled
    except gym.error.DeprecatedEnv as exc:
        # Taxi-v3 once gymnasium has Taxi-v4: the id is known, its version is not served.
        raise EnvError(f"gymnasium env id {env_id!r} is deprecated: {exc}") from exc
    except gym.error.Error as exc:
        if ram := ram_id_hint(env_id):
            raise EnvError(f"unknown gymnasium env id {env_id!r}: {ram}") from exc
        raise EnvError(
            f"unknown gymnasium env id {env_id!r} ({exc});{other_family_hint(env_id, 'gym')} "
            "list the registered ids with "
            "`python -c 'import gymnasium; gymnasium.pprint_registry()'`"
        ) from exc


def _register_ale_envs() -> bool:
    """Register ale_py's Atari ids, once a process; whether this call did."""
    gym = import_gymnasium()
    if "ALE/Pong-v5" in gym.registry:
        return False
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True


# gymnasium's entry point group of packages that register envs (MinAtar's "MinAtar" namespace).
PLUGIN_GROUP = "gymnasium.envs"
_LOADED_PLUGINS: set[str] = set()


def _register_plugin_envs(env_id: str) -> bool:
    """Call the ``gymnasium.envs`` entry points named for ``env_id``'s namespace
    (``"__root__"`` for an id without one), as gymnasium 0.x did when imported and 1.x no
    longer does: MinAtar declares ``MinAtar``, whose ids (``MinAtar/Breakout-v1``) were
    unknown. Whether one was called (each is called once a process)."""
    from importlib.metadata import entry_points

    namespace = env_id.split("/", 1)[0] if "/" in env_id else "__root__"
    plugins = [
        ep
        for ep in entry_points(group=PLUGIN_GROUP)
        if ep.name == namespace and ep.value not in _LOADED_PLUGINS  # again: warns for each id
    ]
    for plugin in plugins:
        _LOADED_PLUGINS.add(plugin.value)
        try:
            plugin.load()()
        except Exception as exc:  # a package's own code: whatever it raises
            raise EnvError(
                f"env.id={env_id!r}: the {PLUGIN_GROUP} entry point {plugin.value!r} that "
                f"registers the {namespace!r} envs failed: {exc!r}"
            ) from exc
    return bool(plugins)


def make_single_env(env_id: str, max_episode_steps: int | None, **kwargs: Any) -> Any:
    """Build one gymnasium env (``kwargs``: gymnasium.make's, ``env.kwargs``); module level so
    AsyncVectorEnv can pickle it for subprocesses."""
    gym = import_gymnasium()
    spec = gym_spec(env_id)  # registers Atari ids in a fresh (forkserver/spawn) subprocess
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    if entry.startswith("gymnasium.envs.mujoco"):
        # A MuJoCo id through env=gym: MuJoCo's default warning handler would append to
        # MUJOCO_LOG.TXT in the working directory; import_mujoco routes it to the log.
        import_mujoco()
    return gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs)


def install_hint(exc: BaseException) -> str:
    """``"; pip install 'seedq[box2d]'"`` for gymnasium's error that a Box2D env's package is
    missing, else "". gymnasium's own line asks for swig and gymnasium[box2d]; seedq's extra
    holds the box2d wheel (no swig, no compiler) and pygame, which CarRacing draws with."""
    text = str(exc)
    if "Box2D" in text or "gymnasium[box2d]" in text:
        return "; seedq's extra installs what the Box2D envs need: pip install 'seedq[box2d]'"
    return ""


def single_action_space(env_id: str, make_kwargs: Mapping[str, Any] | None = None) -> Any:
    """The action space of ``env_id`` made with gymnasium.make's ``make_kwargs``
    (``env.kwargs``): one env built, read and closed."""
    gym = import_gymnasium()
    make_kwargs = dict(make_kwargs or {})
    try:
        env = make_single_env(env_id, None, **make_kwargs)
    except EnvError:
        raise
    except Exception as exc:  # the env's constructor: whatever it raises
        with_kwargs = f" with env.kwargs={make_kwargs}" if make_kwargs else ""
        kind = "" if isinstance(exc, gym.error.Error) else f"{type(exc).__name__}: "
        raise EnvError(
            f"cannot build gymnasium env {env_id!r}{with_kwargs}: {kind}{exc}{install_hint(exc)}"
        ) from exc
    try:
        return env.action_space
    finally:
        env.close()
