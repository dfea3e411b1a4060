"""Number formatting shared by the card's tables (as Jinja filters) and its charts.

>>> fmt_pct(0.25), fmt_num(3.14159), fmt_signed(-0.05), fmt_p(0.0004)
('25.0', '3.14', '−5.0', '<0.001')
"""
from __future__ import annotations

import math
import os
import re
from typing import Any


def finite(x: Any) -> bool:
    """Whether ``x`` is a real, finite number (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_pct(x: Any, digits: int = 1) -> str:
    """A fraction as a percentage without the sign; missing or NaN → '—'.

    >>> fmt_pct(0.25), fmt_pct(None)
    ('25.0', '—')
    """
    return f"{100 * x:.{digits}f}" if finite(x) else "—"


def fmt_num(x: Any, digits: int = 2) -> str:
    """A number to ``digits`` decimals; integers stay integers (with thousands separators).

    >>> fmt_num(3.14159), fmt_num(134515008), fmt_num(float("nan"))
    ('3.14', '134,515,008', '—')
    """
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return f"{x:.{digits}f}" if finite(x) else "—"


def fmt_signed(x: Any, digits: int = 1, scale: float = 100) -> str:
    """A signed difference, scaled to percentage points by default (a true minus sign; zero unsigned).

    >>> fmt_signed(0.031), fmt_signed(-0.05), fmt_signed(-0.0001)
    ('+3.1', '−5.0', '0.0')
    """
    if not finite(x):
        return "—"
    v = round(scale * x, digits)
    return f"{v:+.{digits}f}".replace("-", "−") if v != 0 else f"{0:.{digits}f}"


def fmt_p(p: Any) -> str:
    """A p-value.

    >>> fmt_p(0.0004), fmt_p(0.004), fmt_p(0.5)
    ('<0.001', '0.004', '0.50')
    """
    if not finite(p):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def fmt_p_is(p: Any) -> str:
    """A p-value with its relation, for running text.

    >>> fmt_p_is(0.0004), fmt_p_is(0.03)
    ('p < 0.001', 'p = 0.03')
    """
    text = fmt_p(p)
    return f"p {text[0]} {text[1:]}" if text.startswith("<") else f"p = {text}"


def fmt_about(n: int) -> str:
    """``n`` rounded to two significant figures, with thousands separators ("about 1,200").

    >>> fmt_about(1211), fmt_about(157), fmt_about(8)
    ('1,200', '160', '8')
    """
    if n < 100:
        return str(n)
    digits = len(str(n)) - 2
    return f"{round(n, -digits):,}"


def fmt_source(source: Any, home: str | None = None) -> str:
    """A model's source as the card shows it: a local path under the user's home as ``~/…``, so that a card
    handed on does not carry the home directory (the artifacts keep the path as given).

    >>> fmt_source("/home/ana/.cache/reporter/showcase/rc/step-48", home="/home/ana")
    '~/.cache/reporter/showcase/rc/step-48'
    >>> fmt_source("HuggingFaceTB/SmolLM2-135M-Instruct", home="/home/ana"), fmt_source(None)
    ('HuggingFaceTB/SmolLM2-135M-Instruct', '')
    """
    if source is None:
        return ""
    text = str(source)
    home = os.path.expanduser("~") if home is None else home
    home = home.rstrip("/")
    if home and os.path.isabs(text) and (text == home or text.startswith(home + "/")):
        return "~" + text[len(home):]
    return text


def fmt_identity(identity: Any, digits: int = 12) -> str:
    """A model's content identity (``meta.identity``) as the card's tables show it: what it hashes and the
    first ``digits`` hex digits (the full one is in results.json and the HF README).

    >>> fmt_identity("packaged:smollm2-135m-instruct:b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")
    'GGUF sha256 b179c9523d0e…'
    >>> fmt_identity("hub:HuggingFaceTB/SmolLM2-135M@0123456789abcdef0123"), fmt_identity("local:" + "ab" * 32)
    ('commit 0123456789ab…', 'files sha256 abababababab…')
    >>> fmt_identity("weights:" + "cd" * 32)
    'weights sha256 cdcdcdcdcdcd…'
    >>> fmt_identity(None)
    ''
    """
    if not identity:
        return ""
    kind, _, rest = str(identity).partition(":")
    digest = rest.rpartition("@")[2] if kind == "hub" else rest.rpartition(":")[2]
    label = {"packaged": "GGUF sha256", "local": "files sha256", "hub": "commit", "random": "recipe sha256",
             "weights": "weights sha256", "source": "source sha256"}.get(kind, kind)
    return f"{label} {digest[:digits]}…" if len(digest) > digits else f"{label} {digest}"


def pct_or_none(x: Any) -> float | None:
    """A fraction as a percentage rounded for a chart; None when missing."""
    return round(100 * x, 3) if finite(x) else None


def num_or_none(x: Any) -> Any:
    """``x`` when it is a finite number, else None."""
    return x if finite(x) else None


def md_escape(text: Any) -> str:
    """Text safe in Markdown table cells and paragraphs: Markdown punctuation escaped, ``<``/``>`` as
    entities (no raw HTML), line breaks as spaces.

    >>> md_escape("a|b *c* <d>")
    'a\\\\|b \\\\*c\\\\* &lt;d&gt;'
    """
    s = " ".join(str(text).split())
    s = re.sub(r"([\\`*_\[\]|#])", r"\\\1", s)
    return s.replace("<", "&lt;").replace(">", "&gt;")
