"""One codec for per-item arrays of different lengths ("ragged"), stored in one compressed ``.npz``.

Layout of a file: ``item_ids`` (unicode, n); for each ragged field ``F`` the concatenation
``F_flat`` and the boundaries ``F_offsets`` (int64, n + 1: item j is
``F_flat[F_offsets[j]:F_offsets[j + 1]]``; the unnamed field ``""`` is stored as ``flat`` /
``offsets``); dense per-item arrays under their own names (first dimension n); ``meta`` (a
JSON string with a ``format`` key). Files are written atomically.

:func:`merge_ragged` joins per-batch files into one in a single write (append-only: items keep
the order of the parts, an item stored twice identically is kept once, twice differently is an
error).

>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> save_ragged(os.path.join(d, "1.npz"), ["a"], {"": [np.array([1, 2])]}, meta={"format": "demo/1"})
>>> save_ragged(os.path.join(d, "2.npz"), ["b"], {"": [np.array([3])]}, meta={"format": "demo/1"})
>>> merge_ragged(os.path.join(d, "all.npz"), [os.path.join(d, f) for f in ("1.npz", "2.npz")])
2
>>> f = load_ragged(os.path.join(d, "all.npz")); f.item_ids, [a.tolist() for a in f.ragged[""]]
(['a', 'b'], [[1, 2], [3]])
"""
from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .atomic import atomic_writer


@dataclass
class RaggedFile:
    """The content of one ragged ``.npz``."""

    item_ids: list[str]
    ragged: dict[str, list[np.ndarray]]
    dense: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def _keys(name: str) -> tuple[str, str]:
    return ("flat", "offsets") if name == "" else (f"{name}_flat", f"{name}_offsets")


def save_ragged(path: str | os.PathLike[str], item_ids: Sequence[str], ragged: Mapping[str, Sequence[np.ndarray]], *,
                dense: Mapping[str, np.ndarray] | None = None, meta: Mapping[str, Any] | None = None,
                dtypes: Mapping[str, Any] | None = None) -> None:
    """Write one ragged file (see the module docstring); ``dtypes`` sets a field's stored dtype."""
    n = len(item_ids)
    arrays: dict[str, np.ndarray] = {"item_ids": np.array([str(i) for i in item_ids], dtype=str)}
    for name, rows in ragged.items():
        if len(rows) != n:
            raise ValueError(f"ragged field {name!r}: {len(rows)} arrays for {n} items")
        flat_rows = [np.asarray(r).ravel() for r in rows]
        dtype = (dtypes or {}).get(name)
        flat = np.concatenate(flat_rows) if flat_rows else np.zeros(0, dtype or np.float32)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([r.size for r in flat_rows], out=offsets[1:])
        fk, ok = _keys(name)
        arrays[fk] = flat.astype(dtype) if dtype is not None else flat
        arrays[ok] = offsets
    for name, arr in (dense or {}).items():
        if len(arr) != n:
            raise ValueError(f"dense field {name!r}: {len(arr)} rows for {n} items")
        arrays[name] = np.asarray(arr)
    arrays["meta"] = np.array(json.dumps(dict(meta or {}), sort_keys=True, default=str))
    with atomic_writer(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]


def load_ragged(path: str | os.PathLike[str]) -> RaggedFile:
    """Read a file written by :func:`save_ragged`."""
    with np.load(path, allow_pickle=False) as z:
        names = set(z.files)
        ids = [str(i) for i in z["item_ids"].tolist()]
        meta = json.loads(str(z["meta"]))
        ragged, dense = {}, {}
        for key in sorted(names):
            if key == "offsets" or key.endswith("_offsets"):
                name = "" if key == "offsets" else key[: -len("_offsets")]
                fk, ok = _keys(name)
                flat, off = z[fk], z[ok]
                ragged[name] = [flat[off[j]:off[j + 1]] for j in range(len(ids))]
        consumed = {k for name in ragged for k in _keys(name)} | {"item_ids", "meta"}
        for key in sorted(names - consumed):
            dense[key] = z[key]
    return RaggedFile(ids, ragged, dense, meta)


def ragged_ok(path: str | os.PathLike[str], n_items: int | None = None) -> bool:
    """Whether ``path`` reads back whole (every member's checksum holds) with ``n_items`` items.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "a.npz")
    >>> save_ragged(p, ["a"], {"": [np.array([1])]})
    >>> ragged_ok(p, 1), ragged_ok(p, 2), ragged_ok(p + ".missing")
    (True, False, False)
    """
    try:
        f = load_ragged(path)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, json.JSONDecodeError):
        return False
    return n_items is None or len(f.item_ids) == n_items


def merge_ragged(out_path: str | os.PathLike[str], paths: Sequence[str | os.PathLike[str]], *,
                 comparable: Sequence[str] = ("format",), dtypes: Mapping[str, Any] | None = None) -> int:
    """Merge ragged files into ``out_path`` in one write; returns the number of items.

    The ``comparable`` meta keys must agree between files (an internal invariant: parts of one
    artifact share their settings). With no input file an empty file is written.
    """
    ids: list[str] = []
    ragged: dict[str, list[np.ndarray]] = {}
    dense: dict[str, list[np.ndarray]] = {}
    meta: dict[str, Any] = {}
    empty: dict[str, np.ndarray] = {}  # a zero-row array of each dense field (its shape and dtype)
    index: dict[str, int] = {}
    for p in paths:
        part = load_ragged(p)
        for f in part.ragged:
            ragged.setdefault(f, [])
        for f, arr in part.dense.items():
            dense.setdefault(f, [])
            empty.setdefault(f, arr[:0])
        for key in comparable:
            if key in meta and key in part.meta and meta[key] != part.meta[key]:
                raise RuntimeError(f"{p}: cannot merge files with different {key} ({meta[key]!r} vs {part.meta[key]!r})")
        meta = {**part.meta, **meta}
        for j, item in enumerate(part.item_ids):
            if item in index:
                k = index[item]
                same = all(np.array_equal(ragged[f][k], part.ragged[f][j]) for f in part.ragged) and all(
                    np.array_equal(dense[f][k], part.dense[f][j]) for f in part.dense)
                if not same:
                    raise RuntimeError(f"{p}: item '{item}' is already stored with different values")
                continue
            index[item] = len(ids)
            ids.append(item)
            for f, rows in part.ragged.items():
                ragged[f].append(rows[j])
            for f, arr in part.dense.items():
                dense[f].append(arr[j])
    stacked = {k: np.stack(v) if v else empty[k] for k, v in dense.items()}
    save_ragged(out_path, ids, ragged, dense=stacked, meta=meta, dtypes=dtypes)
    return len(ids)
