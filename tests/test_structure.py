"""The package structure: no two of seedq's packages import each other, directly or around a
circle, counting every import (top level, inside functions, under TYPE_CHECKING)."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import seedq

ROOT = Path(seedq.__file__).parent


def unit(module: str) -> str | None:
    """The package (or top-level module) of ``seedq.x.y``: ``x``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "seedq" else None


def import_graph() -> dict[str, dict[str, str]]:
    """{unit: {imported unit: one file that imports it}} over every import statement."""
    graph: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        src = rel.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                dst = unit(name)
                if dst and dst != src:
                    graph[src].setdefault(dst, str(rel))
    return graph


def find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in graph.get(node, {}):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_import_circle_between_seedqs_packages():
    graph = import_graph()
    cycle = find_cycle(graph)
    pairs = zip(cycle, cycle[1:], strict=False) if cycle else []
    where = [f"{a} -> {b} ({graph[a][b]})" for a, b in pairs]
    assert cycle is None, "import circle: " + "; ".join(where)


def test_the_protocol_types_sit_below_the_learner_runtime_and_the_agents():
    graph = import_graph()
    assert set(graph["core"]) <= {"messages", "schema"}
    assert "agents" not in graph["learner"] and "arch" not in graph["agents"]
