"""The card's shipped files (templates, CSS) and the Jinja loader shared by every output format.

>>> "{% block leaderboard %}" in load_template("card.md.j2")
True
"""
from __future__ import annotations

import functools
from importlib.resources import files

import jinja2

from ..analyse.contamination import SIGNAL_NAMES, TESTS
from ..analyse.control_power import power_summary, power_table
from .format import fmt_about, fmt_identity, fmt_num, fmt_p, fmt_p_is, fmt_pct, fmt_signed, fmt_source, md_escape
from .pair_methods import pair_methods
from .sections import SECTIONS
from .text import finalize

__all__ = ["asset", "load_template", "html_environment", "markdown_environment"]

_FILTERS = dict(pct=fmt_pct, num=fmt_num, pval=fmt_p, p_is=fmt_p_is, signed=fmt_signed, about=fmt_about,
                source=fmt_source, identity=fmt_identity)
#: names every template may use: the contamination tests in order, what each signal is called, the power behind
#: "no test fires" at the run's sizes, and what the paired differences' tests and intervals are
_GLOBALS = dict(contamination_tests=TESTS, signal_names=SIGNAL_NAMES, power_summary=power_summary,
                power_source=lambda: power_table()["short"], pair_methods=pair_methods)


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


def _load_compiled(name: str) -> tuple[str, None, object]:
    """:func:`load_template` for an environment that keeps its compiled templates: a template is compiled again
    only when its source changed (a section registered again, a template file edited).
    """
    source = load_template(name)
    # a section's inline source gets a file name of its own, so that an error in it can be traced to the section
    filename = f"<{name}>" if name.startswith("section:") else None
    return source, filename, lambda: load_template(name) == source


@functools.cache
def html_environment() -> jinja2.Environment:
    """The Jinja environment of the HTML/PDF pages (card, compare): autoescaped, strict, the number filters.

    One per process, shared (never change it): it keeps each template compiled, which took about a second of
    every render. The same object every time:

    >>> html_environment() is html_environment()
    True
    """
    env = jinja2.Environment(loader=jinja2.FunctionLoader(_load_compiled), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined, finalize=finalize)
    env.filters.update(_FILTERS)
    env.globals.update(_GLOBALS)
    return env


@functools.cache
def markdown_environment() -> jinja2.Environment:
    """The Jinja environment of the Markdown pages (card.md, HF README, compare.md): ``md`` escapes text.

    One per process, shared, like :func:`html_environment`.
    """
    env = jinja2.Environment(loader=jinja2.FunctionLoader(_load_compiled), autoescape=False, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             finalize=finalize)
    env.filters.update(_FILTERS, md=md_escape)
    env.globals.update(_GLOBALS)
    return env
