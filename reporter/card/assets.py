"""The card's shipped files (templates, CSS) and the Jinja loader shared by every output format.

>>> "{% block leaderboard %}" in load_template("card.md.j2")
True
"""
from __future__ import annotations

from importlib.resources import files

from .sections import SECTIONS

__all__ = ["asset", "load_template"]


def asset(name: str) -> str:
    """A file shipped in ``reporter.template_files`` (``templates/`` in the source tree), as text."""
    return files("reporter.template_files").joinpath(name).read_text(encoding="utf-8")


def load_template(name: str) -> str:
    """A template: ``section:<name>`` is a registered section's inline source, anything else a shipped file."""
    if name.startswith("section:"):
        source = SECTIONS.get(name.split(":", 1)[1]).source
        if source is None:
            raise AssertionError(f"template {name}: the section has no inline source")
        return source
    return asset(name)
