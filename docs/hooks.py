"""MkDocs hooks: the parts of the docs that are generated from the code when the site is built.

Two markers are replaced, wherever a page has them, so that no page keeps a copy by hand (and the images that
``benchmarks/RESULTS.md`` links as ``../docs/img/…``, right on GitHub, are linked from the site's root):

- ``<!-- schema -->`` becomes :func:`reporter.schema.markdown` (the results.json reference), between
  ``<!-- schema:begin -->`` and ``<!-- schema:end -->``;
- ``<!-- contracts -->`` becomes the import-linter contracts read from ``pyproject.toml``.

``tests/test_architecture.py`` checks :func:`expand` on the committed pages.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter (the test extra) brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_MARK = "<!-- schema -->"
CONTRACTS_MARK = "<!-- contracts -->"
#: the heading level of each document's table on the reference page (the page title is level 1)
SCHEMA_LEVEL = 2


def schema_block() -> str:
    """The generated results.json tables, between their begin/end markers."""
    from reporter.schema import markdown

    return f"<!-- schema:begin -->\n{markdown(level=SCHEMA_LEVEL)}<!-- schema:end -->"


def contracts_markdown(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The ``[[tool.importlinter.contracts]]`` of ``pyproject`` as a Markdown list."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    out = []
    for c in contracts:
        out.append(f"- **{c['name']}** (`{c['type']}`)")
        if c["type"] == "forbidden":
            out.append(f"    - modules: {', '.join(f'`{m}`' for m in c['source_modules'])}")
            out.append(f"    - may not import: {', '.join(f'`{m}`' for m in c['forbidden_modules'])}")
        elif c["type"] == "layers":
            out.append("    - from the top layer (may import everything below it) to the bottom:")
            out.extend(f"        {i}. {' · '.join(f'`{m.strip()}`' for m in layer.split('|'))}"
                       for i, layer in enumerate(c["layers"], 1))
        elif c["type"] == "acyclic_siblings":
            out.append(f"    - under: {', '.join(f'`{m}`' for m in c['ancestors'])}")
        else:  # a contract type this page does not spell out: show its keys as they are
            out.extend(f"    - {k}: `{v}`" for k, v in c.items() if k not in ("name", "type"))
    return "\n".join(out) + "\n"


def expand(markdown: str) -> str:
    """``markdown`` with every generated part filled in."""
    if SCHEMA_MARK in markdown:
        markdown = markdown.replace(SCHEMA_MARK, schema_block())
    if CONTRACTS_MARK in markdown:
        markdown = markdown.replace(CONTRACTS_MARK, contracts_markdown())
    results = '--8<-- "benchmarks/RESULTS.md"'
    if results in markdown:  # included here rather than by the snippets extension, to relink its images
        markdown = markdown.replace(results, (ROOT / "benchmarks" / "RESULTS.md").read_text())
    markdown = markdown.replace("](../docs/img/", "](img/")
    return markdown


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: fill in the generated parts of each page."""
    return expand(markdown)
