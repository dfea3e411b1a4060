"""The best constant answer of an lm-eval task (its ``majority``): the level a model must beat besides chance where one
answer is right more often than guessing (BoolQ's "yes", 62 %; GSM8K's "5", 3 %). Multiple choice with one fixed list
of options: :func:`majority_option`; generated answers: :func:`majority_generated`.

>>> import types
>>> task = types.SimpleNamespace(config=types.SimpleNamespace(doc_to_choice=["no", "yes"]), multiple_input=False,
...                              eval_docs=[0, 1, 2], doc_to_target=lambda d: [1, 1, 0][d])
>>> majority_option(task)
{'answer': 'yes', 'share': 0.6666666666666666, 'over': 3}
"""
from __future__ import annotations

import numbers
import operator
from collections import Counter
from typing import Any, Sequence

__all__ = ["majority_option", "majority_generated"]

#: the most frequent gold answers of a generated-answer task that are scored as constant responses
GENERATED_CANDIDATES = 8


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
        for j in _gold_options(task, doc, options):
            counts[j] += 1
    best = None
    if any(counts) and len(evaluated):
        j = max(range(len(options)), key=lambda k: (counts[k], -k))
        best = {"answer": options[j], "share": counts[j] / len(evaluated), "over": len(evaluated)}
    if docs is None:
        task._reporter_majority = best
    return best


def _gold_options(task: Any, doc: Any, options: list[str]) -> set[int]:
    """The positions of the options ``doc``'s gold accepts, as lm-eval's ``acc`` reads it."""
    gold = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
    out = set()
    for g in set(gold) if isinstance(gold, list) else {gold}:
        if isinstance(g, str):
            g = options.index(g) if g in options else -1
        try:
            j = operator.index(g)  # ints, numpy integers and bools, as lm-eval compares them
        except TypeError:
            continue
        if 0 <= j < len(options):
            out.add(j)
    return out


def option_share(task: Any, answer: str, docs: Sequence[Any]) -> float | None:
    """The share of ``docs`` that always answering the fixed option ``answer`` gets right (as :func:`majority_option`
    counts it); None where the task's options are not one fixed list holding it, or without documents.
    """
    static = getattr(task.config, "doc_to_choice", None)
    options = [str(c) for c in static] if isinstance(static, list) else []
    if answer not in options or not docs:
        return None
    j = options.index(answer)
    return sum(j in _gold_options(task, doc, options) for doc in docs) / len(docs)


def _filtered(task: Any, name: str, responses: list[str], docs: list[Any]) -> list[Any] | None:
    """``responses`` (one per document) through the task's filter pipeline ``name``, as lm-eval's ``FilterEnsemble``
    applies it; None where the task has no such pipeline.
    """
    ensemble = next((f for f in getattr(task, "_filters", None) or [] if f.name == name), None)
    if ensemble is None:
        return None
    out: Any = [[r] for r in responses]
    for make in ensemble.filters:
        out = make().apply(out, docs)
    return list(out)


def majority_generated(task: Any, metric: str, *, docs: Sequence[Any] | None = None,
                       candidates: int = GENERATED_CANDIDATES) -> dict[str, Any] | None:
    """The best constant response of an lm-eval generated-answer task under ``metric`` (``"exact_match,strict-match"``:
    lm-eval's metric and filter), scored by lm-eval itself: the response passes the task's filters (GSM8K's
    ``#### N`` regex) and ``process_results`` scores what they leave, document by document.

    Candidates are the task's own gold texts (a response a model could give every time); the ``candidates`` whose
    filtered form is the gold of most documents are scored over every document, and the best is kept (ties: the
    more frequent gold, then the first). ``{"answer", "share", "over"}`` as :func:`majority_option` gives, the
    answer being what the filters keep of the response ("18"). None where the task has no such filter, no text
    golds, a metric that is not a score in [0, 1], or where no candidate gets any document right. Over the whole
    evaluation split (``docs``: the documents chosen by id); kept on the task object per metric.
    """
    name, _, filter_name = metric.partition(",")
    memo: dict[str, Any] = vars(task).setdefault("_reporter_majority_generated", {}) if docs is None else {}
    key = f"{metric}|{candidates}"
    if key in memo:
        return memo[key]  # type: ignore[no-any-return]
    evaluated = list(task.eval_docs if docs is None else docs)
    best = None
    texts: list[tuple[str, Any]] = []  # (gold text, its document)
    for doc in evaluated:
        gold = task.doc_to_target(doc)
        texts.extend((g, doc) for g in (gold if isinstance(gold, list) else [gold]) if isinstance(g, str) and g)
    kept = _filtered(task, filter_name or "none", [t for t, _ in texts], [d for _, d in texts]) if texts else None
    if kept is not None:
        first: dict[Any, str] = {}
        counts: Counter[Any] = Counter()
        for (text, _), value in zip(texts, kept):
            if isinstance(value, str):
                first.setdefault(value, text)
                counts[value] += 1
        for value, count in counts.most_common(candidates):
            responses = _filtered(task, filter_name or "none", [first[value]] * len(evaluated), evaluated) or []
            try:  # a baseline figure: a task whose process_results fails on it records none, and runs on
                scores = [task.process_results(doc, [r]).get(name) for doc, r in zip(evaluated, responses)]
            except Exception:
                break
            if any(isinstance(x, bool) or not isinstance(x, numbers.Real) or not 0 <= float(x) <= 1 for x in scores):
                break  # not a per-document score in [0, 1]: no constant answer to state
            share = float(sum(float(x) for x in scores)) / len(evaluated)
            if share > 0 and (best is None or share > best["share"]):
                best = {"answer": value, "share": share, "over": len(evaluated)}
    memo[key] = best
    return best


def generated_share(task: Any, metric: str, answer: str, docs: Sequence[Any]) -> float | None:
    """The share of ``docs`` that always giving the constant response :func:`majority_generated` found over the whole
    split (``answer``: what the task's filters keep of it) gets right under ``metric``, scored by lm-eval as there.
    The response is the first gold text of the split whose filtered form is ``answer``; None where none is, or
    without documents.
    """
    name, _, filter_name = metric.partition(",")
    every = list(task.eval_docs)
    texts = [(g, doc) for doc in every for g in (lambda t: t if isinstance(t, list) else [t])(task.doc_to_target(doc))
             if isinstance(g, str) and g]
    kept = _filtered(task, filter_name or "none", [t for t, _ in texts], [d for _, d in texts]) if texts else None
    text = next((t for (t, _), v in zip(texts, kept or []) if v == answer), None)
    if text is None or not docs:
        return None
    responses = _filtered(task, filter_name or "none", [text] * len(docs), list(docs)) or []
    try:
        scores = [float(task.process_results(doc, [r]).get(name)) for doc, r in zip(docs, responses)]
    except Exception:  # noqa: BLE001  (as majority_generated: a baseline figure the task cannot give is left out)
        return None
    return sum(scores) / len(docs) if len(scores) == len(docs) else None

