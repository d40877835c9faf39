"""The algorithms seedq knows: adding one is a folder in ``seedq/agents/`` and a line here.

Entries name their config schema and agent class by import path, so listing or validating
configs never imports torch; :func:`agent_class` imports the agent when a run needs it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AgentEntry:
    name: str
    config: str  # "module:Class" of the algorithm's config dataclass
    agent: str  # "module:Class" implementing seedq.core.agent.Agent


AGENTS: dict[str, AgentEntry] = {
    entry.name: entry
    for entry in [
        AgentEntry(
            "vtrace",
            "seedq.agents.vtrace.config:VTraceConfig",
            "seedq.agents.vtrace.agent:VTraceAgent",
        ),
        AgentEntry(
            "r2d2", "seedq.agents.r2d2.config:R2D2Config", "seedq.agents.r2d2.agent:R2D2Agent"
        ),
        AgentEntry("ppo", "seedq.agents.ppo.config:PPOConfig", "seedq.agents.ppo.agent:PPOAgent"),
        AgentEntry("sac", "seedq.agents.sac.config:SACConfig", "seedq.agents.sac.agent:SACAgent"),
    ]
}


def agent_names() -> list[str]:
    return list(AGENTS)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _entry(name: str) -> AgentEntry:
    try:
        return AGENTS[name]
    except KeyError:
        raise KeyError(f"algorithm {name!r} is unknown; choose one of {agent_names()}") from None


def config_class(name: str) -> type:
    return _load(_entry(name).config)


def agent_class(name: str) -> Any:
    return _load(_entry(name).agent)


def build_agent(ctx: Any) -> Any:
    """The configured algorithm's agent for a run (``ctx``: a ``seedq.core.agent.RunContext``)."""
    return agent_class(ctx.cfg.algorithm.name)(ctx)
