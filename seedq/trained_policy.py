"""A trained seedq policy for one env, acting without a learner: ``seedq.load_policy``.

    policy = seedq.load_policy("runs/2026-11-23/10-00-00_CartPole-v1", mode="greedy")
    obs, _ = env.reset(seed=0)
    action = policy(obs)

:func:`load_policy` builds the checkpoint's network on the CPU and checks what it is given
where it enters (mode, epsilon, seed, action space); a :class:`Policy` acts on one observation
at a time with its algorithm's own selector, keeps its recurrent state between calls, and
refuses an observation of another layout than training delivered, saying what to give instead.
``seedq-eval`` (``seedq.evaluate``) plays its episodes with one.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from seedq.agents.registry import agent_class, agent_names
from seedq.envs import EnvError
from seedq.envs.config import MAX_SEED
from seedq.envs.gym_ids import single_action_space
from seedq.envs.gym_spaces import ACTION_SPACES, continuous_actions, env_actions, joint_actions
from seedq.envs.registry import KINDS, backend
from seedq.learner.checkpoint import CheckpointError, read_checkpoint
from seedq.messages import CONTINUOUS, DISCRETE, EnvSpec

MODES = ("sample", "greedy")
# What seedq-eval does with a checkpoint, in the advice to take an older one.
EVALUATE = "evaluate"


class Policy:
    """A trained seedq policy for one env: call it on each observation for the env's action,
    ``reset()`` between episodes. It keeps the LSTM state itself and acts with its algorithm's
    own selector.

    ``action_space``: the env's, which calling the policy maps its actions into; None: the
    trained env's, read from the checkpoint on the first call (:func:`trained_action_space`).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        config: dict[str, Any],
        *,
        mode: str = "sample",
        epsilon: float | None = None,
        seed: int = 0,
        action_space: Any = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not allowed; choose one of {list(MODES)}")
        check_policy_arguments(epsilon=epsilon, seed=seed)
        self.model = model.eval()
        self.config = config
        self.algorithm = config["algorithm"]["name"]
        self.mode = mode
        agent = agent_class(self.algorithm)
        alg = SimpleNamespace(**config["algorithm"])
        self.select = agent.make_selector(alg, greedy=mode == "greedy")
        default = agent.default_epsilon(alg)
        if default is None and epsilon is not None:
            # It changed nothing: only a value-based policy (R2D2) acts epsilon-greedily.
            raise ValueError(
                f"epsilon={epsilon}: a {self.algorithm} policy has no epsilon (only R2D2's "
                "acts epsilon-greedily); mode=greedy or mode=sample chooses how it acts"
            )
        if default is not None and mode == "greedy":
            # Greedy is the argmax, as for every other policy; R2D2's eval epsilon acted
            # at random now and then under mode=greedy.
            if epsilon:
                raise ValueError(
                    f"epsilon={epsilon} with mode='greedy', which acts with epsilon 0: give "
                    "mode='sample' to act epsilon-greedily"
                )
            default = 0.0
        self.epsilon = default if epsilon is None else float(epsilon)
        self.generator = torch.Generator().manual_seed(seed)
        self.obs_shape: tuple[int, ...] | None = None  # set by load_policy
        self.spec: EnvSpec | None = None  # set by load_policy
        self.path: Path | None = None  # the checkpoint file, set by load_policy
        self.action_space = action_space
        self._to_env: Callable[[np.ndarray], np.ndarray] | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the recurrent state: the next observation starts an episode."""
        self._state = self.model.initial_state(1, "cpu")
        self._new_episode = True

    def __call__(self, obs: np.ndarray) -> Any:
        """The env's action for ``obs``: :meth:`act`'s, mapped into ``self.action_space`` as
        training's env batch maps it (``seedq.envs.gym_spaces.env_actions``): an int of a Discrete
        (its ``start`` added), the entries of a MultiDiscrete or MultiBinary, a Box's vector
        clipped to its bounds in its dtype."""
        if self._to_env is None:
            if self.action_space is None:
                self.action_space = trained_action_space(self.config, self.spec)
            env_id = self.config.get("env", {}).get("id", "the env")
            self._check_action_space(env_id)
            self._to_env = env_actions(env_id, self.action_space)
        action = self._to_env(np.asarray([self.act(obs)]))[0]
        return action.item() if action.ndim == 0 else action

    def _check_action_space(self, env_id: str) -> None:
        """A ValueError unless ``self.action_space`` takes the actions the policy was trained
        on (a continuous policy's vector, mapped as a Discrete's index, went out as garbage)."""
        from gymnasium import spaces

        space = self.action_space
        if not isinstance(space, spaces.Space):
            # A string or the env itself was read as the env's space and refused in its name.
            instead = ", not the env" if hasattr(space, "action_space") else ""
            raise ValueError(
                f"action_space={space!r} is not a gymnasium space: give env.action_space{instead}"
            )
        discrete = spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary
        if not (continuous_actions(space) or isinstance(space, discrete)):
            raise ValueError(f"action_space={space}: a policy acts in {ACTION_SPACES}")
        if self.spec is None:
            return
        continuous = continuous_actions(space)
        n = int(space.shape[0]) if continuous else joint_actions(env_id, space)[0]
        kind = CONTINUOUS if continuous else DISCRETE
        if (kind, n) != (self.spec.action_kind, self.spec.num_actions):
            raise ValueError(
                f"action_space={space} takes {n} {kind} actions; the policy was trained on "
                f"{self.spec.num_actions} {self.spec.action_kind} ones"
            )

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> int | np.ndarray:
        """The network's action for ``obs``: an index into its discrete actions, or the float32
        vector it chose, unclipped; what seedq's env batches take. Calling the policy maps it
        into the env's action space.

        ``obs`` is laid out as training's env batch delivered it (``self.obs_shape``);
        ``seedq.envs.gym_spaces.obs_transform`` turns a gymnasium env's raw ones into that
        layout."""
        obs = self._checked_obs(obs)
        obs_t = torch.as_tensor(obs)[None, None]
        done = torch.tensor([[self._new_episode]])
        out, self._state = self.model(obs_t, done, self._state)
        self._new_episode = False
        epsilon = None if self.epsilon is None else torch.tensor([float(self.epsilon)])
        action = self.select(out, epsilon, self.generator).actions[0]
        return action.numpy() if action.is_floating_point() else int(action)

    def _layout(self) -> str:
        """Where observations in the policy's layout come from, for a refusal."""
        kind = self.config.get("env", {}).get("kind")
        if kind in KINDS and not plays_gymnasium_id(kind):
            # obs_transform's advice was wrong here: Atari's are preprocessed stacks of frames.
            return (
                f"as seedq's env={kind} batch delivers them: seedq.envs.make_env_batch builds "
                "it from seedq.envs.env_config(policy.config['env'])"
            )
        return (
            "a gymnasium env's raw observations take seedq.envs.gym_spaces.obs_transform's layout: "
            "one-hots of Discrete states, Dict and Tuple ones flattened into a vector, "
            "channels-first images"
        )

    def _checked_obs(self, obs: Any) -> np.ndarray:
        """``obs`` as an array of the shape and dtype training delivered (``self.spec``), or a
        ValueError saying what to give instead: a string, a dict or a float frame reached the
        network as a torch TypeError, or as an action chosen from garbage."""
        if isinstance(obs, tuple) and len(obs) == 2 and isinstance(obs[1], dict):
            raise ValueError(
                "the policy was given an (obs, info) pair, what env.reset() returns; give it "
                "the observation: obs, info = env.reset(); policy(obs)"
            )
        wanted = "" if self.spec is None else f" of shape {self.obs_shape} {self.spec.obs_dtype}"
        try:
            array = np.asarray(obs)
        except ValueError:
            array = np.asarray(None)  # ragged nested sequences: refused below, as objects
        if array.dtype.kind not in "biuf":
            raise ValueError(
                f"an observation of {type(obs).__name__} {array.dtype}; the policy takes an "
                f"array of numbers{wanted} ({self._layout()})"
            )
        if self.spec is None:
            return array
        if array.shape != self.obs_shape:
            batch = array.shape[1:] == self.obs_shape
            raise ValueError(
                f"an observation of shape {array.shape}; the policy was trained on "
                f"{self.obs_shape} "
                + (
                    "and acts on one observation at a time, keeping one env's recurrent "
                    "state: call it once per observation, one policy per env"
                    if batch
                    else f"({self._layout()})"
                )
            )
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            # Training's broker refuses such rows too (seedq.messages.batch); the action chosen
            # from one was whatever the argmax of NaN is.
            bad = np.flatnonzero(~np.isfinite(array))[:5].tolist()
            raise ValueError(
                f"an observation holding NaN or inf (flat indices {bad}); the policy acts only "
                "on finite ones, as training did"
            )
        trained = np.dtype(self.spec.obs_dtype)
        if array.dtype == trained:
            return array
        if trained.kind in "ui" and array.dtype.kind == "f" and not (array % 1 == 0).all():
            raise ValueError(
                f"a {array.dtype} observation of fractions; the policy was trained on {trained} "
                f"ones, as its env gave them (frames: 0 to 255, not scaled to [0, 1])"
            )
        if trained.kind == "b" and not np.isin(array, (0, 1)).all():
            raise ValueError(
                "an observation with values other than 0 and 1; the policy was trained on bool "
                "ones (one-hots of Discrete states, MultiBinary entries)"
            )
        if trained.kind in "ui" and array.size:
            info = np.iinfo(trained)
            if array.min() < info.min or array.max() > info.max:
                raise ValueError(
                    f"an observation with values in [{array.min()}, {array.max()}]; the policy "
                    f"was trained on {trained} ones, in [{info.min}, {info.max}]"
                )
        return array.astype(trained)


