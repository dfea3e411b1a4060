"""The model card: self-contained HTML and PDF, Markdown (``card.md``), and Hugging Face ``model-index`` YAML.

Everything comes from a run directory's ``results.json`` and ``manifest.json``; no model is
loaded and torch is never imported. The card is the registered sections
(:mod:`reporter.card.sections`) in order, each with its charts (:mod:`reporter.card.charts`);
a section whose data a run lacks says so in one line; a key of the wrong type is a
:class:`~reporter.errors.SchemaError` naming its path, never a silently wrong card.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..errors import UserError
from ..store.atomic import write_bytes
from ..store.layout import CARD_HTML, CARD_MD, CARD_PDF, HF_DIR, MODEL_INDEX_DIR, slugify
from .assets import asset, html_environment
from .charts import chart_specs, print_specs
from .data import load_card
from .formats import DEFAULT_FORMATS, FORMATS
from .model_index import model_index
from .sections import SECTIONS, ordered_sections
from .vega import javascript_bundle, svg_data_uri


def render(run_dir: str | Path, formats: Sequence[str] = DEFAULT_FORMATS, model: str | None = None, *,
           locked_ok: bool = False) -> dict[str, Path]:
    """Write ``card.html`` / ``card.pdf`` / ``card.md`` and ``model-index/<slug>.yaml`` (each trained model) into
    ``run_dir``.

    Returns the written paths by key (``"html"``, ``"pdf"``, ``"md"``, ``"hf"``, ``"model-index/<slug>"``).
    ``"hf"`` writes ``hf/<slug>/README.md`` for ``model`` (a name or slug of the run). ``locked_ok``: the caller
    holds the run directory's lock (``reporter run``, which draws its card before another run may write there).

    >>> sorted(render(card_run_dir, formats=("html",)))  # tiny: an untrained reference, no model-index
    ['html', 'model-index/smol']
    """
    if unknown := [f for f in formats if f not in FORMATS]:
        raise UserError(f"unknown card format(s) {', '.join(unknown)}; use {', '.join(FORMATS)}")
    if "hf" in formats and not model:
        raise UserError("--format hf writes one model's Hugging Face README: name it with --model NAME")
    if model and "hf" not in formats:
        raise UserError(f"--model {model!r} names the model of --format hf (a Hugging Face README); add hf to "
                        "--format, or leave --model out")
    root = Path(run_dir)
    card = load_card(root, locked_ok=locked_ok)
    _check_targets(root, formats)
    sections = [(s, s.missing_line(card)) for s in ordered_sections()]
    specs = chart_specs(card, [c for s, line in sections if line is None for c in s.charts])
    page = html_environment().get_template("card.html.j2")
    out: dict[str, Path] = {}
    if "html" in formats:
        data = {k: {x: v for x, v in s.items() if x != "$schema"} for k, s in specs.items()}  # no URL at all
        html = _render_page(page, card=card, sections=sections, mode="html", css=asset("card.css"),
                            vega_js=javascript_bundle(), charts=dict.fromkeys(data, ""),
                            specs_json=script_json(data))
        out["html"] = write_bytes(root / CARD_HTML, html.encode())
    if "pdf" in formats:
        import weasyprint

        replaced = print_specs(card, specs)
        html = _render_page(page, card=card, sections=sections, mode="pdf", css=asset("card.css"), vega_js="",
                            specs_json="{}", print_versions=set(replaced),
                            charts={k: svg_data_uri(s) for k, s in {**specs, **replaced}.items()})
        out["pdf"] = write_bytes(root / CARD_PDF, weasyprint.HTML(string=html).write_pdf())
    if "md" in formats:
        from .markdown import markdown_card, write_markdown_charts

        out["md"] = write_bytes(root / CARD_MD, markdown_card(card, write_markdown_charts(card, root)).encode())
    if "hf" in formats:
        from .markdown import hf_readme

        text = hf_readme(card, str(model))
        slug = next(m["slug"] for m in card["models"] if model in (m["name"], m["slug"]))
        out["hf"] = write_bytes(root / HF_DIR / slugify(slug) / "README.md", text.encode())
    for slug, doc in model_index(card).items():
        out[f"model-index/{slug}"] = write_bytes(root / MODEL_INDEX_DIR / f"{slugify(slug)}.yaml",
                                                 yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode())
    for m in card["models"]:  # an untrained reference's files from a render before references had none
        if m["reference"]:
            (root / MODEL_INDEX_DIR / f"{slugify(m['slug'])}.yaml").unlink(missing_ok=True)
            (root / HF_DIR / slugify(m["slug"]) / "README.md").unlink(missing_ok=True)
    return out


def _render_page(page: Any, **context: Any) -> str:
    """``page.render(**context)``; an error raised in a card section's own template (a plugin's, registered with
    inline ``source``) is one line naming the section, not a Jinja traceback. Reporter's own templates keep theirs.
    """
    try:
        return str(page.render(**context))
    except Exception as e:
        section = failing_section(e)
        if section is None:
            raise
        raise UserError(f"card section '{section}': its template fails ({type(e).__name__}: "
                        f"{str(e).strip().splitlines()[0] if str(e).strip() else 'no message'}); fix or remove what "
                        f"registers it ({SECTIONS.origin(section)})") from None


def failing_section(e: BaseException) -> str | None:
    """The card section whose inline template raised ``e`` (its syntax, or a frame of its code), or None.

    >>> import jinja2
    >>> failing_section(jinja2.TemplateSyntaxError("bad", 1, name="section:toy"))
    'toy'
    """
    name = getattr(e, "name", None)
    if isinstance(name, str) and name.startswith("section:"):
        return name.split(":", 1)[1]
    tb = e.__traceback__
    found = None
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if file.startswith("<section:"):
            found = file[len("<section:"):-1]
        tb = tb.tb_next
    return found


def _check_targets(root: Path, formats: Sequence[str]) -> None:
    """Refuse, before anything is written, a directory where a card file goes or a file where its directory goes
    (one line, :func:`~reporter.errors.environment_error`), so that a render writes all of its files or none.
    """
    import errno
    import os

    from ..errors import environment_error
    from .markdown import CHARTS_DIR

    files = [name for key, name in (("html", CARD_HTML), ("pdf", CARD_PDF), ("md", CARD_MD)) if key in formats]
    dirs = [MODEL_INDEX_DIR] + ([CHARTS_DIR] if "md" in formats else []) + ([HF_DIR] if "hf" in formats else [])
    from ..store.lock import refuse_linked_folders

    refuse_linked_folders(root)
    blocked = [OSError(errno.EISDIR, os.strerror(errno.EISDIR), str(root / n)) for n in files if (root / n).is_dir()]
    blocked += [OSError(errno.EEXIST, "a file, not a directory", str(root / n)) for n in dirs
                if (root / n).exists() and not (root / n).is_dir()]
    if blocked and (line := environment_error(blocked[0])) is not None:
        raise line


def script_json(data: object) -> str:
    """JSON safe to inline in a ``<script>`` block: ``<``, ``>`` and ``&`` are written as ``\\u`` escapes,
    so no value (a model called ``</script>`` or ``<!--``) can end or comment out the block.

    >>> script_json({"name": "x<!--<script></script>&"})
    '{"name": "x\\\\u003c!--\\\\u003cscript\\\\u003e\\\\u003c/script\\\\u003e\\\\u0026"}'
    """
    return json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
