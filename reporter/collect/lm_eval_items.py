"""lm-eval's documents as reporter's items: the question as the prompt shows it (no few-shot examples, no answer
cue), the gold answer as text, the options as the published order lists them; and the split the task's config
names besides the evaluated one (the Min-K% test's other split).

>>> listed_options("Sky?\\nA. blue\\nB. green", ["A", "B"])
['blue', 'green']
"""
from __future__ import annotations

from typing import Any

from ..tasks import LETTERS, Item
from ..tasks.lm_eval_source import other_split

__all__ = ["doc_item", "listed_options", "other_split"]


def doc_item(task: Any, kind: str, doc: Any, item_id: str, context: str) -> Item:
    """One document as reporter's item: its own text (no few-shot examples), its gold answer and options.

    A task whose choices are the option labels (lm-eval's MMLU: ``["A", "B", "C", "D"]``, the options listed
    in the question as ``A. text`` lines) gets the options' texts, as the published order shows them.
    """
    question = _question(task, doc, context)
    choices = [str(c) for c in task.doc_to_choice(doc)] if kind == "multiple_choice" else None
    if choices is not None:
        choices = listed_options(question, choices) or choices
    return Item(id=item_id, question=question, answer=_gold(task, doc, choices), choices=choices)


def listed_options(question: str, choices: list[str]) -> list[str] | None:
    """The texts of options listed as ``A. text`` lines at the end of ``question``, when ``choices`` are their labels.

    >>> listed_options("Sky?\\nA. blue\\nB. green", ["A", "B"])
    ['blue', 'green']
    >>> listed_options("Question: Sky?", ["blue", "green"]) is None
    True
    """
    n = len(choices)
    if n < 2 or [c.strip() for c in choices] != list(LETTERS[:n]):
        return None
    lines = question.split("\n")
    tail = lines[-n:]
    if len(lines) <= n or not all(line.startswith(f"{LETTERS[i]}. ") for i, line in enumerate(tail)):
        return None
    return [line[3:] for line in tail]


def _question(task: Any, doc: Any, context: str) -> str:
    """The item's own text (no few-shot examples), as it appears in the prompt; a trailing answer cue
    (``"\\nAnswer:"``) is left out, so that a question listing its options reads as reporter's ``A. option`` block.
    """
    try:
        text = task.doc_to_text(doc)
    except Exception:
        text = None
    if not isinstance(text, str) or not text.strip():
        return context
    text = text.rstrip()
    for cue in ("\nAnswer:", "\nA:", "Answer:"):
        if text.endswith(cue) and len(text) > len(cue):
            return text[: -len(cue)].rstrip()
    return text


def _gold(task: Any, doc: Any, choices: list[str] | None) -> str:
    """The gold answer as text: the correct option of a multiple-choice item, else lm-eval's target."""
    target = task.doc_to_target(doc)
    if choices is not None:
        if isinstance(target, int) and 0 <= target < len(choices):
            return choices[target]
        if isinstance(target, list) and target and isinstance(target[0], int):
            return choices[target[0]]
    return str(target)
