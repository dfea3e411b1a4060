"""The types at the stage seams: ``summary.json``, ``lpp.json`` and ``results.json``.

Four modules with one job each: :mod:`~reporter.schema.documents` (the TypedDicts),
:mod:`~reporter.schema.check` (:func:`validate`), :mod:`~reporter.schema.tables`
(:func:`markdown`) and :mod:`~reporter.schema.published` (the published JSON Schema:
:func:`json_schema`, :func:`check_document`); everything is importable from ``reporter.schema``.

Each document is a :class:`~typing.TypedDict`; :func:`validate` checks a loaded JSON value
against one and normalises it for the renderer: a missing or null optional key becomes
``[]`` (lists), ``{}`` (maps) or ``None``; a key of the wrong type, or a missing required
key, is a :class:`~reporter.errors.SchemaError` naming its path. Keys a type does not list
(for example a plugin collector's summary fields) pass through unchanged.

The README's schema tables are :func:`markdown` of these types (a test keeps them equal).

>>> validate({"models": {"m": {"tasks": {"t": {"score": 0.5, "ci_low": 0.2, "ci_high": 0.8,
...     "n": 4}}}}}, Results)["models"]["m"]["tasks"]["t"]["mui_per_layer"]
[]
>>> validate({"models": {"m": {"tasks": {"t": {"score": 2}}}}}, Results)
Traceback (most recent call last):
reporter.errors.SchemaError: results.json: models.m.tasks.t.score: expected a fraction in [0, 1], got 2
"""
from .check import validate as validate
from .documents import *  # noqa: F403  (every document type)
from .documents import SCHEMA_VERSION as SCHEMA_VERSION
from .documents import is_untrained as is_untrained
from .published import check_document as check_document
from .published import json_schema as json_schema
from .published import not_finite as not_finite
from .tables import markdown as markdown
