"""Reading YAML files with one-line errors.

>>> load_yaml("missing.yaml")
Traceback (most recent call last):
reporter.errors.ConfigError: missing.yaml: file not found
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file, turning I/O and syntax errors into one-line user errors."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None


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

    def raise_if_any(self) -> None:
        """Raise every recorded problem at once."""
        if self.lines:
            raise ConfigError(self.lines)
