"""The ``arch`` section (Hydra group ``arch``): how acting and learning are arranged.

* ``seed``: actor processes step CPU envs and send observations over ZeroMQ to central
  inference (``seedq.arch.seed``); the default, and the only one that spans hosts.
* ``sebulba``: vector envs stepped by threads of the learner process, batches handed to
  inference without sockets (``seedq.arch.sebulba``).
* ``anakin``: envs written as tensor code (``seedq.envs.tensor``), stepped on the learner's
  device inside one act-and-learn loop (``seedq.arch.anakin``).

Which algorithm runs under which architecture is not listed here: each architecture names the
agent capabilities it needs (:data:`ARCH_NEEDS`), and each algorithm's config class declares
what its agent cannot do and why (``AlgorithmConfig.cannot``). This module imports no torch:
configs compose and validate without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from seedq.schema import ConfigError, check_positive, choice, section_type, setting

ARCH_NAMES = ("seed", "sebulba", "anakin")
# What each architecture needs of an agent beyond the Agent protocol's threaded half
# (on_unroll + train): "learn", a synchronous learn(unroll) on device-resident unrolls.
ARCH_NEEDS: dict[str, tuple[str, ...]] = {"seed": (), "sebulba": (), "anakin": ("learn",)}
# How each capability reads in a refusal: "arch=X <needs>; algorithm=Y cannot: <its reason>".
CAPABILITIES = {
    "learn": "trains on each unroll as soon as it is collected on the device (Agent.learn)",
}
ENV_DTYPES = ("float32", "float64")


@dataclass
class AnakinConfig:
    # 1,024 envs x 16 steps trained as 8 updates of 128 columns: many small updates learn the
    # classic-control envs in fewer env steps than one big one (RESULTS, arch=anakin); a larger
    # num_envs raises env steps/s (seedq-bench anakin), not learning speed.
    num_envs: int = setting(1024, "envs stepped together on the device")
    unroll_length: int | None = setting(
        16, "transitions per unroll (null: algorithm.unroll_length)"
    )
    minibatches: int = setting(
        8,
        "updates per unroll: its num_envs columns are split into this many batches, trained "
        "one after another (Agent.learn on each; V-trace corrects the later ones' small "
        "policy lag, PPO trains each share for its epochs)",
    )
    env_dtype: str = setting(
        "float32",
        "floating dtype of the tensor envs' state: float64 reproduces gymnasium step for step, "
        "float32 is faster and is what GPUs do well",
    )


@dataclass
class SebulbaConfig:
    threads: int = setting(
        0,
        "env-stepping threads in the learner process (0: sized at start to the cores left "
        "after the learner's own threads, at least 2 (fewer where actor.max_envs caps them), "
        "logged)",
    )
    envs_per_thread: int = setting(32, "envs in each thread's vector env")


@dataclass
class ArchConfig:
    name: str = setting("seed", f"the architecture: {', '.join(ARCH_NAMES)}")
    anakin: AnakinConfig = setting(help="arch=anakin: envs on the device", factory=AnakinConfig)
    sebulba: SebulbaConfig = setting(
        help="arch=sebulba: env threads in the learner", factory=SebulbaConfig
    )
    # The arch group's option that composed this section ("": built otherwise, e.g. a resumed
    # run's saved section, whose name stands alone). Each conf/arch/<option>.yaml starts from
    # its option's class, as each env family's from its own, so that arch.name=anakin under
    # arch=seed, which would skip anakin.yaml's preset, is refused.
    option: ClassVar[str] = ""


@dataclass
class SeedArchConfig(ArchConfig):
    option: ClassVar[str] = "seed"


@dataclass
class SebulbaArchConfig(ArchConfig):
    option: ClassVar[str] = "sebulba"


@dataclass
class AnakinArchConfig(ArchConfig):
    option: ClassVar[str] = "anakin"


# Stored as arch_<option>_schema (seedq.config.register_configs) for conf/arch/<option>.yaml.
ARCH_OPTIONS: dict[str, type[ArchConfig]] = {
    c.option: c for c in (SeedArchConfig, SebulbaArchConfig, AnakinArchConfig)
}


def anakin_env_ids() -> list[str]:
    """The env ids ``arch=anakin`` can run (imports the tensor envs, hence torch)."""
    from seedq.envs.tensor import tensor_env_ids

    return tensor_env_ids()


def validate_arch(cfg: Any) -> None:
    """Check ``cfg.arch`` and the combinations it cannot run (an agent without a capability
    the architecture needs, an env without a tensor implementation), naming what can."""
    arch = cfg.arch
    choice("arch.name", arch.name, ARCH_NAMES)
    option = getattr(section_type(arch), "option", "")
    if option and arch.name != option:
        raise ConfigError(
            f"arch.name={arch.name} comes with arch={arch.name}, which brings that "
            f"architecture's preset (conf/arch/{arch.name}.yaml); this run is arch={option}: "
            f"write arch={arch.name}"
        )
    if arch.name != "seed" and cfg.launcher.name != "local":
        raise ConfigError(
            f"launcher={cfg.launcher.name} starts actor processes on other hosts; arch="
            f"{arch.name} has none (its envs step in the learner process), so nothing would "
            "run there: use arch=seed to act on other hosts, or drop launcher="
            f"{cfg.launcher.name}"
        )
    check_positive(arch.sebulba, "arch.sebulba", ["envs_per_thread"])
    check_positive(arch.sebulba, "arch.sebulba", ["threads"], zero_ok=True)
    check_agent_fits(cfg)
    if arch.name != "anakin":
        return
    anakin = arch.anakin
    check_positive(anakin, "arch.anakin", ["num_envs", "minibatches"])
    if anakin.unroll_length is not None:
        check_positive(anakin, "arch.anakin", ["unroll_length"])
    choice("arch.anakin.env_dtype", anakin.env_dtype, ENV_DTYPES)
    if anakin.num_envs % anakin.minibatches:
        raise ConfigError(
            f"arch.anakin.num_envs={anakin.num_envs} is not a multiple of "
            f"arch.anakin.minibatches={anakin.minibatches}; each update trains an equal share"
        )
    if cfg.algorithm.model.use_lstm:
        raise ConfigError(
            "arch=anakin runs feed-forward policies only: algorithm.model.use_lstm=true is not "
            "supported (use arch=seed or arch=sebulba for an LSTM policy)"
        )
    ids = anakin_env_ids()
    if cfg.env.id not in ids:
        raise ConfigError(
            f"arch=anakin needs an env with a tensor implementation; env.kind={cfg.env.kind} "
            f"env.id={cfg.env.id} has none. Envs arch=anakin runs: {', '.join(ids)} "
            "(env=cartpole, or env=gym env.id=<one of them>); use arch=seed or arch=sebulba "
            "for other envs"
        )
    kwargs = getattr(cfg.env, "kwargs", None)
    if kwargs:
        raise ConfigError(
            f"arch=anakin runs its own tensor version of {cfg.env.id}, which takes no "
            f"gymnasium make() arguments: env.kwargs={dict(kwargs)} would be ignored; drop "
            "them, or use arch=seed or arch=sebulba to run the gymnasium env with them"
        )


def check_agent_fits(cfg: Any) -> None:
    """Refuse an algorithm whose agent lacks a capability ``arch.name`` needs, with the reason
    its config class gives (one line, exit 2)."""
    from seedq.agents.registry import config_class

    arch, algorithm = cfg.arch.name, cfg.algorithm.name
    cannot: dict[str, str] = getattr(config_class(algorithm), "cannot", {})
    for need in ARCH_NEEDS[arch]:
        if need in cannot:
            others = " or ".join(
                f"arch={name}"
                for name, needs in ARCH_NEEDS.items()
                if name != arch and not set(needs) & set(cannot)
            )
            raise ConfigError(
                f"arch={arch} {CAPABILITIES[need]}; algorithm={algorithm} cannot: "
                f"{cannot[need]}. Use {others} for algorithm={algorithm}"
            )
