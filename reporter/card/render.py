"""The model card: self-contained HTML and PDF, plus Hugging Face ``model-index`` YAML.

Everything comes from a run directory's ``results.json`` and ``manifest.json``; no model is
loaded and torch is never imported. The card is the registered sections
(:mod:`reporter.card.sections`) in order, each with its charts (:mod:`reporter.card.charts`);
a section whose data a run lacks says so in one line; a key of the wrong type is a
:class:`~reporter.errors.SchemaError` naming its path, never a silently wrong card.
"""
from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Sequence

import jinja2
import yaml

from ..errors import UserError
from ..store.atomic import write_bytes
from ..store.layout import CARD_HTML, CARD_PDF, MODEL_INDEX_DIR
from .charts import chart_specs, javascript_bundle, svg_data_uri
from .data import load_card
from .format import fmt_about, fmt_num, fmt_p, fmt_pct, fmt_signed
from .model_index import model_index
from .sections import SECTIONS, ordered_sections

FORMATS = ("html", "pdf")


def render(run_dir: str | Path, formats: Sequence[str] = FORMATS) -> dict[str, Path]:
    """Write ``card.html`` / ``card.pdf`` and ``model-index/<slug>.yaml`` into ``run_dir``.

    Returns the written paths by key (``"html"``, ``"pdf"``, ``"model-index/<slug>"``).

    >>> sorted(render(run_dir, formats=("html",)))
    ['html', 'model-index/GPT-2-base', 'model-index/Llama-chat', 'model-index/Untrained']
    """
    if unknown := [f for f in formats if f not in FORMATS]:
        raise UserError(f"unknown card format(s) {', '.join(unknown)}; use html, pdf")
    root = Path(run_dir)
    card = load_card(root)
    sections = [(s, s.missing_line(card)) for s in ordered_sections()]
    specs = chart_specs(card, [c for s, line in sections if line is None for c in s.charts])
    page = _environment().get_template("card.html.j2")
    out: dict[str, Path] = {}
    if "html" in formats:
        data = {k: {x: v for x, v in s.items() if x != "$schema"} for k, s in specs.items()}  # no URL at all
        html = page.render(card=card, sections=sections, mode="html", css=_asset("card.css"),
                           vega_js=javascript_bundle(), charts=dict.fromkeys(data, ""),
                           specs_json=script_json(data))
        out["html"] = write_bytes(root / CARD_HTML, html.encode())
    if "pdf" in formats:
        import weasyprint

        html = page.render(card=card, sections=sections, mode="pdf", css=_asset("card.css"), vega_js="",
                           specs_json="{}", charts={k: svg_data_uri(s) for k, s in specs.items()})
        out["pdf"] = write_bytes(root / CARD_PDF, weasyprint.HTML(string=html).write_pdf())
    for slug, doc in model_index(card).items():
        out[f"model-index/{slug}"] = write_bytes(root / MODEL_INDEX_DIR / f"{slug}.yaml",
                                                 yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode())
    return out


def script_json(data: object) -> str:
    """JSON safe to inline in a ``<script>`` block: ``<``, ``>`` and ``&`` are written as ``\\u`` escapes,
    so no value (a model called ``</script>`` or ``<!--``) can end or comment out the block.

    >>> script_json({"name": "x<!--<script></script>&"})
    '{"name": "x\\\\u003c!--\\\\u003cscript\\\\u003e\\\\u003c/script\\\\u003e\\\\u0026"}'
    """
    return json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return files("reporter.template_files").joinpath(name).read_text(encoding="utf-8")


def _load(name: str) -> str:
    """A template: ``section:<name>`` is a registered section's inline source, anything else a shipped file."""
    if name.startswith("section:"):
        source = SECTIONS.get(name.split(":", 1)[1]).source
        if source is None:
            raise AssertionError(f"template {name}: the section has no inline source")
        return source
    return _asset(name)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FunctionLoader(_load), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(pct=fmt_pct, num=fmt_num, pval=fmt_p, signed=fmt_signed, about=fmt_about)
    return env
