"""Every agent under every architecture: the ones its algorithm declares it can run under train
(a short run takes updates), the others are refused at validation with the agent's own reason.

Nothing here names an algorithm or an architecture: the matrix comes from the registries, so a
new algorithm folder is covered the day it is registered.
"""

from __future__ import annotations

import pytest

from seedq.agents.registry import AGENTS, config_class
from seedq.arch import run_class
from seedq.arch.config import ARCH_NAMES, ARCH_NEEDS
from seedq.bench.common import compose
from seedq.config import ConfigError

# Small enough for a loaded 2-core box: each run stops on its step budget in a few seconds.
# max_minutes is only the backstop: SAC takes an update per env step, and beside a test suite
# and two Pong runs it stepped 35 a second, short of 3,000 in a minute.
COMMON = [
    "total_env_steps=3000",
    "max_minutes=3",
    "log_interval_s=0.2",
    "checkpoint.every_minutes=0",
    "hardware.num_threads=1",
]
ARCH = {
    "seed": [
        "actor.transport=inproc",
        "actor.num_actors=1",
        "actor.batches_per_actor=2",
        "actor.envs_per_batch=4",
        "broker.max_batch=8",
    ],
    "sebulba": ["arch.sebulba.threads=2", "arch.sebulba.envs_per_thread=4"],
    "anakin": [
        "env=cartpole",
        "arch.anakin.num_envs=32",
        "arch.anakin.unroll_length=8",
        "arch.anakin.minibatches=2",
    ],
}
# Per-algorithm sizes that train within the budget (keys every one of them has are shared).
ALGORITHM = {
    "vtrace": ["algorithm.unroll_length=5", "algorithm.batch_size=4"],
    "ppo": [
        "algorithm.unroll_length=5",
        "algorithm.batch_size=4",
        "algorithm.minibatches=2",
        "algorithm.epochs=1",
    ],
    "r2d2": [
        "algorithm.sequence_length=4",
        "algorithm.burn_in=2",
        "algorithm.n_step=2",
        "algorithm.batch_size=4",
        "algorithm.replay_min_size=8",
        "algorithm.eval_batches=0",
    ],
    "sac": [
        "env=fake",
        "env.obs_shape=[3]",
        "env.continuous_actions=true",
        "env.num_actions=2",
        "env.episode_length=20",
        "algorithm.batch_size=16",
        "algorithm.learning_starts=32",
        # One update per 8 env steps: ~370 updates in 3,000 steps (an update per step took
        # ~30 s a run on a quiet box).
        "algorithm.updates_per_step=0.125",
    ],
}


def fits(algorithm: str, arch: str) -> bool:
    return not set(ARCH_NEEDS[arch]) & set(config_class(algorithm).cannot)


CASES = [(alg, arch) for alg in AGENTS for arch in ARCH_NAMES]


def test_the_matrix_covers_every_registered_algorithm():
    assert set(ALGORITHM) == set(AGENTS), "give a new algorithm its tiny sizes in ALGORITHM"


@pytest.mark.parametrize(("algorithm", "arch"), [c for c in CASES if fits(*c)])
def test_an_agent_trains_under_each_architecture_it_declares(tmp_path, algorithm, arch):
    overrides = [f"algorithm={algorithm}", f"arch={arch}", *ARCH[arch], *ALGORITHM[algorithm]]
    cfg = compose([*COMMON, *overrides], run_dir=str(tmp_path))
    summary = run_class(arch)(cfg, str(tmp_path)).run()
    assert summary.env_steps >= 3000 and summary.updates > 0, summary
    assert (tmp_path / "metrics.csv").exists()


@pytest.mark.parametrize(("algorithm", "arch"), [c for c in CASES if not fits(*c)])
def test_an_agent_is_refused_by_an_architecture_it_cannot_run_under(algorithm, arch):
    reason = next(config_class(algorithm).cannot[need] for need in ARCH_NEEDS[arch])
    with pytest.raises(ConfigError) as refused:
        compose([f"algorithm={algorithm}", f"arch={arch}", *ARCH[arch]])
    message = str(refused.value)
    assert "\n" not in message
    assert f"arch={arch}" in message and f"algorithm={algorithm} cannot: {reason}" in message
    # It names the architectures that do run the algorithm.
    assert all(f"arch={a}" in message for a in ARCH_NAMES if fits(algorithm, a))


def test_no_allow_list_of_algorithm_names_lives_outside_the_agents_package():
    import pathlib

    import seedq

    root = pathlib.Path(seedq.__file__).parent
    names = [f'"{name}"' for name in AGENTS]
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "agents" not in path.relative_to(root).parts
        and sum(name in path.read_text() for name in names) >= 2
    ]
    assert offenders == []
