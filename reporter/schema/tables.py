"""The schema tables of the docs' results.json reference (:func:`markdown`), generated from the document types.

``python -m reporter.schema`` prints them; ``docs/hooks.py`` puts them into ``docs/reference/results-json.md``
when the site is built, so the reference is never kept by hand.
"""
# no ``from __future__ import annotations``: the tables read live Required[...] markers
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from typing_extensions import NotRequired, Required, is_typeddict

from . import documents
from .check import _hints, _strip_required
from .documents import DOCUMENTS, Scalar, _Fraction

# --- documentation -----------------------------------------------------------------------------------

def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is Any:
        return "any"
    if origin is Annotated:
        base, *meta = get_args(tp)
        if any(isinstance(m, _Fraction) for m in meta):
            return "fraction [0, 1]"
        if is_typeddict(base):
            return f"`{_public_name(tp)}`"
        return _describe(base)
    if origin in (Required, NotRequired):
        return _describe(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if tp == Scalar:
            return "number or string"
        text = " or ".join(_describe(a) for a in args if a is not type(None))
        return text + (" or null" if type(None) in args else "")
    if origin is Literal:
        return " \\| ".join(f'"{a}"' for a in get_args(tp))
    if tp is list or origin is list:
        args = get_args(tp)
        return f"list of {_describe(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_describe(get_args(tp)[1])}"
    if is_typeddict(tp):
        return f"`{tp.__name__}`"
    return {float: "number", int: "integer", str: "string", bool: "boolean", dict: "object", list: "list"}[tp]


def _public_name(tp: Any) -> str:
    for name, obj in vars(documents).items():
        if obj is tp and not name.startswith("_"):
            return name
    return str(tp)


def markdown(level: int = 4) -> str:
    """The schema as Markdown tables, one per document, each under a heading of ``level`` (what the docs show).

    >>> print(markdown().splitlines()[0])
    #### `Results`
    >>> print(markdown(level=2).splitlines()[0])
    ## `Results`
    """
    if not 1 <= level <= 6:
        raise ValueError(f"a Markdown heading level is 1 to 6, got {level}")
    out = []
    for td in DOCUMENTS:
        out.append(f"{'#' * level} `{td.__name__}`\n")
        out.append((td.__doc__ or "").strip().splitlines()[0] + "\n")
        out.append("| key | type | required |\n| --- | --- | --- |")
        required = td.__required_keys__
        for key, sub in _hints(td).items():
            out.append(f"| `{key}` | {_describe(_strip_required(sub))} | {'yes' if key in required else ''} |")
        out.append("")
    extra = ["`Overlap`: {tasks (list of string), matrix (a square list of lists of number), matrix_kind}; "
             "`Saturation`: {n, union (lists of number of equal length), n95, total}."]
    return "\n".join(out + extra) + "\n"

