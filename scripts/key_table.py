"""Print the table of config keys, generated from the dataclass defaults and help.

The keys every run has, then each env family's (``env=<kind>``), then each algorithm's.

``python scripts/key_table.py`` prints the Markdown; ``--update docs/config-keys.md`` replaces
the block between the ``<!-- keys:begin -->`` and ``<!-- keys:end -->`` markers of that docs
page. ``tests/test_docs.py`` checks that the page's block is what this prints, so a changed
default or help text shows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from seedq.agents.registry import agent_names
from seedq.config import schema_for
from seedq.envs.registry import BACKENDS
from seedq.schema import describe

BEGIN, END = "<!-- keys:begin -->", "<!-- keys:end -->"


def _default(value: object) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def _cell(text: str) -> str:
    """A help text as one Markdown table cell: no column break, no HTML tag (<run dir>)."""
    return text.replace("|", "/").replace("<", "&lt;").replace(">", "&gt;")


def _rows(docs) -> list[str]:  # noqa: ANN001 - KeyDoc iterable
    return [f"| `{d.key}` | {_default(d.default)} | {_cell(d.help)} |" for d in docs]


def key_table() -> str:
    """Markdown: the keys every run has, each env family's ``env.*`` keys, then each
    algorithm's ``algorithm.*`` keys."""
    header = ["| key | default | meaning |", "|---|---|---|"]
    names = agent_names()
    common = [
        d for d in describe(schema_for(names[0])) if not d.key.startswith(("algorithm.", "env."))
    ]
    lines = ["Every run:", "", *header, *_rows(common)]
    for kind, backend in BACKENDS.items():
        env = [d for d in describe(schema_for(names[0], kind)) if d.key.startswith("env.")]
        lines += ["", f"`env={kind}`, {backend.summary}:", "", *header, *_rows(env)]
    for name in names:
        own = [d for d in describe(schema_for(name)) if d.key.startswith("algorithm.")]
        lines += ["", f"`algorithm={name}`:", "", *header, *_rows(own)]
    return "\n".join(lines) + "\n"


def key_block(text: str) -> str:
    """What stands between the markers of ``text`` (ValueError without them)."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--update", type=Path, help="rewrite the key block of this page (docs/config-keys.md)"
    )
    args = parser.parse_args()
    table = key_table()
    if args.update is None:
        print(table, end="")
        return
    text = args.update.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    args.update.write_text(text[:start] + "\n" + table + text[end:])


if __name__ == "__main__":
    main()
