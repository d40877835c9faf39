"""The README's key table is the one scripts/key_table.py generates from the config fields."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("key_table", ROOT / "scripts" / "key_table.py")
key_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(key_table)


def test_readme_key_table_is_current():
    readme = (ROOT / "README.md").read_text()
    assert key_table.readme_block(readme) == key_table.key_table(), (
        "README.md's key table is stale: run python scripts/key_table.py --update README.md"
    )


def test_key_table_lists_every_algorithm_s_keys():
    table = key_table.key_table()
    assert ("`algorithm.unroll_length`" in table, "`algorithm.burn_in`" in table) == (True, True)
