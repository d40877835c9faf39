"""The package structure: no two of seedq's packages import each other, and no two of its
modules either, directly or around a circle, counting every import (top level, inside
functions, under TYPE_CHECKING)."""

from __future__ import annotations

import ast
import collections
import subprocess
import sys
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


def module_name(path: Path) -> str:
    """``seedq/envs/atari.py`` -> ``seedq.envs.atari``; a package's ``__init__.py`` is the
    package."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, dict[str, str]]:
    """{module: {imported seedq module: the file that imports it}} over every import statement.

    ``from a.b import c`` imports the module ``a.b.c`` when there is one, else ``a.b`` (the
    package's ``__init__``, which is run); the parent packages an import runs on the way are
    not counted.
    """
    modules = {module_name(path): path for path in ROOT.rglob("*.py")}
    graph: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for src, path in modules.items():
        package = src if path.name == "__init__.py" else src.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{alias.name}" for alias in node.names]
                targets = [t if t in modules else base for t in targets]
            else:
                continue
            for target in targets:
                if target in modules and target != src:
                    graph[src].setdefault(target, str(path.relative_to(ROOT.parent)))
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


def test_no_import_circle_between_seedqs_modules():
    graph = module_graph()
    cycle = find_cycle(graph)
    pairs = zip(cycle, cycle[1:], strict=False) if cycle else []
    where = [f"{a} -> {b} ({graph[a][b]})" for a, b in pairs]
    assert cycle is None, "import circle: " + "; ".join(where)


def test_the_module_graph_sees_imports_inside_functions_and_under_type_checking():
    graph = module_graph()
    # seedq/__init__.py imports seedq.trained_policy inside __getattr__; seedq/envs/gym_spaces.py
    # imports gymnasium only under TYPE_CHECKING, seedq/envs/gym_ids.py seedq.envs.mujoco_import
    # at the top.
    assert "seedq.trained_policy" in graph["seedq"]
    assert "seedq.envs.mujoco_import" in graph["seedq.envs.gym_ids"]


def test_the_protocol_types_sit_below_the_learner_runtime_and_the_agents():
    graph = import_graph()
    assert set(graph["core"]) <= {"messages", "schema"}
    assert "agents" not in graph["learner"] and "arch" not in graph["agents"]


def test_a_refused_command_line_never_imports_torch(tmp_path):
    """seedq-train checks a config before anything imports torch (~2 s of a refusal's start;
    the registry names agents by import path for this): a package ``__init__`` that pulls in
    a learner, or a module-level import in the command line, breaks it."""
    probe = (
        "import sys; sys.argv = ['seedq-train', 'algorithm=ppo', 'algorithm.batch_size=-1'];"
        "import seedq.cli\n"
        "try:\n    seedq.cli.train_main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print('exit', code, 'torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.stdout.split()[-3:] == ["exit", "2", "False"], result.stdout + result.stderr
