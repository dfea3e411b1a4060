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

__all__ = ["read_document", "document_ok", "merge_fields", "check_before_writing"]


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


def merge_fields(doc: dict[str, Any], fields: Any, who: str) -> None:
    """Add a plugin's ``fields`` to the document ``doc`` it extends (a task's summary): a mapping of keys of its own.
    A key already there (the score, its interval, ``n``, another collector's field) is refused: a plugin adds to a
    summary, it does not rewrite it (a review made a collector set ``score: 0.99`` outside its own interval).

    >>> d = {"score": 0.5}
    >>> merge_fields(d, {"mine": 1}, "collector 'x'"); d
    {'score': 0.5, 'mine': 1}
    >>> merge_fields(d, {"score": 0.99}, "collector 'x'")
    Traceback (most recent call last):
    reporter.errors.UserError: collector 'x': would overwrite the summary's 'score'; a plugin adds fields of its own
    """
    if not isinstance(fields, dict):
        raise UserError(f"{who}: gave {type(fields).__name__}, not a mapping of summary fields")
    if taken := [k for k in fields if k in doc]:
        raise UserError(f"{who}: would overwrite the summary's {taken[0]!r}; a plugin adds fields of its own")
    doc.update(fields)


def check_before_writing(doc: Any, name: str, what: str) -> None:
    """Refuse to write a document its own schema would call damaged (a plugin's score above 1, a NaN, a value of
    another type): written, it would be recomputed on every resume and fail every analysis. One line naming ``what``.
    """
    try:
        check_document(doc, name)
    except SchemaError as e:
        detail = str(e).split(": ", 1)[-1]
        raise UserError(f"{what}: its {name} would not be what reporter writes ({detail}); a plugin's scorer, "
                        "collector or summarize gave it") from None
