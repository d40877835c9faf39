"""The docs: the README's promises, the generated key table, and the MkDocs site's strict build."""

import contextlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("key_table", ROOT / "scripts" / "key_table.py")
key_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(key_table)

README = (ROOT / "README.md").read_text()


def test_config_keys_page_is_current():
    page = (ROOT / "docs" / "config-keys.md").read_text()
    assert key_table.key_block(page) == key_table.key_table(), (
        "docs/config-keys.md is stale: run python scripts/key_table.py --update docs/config-keys.md"
    )


def test_key_table_lists_every_algorithm_s_keys():
    table = key_table.key_table()
    assert ("`algorithm.unroll_length`" in table, "`algorithm.burn_in`" in table) == (True, True)


def test_key_table_lists_each_env_familys_keys_under_its_option_only():
    table = key_table.key_table()
    atari = table.split("`env=atari`")[1].split("\n\n`")[0]
    assert ("`env.frame_skip`" in atari, "`env.scenario`" in atari) == (True, False)


def test_readme_is_short_and_opens_with_the_two_commands_ci_runs():
    blocks = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()[-1]
    assert len(README.splitlines()) <= 250
    assert blocks[0] == "pip install torch==2.13.0 && pip install -e '.[test]' && seedq-train"
    assert ci == blocks[1], "README.md's test command and .ci/run differ"


def test_readme_links_point_at_files_that_exist():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert missing == []


def test_the_site_builds_strictly(tmp_path):
    """No broken link or anchor, no page missing from the nav, no warning of any kind."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "config-keys" / "index.html").exists()


def test_no_documented_seedq_train_command_names_a_misspelt_key():
    """Every ``seedq-train ...`` line in the README and docs passes the command line's typo
    check (``misspelt_key``), so the check refuses no command the docs give. Commands the docs
    show being refused for another env family's or algorithm's key are not counted."""
    import shlex

    from seedq.command_keys import foreign_algorithm_key, foreign_env_key, misspelt_key

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "benchmarks").glob("*.md"))
    checked, refused = 0, []
    for page in pages:
        for line in page.read_text().replace("\\\n", " ").splitlines():
            for found in re.finditer(r"seedq-train ([^`|;&#\n]*)", line):
                with contextlib.suppress(ValueError):
                    args = [a for a in shlex.split(found.group(1)) if "=" in a]
                    if args and not (foreign_env_key(args) or foreign_algorithm_key(args)):
                        checked += 1
                        if refusal := misspelt_key(args):
                            refused.append(f"{page.name}: {refusal}")
    assert checked > 100
    assert refused == []


def _inline_code(text: str) -> list[str]:
    """The inline code spans of a Markdown page, fenced blocks left out."""
    return re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))


def _layout_names() -> dict[str, set[str]]:
    """What docs/architecture.md's Layout block names: ``{package folder ("" for seedq/
    itself, else "actor/", ...): the module file names on its lines}``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    named: dict[str, set[str]] = {}
    top = ""
    for line in block.splitlines()[2:]:  # after the fence's newline and "seedq/"
        if line and not line.startswith(" "):
            break  # scripts/, benchmarks/, docs/: outside the package
        words = line.split()
        if len(line) - len(line.lstrip()) == 2:
            top = words[0] if words[0].endswith("/") else ""
        named.setdefault(top, set()).update(re.findall(r"\b(\w+\.py)\b", line))
    return named


def test_the_architecture_layout_names_every_module_and_no_other():
    """A module added without a line in the Layout block, or a line left behind by a module
    that moved, fails here (the layout is the map contributors read first)."""
    package = ROOT / "seedq"
    named = _layout_names()
    stale = [
        f"{top}{name}"
        for top, names in named.items()
        for name in names
        if not ((package / name).exists() if not top else any((package / top).rglob(name)))
    ]
    unnamed = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if path.name == "__init__.py" or rel.parts[0] == "conf":
            continue
        top = "" if len(rel.parts) == 1 else f"{rel.parts[0]}/"
        if path.name not in named.get(top, set()):
            unnamed.append(str(rel))
    assert (stale, unnamed) == ([], [])


