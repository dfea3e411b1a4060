"""Numbers made JSON-ready: NaN and infinity become null, numpy values plain Python.

>>> finite_or_none(float("nan")), finite_or_none("2.5")
(None, 2.5)
>>> json_ready({"a": np.float32(0.5), "b": [np.int64(3), float("inf")], "c": (1, 2)})
{'a': 0.5, 'b': [3, None], 'c': [1, 2]}
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def finite_or_none(x: Any) -> float | None:
    """A float, or None for NaN, infinity and what is not a number."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def json_ready(x: Any) -> Any:
    """``x`` with NaN/inf as None, numpy values as Python values, tuples as lists (recursively)."""
    if isinstance(x, dict):
        return {str(k): json_ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_ready(v) for v in x]
    if isinstance(x, np.ndarray):
        return json_ready(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def tested_p(p: float | None) -> float:
    """A paired comparison's p-value (:func:`reporter.metrics.stats.paired_comparison` always sets it).

    >>> tested_p(0.25)
    0.25
    """
    if p is None:
        raise ValueError("a paired comparison without a p-value cannot be adjusted")
    return p


tested_p.__test__ = False  # type: ignore[attr-defined]  # not a test: pytest given a module path would collect it
