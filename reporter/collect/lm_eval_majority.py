"""The best constant answer of an lm-eval multiple-choice task (its ``majority``): the level a model must beat besides
chance where one answer is right more often than guessing (BoolQ's "yes", 62 %). Kept in reporter's cache by the
task's content digest, so that a later run pays nothing for it.

>>> import types
>>> task = types.SimpleNamespace(config=types.SimpleNamespace(doc_to_choice=["no", "yes"]), multiple_input=False,
...                              eval_docs=[0, 1, 2], doc_to_target=lambda d: [1, 1, 0][d])
>>> majority_option(task)
{'answer': 'yes', 'share': 0.6666666666666666, 'over': 3}
"""
from __future__ import annotations

import contextlib
import hashlib
import operator
from typing import Any, Sequence

from ..errors import UserError
from ..installed import cache_root
from ..store.atomic import read_json, write_json

__all__ = ["majority_option"]


def majority_option(task: Any, digest: str | None = None, *, docs: Sequence[Any] | None = None) -> dict[str, Any] | None:
    """The best constant answer of an lm-eval multiple-choice task whose options are one fixed list (BoolQ's
    "no"/"yes", MMLU's letters): always the option at one position, scored as lm-eval's ``acc`` scores it (the gold
    is the target, or the text for a ``multiple_input`` task; a text gold is its option's index, an integer one at or
    past the option count is never right, a list of golds accepts any), over the whole evaluation split (``docs``:
    the evaluated documents instead, where they were chosen by id).

    ``{"answer", "share", "over"}``: the option's text, the share of documents it gets right, the number of
    documents. None where the options differ from document to document (ARC's and HellaSwag's texts: no answer is
    the same for every question there), or without documents or golds. Kept on the task object: its models share
    it; with ``digest`` (the task's :func:`~reporter.tasks.lm_eval_source.task_digest`: its config and documents by
    content) also in reporter's cache, so that a later run pays nothing for it.
    """
    static = getattr(task.config, "doc_to_choice", None)
    if not isinstance(static, list) or not static:
        return None
    options = [str(c) for c in static]
    if docs is None and hasattr(task, "_reporter_majority"):
        return task._reporter_majority  # type: ignore[no-any-return]
    path = None
    if digest and docs is None:
        key = hashlib.sha256(f"{digest}\0majority-v2".encode()).hexdigest()[:32]
        path = cache_root() / "lm-eval-majority" / f"{key}.json"
        try:
            got = read_json(path, None)
        except (OSError, UserError):  # a damaged or unreadable entry: computed again
            got = None
        if isinstance(got, dict) and "best" in got and _valid_majority(got["best"]):
            task._reporter_majority = got["best"]
            return got["best"]  # type: ignore[no-any-return]
    counts = [0] * len(options)
    evaluated = task.eval_docs if docs is None else docs
    for doc in evaluated:
        gold = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
        for g in set(gold) if isinstance(gold, list) else {gold}:
            if isinstance(g, str):
                g = options.index(g) if g in options else -1
            try:
                j = operator.index(g)  # ints, numpy integers and bools, as lm-eval compares them
            except TypeError:
                continue
            if 0 <= j < len(options):
                counts[j] += 1
    best = None
    if any(counts) and len(evaluated):
        j = max(range(len(options)), key=lambda k: (counts[k], -k))
        best = {"answer": options[j], "share": counts[j] / len(evaluated), "over": len(evaluated)}
    if docs is None:
        task._reporter_majority = best
    if path is not None:
        with contextlib.suppress(OSError, UserError):  # a read-only or full cache: computed again next time
            write_json(path, {"best": best})
    return best


def _valid_majority(x: Any) -> bool:
    """A cached best constant answer as :func:`majority_option` writes it (None, or answer, share and count)."""
    return x is None or (isinstance(x, dict) and isinstance(x.get("answer"), str)
                         and isinstance(x.get("share"), (int, float)) and not isinstance(x.get("share"), bool)
                         and 0 <= x["share"] <= 1 and isinstance(x.get("over"), int) and x["over"] > 0)
