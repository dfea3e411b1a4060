"""Names as the card shows them: text-direction and control characters made visible, and labels cut on
grapheme boundaries, so that no output (HTML, PDF, Markdown, chart) can be made to read differently from the
data or be broken by an emoji.

Model names are checked when a models file is read (:mod:`reporter.config.models`), but a card also shows
task names, lm-eval's group names, plugin text and whatever a hand-edited results.json holds: every output
goes through :func:`neutral` (the Jinja environments' ``finalize``), and every chart through
:func:`chart_safe`.

>>> neutral("safe\\u202egnp.exe")
'safe[U+202E]gnp.exe'
>>> cut("Llama 🦙 fine-tuned on 🇫🇷 French data", 12)
'Llama 🦙 fin…'
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import regex

from ..config.models import CONTROL_CHARACTER
from ..tasks.jsonl import LONE_SURROGATE

#: the most graphemes a chart label shows (longer ones end in …; Vega then never cuts a label itself): about the
#: 220 px a legend showed before, so "untrained: Random-init baseline" stays whole
CHART_LABEL = 36
_GRAPHEME = regex.compile(r"\X")


#: what :func:`neutral` shows as ``[U+XXXX]``: every character a model name may not hold
#: (:data:`~reporter.config.models.CONTROL_CHARACTER`) except newline, tab and carriage return, and the lone
#: surrogates of a path's bytes that are not UTF-8 (Python's surrogateescape: '\udcff' for 0xff), which no output
#: can encode
_SHOWN = re.compile(r"(?![\n\t\r])" + CONTROL_CHARACTER.pattern + "|" + LONE_SURROGATE.pattern)


def _shown(m: re.Match[str]) -> str:
    return f"[U+{ord(m.group()):04X}]"


@lru_cache(maxsize=4096)
def neutral(text: str) -> str:
    """``text`` with every bidirectional-control and control character (except newline and tab) shown as
    ``[U+XXXX]``, so that no such character can reorder the text after it or hide unseen in a name.

    >>> neutral("plain name"), neutral("a\\x00b")
    ('plain name', 'a[U+0000]b')
    """
    if text.isascii() and text.isprintable():
        return text
    return _SHOWN.sub(_shown, text)  # one pass in C: the card's inlined scripts are about a megabyte


def cut(text: str, graphemes: int) -> str:
    """``text`` cut to at most ``graphemes`` user-perceived characters (an emoji, a flag, a letter with its
    accents is one), ending in … when cut; never inside a surrogate pair, a ZWJ sequence or a flag.

    >>> cut("🇫🇷🇫🇷🇫🇷", 2), cut("short", 10)
    ('🇫🇷…', 'short')
    """
    if len(text) <= graphemes:
        return text
    parts = _GRAPHEME.findall(text)
    if len(parts) <= graphemes:
        return text
    return "".join(parts[:graphemes - 1]) + "…"


def finalize(value: Any) -> Any:
    """The Jinja ``finalize`` of every card template: strings (escaped markup too) through :func:`neutral`."""
    import markupsafe

    if isinstance(value, markupsafe.Markup):
        return markupsafe.Markup(neutral(str(value)))
    if isinstance(value, str):
        return neutral(value)
    return value


#: the encoding channels whose values a chart draws as text (axis and legend labels, facet headers)
_LABEL_CHANNELS = frozenset({"x", "y", "x2", "y2", "color", "fill", "stroke", "shape", "size", "opacity", "xOffset",
                             "yOffset", "column", "row", "facet", "text", "detail"})


def _label_fields(node: Any, found: set[str]) -> set[str]:
    """The data fields drawn as labels anywhere in a spec (a field shown only in tooltips is not one)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in _LABEL_CHANNELS and isinstance(v, dict) and isinstance(v.get("field"), str):
                found.add(v["field"])
            if k != "tooltip":
                _label_fields(v, found)
    elif isinstance(node, list):
        for x in node:
            _label_fields(x, found)
    return found


def chart_safe(spec: dict[str, Any], graphemes: int = CHART_LABEL) -> dict[str, Any]:
    """A Vega-Lite spec that no name can break or disguise.

    Every string in its data is :func:`neutral`; the values of fields drawn as labels, and the scale domains
    and sort orders that list them, are also cut to ``graphemes`` (the same string always to the same label,
    two different strings never to one); and axes, legends and headers never truncate themselves (Vega
    cuts by UTF-16 code unit, and half an emoji breaks the SVG). Titles are left whole.

    >>> s = chart_safe({"data": {"values": [{"m": "🦙" * 40, "note": "🦙" * 40}]},
    ...                 "encoding": {"color": {"field": "m", "scale": {"domain": ["🦙" * 40]}}}})
    >>> len(s["data"]["values"][0]["m"]), s["encoding"]["color"]["scale"]["domain"] == [s["data"]["values"][0]["m"]]
    (36, True)
    >>> len(s["data"]["values"][0]["note"]), s["config"]["legend"]["labelLimit"]
    (40, 0)
    """
    fields = _label_fields(spec, set())
    labels: dict[str, str] = {}
    taken: set[str] = set()

    def label(s: str) -> str:
        if s in labels:
            return labels[s]
        out = cut(neutral(s), graphemes)
        if out != s:
            base, k = out, 2
            while out in taken:  # two names that share their first graphemes stay two labels
                out = f"{cut(base, graphemes - len(str(k)) - 1)}~{k}"
                k += 1
        labels[s] = out
        taken.add(out)
        return out

    def value(field: str, x: Any) -> Any:
        if not isinstance(x, str):
            return x
        return label(x) if field in fields else neutral(x)

    def rows(v: Any) -> Any:
        if not isinstance(v, list):
            return v
        return [{k: value(k, x) for k, x in r.items()} if isinstance(r, dict) else r for r in v]

    def walk(node: Any, key: str = "") -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == "datasets" and isinstance(v, dict):
                    out[k] = {name: rows(r) for name, r in v.items()}
                elif k == "values" and key == "data":
                    out[k] = rows(v)
                elif k in ("domain", "sort") and isinstance(v, list):
                    out[k] = [label(x) if isinstance(x, str) else x for x in v]
                elif k == "labelLimit":
                    out[k] = 0
                else:
                    out[k] = walk(v, k)
            return out
        if isinstance(node, list):
            return [walk(x, key) for x in node]
        return node

    safe = walk(spec)
    config = dict(safe.get("config") or {})
    for part in ("axis", "legend", "header"):
        config[part] = {**(config.get(part) or {}), "labelLimit": 0}
    config["header"] = {**config["header"], "titleLimit": 0}
    safe["config"] = config
    return safe
