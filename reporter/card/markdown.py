"""The card as Markdown: ``card.md`` for release notes and wikis, and a Hugging Face model-card README.

``card.md`` is GitHub-flavoured Markdown (``templates/card.md.j2``): a title, a summary of a few
lines, the leaderboard and per-task tables with CIs, the warnings, the law-adjusted ranking
when there is one, one paragraph of methods, and a pointer to ``card.html``. Its charts are PNG
files in ``card_files/`` beside it (vl-convert), linked relatively with alt text. Every section
is a template block, so one of them can be printed alone (:data:`MD_SECTIONS`).

The Hugging Face README of one model (:func:`hf_readme`) is YAML front matter holding the
model's ``model-index`` results (:mod:`reporter.card.model_index`) followed by the model's own
section: its scores, rank, MUI, LPP signature and warnings.

>>> from reporter.card.data import load_card
>>> text = markdown_card(load_card(run_dir))
>>> text.splitlines()[0].startswith("# Model card:"), "| Rank (95% interval) |" in text
(True, True)
>>> md_escape("a|b *c* <d>")
'a\\\\|b \\\\*c\\\\* &lt;d&gt;'
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import jinja2
import yaml

from ..errors import UserError
from ..store.layout import CARD_FILES as CHARTS_DIR
from .assets import markdown_environment
from .format import md_escape
from .model_index import model_index

__all__ = ["MD_SECTIONS", "CHARTS_DIR", "md_escape", "markdown_card", "hf_readme"]

#: the blocks of card.md, in order (``--section`` names one)
MD_SECTIONS = ("title", "summary", "leaderboard", "tasks", "warnings", "law", "methods")
#: the charts card.md shows, with their alt text
MD_CHARTS = {"task_scores": "Score per task and model with 95% confidence intervals; ticks: chance levels and the "
                            "untrained reference"}


def _template(name: str) -> jinja2.Template:
    return markdown_environment().get_template(name)


def markdown_card(card: dict[str, Any], charts: Sequence[tuple[str, str, str]] = (),
                  section: str | None = None) -> str:
    """card.md's text (or one of its :data:`MD_SECTIONS`); ``charts`` = [(name, relative path, alt text)]."""
    tmpl = _template("card.md.j2")
    context = {"card": card, "charts": list(charts)}
    if section is None:
        text = tmpl.render(**context)
    elif section not in MD_SECTIONS:
        raise UserError(f"unknown card section '{section}'; card.md has: {', '.join(MD_SECTIONS)}")
    else:
        text = "".join(tmpl.blocks[section](tmpl.new_context(context)))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def write_markdown_charts(card: dict[str, Any], root: Path) -> list[tuple[str, str, str]]:
    """Write card.md's charts as PNG files into ``root/card_files``; returns (name, relative path, alt)."""
    import vl_convert

    from ..store.atomic import write_bytes
    from .charts import chart_specs
    from .vega import vl_version

    out = []
    for name, spec in chart_specs(card, list(MD_CHARTS)).items():
        png = vl_convert.vegalite_to_png(spec, vl_version=vl_version(), scale=2)
        write_bytes(root / CHARTS_DIR / f"{name}.png", png)
        out.append((name, f"{CHARTS_DIR}/{name}.png", MD_CHARTS[name]))
    return out


def hf_readme(card: dict[str, Any], model: str) -> str:
    """A Hugging Face model-card README for ``model`` (name or slug): model-index front matter + its section.

    >>> from reporter.card.data import load_card
    >>> text = hf_readme(load_card(card_run_dir), "smol")
    >>> text.startswith("---\\ntags:"), "\\nmodel-index:" in text, "# smol" in text
    (True, True, True)
    """
    m = next((x for x in card["models"] if model in (x["name"], x["slug"])), None)
    if m is None:
        names = ", ".join(x["name"] for x in card["models"])
        raise UserError(f"--model '{model}' is not a model of this run; it has: {names}")
    if m.get("reference"):
        raise UserError(f"model '{m['name']}' is an untrained reference (random weights), the other models' chance "
                        "level, not a model to publish; its numbers are in card.md")
    doc = model_index(card).get(m["slug"])
    if doc is None:
        raise UserError(f"model '{m['name']}' has no benchmark result in this run; there is nothing to publish")
    front = yaml.safe_dump({"tags": ["reporter", "evaluation"], **doc}, sort_keys=False, allow_unicode=True)
    def named(name: str) -> re.Pattern[str]:
        return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])")  # gpt2 is not gpt2-large

    mine, others = named(m["name"]), [named(x["name"]) for x in card["models"] if x is not m]
    # the warnings that name this model, and the run-wide ones that name no model (small samples, too few models)
    warnings = [(level, text) for level, text in card["warnings"]
                if mine.search(text) or not any(o.search(text) for o in others)]
    notes = [text for _, text in m["badges"] if not text.startswith("contamination")]
    body = _template("hf_readme.md.j2").render(card=card, m=m, warnings=warnings, notes=notes)
    return f"---\n{front}---\n\n" + re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"
