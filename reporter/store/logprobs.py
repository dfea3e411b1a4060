"""``logprobs.npz``: per-item token log-probabilities of prompt and response (a ragged file).

Fields: ``prompt`` and ``response`` (float32, in token order: the log-probability of each actual
next token, prompt token j >= 1 at ``prompt[j - 1]``), and ``question_span`` (int64 [n, 2]:
[start, end) of the question in prompt-token indices; -1, -1 when unknown). In a task's file the
prompt tokens before the question (chat template, instructions, few-shot examples) are NaN: they
are not computed (the LM head runs from the question on); with an unknown span the whole prompt is.

>>> import tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "lp.npz")
>>> save_logprobs(p, ["a", "b"], [np.array([-1., -2.]), np.array([-3.])], question_spans=[(1, 3), None],
...               meta={"model": "m"})
>>> d, meta = load_logprobs(p)
>>> sorted(d), d["a"]["question_span"], d["b"]["question_span"], meta["model"]
(['a', 'b'], (1, 3), None, 'm')
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from .ragged import load_ragged, merge_ragged, save_ragged

FORMAT = "reporter.token_logprobs/1"
PathLike = str | os.PathLike[str]


def save_logprobs(path: PathLike, item_ids: Sequence[str], prompt: Sequence[np.ndarray],
                  response: Sequence[np.ndarray] | None = None,
                  question_spans: Sequence[tuple[int, int] | None] | None = None,
                  meta: Mapping[str, Any] | None = None) -> None:
    """Write per-item prompt/response log-probs to one compressed ``.npz``, atomically."""
    n = len(item_ids)
    resp = list(response) if response is not None else [np.zeros(0, np.float32)] * n
    spans = list(question_spans) if question_spans is not None else [None] * n
    if not (len(prompt) == len(resp) == len(spans) == n):
        raise ValueError("save_logprobs: item_ids, prompt, response and question_spans differ in length")
    sp = np.array([list(s) if s is not None else [-1, -1] for s in spans], dtype=np.int64).reshape(-1, 2)
    save_ragged(path, [str(i) for i in item_ids], {"prompt": list(prompt), "response": resp},
                dense={"question_span": sp}, meta={**(meta or {}), "format": FORMAT},
                dtypes={"prompt": np.float32, "response": np.float32})


def load_logprobs(path: PathLike) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """``({item_id: {"prompt": arr, "response": arr, "question_span": (s, e) | None}}, meta)``."""
    f = load_ragged(path)
    sp = f.dense["question_span"]
    out = {}
    for j, item in enumerate(f.item_ids):
        span = None if sp[j][0] < 0 else (int(sp[j][0]), int(sp[j][1]))
        out[item] = {"prompt": f.ragged["prompt"][j], "response": f.ragged["response"][j], "question_span": span}
    return out, f.meta


def merge_logprobs(out_path: PathLike, paths: Sequence[PathLike]) -> int:
    """Merge per-batch log-prob files into ``out_path`` in one write; returns the item count."""
    if not paths:
        save_logprobs(out_path, [], [], meta={})
        return 0
    return merge_ragged(out_path, paths, dtypes={"prompt": np.float32, "response": np.float32})
