"""``neurons.npz``: the key-neuron set of every item of a task (a :mod:`~reporter.store.ragged` file).

Neuron ids are flat ``layer * d_ff + i`` (stored int32, read back int64, each set sorted and
unique); ``meta`` records what makes two files comparable (model, dtype, n_layers, d_ff,
top_ratio, mode, rho).

>>> import tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "neurons.npz")
>>> save_neuron_sets(p, ["q1", "q2"], [np.array([3, 1]), np.array([], int)], {"model": "m"})
>>> ids, sets, meta = load_neuron_sets(p)
>>> ids, [s.tolist() for s in sets], meta["model"]
(['q1', 'q2'], [[1, 3], []], 'm')
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from .ragged import load_ragged, merge_ragged, save_ragged

FORMAT = "reporter.neuron_sets/1"
#: meta keys that must agree for two neuron-set files to be merged
COMPARABLE = ("format", "model", "revision", "dtype", "n_layers", "d_ff", "definition", "top_ratio", "mode", "rho")

PathLike = str | os.PathLike[str]


def save_neuron_sets(path: PathLike, item_ids: Sequence[str], sets: Sequence[np.ndarray],
                     meta: Mapping[str, Any]) -> None:
    """Write per-item key-neuron sets to one compressed ``.npz`` (atomically)."""
    ids = [str(i) for i in item_ids]
    if len(ids) != len(sets):
        raise ValueError(f"save_neuron_sets: {len(ids)} item ids but {len(sets)} sets")
    if len(set(ids)) != len(ids):
        raise ValueError("save_neuron_sets: duplicate item ids")
    clean = [np.unique(np.asarray(s, dtype=np.int64).ravel()) for s in sets]
    n_total = int(meta.get("n_layers", 0)) * int(meta.get("d_ff", 0))
    limit = n_total or np.iinfo(np.int32).max + 1
    if any(s.size and (s[0] < 0 or s[-1] >= limit) for s in clean):
        raise ValueError(f"save_neuron_sets: neuron ids out of range [0, {limit})")
    save_ragged(path, ids, {"": clean}, meta={**meta, "format": FORMAT}, dtypes={"": np.int32})


def load_neuron_sets(path: PathLike) -> tuple[list[str], list[np.ndarray], dict[str, Any]]:
    """``(item_ids, sets, meta)`` of a file written by :func:`save_neuron_sets`."""
    f = load_ragged(path)
    return f.item_ids, [s.astype(np.int64) for s in f.ragged.get("", [])], f.meta


def merge_neuron_sets(out_path: PathLike, paths: Sequence[PathLike]) -> int:
    """Merge per-batch neuron-set files into ``out_path`` in one write; returns the item count.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p1, p2, out = (os.path.join(d, n) for n in ("1.npz", "2.npz", "all.npz"))
    >>> save_neuron_sets(p1, ["a"], [np.array([1])], {}); save_neuron_sets(p2, ["b"], [np.array([2])], {})
    >>> merge_neuron_sets(out, [p1, p2])
    2
    """
    if not paths:
        save_neuron_sets(out_path, [], [], {})
        return 0
    return merge_ragged(out_path, paths, comparable=COMPARABLE, dtypes={"": np.int32})
