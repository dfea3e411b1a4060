"""What the card says about few-shot prompting of reporter's own tasks: :func:`shots_phrase`.

Instruct models are prompted zero-shot with their chat template and base models 1-shot (the Utility Law paper's
settings) unless the profile sets a task's ``shots``. The phrase is read from the shot counts the models' task
records carry, so a card never states the defaults for a task that ran with others.

>>> card = {"benchmarks": ["arc", "gsm8k"], "models": [
...     {"meta": {"kind": "instruct"}, "tasks": {"arc": {"shots": 0}, "gsm8k": {"shots": 5}}},
...     {"meta": {"kind": "base"}, "tasks": {"arc": {"shots": 1}, "gsm8k": {"shots": 5}}}]}
>>> shots_phrase(card)
'instruct models zero-shot with their chat template, base models 1-shot, except gsm8k: 5-shot for every model'
"""
from __future__ import annotations

from typing import Any

from ..tasks import DEFAULT_SHOTS

__all__ = ["shots_phrase"]
_DEFAULTS = "instruct models zero-shot with their chat template, base models 1-shot"


def shots_phrase(card: dict[str, Any]) -> str:
    """The shots of reporter's own benchmark tasks (lm-eval's tasks and the probes are described apart):
    the defaults, then every task whose recorded shot counts differ from them, with the counts it ran with.

    >>> shots_phrase({"benchmarks": ["arc"], "models": [{"meta": {"kind": "base"}, "tasks": {"arc": {"shots": 1}}}]})
    'instruct models zero-shot with their chat template, base models 1-shot'
    >>> shots_phrase({"benchmarks": ["arc"], "models": [
    ...     {"meta": {"kind": "instruct"}, "tasks": {"arc": {"shots": 3}}},
    ...     {"meta": {"kind": "base"}, "tasks": {"arc": {"shots": 1}}}]})
    'instruct models zero-shot with their chat template, base models 1-shot, except arc: 3-shot for instruct models, 1-shot for base models'
    >>> shots_phrase({"benchmarks": ["arc", "gsm8k"], "models": [{"meta": {}, "tasks": {  # a paper profile: shots 0
    ...     "arc": {"shots": 0}, "gsm8k": {"shots": 0}}}]})
    "every model zero-shot on every task (the profile's shots)"
    """
    exceptions, uniform, tasks = [], set(), 0
    for task in card.get("benchmarks") or []:
        by_kind: dict[str, set[int]] = {}
        differs = False
        for m in card.get("models") or []:
            rec = (m.get("tasks") or {}).get(task)
            if not rec or rec.get("scorer") == "lm_eval" or not isinstance(rec.get("shots"), int):
                continue
            kind = "instruct" if (m.get("meta") or {}).get("kind") == "instruct" else "base"  # as plan_task reads it
            by_kind.setdefault(kind, set()).add(rec["shots"])
            differs |= rec["shots"] != DEFAULT_SHOTS[kind]
        tasks += bool(by_kind)
        if not differs:
            continue
        counts = {s for ss in by_kind.values() for s in ss}
        if len(counts) == 1:
            uniform |= counts
            exceptions.append(f"{task}: {_n(next(iter(counts)))} for every model")
        else:
            exceptions.append(f"{task}: " + ", ".join(f"{' or '.join(_n(s) for s in sorted(ss))} for {kind} models"
                                                      for kind, ss in sorted(by_kind.items(), key=_kind_order)))
    if exceptions and len(exceptions) == tasks and len(uniform) == 1 and all("for every model" in e for e in exceptions):
        chat = any((m.get("meta") or {}).get("kind") == "instruct" for m in card.get("models") or [])
        return (f"every model {_n(uniform.pop())} on every task (the profile's shots)"
                + (", instruct models with their chat template" if chat else ""))
    return _DEFAULTS + (", except " + "; ".join(exceptions) if exceptions else "")


def _n(shots: int) -> str:
    return "zero-shot" if shots == 0 else f"{shots}-shot"


def _kind_order(item: tuple[str, set[int]]) -> int:
    return list(DEFAULT_SHOTS).index(item[0])
