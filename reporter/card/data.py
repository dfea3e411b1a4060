"""The card's data: results.json checked against :mod:`reporter.schema`, plus the derived views
the sections render (averages and ranks, neighbour comparisons, warnings, the summary,
limitations, measurements of plugin collectors).

Nothing here loads a model or imports torch: a card can be re-rendered anywhere.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..analyse.task_weights import grouping, task_shares
from ..metrics.mui import DEFINITION_TEXT, LEGACY_DEFINITION, k_mui_eval, k_per_layer
from ..schema import Results, TaskSummary, is_untrained, validate
from ..store.gate import check_version, open_run
from ..tasks import is_probe
from .format import finite, fmt_about
from .lm_eval import lm_eval_view, task_rows
from .readings import item_counts_differ, logprob_answers, null_own, partial_credit, reasons_by_test, task_levels
from .shots import shots_phrase
from .warnings import card_warnings, join_names, trained

#: reporter's own scorers whose items are right or wrong (0 or 1): a task of theirs gets the exact binomial interval
RIGHT_OR_WRONG = frozenset({"choice", "exact", "bool", "numeric", "math", "code"})

_SEVERITIES = ("strong", "weak", "none")
#: the task summary keys the built-in sections show; any other key is a plugin's measurement
#: a task summary's own fields, and those the card adds to it (the chance marks of :func:`_ranks`), which no plugin measured
#: the warnings the summary shows (the card's Limitations list the rest)
SUMMARY_WARNINGS = 4
#: AR probe metrics the tables read at the top level of a task (older runs nest them under "ar" only)
_AR_FIELDS = ("flag_accuracy", "answer_accuracy", "format_validity", "overconfidence", "unparsed_flag")
#: what the built-in sections show of a task (the AR fields lifted to the top: the probe table shows them)
_CORE_TASK_KEYS = frozenset(TaskSummary.__annotations__) | {"at_chance", "chance_p"} | set(_AR_FIELDS)


def load_card(run_dir: str | Path, *, locked_ok: bool = False) -> dict[str, Any]:
    """Read and check a run's results.json + manifest.json; return what the templates render. ``locked_ok``: the
    caller holds the run directory's lock (``reporter run`` drawing its own card); otherwise a run that is still
    writing is refused.

    >>> card = load_card(run_dir)
    >>> card["benchmarks"], card["probes"]
    (['arc_easy'], ['spc'])
    """
    view = open_run(run_dir, "render", manifest=False, locked_ok=locked_ok)  # the gate: lock, schema_version, shape
    assert view.results is not None
    return build_card(view.results, view.manifest)


def build_card(res: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """The checked (:func:`reporter.schema.validate`), derived view of ``results.json`` that templates and charts use."""
    check_version(res)
    res = validate(res, Results)
    # provenance only: a results.json without its run block (hand-made, or cut) renders with "?" where it goes
    run = {**dict.fromkeys(("created", "reporter_version", "seed", "config_hash", "profile")), **(res["run"] or {})}
    models = [_model(name, m) for name, m in res["models"].items()]
    order = [t["name"] for t in (manifest.get("resolved", {}).get("profile") or {}).get("tasks", [])]
    seen = order + [t for m in models for t in m["tasks"] if t not in order]
    tasks = [t for t in dict.fromkeys(seen) if any(t in m["tasks"] for m in models)]
    if (a := res["analysis"]) is not None:
        a["contamination"].sort(key=lambda c: (_SEVERITIES.index(c["severity"]), c["model"], c["task"]))
    card = {"run": run, "manifest": manifest, "models": models,
            "benchmarks": [t for t in tasks if not is_probe(t)], "probes": [t for t in tasks if is_probe(t)],
            "comparisons": res["comparisons"], "lpp_correlations": res["lpp_correlations"], "analysis": a}
    names = [m["name"] for m in models]
    card["title"] = "Model card: " + (", ".join(names[:3]) + f" and {len(names) - 3} more" if len(names) > 4
                                      else ", ".join(names))
    card["subtitle"] = f"profile {run.get('profile') or 'unnamed'}, {len(models)} model{'s' * (len(models) != 1)}"
    card["date"] = (run.get("created") or manifest.get("created") or "")[:10]
    _averages(card)
    card["mui_definitions"] = mui_definitions(card)
    card["mui_kept"] = mui_kept(card)
    card["lpp_short_texts"] = sorted({str((m.get("lpp") or {}).get("short_texts") or "exclude") for m in models
                                      if m.get("lpp")})
    card["collection_fallbacks"] = [{"model": m["name"], "task": t, "reason": s["collection_fallback"]}
                                    for m in models for t, s in m["tasks"].items() if s.get("collection_fallback")]
    card["holm"] = any(c.get("p_holm") is not None for c in card["comparisons"])
    for c in card["comparisons"]:
        if c.get("significant") is None:  # results.json from before the Holm adjustment: the bootstrap CI
            c["significant"] = c["ci_low"] > 0 or c["ci_high"] < 0
    card["levels"] = task_levels(card)
    card["null_own"] = null_own(card)
    card["logprob_answers"] = logprob_answers(card)
    card["partial_credit"] = partial_credit(card)
    card["lm_eval"] = lm_eval_view(card)
    card["task_rows"] = task_rows(card)
    card["own_shots"] = shots_phrase(card)
    # a constant partial-credit score analysed before its exact bound (metrics.stats.constant_score_bounds)
    card["zero_width"] = [f"{m['name']} on {t}" for m in models for t, s in m["tasks"].items()
                          if s.get("method") == "degenerate" and 0 < s.get("score", 0) < 1]
    # right/wrong items analysed before their exact binomial interval (metrics.stats.score_ci)
    card["bca_binary_tasks"] = {m["name"]: older for m in models if (older := [
        t for t, s in m["tasks"].items() if s.get("method") == "bootstrap-bca" and s.get("scorer") in RIGHT_OR_WRONG])}
    card["bca_binary"] = [f"{name} on {t}" for name, ts in card["bca_binary_tasks"].items() for t in ts]
    for key, fn in (("neighbours", _neighbours), ("warnings", card_warnings), ("summary", _summary),
                    ("limitations", _limitations), ("extra_measurements", extra_measurements)):
        card[key] = fn(card)
    card["empty"] = empty_elements(card)
    return card


def _model(name: str, m: dict[str, Any]) -> dict[str, Any]:
    meta = m["meta"] or {}
    for t in m["tasks"].values():  # AR metrics: top-level fields, or nested under "ar" (reporter.tasks.probes.ar)
        t.update({k: v for k, v in (t["ar"] or {}).items() if t.get(k) is None and k in _AR_FIELDS})
    return {**m, "name": name, "meta": meta, "smoke": m["smoke"] or {}, "status": m["status"] or "pending",
            "slug": m["slug"] or name,
            "reference": is_untrained(m)}


def _averages(card: dict[str, Any]) -> None:
    """Mean score (with an approximate CI), mean MUI and raw rank over the benchmark tasks, an lm-eval group
    counting as one task (:mod:`reporter.analyse.task_weights`, as the analysis's ranking does).
    """
    bench = card["benchmarks"]
    groups, sizes = grouping(dict(enumerate(card["models"])), bench)
    w, k = task_shares(bench, groups, sizes)  # each task's share of a unit, and the units (no group: 1s, #tasks)
    # the lm-eval groups the mean counts as one task each, with their number of tasks (the card's sentences)
    card["mean_groups"] = ([{"name": g, "tasks": sum(1 for x in groups.values() if x == g)}
                            for g in sorted(set(groups.values()))] if any(v != 1.0 for v in w.values()) else [])
    for m in card["models"]:
        ts = {t: m["tasks"][t] for t in bench if t in m["tasks"]}
        m["complete"] = bool(bench) and len(ts) == len(bench)
        m["avg"] = m["avg_lo"] = m["avg_hi"] = m["avg_mui"] = m["avg_mui_sae"] = None
        m["sae_tasks"] = [t for t in bench if (m["tasks"].get(t) or {}).get("mui_sae") is not None]
        m["sae_settings"] = m["tasks"][m["sae_tasks"][0]]["mui_sae_settings"] if m["sae_tasks"] else None
        if m["complete"]:  # the half-widths combine in quadrature with the same weights
            m["avg"] = sum(w[t] * s["score"] for t, s in ts.items()) / k
            m["avg_lo"] = max(0.0, m["avg"] - math.sqrt(sum((w[t] * (s["score"] - s["ci_low"])) ** 2
                                                            for t, s in ts.items())) / k)
            m["avg_hi"] = min(1.0, m["avg"] + math.sqrt(sum((w[t] * (s["ci_high"] - s["score"])) ** 2
                                                            for t, s in ts.items())) / k)
            if all(s["mui"] is not None for s in ts.values()):
                m["avg_mui"] = sum(w[t] * s["mui"] for t, s in ts.items()) / k
            if all(s.get("mui_sae") is not None for s in ts.values()):
                m["avg_mui_sae"] = sum(w[t] * s["mui_sae"] for t, s in ts.items()) / k
    _ranks(card)
    a = card["analysis"] or {}
    fair = {f["model"]: f for f in ((a.get("fairness") or {}).get("per_model") or [])}
    contam = [c for c in a.get("contamination") or [] if c["severity"] != "none"]
    for m in card["models"]:
        m["fair"] = fair.get(m["name"])
        m["badges"] = ([(c["severity"], f"contamination {c['severity']}: {c['task']}") for c in contam
                        if c["model"] == m["name"]]
                       + ([("strong", "failed")] if m["status"] == "failed" else [])
                       + ([("weak", m["status"])] if m["status"] in ("partial", "pending") else [])
                       + ([("info", "untrained reference")] if m["reference"] else [])
                       + ([("info", "quantised (GGUF)")] if m["meta"].get("source_type") == "packaged" else []))


def _ranks(card: dict[str, Any]) -> None:
    """Ranks, 95% rank intervals and tiers of the trained models (analysis.ranking); untrained models are
    reference rows below them, never ranked; chance marks on every task cell.
    """
    a = card["analysis"] or {}
    by_name = {m["name"]: m for m in card["models"]}
    for m in card["models"]:
        m["rank"] = m["rank_low"] = m["rank_high"] = m["tier"] = None
        m["tied_with"] = []
    rk = a.get("ranking")
    if rk:
        tiers = {name: tier for tier in rk["tiers"] for name in tier}
        ranked = []
        for r in rk["models"]:
            if (m := by_name.get(r["model"])) is not None:
                m.update(rank=r["rank"], rank_low=r["rank_low"], rank_high=r["rank_high"], tier=r["tier"],
                         tied_with=[n for n in tiers.get(m["name"], []) if n != m["name"]])
                ranked.append(m)
    else:  # no analysis.ranking (not analysed, or analysed before rankings): raw order, trained models only;
        # equal means share a place, since nothing here tests a difference
        ranked = sorted((m for m in card["models"] if m["avg"] is not None and not m["reference"]),
                        key=lambda m: -m["avg"])
        for i, m in enumerate(ranked):
            m["rank"] = ranked[i - 1]["rank"] if i and m["avg"] == ranked[i - 1]["avg"] else i + 1
    refs = [m for m in card["models"] if m["reference"] and m not in ranked and m["avg"] is not None]
    card["ranked"] = ranked + refs + [m for m in card["models"] if m not in ranked and m not in refs]
    card["theoretical_chance"] = next((r["score"] for r in a.get("references") or [] if r["kind"] == "theoretical"),
                                      None)
    card["majority_baseline"] = next((r for r in a.get("references") or [] if r["kind"] == "majority"), None)
    card["multi_tier"] = len({m["tier"] for m in ranked}) > 1
    chance = {(c["model"], c["task"]): c for c in a.get("above_chance") or []}
    for m in card["models"]:
        for t, r in m["tasks"].items():
            c = chance.get((m["name"], t))
            r["at_chance"] = bool(c and c["above"] is False and not m["reference"])
            r["chance_p"] = c["p"] if c else None
        m["at_chance_tasks"] = [t for t in card["benchmarks"] if m["tasks"].get(t, {}).get("at_chance")]


def mui_definitions(card: dict[str, Any]) -> list[dict[str, Any]]:
    """The MUI definitions the run's numbers use, each with its one-sentence description.

    Runs recorded before definitions were named used ``contribution``.

    >>> [d["name"] for d in mui_definitions({"models": [{"tasks": {"t": {"mui_settings": {"definition": "paper"}}}}]})]
    ['paper']
    """
    names = set()
    for m in card["models"]:
        for t in m["tasks"].values():
            if (ms := t.get("mui_settings")):
                names.add(ms.get("definition") or LEGACY_DEFINITION)
    recorded = any((t.get("mui_settings") or {}).get("definition") for m in card["models"] for t in m["tasks"].values())
    return [{"name": n, "text": DEFINITION_TEXT.get(n, ""), "legacy": n == LEGACY_DEFINITION and not recorded}
            for n in sorted(names)]


def mui_kept(card: dict[str, Any]) -> list[dict[str, Any]]:
    """The share of each layer's FFN neurons that top_ratio keeps per answer, by trained model, where the rounding of
    k makes it differ between them by more than a tenth: ``[{"model", "k", "d_ff", "share", "rule"}]``, else [].

    k is a whole number (``k_per_layer``: max(1, ⌊top_ratio·d_ff⌋); MUI-Eval's ``int(top_ratio·d_ff)``), so at a
    small d_ff the share kept is not top_ratio, and two models with another d_ff keep other shares at the same
    top_ratio: SmolLM2-135M (d_ff 1,536) keeps 1 neuron a layer, 0.065 %, Gemma-3-270M (2,048) 2, 0.098 %.
    Per-layer modes only (``score``, ``activation``); ``topscore`` keeps by a threshold, ``global_topk`` over all layers.

    >>> ms = lambda d_ff: {"mui_settings": {"mode": "score", "top_ratio": 0.001, "d_ff": d_ff, "definition": "paper"}}
    >>> card = {"models": [{"name": "S", "reference": False, "tasks": {"t": ms(1536)}},
    ...                    {"name": "G", "reference": False, "tasks": {"t": ms(2048)}}]}
    >>> [(r["model"], r["k"], round(100 * r["share"], 3)) for r in mui_kept(card)]
    [('S', 1, 0.065), ('G', 2, 0.098)]
    >>> mui_kept({"models": card["models"][:1]})
    []
    """
    rows = []
    for m in card["models"]:
        if m.get("reference"):
            continue
        kept = set()
        for t in m["tasks"].values():
            ms = t.get("mui_settings") or {}
            ratio, d_ff = ms.get("top_ratio"), ms.get("d_ff")
            if ms.get("mode", "score") not in ("score", "activation") or not isinstance(d_ff, int) or \
                    not isinstance(ratio, (int, float)) or d_ff <= 0:
                continue
            mui_eval = ms.get("definition") == "mui-eval"
            kept.add(((k_mui_eval if mui_eval else k_per_layer)(float(ratio), d_ff), d_ff, mui_eval))
        if len(kept) == 1:
            k, d_ff, mui_eval = kept.pop()
            rows.append({"model": m["name"], "k": k, "d_ff": d_ff, "share": k / d_ff,
                         "rule": "int(top_ratio·d_ff), MUI-Eval's" if mui_eval else "max(1, ⌊top_ratio·d_ff⌋)"})
    shares = [r["share"] for r in rows]
    if len(rows) < 2 or (min(shares) > 0 and max(shares) <= 1.1 * min(shares)) or max(shares) == 0:
        return []
    return rows


def _oriented(c: dict[str, Any], a: str) -> dict[str, Any]:
    """Comparison ``c`` as ``a`` minus the other model."""
    if c["model_a"] == a:
        return c
    return {**c, "model_a": c["model_b"], "model_b": c["model_a"], "mean_diff": -c["mean_diff"],
            "ci_low": -c["ci_high"], "ci_high": -c["ci_low"], "n01": c["n10"], "n10": c["n01"]}


def _neighbours(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Each ranked model against the next one down, task by task: is the higher rank a real difference."""
    ranked = [m["name"] for m in card["ranked"] if m["rank"] is not None]
    by_pair: dict[tuple[str, str, str], dict[str, Any]] = {}
    for c in card["comparisons"]:
        by_pair[(c["model_a"], c["model_b"], c["task"])] = by_pair[(c["model_b"], c["model_a"], c["task"])] = c
    out = []
    for a, b in zip(ranked, ranked[1:]):
        cells = {t: _oriented(by_pair[(a, b, t)], a) for t in card["benchmarks"] if (a, b, t) in by_pair}
        out.append({"a": a, "b": b, "cells": cells, "wins": sum(c["significant"] and c["mean_diff"] > 0
                                                                 for c in cells.values()),
                    "losses": sum(c["significant"] and c["mean_diff"] < 0 for c in cells.values())})
    return out


def _summary(card: dict[str, Any]) -> dict[str, Any]:
    """Who wins on raw score (and is the lead significant?), the tiers, chance, power, law-adjusted, the top warnings."""
    ranked = [m for m in card["ranked"] if m["rank"] is not None]
    w, r = (ranked + [None, None])[:2]
    wins = sum(1 for c in card["comparisons"] if r and c["significant"] and c["task"] in card["benchmarks"]
               and {c["model_a"], c["model_b"]} == {w["name"], r["name"]} and _oriented(c, w["name"])["mean_diff"] > 0)
    top = next((m for m in card["models"] if m["fair"] and m["fair"]["rank_adjusted"] == 1), None)
    a = card["analysis"] or {}
    joint = [m["name"] for m in ranked if w is not None and m["rank"] == w["rank"]]  # equal means share a place
    return {"winner": w, "runner_up": r, "wins": wins, "joint": joint, "joint_text": join_names(joint) if joint else "", "top_adjusted": top,
            "n_trained": len(trained(card)),
            "tiers": _tier_sentence(ranked, a), "chance": _chance_sentence(card), "power": _power_sentence(a),
            "warnings": card["warnings"][:SUMMARY_WARNINGS],
            "more_warnings": max(0, len(card["warnings"]) - SUMMARY_WARNINGS)}


def _tier_sentence(ranked: list[dict[str, Any]], a: dict[str, Any]) -> str | None:
    """"A and B are statistically tied on 8 of 9 tasks" — the tiers of the ranking, in words."""
    rk = a.get("ranking")
    if not rk or not ranked:
        return None
    if len(ranked) == 1:
        return f"{ranked[0]['name']} is the only ranked model."
    interval = {m["name"]: f"{m['rank_low']}–{m['rank_high']}" if m["rank_low"] != m["rank_high"]
                else str(m["rank_low"]) for m in ranked}
    tiers = [[n for n in tier if n in interval] for tier in rk["tiers"]]
    if len(tiers) == 1:
        text = (f"{join_names(tiers[0])} are statistically tied over all benchmark tasks (one tier; rank intervals "
                f"{', '.join(interval[n] for n in tiers[0])}).")
    else:
        text = "Tiers: " + "; ".join(f"{k}. {join_names(t)}" + (" (statistically tied)" if len(t) > 1 else "")
                                     for k, t in enumerate(tiers, 1)) + "."
    ties = a.get("ties")
    if ties and ties["n_tasks"]:
        x, y = ties["models"]
        text += (f" Task by task, {x} and {y} are statistically tied on {len(ties['tied'])} of {ties['n_tasks']} "
                 "benchmark tasks (Holm-adjusted paired tests).")
    return text


def _majority_levels(card: dict[str, Any]) -> str:
    """The sentence naming the tasks tested against their most common answer, with its share (empty where none
    was): " Where always giving … beats guessing, that is the level tested: boolq 62 % ("yes").".
    """
    levels: dict[str, tuple[str, float]] = {}
    for c in (card["analysis"] or {}).get("above_chance") or []:
        if c.get("baseline_kind") == "majority" and c.get("majority_answer") is not None:
            levels.setdefault(c["task"], (str(c["majority_answer"]), float(c["baseline"])))
    if not levels:
        return ""
    return (" Where always giving a task's most common answer beats guessing, that is the level tested: "
            + ", ".join(f"{t} {100 * x:.0f} % (\"{a}\")" for t, (a, x) in sorted(levels.items())) + ".")


def _chance_sentence(card: dict[str, Any]) -> str | None:
    bench = card["benchmarks"]
    rows = [(m["name"], m["at_chance_tasks"]) for m in trained(card) if m["at_chance_tasks"]]
    if not trained(card):  # untrained references only: "every trained model" would be a claim about none
        return None
    if not rows:
        tested = any(c.get("above") is not None for c in (card["analysis"] or {}).get("above_chance") or [])
        return "Every trained model beats chance on every benchmark task." + _majority_levels(card) if tested else None

    tested = {(c.get("model"), c.get("task")) for c in (card["analysis"] or {}).get("above_chance") or []
              if c.get("above") is not None}

    def tasks(name: str, ts: list[str]) -> str:
        of = [t for t in bench if (name, t) in tested]  # a task not tested (no chance level) is in neither list
        if len(ts) > len(of) / 2:
            rest = [t for t in of if t not in ts]
            what = f"{len(of)} tasks" + (f" tested ({len(bench) - len(of)} had no chance level)" if len(of) < len(bench)
                                         else "")
            return f"{len(ts)} of {what}" + (f" (all but {', '.join(rest)})" if rest else " (all)")
        return ", ".join(ts)
    return "Not significantly above chance (one-sided exact binomial test, α = 0.05): " + "; ".join(
        f"{name} on {tasks(name, ts)}" for name, ts in rows) + "." + _majority_levels(card)


def _power_sentence(a: dict[str, Any]) -> str | None:
    pw = a.get("power")
    if not pw or not pw.get("headline"):
        return None
    h = pw["headline"]
    x, y = pw["models"]
    more = [t for t in pw["underpowered"] if t != h["task"]]
    # what the other tasks need: the headline is the largest task (ties: the fewest items needed), not the worst
    needed = {r["task"]: int(r["n_needed"]) for r in pw.get("per_task") or []
              if r.get("task") in more and isinstance(r.get("n_needed"), (int, float))}
    need = sorted(needed.values())
    lo, hi = (fmt_about(need[0]), fmt_about(need[-1])) if need else ("", "")
    planned = [t for t in more if t in needed]
    rest = [t for t in more if t not in needed]
    parts = ([f"{', '.join(planned)} (about {lo}{'–' + hi if hi != lo else ''} items needed)"] if planned else []) + (
        [f"{', '.join(rest)} (no disagreement or spread to plan from)"] if rest and planned
        else [", ".join(rest)] if rest else [])
    return (f"Underpowered: to detect a {100 * pw['planned_difference']:.0f}-point difference between the top two "
            f"models ({x} and {y}) on {h['task']} with {100 * pw['power']:.0f}% power, about {fmt_about(h['n_needed'])} "
            f"items are needed; this run used {h['n']}."
            + (f" Also underpowered: {'; '.join(parts)}." if more else ""))


def _limitations(card: dict[str, Any]) -> list[str]:
    """Every warning the summary has no room for (the HTML and PDF cards show no other list of them), the
    limitations among the ones it shows, then the run's own.
    """
    out = [w for i, (lvl, w) in enumerate(card["warnings"])
           if i >= SUMMARY_WARNINGS or w.startswith(("Small samples", "Only ", "Offline demo"))]
    settings = {(s.get("n_samples"), s.get("top_ratio")) for m in card["models"] for t in m["tasks"].values()
                if (s := t["mui_settings"])}
    if len(settings) > 1:
        out.append("MUI grows with the number of samples: tasks here use different sample counts "
                   f"({', '.join(str(n) for n, _ in sorted(settings, key=str))}), so compare MUI only "
                   "within a task.")
    if differ := item_counts_differ(card):
        out.append("Trained models were scored on different numbers of items on " + "; ".join(differ) + ": a base "
                   "model holds its few-shot example out of the items where the task has no few-shot split, so each "
                   "mean score is over that model's own items, and a pairwise test over the items both answered.")
    a = card["analysis"] or {}
    return out + a.get("notes", [])


def extra_measurements(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-task summary fields that no built-in section shows (a plugin collector's measurements).

    One entry per field: ``{"field", "tasks": [...], "rows": [{"model", "cells": {task: text}}]}``, where
    a number is shown as is, and a list of numbers as its mean with its length and range.

    >>> card = {"models": [{"name": "m", "tasks": {"t": {"score": 1, "layer_norm": [1.0, 3.0]}}}]}
    >>> extra_measurements(card)[0]["rows"][0]["cells"]
    {'t': 'mean 2.000 over 2 values (1.000 to 3.000)'}
    """
    fields: dict[str, list[str]] = {}
    for m in card["models"]:
        for task, summary in m["tasks"].items():
            for key, value in summary.items():
                if key not in _CORE_TASK_KEYS and _shown(value) is not None:
                    tasks = fields.setdefault(key, [])
                    if task not in tasks:
                        tasks.append(task)
    out = []
    for key, tasks in fields.items():
        rows = [{"model": m["name"], "cells": {t: _shown(m["tasks"][t].get(key)) or "—" for t in tasks
                                               if t in m["tasks"]}}
                for m in card["models"] if any(key in s for s in m["tasks"].values())]
        out.append({"field": key, "tasks": tasks, "rows": rows})
    return out


def _shown(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return f"{value:.4g}" if math.isfinite(value) else None
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                 for v in value):
        return (f"mean {sum(value) / len(value):.3f} over {len(value)} values "
                f"({min(value):.3f} to {max(value):.3f})")
    return None


def _fitted(fit: Any) -> bool:
    return isinstance(fit, dict) and fit.get("slope") is not None


def _by_reason(fits: dict[str, Any]) -> str:
    """Tasks grouped by the reason their fit is missing: "a, b: reason. c: other reason"."""
    groups: dict[str, list[str]] = {}
    for task, fit in fits.items():
        groups.setdefault(str((fit or {}).get("reason") or "not computed"), []).append(task)
    return ". ".join(f"{', '.join(tasks)}: {reason}" for reason, tasks in groups.items())


def empty_elements(card: dict[str, Any]) -> dict[str, str]:
    """The card's charts and tables that have nothing to show in this run, each with the one line the card
    shows in its place: why, in the analysis's own words (its recorded reasons), never an empty frame.

    Keys: ``law_fits`` (the fit table: no fit at all), ``law_per_task`` (the per-task grid: no task has a
    fit), ``law_pooled`` (the scatter: no point), ``law_adjusted`` (the leaderboard's law columns),
    ``advice`` (no model has diversity advice), ``contamination`` (no trained model's pair could be
    tested), ``training`` (the section: no checkpoint series).

    >>> empty_elements({"analysis": {"law": {"pooled": {"reason": "2 models"}, "per_task": {
    ...     "a": {"reason": "2 usable points"}, "b": {"reason": "2 usable points"}}}},
    ...     "models": []})["law_per_task"]
    'No per-task fit: a, b: 2 usable points.'
    """
    a = card.get("analysis") or {}
    trained = [m for m in card["models"] if not m["reference"] and m["status"] != "failed"]
    out: dict[str, str] = {}
    law = a.get("law")
    if law:
        pooled, avg, per = law.get("pooled"), law.get("per_model_average"), law.get("per_task") or {}
        if not any(_fitted(f) for f in (pooled, avg, *per.values())):
            parts = [f"{label}: {f.get('reason') or 'not computed'}" for label, f in
                     (("pooled", pooled), ("per-model average", avg)) if isinstance(f, dict)]
            out["law_fits"] = "No Utility Law fit in this run" + (f" ({'; '.join(parts)})" if parts else "") + "."
        if per and not any(_fitted(f) for f in per.values()):
            out["law_per_task"] = f"No per-task fit: {_by_reason(per)}."
        points = (pooled or {}).get("points") if isinstance(pooled, dict) else None
        if not points and not any(finite(r.get("mui")) for m in trained for r in m["tasks"].values()):
            out["law_pooled"] = ("No Utility Law points: no trained model has both a score and an MUI on a task"
                                 + (f" ({pooled['reason']})" if (pooled or {}).get("reason") else "") + ".")
    if not any(m.get("fair") for m in card["models"]):
        fair = a.get("fairness") or {}
        k = len(trained)
        out["law_adjusted"] = ("Law-adjusted score and law rank: " + (
            f"not available: {str(fair['reason']).removeprefix('no fair adjustment is possible: ')}." if fair.get("reason") else
            f"need ≥3 trained models (this run has {k})." if k < 3 else "not computed in this run."))
    div = a.get("diversity") or {}
    if div and not any(d.get("advice") for d in div.values()):
        withheld = {m: list(d.get("withheld") or []) for m, d in div.items()}
        reasons = list(dict.fromkeys(w for ws in withheld.values() for w in ws))
        who = join_names(list(div)) if len(div) > 1 else list(div)[0]
        if not reasons:
            why = "the evidence in this run cannot support any"
        elif all(ws == reasons for ws in withheld.values()):
            why = "; ".join(reasons)
        else:
            why = "; ".join(f"{m}: {'; '.join(ws) or 'the evidence cannot support any'}" for m, ws in withheld.items())
        out["advice"] = f"No dataset-diversity advice for {'any model (' + who + ')' if len(div) > 1 else who}: {why}."
    contamination = a.get("contamination") or []
    if contamination:
        tested = [c for c in contamination if not c.get("baseline")]
        if not tested:
            out["contamination"] = ("Contamination: only untrained baselines were checked; "
                                    "no trained model was tested in this run.")
        elif all(c.get("measured") is False for c in tested):
            why = reasons_by_test(tested)
            out["contamination"] = ("Contamination: no test could be run, or none that ran could fire, on any model × "
                                    "task pair"
                                    + (f" ({why})" if why else "") + ".")
    if not (a.get("training") or {}).get("model_series"):
        ck = [m["name"] for m in trained if finite(m["meta"].get("checkpoint"))]
        if not ck:
            out["training"] = ('Training phases: no checkpoint series in this run. No model entry sets "checkpoint:" '
                               "(its training step), so there is no series to order.")
        elif len(ck) == 1:
            out["training"] = (f'Training phases: no checkpoint series in this run. Only {ck[0]} sets "checkpoint:"; '
                               "a series needs at least 2 checkpoints.")
    return out
