"""User-facing errors: anything the CLI prints as one line and exits 2 on.

Internal invariants (a bug in reporter, not in the user's input) raise ``RuntimeError`` or
``AssertionError`` instead, so that they keep their traceback.
"""
from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input or environment, printed without a traceback.

    Each element of ``lines`` is one complete, self-explanatory problem line.

    >>> str(UserError(["models.yaml: models[0].dtype: 'fp8' is not valid; use one of auto, float32"]))
    "models.yaml: models[0].dtype: 'fp8' is not valid; use one of auto, float32"
    """

    exit_code = 2

    def __init__(self, lines: list[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


class ConfigError(UserError):
    """Problems found while validating a models YAML file."""


class SchemaError(UserError):
    """A results.json (or other artifact) that does not match :mod:`reporter.schema`."""
