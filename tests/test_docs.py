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

    from seedq.cli import foreign_algorithm_key, foreign_env_key, misspelt_key

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
