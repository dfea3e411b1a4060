"""The published JSON Schema of reporter's documents (:func:`json_schema`), generated from the types in
:mod:`reporter.schema.documents`, and the check of a document against it (:func:`check_document`).

The schema says what :func:`reporter.schema.validate` accepts, in JSON Schema draft 2020-12, so that
another tool can check a results.json without reporter:

- one ``$defs`` entry per :class:`~typing.TypedDict`, described by its docstring (a key by the ``#:`` comment
  above it, :func:`field_comments`); every object allows keys it does not list (``additionalProperties:
  true``: plugin collectors add their own);
- an optional key may be ``null`` (the checker reads a null optional as missing); a required key may not;
- a fraction is a number in [0, 1] (give or take the checker's rounding tolerance of 1e-9);
- a whole-value check (:class:`~reporter.schema.documents.Check`: a square overlap matrix, a law fit or
  the reason there is none) is its base type: the schema cannot say a matrix is square.

The package ships each document's schema as ``reporter/data/<document>.schema.json`` (:data:`DOCUMENTS`
names them); ``reporter schema [NAME]`` prints one. After a change of the types, regenerate the shipped files
with :func:`write_shipped` (a test keeps them equal to :func:`json_schema` and says how)::

    .venv/bin/python -c 'from reporter.schema.published import write_shipped; write_shipped()'
"""
# no ``from __future__ import annotations``: the schema reads live Required[...] markers
import ast
import functools
import inspect
import json
import re
import sys
import types
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from typing_extensions import is_typeddict

from . import documents
from .check import _hints, _strip_required
from .documents import Check, _Count, _error, _Fraction

__all__ = ["DOCUMENTS", "DRAFT", "check_document", "field_comments", "json_schema", "schema_text", "shipped", "write_shipped"]

DRAFT = "https://json-schema.org/draft/2020-12/schema"
#: the documents with a published schema: name -> (file it describes, its type)
DOCUMENTS: dict[str, tuple[str, Any]] = {
    "results": ("results.json", documents.Results),
    "compare": ("compare.json", documents.CompareDocument),
    "summary": ("models/<slug>/tasks/<task>/summary.json", documents.TaskSummary),
    "lpp": ("models/<slug>/lpp.json", documents.LPPProfile),
    "model": ("models/<slug>/model.json", documents.ModelMeta),
    "smoke": ("models/<slug>/smoke.json", documents.Smoke),
    "validation": ("models/<slug>/tasks/<task>/validation.json", documents.Validation),
}
#: the checker's tolerance around [0, 1] for a fraction (:func:`reporter.schema.validate`)
_TOLERANCE = 1e-9
_PRIMITIVES = {float: "number", int: "integer", str: "string", bool: "boolean", list: "array", dict: "object"}


def _def_name(td: Any) -> str:
    return td.__name__.lstrip("_")


def field_comments(td: Any) -> dict[str, str]:
    """The ``#:`` comments above the keys of a TypedDict in its source, by key (the keys' descriptions).

    >>> field_comments(documents.TaskSummary)["collection"]
    '"fused" (the collectors rode generation) or "teacher-forced" (one pass after it)'
    """
    lines = _class_sources(td.__module__).get(td.__qualname__)
    if lines is None:  # not a top-level class of a module with a source file
        try:
            lines = inspect.getsource(td).splitlines()
        except (OSError, TypeError):  # no source (a frozen or generated type)
            return {}
    out: dict[str, str] = {}
    pending: list[str] = []
    for line in lines[1:]:  # after the class line
        text = line.strip()
        if text.startswith("#:"):
            pending.append(text[2:].strip())
            continue
        key = re.match(r"(\w+)\s*:", text)
        if key and pending:
            out[key.group(1)] = " ".join(pending)
        pending = []
    return out


