"""Vega-Lite to what the card embeds: each spec checked against the Vega-Lite schema, static SVG for the PDF,
and the Vega bundle the HTML inlines (vl-convert).

The chart specs themselves are :mod:`reporter.card.charts`; this module only checks, converts and bundles, offline.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import altair as alt

from ..errors import UserError
from ..installed import cache_root
from ..store.atomic import write_bytes

__all__ = ["validated", "vl_version", "to_svg", "svg_data_uri", "javascript_bundle"]


@lru_cache(maxsize=1)
def _vl_schema() -> dict[str, Any]:
    from altair.vegalite.v6.schema.core import load_schema

    return load_schema()


def _without_rows(node: Any) -> Any:
    """The spec with each inline dataset (``values``, top-level ``datasets``) cut to its first row: the
    structure, not the data, is validated.
    """
    if isinstance(node, list):
        return [_without_rows(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _without_rows(v) for k, v in node.items() if k not in ("values", "datasets")}
    if isinstance(node.get("values"), list):
        out["values"] = node["values"][:1]
    if isinstance(node.get("datasets"), dict):
        out["datasets"] = {name: rows[:1] for name, rows in node["datasets"].items()}
    return out


@lru_cache(maxsize=1)
def _vl_validator() -> Any:
    """The validator altair's ``validate_jsonschema`` builds for the Vega-Lite schema, built once: altair builds it
    (a deep copy of the whole schema and a reference registry) on every call, most of a chart's validation time.
    None when this altair's helpers are not there (then every call goes through ``validate_jsonschema``).
    """
    try:
        from altair.utils import schemapi as sp
        from jsonschema import validators as jsonschema_validators

        schema = _vl_schema()
        url = sp._get_json_schema_draft_url(schema)
        cls = jsonschema_validators.validator_for({"$schema": url})
        kwargs: dict[str, Any] = {}
        if hasattr(cls, "FORMAT_CHECKER"):
            kwargs["format_checker"] = cls.FORMAT_CHECKER
        if not sp._use_referencing_library():
            return None
        prepared = sp._prepare_references_in_schema(schema)
        kwargs["registry"] = sp._get_referencing_registry(schema, url)
        return cls(prepared, **kwargs)
    except (ImportError, AttributeError, TypeError):
        return None


def validated(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` after checking it against the Vega-Lite schema (its rows cut to one: the data's schema is
    any JSON, and walking every row made validation the card's slowest step); raises on an invalid spec.

    >>> validated({"mark": "point", "data": {"values": [{"a": 1}, {"a": 2}]}})["mark"]
    'point'
    >>> validated({"mark": "pointy", "data": {"values": [{"a": 1}]}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    jsonschema.exceptions.ValidationError: ...
    """
    from altair.utils.schemapi import validate_jsonschema

    rows = _without_rows(spec)
    validator = _vl_validator()
    if validator is None or not validator.is_valid(rows):  # altair's own call ranks the errors and raises the best
        validate_jsonschema(rows, _vl_schema())
    return spec


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
