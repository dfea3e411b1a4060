"""Artifacts read against their published schema (``reporter schema``): a file that parses but is not what
reporter wrote (a hand edit, a wrong-typed value, NaN) is damaged, like one that does not parse.

Resume recomputes a damaged artifact (:func:`document_ok`); reading one for analysis is a one-line error naming
the file, the key and what would be valid (:func:`read_document`), never a traceback further on.

>>> import json, tempfile, pathlib
>>> f = pathlib.Path(tempfile.mkdtemp()) / "summary.json"
>>> _ = f.write_text(json.dumps({"score": "high", "ci_low": 0.2, "ci_high": 0.8, "n": 4}))
>>> document_ok(f, "summary")
False
>>> read_document(f, "summary")
Traceback (most recent call last):
reporter.errors.UserError: .../summary.json: damaged (score: 'high' is not of type 'number'); rerun `reporter run` on its run directory to recompute it
"""
from __future__ import annotations

import os
from typing import Any

from ..errors import SchemaError, UserError
from ..schema.published import check_document
from .atomic import read_json

__all__ = ["read_document", "document_ok"]


def read_document(path: str | os.PathLike[str], name: str) -> Any:
    """The artifact at ``path`` checked against the published schema ``name`` (``summary``, ``model``, ``smoke``,
    ``lpp``, ``validation``); None when it does not exist; a :class:`~reporter.errors.UserError` when damaged.
    """
    doc = read_json(path)
    if doc is None:
        return None
    try:
        check_document(doc, name)
    except SchemaError as e:
        detail = str(e).split(": ", 1)[-1]  # without the schema's generic document name: the file is named
        raise UserError(f"{path}: damaged ({detail}); rerun `reporter run` on its run directory to recompute "
                        "it") from None
    return doc


def document_ok(path: str | os.PathLike[str], name: str) -> bool:
    """Whether the artifact at ``path`` exists, parses and matches its published schema ``name``."""
    try:
        return read_document(path, name) is not None
    except UserError:
        return False
