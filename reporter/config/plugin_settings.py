"""A profile's ``plugins:`` section: each installed plugin's settings, checked against the settings dataclass the plugin
declares (:func:`reporter.registry.declared_settings`) and built into an instance of it.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from ..registry import declared_settings, unknown_name
from .files import Problems, short


def parse_plugins(p: Problems, raw: Any, recorded: bool) -> dict[str, Any]:
    """``plugins:`` — each plugin's settings, by plugin name, checked against the dataclass the plugin declares.

    A recorded profile keeps the mappings as they are (the plugin may not be installed where a run is read).
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        p.add("plugins", f"must be a mapping of plugin name to its settings, got {short(raw)}")
        return {}
    if recorded:
        return {str(k): dict(v) for k, v in raw.items() if isinstance(v, dict)}
    declared = declared_settings()
    out: dict[str, Any] = {}
    for name, value in raw.items():
        key = f"plugins.{name}"
        if name not in declared:
            p.add(key, (unknown_name("plugin", str(name), declared, listing="plugins with settings")
                        if declared else f"unknown plugin '{name}'; no plugin with settings is installed")
                  + " (a plugin of your own is loaded before the command: reporter --plugin FILE run …)")
            continue
        parsed = parse_settings(p, key, value if value is not None else {}, declared[name])
        if parsed is not None:
            out[str(name)] = parsed
    return out


def parse_settings(p: Problems, key: str, value: Any, cls: type) -> Any:
    """One plugin's settings mapping as an instance of ``cls`` (None, with the problems added, when invalid).

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class S:
    ...     window: int = 4
    ...     mode: Literal["a", "b"] = "a"
    >>> p = Problems("p.yaml")
    >>> parse_settings(p, "plugins.toy", {"window": "x", "mod": "a"}, S), p.lines
    (None, ["p.yaml: plugins.toy.mod: unknown key 'mod' (did you mean 'mode'?); valid keys: window, mode", \
"p.yaml: plugins.toy.window: must be an integer, got 'x'"])
    """
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = tuple(f.name for f in fields)
    if not isinstance(value, dict):
        p.add(key, f"must be a mapping of settings (valid keys: {', '.join(names)}), got {short(value)}")
        return None
    n0 = len(p.lines)
    p.unknown_keys(key, value, names)
    try:
        hints = typing.get_type_hints(cls)
    except Exception as e:  # an annotation the plugin's module cannot resolve: a plugin bug, one line
        p.add(key, f"the plugin's settings class {cls.__name__} has annotations that cannot be read "
                   f"({type(e).__name__}: {e}); its author must fix it")
        return None
    kwargs = {}
    for f in fields:
        if f.name in value:
            problem, kwargs[f.name] = _setting(value[f.name], hints.get(f.name, Any))
            if problem:
                p.add(f"{key}.{f.name}", problem)
    if len(p.lines) > n0:
        return None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:  # the plugin's own __post_init__ checks
        p.add(key, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        return None


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _setting(v: Any, hint: Any) -> tuple[str | None, Any]:
    """``(problem or None, value)`` of one setting against its type annotation.

    Understood: bool, int, float, str, ``Literal[...]``, ``X | None``, ``list[X]`` and ``tuple[X, ...]``
    (given as a YAML list); any other annotation takes the value as it is.

    >>> _setting(3, float), _setting([1, 2], tuple[int, ...]), _setting(None, int | None)
    ((None, 3.0), (None, (1, 2)), (None, None))
    >>> _setting("c", Literal["a", "b"])[0]
    "'c' is not valid; use one of a, b"
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if v is None and type(None) in args:
            return None, None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _setting(v, rest[0])
        return None, v
    if origin is Literal:
        if v in args:
            return None, v
        return f"{short(v)} is not valid; use one of {', '.join(map(str, args))}", None
    if origin in (list, tuple) and (origin is list or (len(args) == 2 and args[1] is Ellipsis)):
        if not isinstance(v, list):
            return f"must be a list, got {short(v)}", None
        items = [_setting(x, args[0] if args else Any) for x in v]
        bad = next(((i, problem) for i, (problem, _) in enumerate(items) if problem), None)
        if bad:
            return f"item {bad[0]} {bad[1]}", None
        return None, origin(x for _, x in items)
    if hint in _TYPE_WORDS:
        ok = isinstance(v, hint) and not (hint is not bool and isinstance(v, bool))
        if hint is float and isinstance(v, int) and not isinstance(v, bool):
            return None, float(v)
        return (None, v) if ok else (f"must be {_TYPE_WORDS[hint]}, got {short(v)}", None)
    return None, v
