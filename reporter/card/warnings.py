"""The card's warnings, most severe first: :func:`card_warnings`.

Each is a sentence someone may act on (a failed or partial model, an unanalysed run, a contamination verdict, small
samples, too few models for the law, a constant answer that scores as much as a ranked model on these items), with
its level: ``high``, ``medium`` or ``low``.

>>> join_names(["A", "B", "C"])
'A, B and C'
"""
from __future__ import annotations

import re
from typing import Any

from ..analyse.leaderboard import constant_answer_caution, not_above_constant
from ..tasks import is_probe

__all__ = ["LEVELS", "card_warnings", "join_names", "reply_warnings", "trained"]

#: the warnings' levels, most severe first
LEVELS = ("high", "medium", "low")


def join_names(names: list[str]) -> str:
    """Names as a sentence lists them: "A", "A and B", "A, B and C"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def trained(card: dict[str, Any]) -> list[dict[str, Any]]:
    """The card's trained models that did not fail (untrained references are never among them)."""
    return [m for m in card["models"] if not m["reference"] and m["status"] != "failed"]


def reply_warnings(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The analysis's ``responses`` rows (:mod:`reporter.analyse.responses`) as warnings: one for the tasks whose
    replies were mostly empty, one for those mostly cut at the new-token limit and scored 0.

    >>> reply_warnings([{"model": "M", "task": "gsm8k", "kind": "cut", "n": 3, "cut_wrong": 3, "limit": 96},
    ...                 {"model": "M", "task": "ar", "kind": "empty", "n": 5, "empty": 5, "empty_stopped": {"stop": 5}}])[0][1]
    "M's replies were empty on ar (5 of 5): it stopped at once, on the task's stop sequence. Those scores are of an empty reply, not of what the model knows."
    """
    out = []
    empty: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["kind"] == "empty":
            empty.setdefault(r["model"], []).append(r)
    if empty:
        def why(rs: list[dict[str, Any]]) -> str:
            reasons = [k for k in ("stop", "eos") if any((r.get("empty_stopped") or {}).get(k) for r in rs)]
            return {"stop": "on the task's stop sequence", "eos": "at its end-of-text token"}[reasons[0]] \
                if len(reasons) == 1 else "on the stop sequence or its end-of-text token"

        parts = [f"{m}'s replies were empty on " + join_names([f"{r['task']} ({r['empty']} of {r['n']})" for r in rs])
                 + f": it stopped at once, {why(rs)}" for m, rs in empty.items()]
        out.append(("medium", "; ".join(parts) + ". Those scores are of an empty reply, not of what the model "
                                                 "knows."))
    cut = [r for r in rows if r["kind"] == "cut"]
    if cut:
        by_model: dict[str, list[str]] = {}
        for r in cut:
            by_model.setdefault(r["model"], []).append(f"{r['task']} ({r['cut_wrong']} of {r['n']})")
        limits = sorted({r["limit"] for r in cut if isinstance(r.get("limit"), int)})
        limit = (f"the {limits[0]}-token limit" if len(limits) == 1
                 else f"their tasks' limits ({', '.join(map(str, limits))} tokens)" if limits else "the token limit")
        out.append(("medium", "Replies cut at " + limit + " and scored 0: "
                    + "; ".join(f"{m} on {join_names(ts)}" for m, ts in by_model.items())
                    + ". A reply cut before its answer scores 0 whatever the model knows, so these scores measure "
                      "the limit as much as the model; a larger max_new_tokens in the profile tells them apart."))
    return out


def _task_error(model: str, task: str, line: str) -> str:
    """A task's failure line without the words the sentence already says (``model 'm', task 't': ``).

    >>> _task_error("m", "t", "model 'm', task 't': no items")
    'no items'
    >>> _task_error("m", "t", "model 'm', task 'group': failed with KeyError: 'x' (the traceback is in e.json)")
    "failed with KeyError: 'x' (the traceback is in e.json)"
    >>> _task_error("m", "t", "model 'm', task 't', collector 'c': failed with KeyError: 'x'")
    "collector 'c': failed with KeyError: 'x'"
    """
    first = (line.splitlines()[0] if line else "").removeprefix(f"model '{model}', ")
    return re.sub(r"^task '[^']*'(: |, )", "", first, count=1).rstrip(".")  # its task's (or group's) name, said
    # already; what named the part that failed (", collector 'x': …") stays


def card_warnings(card: dict[str, Any]) -> list[tuple[str, str]]:
    """(level, sentence) pairs, most severe first."""
    out = []
    a = card["analysis"] or {}
    for m in card["models"]:
        if m["status"] == "failed":
            why = (m["error"] or "no error recorded").rstrip()
            out.append(("high", f"{m['name']} failed to evaluate: {why}" + ("" if why.endswith(".") else ".")))
        elif m["status"] in ("partial", "pending"):
            planned = [t["name"] for t in (card["manifest"].get("resolved", {}).get("profile") or {}).get("tasks", [])
                       if isinstance(t, dict)]
            missing = [t for t in dict.fromkeys(planned + card["benchmarks"] + card["probes"]) if t not in m["tasks"]]
            no_mean = any(not is_probe(t) for t in missing)
            errors = m.get("task_errors") or {}
            said = {t: _task_error(m["name"], t, errors[t]) for t in missing if t in errors}
            failed_why = "; ".join(f"{t} {why}" if why.startswith("failed") else f"{t} failed: {why}"
                                   for t, why in said.items())
            out.append(("medium", f"{m['name']} is {m['status']}: " + (
                f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
                + (", so it has no mean score" if no_mean else "")
                + (f" ({failed_why})." if failed_why else ".")
                if missing else "its model.json or smoke.json is missing (an interrupted run, or a file removed): "
                                "rerun `reporter run` to complete it.")))
    for m in card["models"]:
        if steps := m.get("step_errors"):
            said = [f"its evidence pass '{name.rsplit('/', 1)[1]}' on {name.rsplit('/', 1)[0]} {why.rstrip('.')}"
                    if "/" in name else f"its model-only step '{name}' {why.rstrip('.')}" for name, why in steps.items()]
            one = len(said) == 1
            out.append(("medium", f"{m['name']}: " + "; ".join(said) + (", so what it measures is" if one else
                                                                       ", so what they measure is")
                        + f" missing from this card; rerun `reporter run` to measure {'it' if one else 'them'}."))
    if card["analysis"] is None:
        out.append(("medium", "This run has not been analysed (results.json has no analysis section): places are "
                              "the raw order of mean scores, with no rank intervals, tiers, tests against chance, "
                              "Utility Law or contamination verdicts; run `reporter analyse` on the run directory "
                              "to add them."))
    for c in a.get("contamination") or []:
        fired = [k.replace("_", " ") for k, v in c["signals"].items() if isinstance(v, dict) and v.get("fires")]
        if c["severity"] != "none":
            out.append(("high" if c["severity"] == "strong" else "medium",
                        f"Possible test-set contamination ({c['severity']}): {c['model']} on {c['task']}"
                        + (f" ({' and '.join(fired)} signal{'s' * (len(fired) > 1)})" if fired else "")
                        + "; see Contamination."))
    if (a.get("training") or {}).get("collapse"):
        out.append(("high", "Training diagnostics: the checkpoint series shows a collapsing phase "
                            "(score down while MUI rises)."))
    ns = [t["n"] for m in card["models"] for t in m["tasks"].values()]
    if ns and min(ns) < 100:
        widest = max(t["ci_high"] - t["ci_low"] for m in card["models"] for t in m["tasks"].values())
        out.append(("medium", f"Small samples: tasks have {min(ns)}–{max(ns)} items; the widest 95% CI spans "
                              f"{100 * widest:.0f} percentage points, so small score gaps are noise."))
    avg = {m["name"]: m["avg"] for m in card.get("ranked") or [] if m.get("rank") is not None}
    if (low := not_above_constant([card.get("majority_baseline") or {}], avg)) is not None:
        level, below = low  # the constant answers on the very items the models answered
        out.append(("medium", constant_answer_caution(level, join_names([f"{m} ({100 * avg[m]:.1f}%)" for m in below]))))
    out += reply_warnings(a.get("responses") or [])
    if (k := len(trained(card))) < 3:
        out.append(("medium", f"Only {k} trained model{'s' * (k != 1)}: the Utility Law fit and the "
                              "law-adjusted ranking need ≥3 models."))
    pooled = ((a.get("law") or {}).get("pooled")) or {}
    if pooled.get("r2") is not None and pooled["r2"] < 0.5:
        out.append(("low", f"The pooled Utility Law fit is weak (R² = {pooled['r2']:.2f}); law-based "
                           "adjustments are indicative only."))
    if card["lpp_correlations"] and not any(c["reliable"] for c in card["lpp_correlations"]):
        out.append(("low", "No LPP–benchmark correlation is reliable at this number of models."))
    if any(m["meta"].get("source_type") == "packaged" for m in card["models"]):
        out.append(("low", "Offline demo models are quantised GGUF files dequantised to float; their scores "
                           "can differ from the original full-precision weights."))
    return sorted(out, key=lambda w: LEVELS.index(w[0]))
