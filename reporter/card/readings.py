"""How the card's numbers were read, derived from results.json for its templates: each task's chance level and the
most common answer's share where that is the level tested (:func:`task_levels`), the answers read from option
log-probs (:func:`logprob_answers`), and the run's models that are the option-order null study's own
(:func:`null_own`).

>>> task_levels({"models": [{"tasks": {"t": {"chance": 0.25}}}]})
{'t': {'chance': 0.25, 'common': None}}
"""
from __future__ import annotations

from typing import Any

from ..analyse.contamination import SIGNAL_NAMES
from .warnings import join_names, trained

__all__ = ["PARTIAL", "item_counts_differ", "logprob_answers", "null_own", "partial_credit", "reasons_by_test",
           "task_levels"]

#: the scorers whose item scores are partial credit in [0, 1], not right or wrong, and how each credits an item
PARTIAL = {"f1": "token F1 against the answer", "char_f1": "character F1 against the answer"}


def task_levels(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each task's chance level and, where always giving its most common answer scores more, that answer and its
    share: ``{task: {"chance", "common"}}`` (from the first model that recorded each; task names may contain dots).

    >>> card = {"models": [{"tasks": {"boolq": {"chance": 0.5, "majority": {"answer": "yes", "share": 0.62}}}}]}
    >>> task_levels(card)
    {'boolq': {'chance': 0.5, 'common': {'answer': 'yes', 'share': 0.62}}}
    """
    out: dict[str, dict[str, Any]] = {}
    for m in card["models"]:
        for t, r in m["tasks"].items():
            row = out.setdefault(t, {"chance": None, "common": None})
            if row["chance"] is None and isinstance(r.get("chance"), (int, float)):
                row["chance"] = float(r["chance"])
            if row["common"] is None and isinstance(mj := r.get("majority"), dict):
                row["common"] = mj
    for row in out.values():
        if row["common"] is not None and (row["chance"] is None or row["common"]["share"] <= row["chance"]):
            row["common"] = None
    return out


def partial_credit(card: dict[str, Any]) -> list[dict[str, str]]:
    """The tasks whose items earn partial credit in [0, 1] (a scorer in :data:`PARTIAL`), in card order:
    ``{"task", "scorer", "how"}`` (from the first model that recorded each task's scorer).

    >>> card = {"benchmarks": ["arc", "qa"], "probes": ["spc"], "models": [{"tasks": {
    ...     "arc": {"scorer": "choice"}, "qa": {"scorer": "f1"}, "spc": {"scorer": "char_f1"}}}]}
    >>> [(p["task"], p["how"]) for p in partial_credit(card)]
    [('qa', 'token F1 against the answer'), ('spc', 'character F1 against the answer')]
    """
    scorer: dict[str, str] = {}
    for m in card["models"]:
        for t, r in m["tasks"].items():
            if isinstance(r.get("scorer"), str):
                scorer.setdefault(t, r["scorer"])
    return [{"task": t, "scorer": scorer[t], "how": PARTIAL[scorer[t]]}
            for t in card["benchmarks"] + card["probes"] if scorer.get(t) in PARTIAL]


def logprob_answers(card: dict[str, Any]) -> list[dict[str, Any]]:
    """The multiple-choice tasks where some of a model's answers were read from its option log-probs because its
    response named no option (``answer_from_logprob_share`` > 0): ``{"model", "task", "share", "n", "reference"}``
    in card order. Such a score is partly lm-eval's log-likelihood reading, not the model's generated answer.

    >>> card = {"benchmarks": ["arc"], "models": [{"name": "a", "reference": False, "tasks": {"arc": {
    ...     "answer_from_logprob_share": 0.25, "n": 8}}}, {"name": "b", "reference": False, "tasks": {"arc": {
    ...     "answer_from_logprob_share": 0.0, "n": 8}}}]}
    >>> logprob_answers(card)
    [{'model': 'a', 'task': 'arc', 'share': 0.25, 'n': 8, 'reference': False}]
    """
    return [{"model": m["name"], "task": t, "share": float(x), "n": r.get("n"), "reference": bool(m.get("reference"))}
            for m in card["models"] for t in card["benchmarks"]
            if (r := m["tasks"].get(t)) and isinstance(x := r.get("answer_from_logprob_share"), (int, float)) and x > 0]


def null_own(card: dict[str, Any]) -> dict[str, Any] | None:
    """The run's models that may be the calibrated option-order null's own clean models, whose own preference is then
    part of their null: ``{"clean": [names], "weights": [models with the same weights, by content], "names": [models
    that only carry a clean model's name]}``, or None where no calibrated null was used or no model is one.

    A model whose content identity (``meta.identity``) is of a kind the null recorded for its models (``packaged:``:
    a GGUF's sha256) is matched by it, and then never by name; otherwise (no identity, or one of another kind, which
    no hash of the null's can equal: a hub commit, a local directory's files) by name.

    >>> null = {"name": "calibrated", "clean_models": ["S"], "clean_identities": ["packaged:s:ab"]}
    >>> row = {"model": "S", "baseline": False, "signals": {"option_order": {"measured": True, "null": null}}}
    >>> card = {"analysis": {"contamination": [row, dict(row, model="T")]},
    ...         "models": [{"name": "S", "meta": {"identity": "local:cd"}}, {"name": "T", "meta": {"identity": "packaged:s:ab"}}]}
    >>> null_own(card)  # S's local files cannot be compared with a GGUF's hash: its name is all there is
    {'clean': ['S'], 'weights': ['T'], 'names': ['S']}
    """
    rows = [c for c in (card.get("analysis") or {}).get("contamination") or [] if not c.get("baseline")]
    nulls = [o["null"] for c in rows if isinstance(o := (c.get("signals") or {}).get("option_order"), dict)
             and o.get("measured") is not False and (o.get("null") or {}).get("name") == "calibrated"]
    if not nulls:
        return None
    clean, ids = list(nulls[0].get("clean_models") or []), nulls[0].get("clean_identities") or []
    kinds = {str(x).split(":", 1)[0] for x in ids}
    identity = {m["name"]: (m.get("meta") or {}).get("identity") for m in card["models"]}
    weights, names = [], []
    for name in dict.fromkeys(c["model"] for c in rows):
        own = identity.get(name)
        if own and str(own).split(":", 1)[0] in kinds:
            if own in ids:
                weights.append(name)
        elif name in clean:
            names.append(name)
    return {"clean": clean, "weights": weights, "names": names} if weights or names else None

def reasons_by_test(rows: list[dict[str, Any]]) -> str:
    """Why each contamination test could not run, per test, each reason with the tasks it holds for ("every task"
    where all): "option order: the task has no multiple-choice options (boolq, gsm8k); …".

    >>> rows = [{"task": "arc", "signals": {"option_order": {"reason": "too few items"},
    ...                                      "verbatim": {"reason": "verbatim_items is 0"}}},
    ...         {"task": "gsm8k", "signals": {"option_order": {"reason": "no options"},
    ...                                        "verbatim": {"reason": "verbatim_items is 0"}}}]
    >>> reasons_by_test(rows)
    'option order: too few items (arc); no options (gsm8k); verbatim completion: verbatim_items is 0 (every task)'
    """
    tasks = list(dict.fromkeys(str(c.get("task")) for c in rows))
    parts = []
    for name in dict.fromkeys([*SIGNAL_NAMES, *(k for c in rows for k in (c.get("signals") or {}))]):
        by_reason: dict[str, list[str]] = {}
        for c in rows:
            sig = (c.get("signals") or {}).get(name)
            if isinstance(sig, dict) and sig.get("reason"):
                seen = by_reason.setdefault(str(sig["reason"]), [])
                if str(c.get("task")) not in seen:
                    seen.append(str(c.get("task")))
        if by_reason:
            parts.append(f"{SIGNAL_NAMES.get(name, name.replace('_', ' '))}: " + "; ".join(
                f"{reason} ({'every task' if len(ts) == len(tasks) > 1 else ', '.join(ts)})"
                for reason, ts in by_reason.items()))
    return "; ".join(parts)


def item_counts_differ(card: dict[str, Any]) -> list[str]:
    """Each benchmark task whose trained models answered different numbers of items, with the counts and models.

    >>> card = {"benchmarks": ["arc", "gsm8k"], "models": [
    ...     {"name": "a", "reference": False, "status": "complete", "tasks": {"arc": {"n": 7}, "gsm8k": {"n": 5}}},
    ...     {"name": "b", "reference": False, "status": "complete", "tasks": {"arc": {"n": 8}, "gsm8k": {"n": 5}}}]}
    >>> item_counts_differ(card)
    ['arc (7: a; 8: b)']
    """
    out = []
    for task in card["benchmarks"]:
        by_n: dict[int, list[str]] = {}
        for m in trained(card):
            if isinstance(n := (m["tasks"].get(task) or {}).get("n"), int):
                by_n.setdefault(n, []).append(m["name"])
        if len(by_n) > 1:
            out.append(f"{task} (" + "; ".join(f"{n}: {join_names(ms)}" for n, ms in sorted(by_n.items())) + ")")
    return out