@functools.lru_cache(maxsize=None)
def _class_sources(module: str) -> dict[str, list[str]]:
    """The source lines of each top-level class of ``module``, by name, from one parse of its file (``inspect``
    parses the whole file again for every class it is asked for); empty without a source file.
    """
    try:
        text = inspect.getsource(sys.modules[module])
    except (KeyError, OSError, TypeError):
        return {}
    lines = text.splitlines()
    return {node.name: lines[node.lineno - 1:node.end_lineno] for node in ast.parse(text).body
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null (for an optional key, which the checker reads as missing when null)."""
    if not schema:
        return schema  # anything, null included
    if isinstance(schema.get("type"), list):
        return schema if "null" in schema["type"] else {**schema, "type": [*schema["type"], "null"]}
    if isinstance(schema.get("type"), str) and set(schema) <= {"type", "minimum", "maximum", "items",
                                                              "additionalProperties", "description"}:
        return {**schema, "type": [schema["type"], "null"]}
    if schema.get("type") is None and "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    if "anyOf" in schema:
        return schema if {"type": "null"} in schema["anyOf"] else {"anyOf": [*schema["anyOf"], {"type": "null"}]}
    return {"anyOf": [schema, {"type": "null"}]}


class _Builder:
    """Translates the document types into JSON Schema, collecting one ``$defs`` entry per TypedDict."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def ref(self, td: Any) -> dict[str, Any]:
        name = _def_name(td)
        if name not in self.defs:
            self.defs[name] = {}  # reserve the name first: types may refer to each other
            self.defs[name] = self.typeddict(td)
        return {"$ref": f"#/$defs/{name}"}

    def typeddict(self, td: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object"}
        if td.__doc__ and not td.__doc__.startswith(td.__name__ + "("):  # not the generated signature
            out["description"] = inspect.cleandoc(td.__doc__)
        required, comments = td.__required_keys__, field_comments(td)
        props = {}
        for key, tp in _hints(td).items():
            sub = self.schema(_strip_required(tp))
            sub = sub if key in required else _nullable(sub)
            props[key] = {**sub, "description": comments[key]} if key in comments else sub
        out["properties"] = props
        if required:
            out["required"] = [k for k in props if k in required]
        out["additionalProperties"] = True
        return out

    def schema(self, tp: Any) -> dict[str, Any]:
        if tp is Any:
            return {}
        origin = get_origin(tp)
        if origin is Annotated:
            base, *meta = get_args(tp)
            if any(isinstance(m, _Fraction) for m in meta):
                return {"type": "number", "minimum": -_TOLERANCE, "maximum": 1 + _TOLERANCE}
            if any(isinstance(m, _Count) for m in meta):
                return {"type": "integer", "minimum": 0}
            assert all(isinstance(m, Check) for m in meta), f"schema: unsupported annotation of {tp!r}"
            return self.schema(base)
        if origin in (Union, types.UnionType):
            args = get_args(tp)
            members = [self.schema(a) for a in args if a is not type(None)]
            if len(members) == 1:
                out = members[0]
            elif all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
                out = {"type": [m["type"] for m in members]}
            else:
                out = {"anyOf": members}
            return _nullable(out) if type(None) in args else out
        if origin is Literal:
            return {"enum": list(get_args(tp))}
        if tp is list or origin is list:
            args = get_args(tp)
            return {"type": "array", **({"items": self.schema(args[0])} if args and args[0] is not Any else {})}
        if origin is dict:
            sub = get_args(tp)[1]
            return {"type": "object", **({"additionalProperties": self.schema(sub)} if sub is not Any else {})}
        if is_typeddict(tp):
            return self.ref(tp)
        if tp in _PRIMITIVES:
            return {"type": _PRIMITIVES[tp]}
        raise TypeError(f"schema: unsupported type {tp!r}")


def _document(name: str) -> dict[str, Any]:
    if name not in DOCUMENTS:
        raise ValueError(f"no published schema named {name!r}; one of: {', '.join([*DOCUMENTS, 'all'])}")
    path, td = DOCUMENTS[name]
    b = _Builder()
    root = b.ref(td)
    return {"$schema": DRAFT, "$id": f"urn:reporter:schema:{name}:v{documents.SCHEMA_VERSION}",
            "title": f"reporter {path}", "description": b.defs[_def_name(td)].get("description", ""),
            **root, "$defs": b.defs}


def json_schema(name: str = "results") -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one document: ``results``, ``compare``, ``summary``, ``lpp``,
    ``model``, ``smoke`` or ``validation`` (:data:`DOCUMENTS`); ``all`` bundles them in one compound
    schema, each under its own ``$id`` in ``$defs``.

    >>> s = json_schema("summary")
    >>> s["$ref"], s["$defs"]["TaskSummary"]["required"], s["$defs"]["TaskSummary"]["properties"]["seed"]
    ('#/$defs/TaskSummary', ['score', 'ci_low', 'ci_high', 'n'], {'type': ['integer', 'null']})
    >>> import jsonschema
    >>> jsonschema.validate({"score": 0.5, "ci_low": 0.2, "ci_high": 0.8, "n": 4}, s)  # passes
    >>> jsonschema.validate({"score": "high", "ci_low": 0.2, "ci_high": 0.8, "n": 4}, s)
    Traceback (most recent call last):
    jsonschema.exceptions.ValidationError: 'high' is not of type 'number'
    ...
    """
    if name == "all":
        return {"$schema": DRAFT, "$id": f"urn:reporter:schema:all:v{documents.SCHEMA_VERSION}",
                "title": "reporter documents",
                "description": "Every published document schema, each under its own $id: "
                               + "; ".join(f"{n}: {p}" for n, (p, _) in DOCUMENTS.items()) + ".",
                "$defs": {n: _document(n) for n in DOCUMENTS}}
    return _document(name)


def schema_text(name: str = "results") -> str:
    """:func:`json_schema` as the text of its file (what ``reporter schema`` prints and the package ships)."""
    return json.dumps(json_schema(name), indent=2, ensure_ascii=False) + "\n"


def _shipped_file(name: str) -> Any:
    return resources.files("reporter.data").joinpath(f"{name}.schema.json")


@functools.lru_cache(maxsize=None)
def shipped(name: str = "results") -> dict[str, Any]:
    """The schema of one document as the package ships it (``reporter/data/<name>.schema.json``)."""
    return json.loads(_shipped_file(name).read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def _validator(name: str) -> Any:
    """A draft 2020-12 validator of the shipped schema with a fast path: a value whose schema is only a ``type``
    of plain values (most of a results.json: numbers, per-layer lists) is tested in one step; any other value,
    or one that fails the step, goes to jsonschema's own keywords, so what fails and its message are theirs.
    """
    import jsonschema

    base = jsonschema.Draft202012Validator
    items = base.VALIDATORS["items"]
    plain: dict[int, Any] = {}  # id of a subschema -> (the subschema, kept alive; its test or None)

    def test(sub: Any) -> Any:
        """A sufficient test of a value against ``sub``, or None (``sub`` is more than a plain type)."""
        key = id(sub)
        if key not in plain:
            kinds = sub.get("type") if isinstance(sub, dict) and len(sub) == 1 else None
            kinds = [kinds] if isinstance(kinds, str) else kinds
            tests = [_PLAIN.get(k) for k in kinds] if isinstance(kinds, list) else [None]
            plain[key] = (sub, None if None in tests else (lambda v, ts=tuple(tests): any(t(v) for t in ts)))
        return plain[key][1]

    def fast_items(validator: Any, sub: Any, instance: Any, schema: Any) -> Any:
        ok = test(sub)
        if ok is not None and validator.is_type(instance, "array") and all(map(ok, instance)):
            return
        yield from items(validator, sub, instance, schema)

    def fast_properties(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        for key, sub in properties.items():
            if key in instance:
                ok = test(sub)
                if ok is None or not ok(instance[key]):
                    yield from validator.descend(instance[key], sub, path=key, schema_path=key)

    fast = jsonschema.validators.extend(base, {"items": fast_items, "properties": fast_properties})
    return fast(_inlined(shipped(name)))  # the schema itself is checked by the tests


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``{"$ref": "#/$defs/X"}`` replaced by X (the types do not refer to themselves, so the
    result is finite; a reference that would recurse is kept) and descriptions dropped: a validator then takes
    one step less per object.

    >>> _inlined({"$ref": "#/$defs/A", "$defs": {"A": {"description": "a", "type": "object", "properties": {
    ...     "description": {"$ref": "#/$defs/B"}}}, "B": {"type": "integer"}}})["properties"]
    {'description': {'type': 'integer'}}
    """
    defs = schema.get("$defs", {})

    def walk(x: Any, seen: tuple[str, ...]) -> Any:
        """One schema (never a map of property names, whose keys may be any word, "description" included)."""
        if not isinstance(x, dict):
            return x
        ref = x.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs and ref[8:] not in seen:
            return {**walk(defs[ref[8:]], (*seen, ref[8:])), **walk({k: v for k, v in x.items() if k != "$ref"}, seen)}
        out: dict[str, Any] = {}
        for k, v in x.items():
            if k in ("properties", "$defs"):
                out[k] = {name: walk(sub, seen) for name, sub in v.items()}
            elif k in ("items", "additionalProperties"):
                out[k] = walk(v, seen)
            elif k == "anyOf":
                out[k] = [walk(sub, seen) for sub in v]
            elif k not in ("description", "title"):
                out[k] = v
        return out

    return walk(schema, ())


#: a sufficient test that a value has a JSON type (jsonschema's own test decides the rest)
_PLAIN: dict[str, Any] = {
    "number": lambda v: type(v) is float or type(v) is int,
    "integer": lambda v: type(v) is int,
    "string": lambda v: type(v) is str,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def _where(path: Any) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _not_finite(doc: Any, path: list[Any]) -> tuple[list[Any], float] | None:
    """The path and value of the first NaN or infinite number in ``doc``, or None.

    >>> _not_finite({"a": [1.0, {"b": float("nan")}]}, [])
    (['a', 1, 'b'], nan)
    """
    if isinstance(doc, float):
        return None if doc - doc == 0 else (path, doc)
    if isinstance(doc, dict):
        items: Any = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    else:
        return None
    for k, v in items:
        if (found := _not_finite(v, [*path, k])) is not None:
            return found
    return None


#: where a NaN or an infinity is never what reporter wrote: whole documents, and results.json's parts that hold
#: them (scores and their intervals, the paired comparisons). An LPP profile may hold NaN on purpose (the entropy
#: of a prefix a short text does not reach, the participation ratio of states without variance).
_FINITE_DOCUMENTS = ("summary", "model", "smoke", "validation")


def not_finite(doc: Any, name: str = "results") -> None:
    """Raise :class:`~reporter.errors.SchemaError` at the first NaN or infinite number where reporter never writes
    one (:data:`_FINITE_DOCUMENTS`; in results.json its task entries and comparisons): NaN passes every bound a
    schema can state.

    >>> not_finite({"models": {"m": {"lpp": {"entropy": float("nan")}, "tasks": {}}}})  # LPP's NaN is its own
    >>> not_finite({"models": {"m": {"tasks": {"t": {"score": float("nan")}}}}})
    Traceback (most recent call last):
    reporter.errors.SchemaError: results.json: models.m.tasks.t.score: nan is not a number reporter writes (finite values only)
    """
    if name in _FINITE_DOCUMENTS:
        parts: list[tuple[list[Any], Any]] = [([], doc)]
    elif name == "results" and isinstance(doc, dict):
        models = doc.get("models")
        parts = [(["models", m, "tasks"], e.get("tasks")) for m, e in (models if isinstance(models, dict) else {}).items()
                 if isinstance(e, dict)]
        parts.append((["comparisons"], doc.get("comparisons")))
    else:
        return
    for path, part in parts:
        if (bad := _not_finite(part, path)) is not None:
            raise _error(_where(bad[0]), f"{bad[1]} is not a number reporter writes (finite values only)",
                         DOCUMENTS[name][0].rsplit("/", 1)[-1])


def check_document(doc: Any, name: str = "results") -> None:
    """Check ``doc`` against the published schema of the document ``name`` with :mod:`jsonschema`.

    Raises :class:`~reporter.errors.SchemaError` naming the JSON path of the first problem (the one
    :func:`jsonschema.exceptions.best_match` picks).

    >>> check_document({"models": {"m": {"tasks": {"t": {"score": 0.5, "ci_low": 0.2, "ci_high": 0.8}}}}})
    Traceback (most recent call last):
    reporter.errors.SchemaError: results.json: models.m.tasks.t.n: missing
    >>> check_document({"models": {"m": {"status": "done"}}})
    Traceback (most recent call last):
    reporter.errors.SchemaError: results.json: models.m.status: 'done' is not one of ['complete', ...]
    """
    from jsonschema.exceptions import best_match

    not_finite(doc, name)
    error = best_match(_validator(name).iter_errors(doc))
    if error is None:
        return
    where, message = list(error.absolute_path), error.message
    if error.validator == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        where, message = [*where, missing], "missing"
    raise _error(_where(where), message, DOCUMENTS[name][0].rsplit("/", 1)[-1])


def write_shipped(folder: Path | None = None) -> list[Path]:
    """Write every document's schema to ``folder/<name>.schema.json`` (default: the package's ``reporter/data``).

    >>> import tempfile
    >>> [p.name for p in write_shipped(Path(tempfile.mkdtemp()))][:2]
    ['results.schema.json', 'compare.schema.json']
    """
    folder = Path(__file__).resolve().parent.parent / "data" if folder is None else folder
    out = []
    for name in DOCUMENTS:
        path = folder / f"{name}.schema.json"
        path.write_text(schema_text(name), encoding="utf-8")
        out.append(path)
    return out
