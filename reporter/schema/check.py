"""Checking a loaded JSON document against its type (:func:`validate`); see :mod:`reporter.schema`."""
# no ``from __future__ import annotations``: the checks read live Required[...] markers
import json
import math
import types
from typing import Annotated, Any, Literal, Mapping, Union, get_args, get_origin, get_type_hints

from typing_extensions import NotRequired, Required, is_typeddict

from . import documents
from .documents import Check, _Count, _error, _Fraction

# --- validation ------------------------------------------------------------------------------------

_WHAT = {float: "a number", int: "an integer", str: "a string", bool: "true or false", list: "a list",
         dict: "an object"}


def _typename(v: Any) -> str:
    return type(v).__name__


def _primitive(v: Any, tp: type, where: str, document: str, what: str | None = None) -> Any:
    ok = {float: (int, float), int: (int,), str: (str,), bool: (bool,), list: (list,), dict: (dict,)}[tp]
    if not isinstance(v, ok) or (isinstance(v, bool) and tp is not bool):
        raise _error(where, f"expected {what or _WHAT[tp]}, got {_typename(v)} {json.dumps(v, default=str)[:40]}",
                     document)
    return v


def _json_kind(v: Any) -> type:
    if isinstance(v, dict):
        return dict
    if isinstance(v, list):
        return list
    if isinstance(v, str):
        return str
    if isinstance(v, bool):
        return bool
    return float


def _kind_of(tp: Any) -> type | None:
    """The JSON kind a type accepts (dict, list, str, bool, float), for choosing a union member."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _kind_of(get_args(tp)[0])
    if is_typeddict(tp) or tp is dict or origin in (dict, Mapping):
        return dict
    if tp is list or origin is list:
        return list
    if tp in (str, bool):
        return tp
    if tp in (int, float):
        return float
    return None


def _default(tp: Any) -> Any:
    """What a missing optional key of type ``tp`` reads as."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _default(get_args(tp)[0])
    if tp is list or origin is list:
        return []
    if origin is dict:
        return {}
    return None


def _hints(td: Any) -> dict[str, Any]:
    return get_type_hints(td, globalns=vars(documents), include_extras=True)


def _strip_required(tp: Any) -> Any:
    while get_origin(tp) in (Required, NotRequired):
        tp = get_args(tp)[0]
    return tp


def validate(value: Any, tp: Any, where: str = "", *, document: str = "results.json") -> Any:
    """``value`` checked against the type ``tp`` and normalised (see the module docstring).

    >>> validate([1, 2.5], list[float])
    [1, 2.5]
    >>> validate({"severity": "high", "model": "m", "task": "t"}, documents.ContaminationRow, "analysis.contamination[0]")
    Traceback (most recent call last):
    reporter.errors.SchemaError: results.json: analysis.contamination[0].severity: 'high' is not one of strong, weak, none
    """
    if tp is Any:
        return value
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        checks = [m for m in meta if isinstance(m, Check)]
        if checks and base is not None and get_origin(base) in (Union, types.UnionType):
            return checks[0].fn(value, where, validate)  # the check itself decides between the members
        if any(isinstance(m, _Fraction) for m in meta):
            out = _primitive(value, float, where, document, "a fraction in [0, 1]")
            if not math.isnan(out) and not -1e-9 <= out <= 1 + 1e-9:
                raise _error(where, f"expected a fraction in [0, 1], got {out!r}", document)
        elif any(isinstance(m, _Count) for m in meta):
            out = _primitive(value, int, where, document, "a count (an integer >= 0)")
            if out < 0:
                raise _error(where, f"expected a count (an integer >= 0), got {out!r}", document)
        else:
            out = validate(value, base, where, document=document)
        for c in checks:
            out = c.fn(out, where, validate)
        return out
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        kind = _json_kind(value)
        match = next((m for m in members if _kind_of(m) == kind and not (kind is bool and m is not bool)), None)
        if match is None and kind is float:  # an integer is a number
            match = next((m for m in members if m in (int, float)), None)
        if match is not None:
            return validate(value, match, where, document=document)
        if any(_kind_of(m) in (str, float) for m in members):
            raise _error(where, f"expected a value, got {_typename(value)} {json.dumps(value, default=str)[:40]}",
                         document)
        return validate(value, members[0], where, document=document)
    if origin is Literal:
        allowed = get_args(tp)
        if validate(value, str, where, document=document) not in allowed:
            raise _error(where, f"{value!r} is not one of {', '.join(allowed)}", document)
        return value
    if tp is list or origin is list:
        items = _primitive(value, list, where, document)
        (sub,) = get_args(tp) or (Any,)
        return [validate(x, sub, f"{where}[{i}]", document=document) for i, x in enumerate(items)]
    if origin is dict:
        d = _primitive(value, dict, where, document)
        sub = get_args(tp)[1]
        return {k: validate(x, sub, _at(where, k), document=document) for k, x in d.items()}
    if is_typeddict(tp):
        d = _primitive(value, dict, where, document)
        out = dict(d)
        required = tp.__required_keys__
        for key, sub in _hints(tp).items():
            sub = _strip_required(sub)
            if d.get(key) is not None:
                out[key] = validate(d[key], sub, _at(where, key), document=document)
            elif key in required:
                raise _error(_at(where, key), "missing", document)
            else:
                out[key] = _default(sub)
        return out
    if tp in _WHAT:
        return _primitive(value, tp, where, document)
    raise TypeError(f"schema: unsupported type {tp!r} at {where or 'top level'}")


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
