"""A chart's rows kept beside it while Altair builds it, and put into the finished spec's top-level ``datasets``.

Altair deep-copies a chart's data at every method call (``encode``, ``properties``, each ``configure_*``, each
layer of a ``layer`` or ``concat``), which with inline rows was most of a card's chart time on per-item charts. A
chart built on :func:`_data` carries only a dataset's name; :func:`with_rows` puts the rows under it, where Altair
puts inline rows itself and under the same name, so the spec is the one ``{"values": rows}`` gives, to the byte.

>>> import altair as alt
>>> spec = alt.Chart(_data([{"x": 1}])).mark_point().encode(x="x:Q").to_dict(validate=False)
>>> list(with_rows(spec, "t")["datasets"].values())
[[{'x': 1}]]
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

#: the rows of the charts being built, by dataset name (see :func:`_data`); a name is a hash of its rows, so an entry
#: is never stale; :func:`reporter.card.charts.chart_specs`, ``print_specs`` and the release notes' chart drop them
#: once their charts are finished
_ROWS: dict[str, list[dict[str, Any]]] = {}


def _dataset_name(rows: list[dict[str, Any]]) -> str:
    """The name Altair gives inline rows in a spec's top-level ``datasets`` (a hash of their JSON)."""
    if rows == [{}]:
        return "empty"
    return "data-" + hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _data(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows as a named dataset, for a chart's ``data``: the chart carries only the name while Altair builds it, and
    :func:`with_rows` puts the rows in the finished spec (see the module docstring).
    """
    name = _dataset_name(rows)
    _ROWS[name] = rows
    return {"name": name}


def _named_data(spec: Any, found: dict[str, list[dict[str, Any]] | None]) -> None:
    """The rows of every dataset of :func:`_data` that ``spec`` names, in the order Altair meets them (None for a
    name of that form whose rows are not at hand).
    """
    if isinstance(spec, dict):
        data = spec.get("data")
        name = data.get("name") if isinstance(data, dict) and set(data) == {"name"} else None
        if isinstance(name, str) and (name in _ROWS or name.startswith("data-") or name == "empty"):
            found.setdefault(name, _ROWS.get(name))
        for v in spec.values():
            _named_data(v, found)
    elif isinstance(spec, list):
        for v in spec:
            _named_data(v, found)


def with_rows(spec: dict[str, Any], title: str) -> dict[str, Any]:
    """``spec`` (a finished chart's dict, titled ``title``) with the rows of every dataset :func:`_data` named in it
    added to its ``datasets``; a name whose rows were dropped while it was built is an error, not a chart without
    data.
    """
    found: dict[str, list[dict[str, Any]] | None] = {}
    _named_data(spec, found)
    datasets = spec.get("datasets") or {}
    if lost := [name for name, rows in found.items() if rows is None and name not in datasets]:
        raise RuntimeError(f"chart '{title}': the rows of dataset(s) {', '.join(lost)} were dropped while it was built")
    if added := {name: rows for name, rows in found.items() if rows is not None}:
        spec.setdefault("datasets", {}).update(added)
    return spec
