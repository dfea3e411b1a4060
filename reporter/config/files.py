"""Reading YAML files with one-line errors, safely: bounded size, no aliases, the C parser.

A configuration file is small: anything over :data:`MAX_BYTES` (1 MiB), anything that is not a
regular file (``/dev/zero``, a directory) and any YAML alias (``*name``, the "billion laughs"
expansion bomb) is refused with one line, before it can hang the reader.

>>> load_yaml("missing.yaml")
Traceback (most recent call last):
reporter.errors.ConfigError: missing.yaml: file not found
>>> short(list(range(100)))
'[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, …'
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Collection, Iterable

import yaml

from ..errors import ConfigError
from ..registry import unknown_name

#: the largest models or profile file accepted
MAX_BYTES = 1 << 20
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def short(v: Any, limit: int = 60) -> str:
    """``repr(v)`` cut to ``limit`` characters: an error message never prints an unbounded value. YAML's own words
    for a boolean and a null (``limit: true`` said "got True").

    >>> short(True), short(None), short("x" * 80)[-3:]
    ('true', 'null', 'xx…')
    """
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    if isinstance(v, (list, tuple, dict, set)) and len(v) > limit:  # never build the repr of a huge value
        v = type(v)(list(v)[:limit]) if not isinstance(v, dict) else dict(list(v.items())[:limit])
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_text(path: Path, what: str = "file", max_bytes: int = MAX_BYTES) -> str:
    """A small UTF-8 text file, or a one-line :class:`ConfigError` saying why not."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{path}: is a directory, not a {what}")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path}: is not a regular file; give a {what}")
    if info.st_size > max_bytes:
        raise ConfigError(f"{path}: {info.st_size:,} bytes is too large for a {what} (at most {max_bytes:,})")
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror})") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{path}: too large for a {what} (at most {max_bytes:,} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x}); save it as UTF-8"
                          ) from None


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int, first: int):
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


#: keys whose value is a label as written: ``version: 1.10`` is the text "1.10", not the number 1.1 (which would
#: put 1.10 before 1.9 on a board)
_LABEL_KEYS = ("version", "release")
_NUMBER_TAGS = ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int")


class _UniqueKeyLoader(_LOADER):  # type: ignore[misc,valid-type]
    """The safe loader, refusing a key written twice in one mapping (YAML keeps the last one silently), and reading
    an unquoted number under a label key (:data:`_LABEL_KEYS`) as the text written.
    """

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # noqa: D102
        seen: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if (isinstance(key_node, yaml.ScalarNode) and key_node.value in _LABEL_KEYS
                    and isinstance(value_node, yaml.ScalarNode) and value_node.tag in _NUMBER_TAGS):
                value_node.tag = "tag:yaml.org,2002:str"
            if isinstance(key_node, yaml.ScalarNode):
                line = key_node.start_mark.line + 1 if key_node.start_mark else 0
                if (key_node.tag, key_node.value) in seen:
                    raise _DuplicateKey(key_node.value, line, seen[(key_node.tag, key_node.value)])
                seen[(key_node.tag, key_node.value)] = line
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, where: str) -> Any:
    """Parse YAML text with the safe C loader, refusing aliases and keys written twice; syntax errors are one line.

    >>> parse_yaml("version: 1.10\\nrate: 1.10\\n", "m.yaml")
    {'version': '1.10', 'rate': 1.1}
    >>> parse_yaml("models: []\\nmodels: [a]\\n", "m.yaml")
    Traceback (most recent call last):
    reporter.errors.ConfigError: m.yaml: line 2: the key 'models' is written twice (also line 1); keep one
    """
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise ConfigError(f"{where}: line {line}: YAML aliases (*{event.anchor}) are not supported; "
                                  "write the value out")
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a safe loader
    except _DuplicateKey as e:
        raise ConfigError(f"{where}: line {e.line}: the key {e.key!r} is written twice (also line {e.first}); "
                          "keep one") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML{at}: {problem}") from None


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file (see the module docstring), turning every problem into one-line user errors."""
    path = Path(path)
    return parse_yaml(read_text(path, "YAML file"), str(path))


def type_name(v: Any) -> str:
    """How a YAML value's type reads in an error message.

    >>> type_name(3), type_name([1]), type_name(None)
    ('an integer', 'a list', 'empty')
    """
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping", type(None): "empty"}.get(type(v), type(v).__name__)


class Problems:
    """Collects one-line problems of a file: ``<file>: <key path>: <message>``."""

    def __init__(self, path: str):
        self.path = path
        self.lines: list[str] = []

    def add(self, key: str, msg: str) -> None:
        """Record a problem at ``key`` (a key path such as ``models[2].dtype``; empty for the file)."""
        self.lines.append(f"{self.path}: {key}: {msg}" if key else f"{self.path}: {msg}")

    def unknown_keys(self, at: str, given: Iterable[Any], valid: Collection[str], *, listing: str = "valid keys",
                     also: Collection[str] = ()) -> None:
        """Record each key of ``given`` that is not in ``valid`` (nor in ``also``, keys accepted but not listed) at
        ``<at>.<key>`` (the key alone where ``at`` is empty), with a "did you mean" and the valid keys.

        >>> p = Problems("p.yaml"); p.unknown_keys("mui", {"rh": 0.9, "mode": "score"}, ("rho", "mode")); p.lines
        ["p.yaml: mui.rh: unknown key 'rh' (did you mean 'rho'?); valid keys: rho, mode"]
        """
        for k in given:
            if k not in valid and k not in also:
                self.add(f"{at}.{k}" if at else str(k), unknown_name("key", str(k), tuple(valid), listing=listing))

    def raise_if_any(self) -> None:
        """Raise every recorded problem at once."""
        if self.lines:
            raise ConfigError(self.lines)
