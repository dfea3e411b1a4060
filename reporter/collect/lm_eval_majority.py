"""The best constant answer of an lm-eval multiple-choice task (its ``majority``): the level a model must beat besides
chance where one answer is right more often than guessing (BoolQ's "yes", 62 %).

>>> import types
>>> task = types.SimpleNamespace(config=types.SimpleNamespace(doc_to_choice=["no", "yes"]), multiple_input=False,
...                              eval_docs=[0, 1, 2], doc_to_target=lambda d: [1, 1, 0][d])
>>> majority_option(task)
{'answer': 'yes', 'share': 0.6666666666666666, 'over': 3}
"""
from __future__ import annotations

import operator
from typing import Any, Sequence

__all__ = ["majority_option"]


def majority_option(task: Any, *, docs: Sequence[Any] | None = None) -> dict[str, Any] | None:
    """The best constant answer of an lm-eval multiple-choice task whose options are one fixed list (BoolQ's
    "no"/"yes", MMLU's letters): always the option at one position, scored as lm-eval's ``acc`` scores it (the gold
    is the target, or the text for a ``multiple_input`` task; a text gold is its option's index, an integer one at or
    past the option count is never right, a list of golds accepts any), over the whole evaluation split (``docs``:
    the evaluated documents instead, where they were chosen by id).

    ``{"answer", "share", "over"}``: the option's text, the share of documents it gets right, the number of
    documents. None where the options differ from document to document (ARC's and HellaSwag's texts: no answer is
    the same for every question there), or without documents or golds. Kept on the task object: its models share
    it. (A count over the golds: BoolQ's 3,270 documents take 0.05 s, so nothing is cached on disk.)
    """
    static = getattr(task.config, "doc_to_choice", None)
    if not isinstance(static, list) or not static:
        return None
    options = [str(c) for c in static]
    if docs is None and hasattr(task, "_reporter_majority"):
        return task._reporter_majority  # type: ignore[no-any-return]
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
    return best