def check_policy_arguments(*, epsilon: Any, seed: Any) -> None:
    """ValueError naming ``epsilon`` or ``seed`` where it is not a number in its range: an
    epsilon of 2 or NaN acted at random or greedily without a word, and a seed out of
    torch's range ended in its RuntimeError."""
    real = isinstance(epsilon, numbers.Real) and not isinstance(epsilon, bool)
    if epsilon is not None and not (real and 0.0 <= epsilon <= 1.0):
        why = "is out of range" if real else "is not a number"
        raise ValueError(f"epsilon={epsilon!r} {why}; it must be a number in [0, 1]")
    whole = isinstance(seed, numbers.Integral) and not isinstance(seed, bool)
    if not (whole and 0 <= seed <= MAX_SEED):
        why = "is out of range" if whole else "is not a whole number"
        raise ValueError(f"seed={seed!r} {why}; it must be a whole number in [0, {MAX_SEED}]")


def plays_gymnasium_id(kind: str | None) -> bool:
    """Whether an env of ``kind`` is the gymnasium id itself, made with ``gymnasium.make``
    (the registry's ``gymnasium_id``), not seedq's own env batch."""
    return kind in KINDS and backend(kind).gymnasium_id


def trained_action_space(config: Mapping[str, Any], spec: EnvSpec | None) -> Any:
    """The action space of the env a checkpoint trained on: a gymnasium id's own, built once as
    training built it (``env.kwargs`` applied), so a Discrete's ``start`` and a MultiDiscrete's
    entries are known; for seedq's own env batches, which take the policy's index, and the fake
    env, what ``spec`` records."""
    from gymnasium import spaces

    env = config.get("env") or {}
    if plays_gymnasium_id(env.get("kind")):
        try:
            return single_action_space(env["id"], env.get("kwargs"))
        except EnvError as exc:
            raise EnvError(
                f"the policy maps its actions into env.id={env['id']!r}'s action space, which "
                f"cannot be read here ({exc}); give load_policy action_space=env.action_space, "
                "or act with policy.act(obs), the network's action"
            ) from exc
    if spec is None:
        raise ValueError(
            "the policy has no env spec to map its actions with: give it "
            "action_space=env.action_space, or act with policy.act(obs)"
        )
    if spec.continuous:
        low, high = (np.array(bound, np.float32) for bound in (spec.action_low, spec.action_high))
        return spaces.Box(low, high, dtype=np.float32)
    return spaces.Discrete(spec.num_actions)