def test_every_repository_path_the_docs_name_exists():
    """``seedq/...``, ``scripts/...``, ``tests/...`` and package-relative paths such as
    ``arch/seed.py`` or ``tuning/ppo_atari.yaml`` in the README and docs name real files."""
    package = ROOT / "seedq"
    tops = {"seedq", "scripts", "tests", "benchmarks", "docs"}
    tops |= {p.name for p in package.iterdir() if p.is_dir()}
    tops |= {p.name for p in (package / "conf").iterdir() if p.is_dir()}
    checked, missing = 0, []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for code in _inline_code(page.read_text()):
            if "/" not in code or any(c in code for c in " <*{") or code.split("/")[0] not in tops:
                continue
            if not (code.endswith("/") or re.search(r"\.\w+$", code)):
                continue  # a metric (train/lr) or a key, not a file
            checked += 1
            if not any((base / code).exists() for base in (ROOT, package, package / "conf")):
                missing.append(f"{page.name}: {code}")
    assert checked > 100
    assert missing == []


# Metrics the docs name from other systems (Sample Factory's summaries), not seedq's columns.
OTHER_SYSTEMS_METRICS = {"train/kl_divergence"}


def test_every_metric_column_the_docs_name_is_one_a_run_writes():
    from seedq.agents.registry import agent_class, agent_names
    from seedq.arch.monitor import RUN_COLUMNS
    from seedq.metrics import REQUIRED_COLUMNS

    columns = {*REQUIRED_COLUMNS, *RUN_COLUMNS}
    for name in agent_names():
        columns |= set(agent_class(name).metric_columns)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {
        (page.name, code)
        for page in pages
        for code in _inline_code(page.read_text())
        if re.fullmatch(r"(episode|train|perf|faults|loss|replay|eval)/\w+", code)
    }
    unknown = sorted(f"{page}: {code}" for page, code in named if code not in columns)
    assert len(named) > 30
    assert unknown == [f"results.md: {code}" for code in sorted(OTHER_SYSTEMS_METRICS)]


def test_the_architecture_page_lists_the_run_columns_in_their_order():
    """Its Metrics section: item 1 the columns every tool reads first, item 2 the run's own
    groups, each with its names in the order metrics.csv has them."""
    from seedq.arch.monitor import RUN_COLUMNS
    from seedq.metrics import REQUIRED_COLUMNS

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Metrics", 1)[1]
    first = re.search(r"^1\. (.*?)^2\. (.*?)^3\. ", section, flags=re.S | re.M)
    leading = re.findall(r"`(\w+)`", first.group(1))
    groups = re.findall(r"`(\w+/)` \(([^)]*)\)", first.group(2))
    run = [group + name.strip() for group, names in groups for name in names.split(",")]
    assert (leading, run) == (list(REQUIRED_COLUMNS), RUN_COLUMNS)


# Inline code that starts like a key and is not one: modules, CURVE key files, the misspelt
# keys configuration.md shows being refused, gymnasium's env methods.
NOT_KEYS = {
    "actor.main",
    "broker.shard_process",
    "checkpoint.check_compatible",
    "actor.key",
    "actor.key_secret",
    "algorithm.lrr",
    "algorithm.foo",
    "algorithm.discount",
    "env.sticky_actions",
    "env.reset",
    "env.observation_space",
}


def test_every_config_key_the_docs_name_is_in_the_schema():
    """``arch.anakin.num_envs``, ``actor.max_envs=16``, ``arch.sebulba.*``: a key renamed or
    removed in the code leaves no mention behind in the prose (the command lines have
    ``test_no_documented_seedq_train_command_names_a_misspelt_key``)."""
    from seedq.agents.registry import agent_names
    from seedq.config import schema_for
    from seedq.envs.registry import BACKENDS
    from seedq.schema import describe

    keys = {d.key for a in agent_names() for k in BACKENDS for d in describe(schema_for(a, k))}
    sections = {key.split(".")[0] for key in keys if "." in key}
    checked, unknown = 0, []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for code in _inline_code(page.read_text()):
            for word in code.split():
                found = re.fullmatch(
                    r"[+~]?(\w+(?:\.\w+)+)(\.\*|\.)?(?:=.*)?", word.strip("'\"[](),")
                )
                if not found or found.group(1).split(".")[0] not in sections:
                    continue
                name = found.group(1)
                checked += 1
                # A prefix (`arch.sebulba.*`), a key, or an entry of a mapping key (env.kwargs.X).
                known = any(name.startswith(key + ".") for key in keys) or (
                    name in {k.rsplit(".", i)[0] for k in keys for i in range(1, 4)}
                    if found.group(2)
                    else name in keys
                )
                if not known and name not in NOT_KEYS:
                    unknown.append(f"{page.name}: {word}")
    assert checked > 500
    assert unknown == []


