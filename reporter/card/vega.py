"""Vega-Lite to what the card embeds: static SVG for the PDF, and the Vega bundle the HTML inlines (vl-convert).

The chart specs themselves are :mod:`reporter.card.charts`; this module only converts and bundles, offline.
"""
from __future__ import annotations

from functools import lru_cache

import altair as alt

from ..errors import UserError
from ..installed import cache_root
from ..store.atomic import write_bytes

__all__ = ["vl_version", "to_svg", "svg_data_uri", "javascript_bundle"]


@lru_cache(maxsize=1)
def vl_version() -> str | None:
    """The Vega-Lite version Altair writes, as vl-convert names it; None = vl-convert's latest.

    >>> vl_version() is None or vl_version().count(".") == 1
    True
    """
    import vl_convert

    v = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return v if v in vl_convert.get_vegalite_versions() else None


def to_svg(spec: dict) -> str:
    """Static SVG of a Vega-Lite spec (text stays text, so the PDF is vector and searchable).

    >>> to_svg({"mark": "point", "data": {"values": [{"x": 1}]}, "encoding": {"x": {"field": "x"}}})[:4]
    '<svg'
    """
    import vl_convert

    return vl_convert.vegalite_to_svg(spec, vl_version=vl_version())


def svg_data_uri(spec: dict) -> str:
    """The chart as a ``data:image/svg+xml`` URI (how the PDF embeds it, isolated from the page).

    >>> svg_data_uri({"mark": "point", "data": {"values": [{"x": 1}]}, "encoding": {"x": {"field": "x"}}})[:26]
    'data:image/svg+xml;base64,'
    """
    import base64

    return "data:image/svg+xml;base64," + base64.b64encode(to_svg(spec).encode()).decode()


@lru_cache(maxsize=1)
def javascript_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed in one script (from vl-convert), inlined so the HTML works offline.

    vl-convert bundles it anew in every process (~2 s), so it is kept in the reporter cache, named by
    vl-convert's and Vega-Lite's versions and checked by its sha256 when read; an unreadable or
    unwritable cache only means bundling again.

    >>> "vegaEmbed" in javascript_bundle()
    True
    """
    import hashlib

    import vl_convert

    version = vl_version()
    path = cache_root() / "vega" / f"bundle-vlconvert{vl_convert.__version__}-vl{version or 'latest'}.js"
    try:
        digest, _, text = path.read_text(encoding="utf-8").partition("\n")
        if digest == hashlib.sha256(text.encode()).hexdigest():
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = vl_convert.javascript_bundle(vl_version=version)
    try:
        write_bytes(path, f"{hashlib.sha256(text.encode()).hexdigest()}\n{text}".encode())
    except (OSError, UserError):  # a read-only or full cache: the card is still written
        pass
    return text