def load_policy(
    path: str,
    *,
    mode: str = "sample",
    epsilon: float | None = None,
    seed: int = 0,
    action_space: Any = None,
) -> Policy:
    """The policy of a checkpoint file or of a run directory's newest checkpoint that reads
    (CPU), acting on one observation at a time.

    ``mode``: ``"sample"`` (V-trace's softmax, PPO's and SAC's Gaussian, R2D2 epsilon-greedy
    with ``epsilon``, the run's eval epsilon if None) or ``"greedy"`` (the argmax, the mean).
    ``seed``: of the policy's own random stream. ``action_space``: the env's the policy acts
    in, if not the trained env's (read from the checkpoint's config when first needed).

    Raises:
        CheckpointError: no checkpoint at ``path``, or one that is damaged or not seedq's.
        ValueError: a mode, epsilon, seed or action space the policy cannot act with.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path={path!r}: give a run directory or a checkpoint file, a str or Path")
    read, state = read_checkpoint(path, EVALUATE)
    config = state["config"]
    if "spec" not in state:
        raise CheckpointError(f"{read} is not a seedq checkpoint (it has no spec)")
    spec = state["spec"]
    alg = config["algorithm"]
    model_cfg = SimpleNamespace(**alg["model"])
    if alg["name"] not in agent_names():
        # A newer seedq's algorithm, or a file edited by hand: the registry's KeyError.
        raise CheckpointError(
            f"{read} was written by algorithm={alg['name']!r}, which this seedq does not have "
            f"(it has {agent_names()}); load it with the seedq that trained it"
        )
    agent = agent_class(alg["name"])
    model = agent.build_model(
        EnvSpec.from_dict(spec),
        SimpleNamespace(**{**alg, "model": model_cfg}),
        channels_last=config["hardware"]["channels_last"],
    )
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        # Wrong shapes, missing or unexpected keys: a file edited or written by another network.
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise CheckpointError(
            f"{read}: its weights do not fit the network its config builds ({detail[:400]}); "
            "it is damaged or not a seedq checkpoint"
        ) from None
    policy = Policy(model, config, mode=mode, epsilon=epsilon, seed=seed, action_space=action_space)
    policy.obs_shape = tuple(spec["obs_shape"])
    policy.spec = EnvSpec.from_dict(spec)
    policy.path = read  # the checkpoint file it came from
    if action_space is not None:
        # Refused here, where it enters, not at the first step.
        policy._check_action_space(config.get("env", {}).get("id", "the env"))
    return policy