def _modules() -> dict[str, list[str]]:
    """Each dotted tail of a seedq module (``cli``, ``learner.checkpoint``, ...): the modules
    it names, the ones nearest the package root first."""
    named: dict[str, list[str]] = {}
    for path in sorted((ROOT / "seedq").rglob("*.py"), key=lambda p: len(p.parts)):
        parts = path.relative_to(ROOT).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        for i in range(1, len(parts)):
            named.setdefault(".".join(parts[i:]), []).append(".".join(parts))
    return named


def test_every_module_attribute_the_docs_name_exists():
    """``command_keys.misspelt_key``, ``learner_ranks.rank_main``, ``gym_spaces.env_actions``:
    a function moved to another module leaves no reference to its old home."""
    import importlib

    from seedq.agents.registry import agent_names
    from seedq.config import schema_for
    from seedq.envs.registry import BACKENDS
    from seedq.schema import describe

    keys = {d.key for a in agent_names() for k in BACKENDS for d in describe(schema_for(a, k))}
    sections = {key.split(".")[0] for key in keys if "." in key}
    modules = _modules()
    checked, missing = 0, []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for code in _inline_code(page.read_text()):
            found = re.fullmatch(r"(?:seedq\.)?((?:\w+\.)*\w+)\.(\w+)(?:\(.*\))?", code)
            if not found or re.search(r"\.(py|csv|npz|json|log|yaml|md|key|key_secret)$", code):
                continue
            module, attr = found.groups()
            names = modules.get(module, [])
            if code.startswith("seedq."):
                names = [n for n in names if n == f"seedq.{module}"]
            elif module.split(".")[0] in sections - {"checkpoint"} or f"{module}.{attr}" in keys:
                continue  # a config key (arch.anakin.num_envs), not a module's attribute
            nearest = [n for n in names if n.count(".") == names[0].count(".")] if names else []
            if len(nearest) != 1:
                continue
            checked += 1
            owner = importlib.import_module(nearest[0])
            submodule = hasattr(owner, "__path__") and importlib.util.find_spec(
                f"{owner.__name__}.{attr}"
            )
            if not (hasattr(owner, attr) or submodule):
                missing.append(f"{page.name}: {code} ({nearest[0]} has no {attr})")
    assert checked > 15
    assert missing == []


def test_the_configuration_page_lists_every_option_of_every_group():
    """Its Groups table against the YAML groups in seedq/conf and the algorithm registry."""
    from seedq.agents.registry import agent_names

    text = (ROOT / "docs" / "configuration.md").read_text()
    table = text.split("## Groups", 1)[1].split("\n\n", 2)[1]
    listed = {
        row.split("|")[1].strip(" `"): set(re.findall(r"`(\w+)`", row.split("|")[2]))
        for row in table.splitlines()[2:]
    }
    conf = ROOT / "seedq" / "conf"
    groups = {g: {p.stem for p in (conf / g).glob("*.yaml")} for g in listed if g != "algorithm"}
    assert listed == {**groups, "algorithm": set(agent_names())}


def test_the_configuration_page_lists_every_preset():
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split("## Presets", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`((?:arch_)?tuning/\w+)`", section))
    conf = ROOT / "seedq" / "conf"
    presets = {
        f"{p.parent.name}/{p.stem}"
        for g in ("tuning", "arch_tuning")
        for p in (conf / g).glob("*.yaml")
    }
    assert listed == presets


def test_every_default_the_docs_give_after_a_key_is_its_default():
    """``arch.anakin.num_envs`` (1,024), ``total_env_steps`` (5 M): a number in parentheses
    right after a key is the key's default for some algorithm or env family, so a changed
    default leaves no stale figure in the prose."""
    from seedq.agents.registry import agent_names
    from seedq.config import schema_for
    from seedq.envs.registry import BACKENDS
    from seedq.schema import describe

    defaults: dict[str, list] = {}
    for name in agent_names():
        for kind in BACKENDS:
            for doc in describe(schema_for(name, kind)):
                defaults.setdefault(doc.key, []).append(doc.default)
    units = {None: 1, " M": 1e6, "M": 1e6, " k": 1e3, "k": 1e3}
    checked, wrong = 0, []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        pattern = r"`([a-z_]+(?:\.[a-z_]+)*)` \(([0-9][0-9,.]*)( ?[Mk])?[;,) ]"
        for key, number, unit in re.findall(pattern, page.read_text()):
            if key not in defaults:
                continue
            checked += 1
            value = float(number.replace(",", "")) * units[unit or None]
            numbers = [d for d in defaults[key] if isinstance(d, int | float)]
            if not any(float(d) == value for d in numbers if not isinstance(d, bool)):
                wrong.append(
                    f"{page.name}: {key} ({number}{unit}), the default is {defaults[key][0]}"
                )
    assert checked > 25
    assert wrong == []
