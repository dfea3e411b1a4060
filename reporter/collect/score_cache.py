"""Evidence scores kept across runs: a model's log-probs (and argmaxes) of the exact token sequences an evidence
pass scores, computed once per model and reused by every later run that scores the same tokens.

A task's contamination evidence (the option-order test, the other-split Min-K% pass) is a deterministic function
of the model and of the tokens it scores, and costs a third to a half of a small run (benchmarks/RESULTS.md). The
passes still plan every run (which items, which orders, which pairs: cheap); what they would hand the model is
the key, with the model's content identity (:func:`reporter.models.identity.model_identity`), dtype and device
kind, the batch size (padding changes float summation order), reporter's code version and the torch and
transformers versions (:func:`reporter.collect.model_cache.step_key`). So a second run of the same model on the
same items, or a run that adds a model or a task to an earlier configuration, pays nothing for that evidence,
and any change of tokens, model or code computes anew. A model without a content identity, ``--force``, or a
cache that cannot be read or written only means computing.

>>> import numpy as np
>>> arrays = [np.array([1.5, 2.5], np.float32), None, np.zeros(0, np.float32)]
>>> back = _unpack(_pack(arrays))
>>> [None if a is None else a.tolist() for a in back]
[[1.5, 2.5], None, []]
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from typing import Any, Callable, Literal, Sequence

import numpy as np

from ..errors import UserError
from ..installed import cache_root
from ..store.atomic import write_bytes
from .model_cache import CACHED, COMPUTED, ModelStep, code_version, step_key

__all__ = ["SCORES_DIR", "CacheMode", "cached_scores"]

#: the cache directory (beside ``model-work``) that holds evidence scores
SCORES_DIR = "evidence-scores"

Ragged = Sequence["np.ndarray | None"]


def _pack(arrays: Ragged) -> dict[str, np.ndarray]:
    """Ragged 1-D arrays (or None) as two flat arrays: the values and each one's length (-1: None)."""
    lengths = np.array([-1 if a is None else len(a) for a in arrays], np.int64)
    parts = [np.asarray(a) for a in arrays if a is not None and len(a)]
    values = np.concatenate(parts) if parts else np.zeros(0, np.float64)
    return {"values": values, "lengths": lengths}


def _unpack(packed: dict[str, np.ndarray]) -> list[np.ndarray | None]:
    out: list[np.ndarray | None] = []
    pos = 0
    values = packed["values"]
    for n in packed["lengths"].tolist():
        if n < 0:
            out.append(None)
            continue
        out.append(values[pos:pos + n].copy())
        pos += n
    return out


def _key(lm: Any, kind: str, payload: Any) -> str | None:
    from ..models.identity import device_kind, model_identity, source_files

    identity = model_identity(lm)
    if identity is None:
        return None
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    return step_key(identity, str(lm.dtype).replace("torch.", ""), device_kind(lm), ModelStep(kind, digest),
                    code_version(*source_files(lm.spec)))  # a plugin source's code may change what weights compute


#: how a pass uses the cache: not at all (a direct call), compute and store anew (``--force``), read or compute
CacheMode = Literal["off", "refresh", "use"]


def cached_scores(lm: Any, kind: str, payload: Any, compute: Callable[[], tuple[Ragged, ...]], *,
                  mode: CacheMode = "use") -> tuple[tuple[list[np.ndarray | None], ...], str]:
    """``compute()`` (a tuple of ragged lists of 1-D arrays, each entry an array or None), or the stored result for
    the same ``kind`` and ``payload`` (the tokens and settings the computation sees, plain JSON data) on the same
    model; returns ``(result, "cached" | "computed")``. Each part comes back as float/int arrays of the dtype
    it was stored with. ``mode``: ``use`` reads a stored result and stores a computed one, ``refresh`` only
    stores, ``off`` neither.
    """
    if mode == "off":
        return _arrays(compute()), COMPUTED
    key = _key(lm, kind, payload)
    path = cache_root() / SCORES_DIR / kind / f"{key}.npz" if key is not None else None
    if path is not None and mode == "use" and path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                n = int(z["n_parts"])
                got = tuple(_unpack({"values": z[f"values_{i}"], "lengths": z[f"lengths_{i}"]}) for i in range(n))
            return got, CACHED
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # a damaged entry: computed again, and replaced
            pass
    result = compute()
    if path is not None:
        buf = io.BytesIO()
        parts = {"n_parts": np.array(len(result))}
        for i, part in enumerate(result):
            packed = _pack(part)
            parts[f"values_{i}"], parts[f"lengths_{i}"] = packed["values"], packed["lengths"]
        np.savez(buf, **parts)
        try:
            write_bytes(path, buf.getvalue())
        except (OSError, UserError):  # a read-only or full cache: the run goes on
            pass
    return _arrays(result), COMPUTED


def _arrays(result: tuple[Ragged, ...]) -> tuple[list[np.ndarray | None], ...]:
    """A computed result in the shape a cached one comes back in (arrays, None kept)."""
    return tuple([None if a is None else np.asarray(a) for a in part] for part in result)
