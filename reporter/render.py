"""The model card: self-contained HTML and PDF, plus Hugging Face ``model-index`` YAML.

Everything comes from a run directory's ``results.json`` and ``manifest.json``; no model is
loaded. A section whose data a run lacks says so in one line; a key of the wrong type is a
:class:`CardDataError` naming its path, never a silently wrong card.

>>> paths = render("reports/my-run")                    # doctest: +SKIP
>>> sorted(paths)                                       # doctest: +SKIP
['html', 'model-index/smol', 'pdf']
"""
from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path

import yaml

from .artifacts import RunDir, read_json
from .errors import UserError

PROBES = ("spc", "ar")  # LPP synthetic probes: reported apart from the benchmarks
FORMATS = ("html", "pdf")
_LEVELS = ("high", "medium", "low")
_SEVERITIES = ("strong", "weak", "none")


class CardDataError(UserError):
    """results.json does not match the schema the card is rendered from."""


# --- schema checks: a missing key is None (or [] / {}), a wrong type is an error -----------------

_KINDS = {"num": ((int, float), "a number"), "frac": ((int, float), "a fraction in [0, 1]"),
          "int": ((int,), "an integer"), "str": ((str,), "a string"), "list": ((list,), "a list"),
          "dict": ((dict,), "an object"), "bool": ((bool,), "true or false"), "any": ((str, int, float), "a value")}


def _bad(where: str, msg: str) -> CardDataError:
    return CardDataError(f"results.json: {where or 'top level'}: {msg}")


def _val(v, kind: str, where: str):
    if kind.endswith("?"):  # nullable (e.g. a CI bound the bootstrap could not give)
        if v is None:
            return None
        kind = kind[:-1]
    types, what = _KINDS[kind]
    if not isinstance(v, types) or (isinstance(v, bool) and kind != "bool"):
        raise _bad(where, f"expected {what}, got {type(v).__name__} {json.dumps(v, default=str)[:40]}")
    if kind == "frac" and not -1e-9 <= v <= 1 + 1e-9 and not math.isnan(v):
        raise _bad(where, f"expected {what}, got {v!r}")
    return v


def _check(v, spec, where: str = ""):
    """``v`` checked against ``spec`` and normalised.

    A spec is a kind ('num', 'frac', 'int', 'str', 'bool', 'any', 'list', 'dict'), ``[spec]`` (a list),
    ``{"*": spec}`` (a mapping), ``{key: spec}`` (an object: every key present afterwards, missing
    ones None / [] / {}; a key ending in '!' is required) or a function ``(value, where) -> value``.
    """
    if callable(spec):
        return spec(v, where)
    if isinstance(spec, str):
        return _val(v, spec, where)
    if isinstance(spec, list):
        return [_check(x, spec[0], f"{where}[{i}]") for i, x in enumerate(_val(v, "list", where))]
    at = (lambda k: f"{where}.{k}" if where else k)
    d = _val(v, "dict", where)
    if "*" in spec:
        return {k: _check(x, spec["*"], at(k)) for k, x in d.items()}
    out = dict(d)
    for key, sub in spec.items():
        name = key.rstrip("!")
        if d.get(name) is not None:
            out[name] = _check(d[name], sub, at(name))
        elif key.endswith("!"):
            raise _bad(at(name), "missing")
        else:
            out[name] = [] if isinstance(sub, list) else {} if isinstance(sub, dict) and "*" in sub else None
    return out


def _fit(v, where: str) -> dict:
    if isinstance(v, dict) and "reason" in v and "slope" not in v:
        return {"reason": _val(v["reason"], "str", f"{where}.reason")}
    return _check(v, {"slope!": "num", "intercept!": "num", "r2!": "num", "n!": "int", "slope_ci": ["num?"],
                      "intercept_ci": ["num?"], "points": [{"P!": "num", "MUI!": "num", "model": "str", "task": "str?",
                                                            "excluded": "str"}]}, where)


def _one_of(*allowed):
    def check(v, where):
        if _val(v, "str", where) not in allowed:
            raise _bad(where, f"{v!r} is not one of {', '.join(allowed)}")
        return v
    return check


def _square(v, where: str) -> dict:
    o = _check(v, {"tasks!": ["str"], "matrix!": [["num"]], "matrix_kind": "str"}, where)
    k = len(o["tasks"])
    if len(o["matrix"]) != k or any(len(r) != k for r in o["matrix"]):
        raise _bad(f"{where}.matrix", f"expected a {k}×{k} matrix (one row and column per task)")
    return o


def _saturation(v, where: str) -> dict:
    s = _check(v, {"n!": ["num"], "union!": ["num"], "n95": "num", "total": "num"}, where)
    if len(s["n"]) != len(s["union"]):
        raise _bad(where, "n and union differ in length")
    return s


def _signal(v, where: str):
    """A contamination signal: a number, or {measured, fires, evidence | reason, …} (reporter.contamination)."""
    if isinstance(v, dict):
        return _check(v, {"measured": "bool", "fires": "bool", "evidence": "str", "reason": "str"}, where)
    return _val(v, "any", where)


def _excluded(v, where):
    return v if isinstance(v, str) else _check(v, {"model": "str", "task": "str", "reason": "str"}, where)


TASK = {"score!": "frac", "ci_low!": "frac", "ci_high!": "frac", "n!": "int", "method": "str", "scorer": "str",
        "shots": "int", "limit": "int", "source": "str", "description": "str", "mean_response_tokens": "num",
        "mui": "num", "mui_per_layer": ["num"], "mui_settings": "dict", "validation": "dict",
        "calibration": {"ece!": "num", "brier!": "num", "n!": "int"}, "flag_accuracy": "frac",
        "answer_accuracy": "frac", "format_validity": "frac", "overconfidence": "frac",
        "ar": {"flag_accuracy": "frac", "answer_accuracy": "frac", "format_validity": "frac", "overconfidence": "frac"}}
LPP = {"entropy_floor!": "num", "participation_ratio!": "num", "effective_rank!": "num", "pr_raw": "num",
       "er_raw": "num", "top1_var_share": "frac", "top5_var_share": "frac",
       "robust": {"participation_ratio": "num", "effective_rank": "num"},
       "per_prefix": [{"m!": "int", "entropy!": "num", "pr": "num", "er": "num", "pr_raw": "num", "er_raw": "num"}],
       "per_layer": "list"}
MODEL = {"slug": "str", "source": "str", "status": "str", "error": "str", "meta": "dict", "smoke": "dict",
         "tasks": {"*": TASK}, "lpp": LPP}
DIVERSITY = {"overlap": _square, "saturation": {"*": _saturation}, "marginal_gain": "list",
             "core_sets": {"*": {"size!": "int", "n!": "int", "coverage!": "num"}}, "recommendations": ["str"]}
ANALYSIS = {
    "law": {"pooled": _fit, "per_task": {"*": _fit}, "per_model_average": _fit, "excluded": [_excluded],
            "notes": ["str"]},
    "fairness": {"definition": "str", "sentence": "str", "reason": "str", "caution": "str", "available": "bool",
                 "per_model": [{"model!": "str", "score!": "frac", "mui!": "num", "p_law": "num", "adjusted": "num",
                                "rank_raw!": "int", "rank_adjusted!": "int", "shift!": "int", "n_tasks": "int"}]},
    "contamination": [{"model!": "str", "task!": "str", "severity!": _one_of(*_SEVERITIES), "measured": "bool",
                       "signals": {"*": _signal}, "evidence": "str", "baseline": "bool"}],
    "diversity": {"*": DIVERSITY},
    "training": {"model_series!": [{"model!": "str", "checkpoint": "any", "P!": "frac", "MUI!": "num", "dP": "num",
                                    "dMUI": "num", "phase": "str"}], "collapse": "bool", "summary": "str"},
    "definitions": {"*": "str"}, "notes": ["str"]}
RESULTS = {"run": "dict", "models!": {"*": MODEL}, "analysis": ANALYSIS,
           "comparisons": [{"model_a!": "str", "model_b!": "str", "task!": "str", "n!": "int", "mean_diff!": "num",
                            "ci_low!": "num", "ci_high!": "num", "mcnemar_p": "num", "n01": "int", "n10": "int",
                            "method": "str"}],
           "lpp_correlations": [{"metric!": "str", "task!": "str", "pearson_r": "num", "pearson_p": "num",
                                 "spearman_r": "num", "spearman_p": "num", "n!": "int", "reliable": "bool",
                                 "reason": "str"}]}


# --- the card's data, checked and derived -------------------------------------------------------

def load_card(run_dir: str | Path) -> dict:
    """Read and check a run's results.json + manifest.json; return what the templates render.

    >>> card = load_card("reports/my-run")              # doctest: +SKIP
    >>> card["summary"]["raw"]                          # doctest: +SKIP
    'smol has the highest mean score ...'
    """
    rd = RunDir(run_dir)
    res = read_json(rd.results)
    if res is None:
        raise UserError(f"{rd.results}: no results.json; run `reporter run` first")
    return build_card(res, read_json(rd.manifest, {}))


def build_card(res: dict, manifest: dict) -> dict:
    """The checked, derived view of ``results.json`` that templates and charts use.

    >>> build_card(json.loads(Path("results.json").read_text()), {})["benchmarks"]   # doctest: +SKIP
    ['arc_easy', 'gsm8k', 'humaneval', 'boolq']
    """
    res = _check(res, RESULTS)
    run = res["run"] or {}
    models = [_model(name, m) for name, m in res["models"].items()]
    order = [t["name"] for t in (manifest.get("resolved", {}).get("profile") or {}).get("tasks", [])]
    seen = order + [t for m in models for t in m["tasks"] if t not in order]
    tasks = [t for t in dict.fromkeys(seen) if any(t in m["tasks"] for m in models)]
    if (a := res["analysis"]) is not None:
        a["contamination"].sort(key=lambda c: (_SEVERITIES.index(c["severity"]), c["model"], c["task"]))
    card = {"run": run, "manifest": manifest, "models": models,
            "benchmarks": [t for t in tasks if t not in PROBES], "probes": [t for t in tasks if t in PROBES],
            "comparisons": res["comparisons"], "lpp_correlations": res["lpp_correlations"], "analysis": a}
    names = [m["name"] for m in models]
    card["title"] = "Model card: " + (", ".join(names[:3]) + f" and {len(names) - 3} more" if len(names) > 4
                                      else ", ".join(names))
    card["subtitle"] = f"profile {run.get('profile') or 'unnamed'}, {len(models)} model{'s' * (len(models) != 1)}"
    card["date"] = (run.get("created") or manifest.get("created") or "")[:10]
    _averages(card)
    for c in card["comparisons"]:
        c["significant"] = c["ci_low"] > 0 or c["ci_high"] < 0
    for key, fn in (("neighbours", _neighbours), ("warnings", _warnings), ("summary", _summary),
                    ("limitations", _limitations)):
        card[key] = fn(card)
    return card


def _model(name: str, m: dict) -> dict:
    meta = m["meta"] or {}
    for t in m["tasks"].values():  # AR metrics: top-level fields, or nested under "ar" (reporter.probes)
        t.update({k: v for k, v in (t["ar"] or {}).items() if t.get(k) is None and k in TASK["ar"]})
    return {**m, "name": name, "meta": meta, "smoke": m["smoke"] or {}, "status": m["status"] or "pending",
            "slug": m["slug"] or name,
            "reference": meta.get("source_type") == "random" or (m["source"] or "").startswith("random:")}


def _averages(card: dict) -> None:
    """Mean score (with an approximate CI), mean MUI and raw rank over the benchmark tasks."""
    bench = card["benchmarks"]
    for m in card["models"]:
        ts = [m["tasks"][t] for t in bench if t in m["tasks"]]
        m["complete"] = bool(bench) and len(ts) == len(bench)
        m["avg"] = m["avg_lo"] = m["avg_hi"] = m["avg_mui"] = None
        if m["complete"]:
            k = len(ts)
            m["avg"] = sum(t["score"] for t in ts) / k
            m["avg_lo"] = max(0.0, m["avg"] - math.sqrt(sum((t["score"] - t["ci_low"]) ** 2 for t in ts)) / k)
            m["avg_hi"] = min(1.0, m["avg"] + math.sqrt(sum((t["ci_high"] - t["score"]) ** 2 for t in ts)) / k)
            if all(t["mui"] is not None for t in ts):
                m["avg_mui"] = sum(t["mui"] for t in ts) / k
    ranked = sorted((m for m in card["models"] if m["avg"] is not None), key=lambda m: -m["avg"])
    for i, m in enumerate(ranked):
        m["rank"] = i + 1
    card["ranked"] = ranked + [m for m in card["models"] if m["avg"] is None]
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


def _oriented(c: dict, a: str) -> dict:
    """Comparison ``c`` as ``a`` minus the other model."""
    if c["model_a"] == a:
        return c
    return {**c, "model_a": c["model_b"], "model_b": c["model_a"], "mean_diff": -c["mean_diff"],
            "ci_low": -c["ci_high"], "ci_high": -c["ci_low"], "n01": c["n10"], "n10": c["n01"]}


def _neighbours(card: dict) -> list[dict]:
    """Each ranked model against the next one down: is the higher rank a real difference, task by task?"""
    ranked = [m["name"] for m in card["ranked"] if m["avg"] is not None]
    by_pair = {}
    for c in card["comparisons"]:
        by_pair[(c["model_a"], c["model_b"], c["task"])] = by_pair[(c["model_b"], c["model_a"], c["task"])] = c
    out = []
    for a, b in zip(ranked, ranked[1:]):
        cells = {t: _oriented(by_pair[(a, b, t)], a) for t in card["benchmarks"] if (a, b, t) in by_pair}
        out.append({"a": a, "b": b, "cells": cells, "wins": sum(c["significant"] and c["mean_diff"] > 0
                                                                 for c in cells.values()),
                    "losses": sum(c["significant"] and c["mean_diff"] < 0 for c in cells.values())})
    return out


def _trained(card: dict) -> list[dict]:
    return [m for m in card["models"] if not m["reference"] and m["status"] != "failed"]


def _warnings(card: dict) -> list[tuple[str, str]]:
    """(level, sentence) pairs, most severe first."""
    out = []
    a = card["analysis"] or {}
    for m in card["models"]:
        if m["status"] == "failed":
            out.append(("high", f"{m['name']} failed to evaluate: {m['error'] or 'no error recorded'}."))
        elif m["status"] in ("partial", "pending"):
            out.append(("medium", f"{m['name']} is {m['status']}: some tasks are missing, so it has no mean score."))
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
    if (k := len(_trained(card))) < 3:
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
    return sorted(out, key=lambda w: _LEVELS.index(w[0]))


def _summary(card: dict) -> dict:
    """Who wins on raw score (and is the lead significant?), who wins law-adjusted, the top warnings."""
    ranked = [m for m in card["ranked"] if m["avg"] is not None and not m["reference"]]
    w, r = (ranked + [None, None])[:2]
    wins = sum(1 for c in card["comparisons"] if r and c["significant"] and c["task"] in card["benchmarks"]
               and {c["model_a"], c["model_b"]} == {w["name"], r["name"]} and _oriented(c, w["name"])["mean_diff"] > 0)
    top = next((m for m in card["models"] if m["fair"] and m["fair"]["rank_adjusted"] == 1), None)
    return {"winner": w, "runner_up": r, "wins": wins, "top_adjusted": top, "n_trained": len(_trained(card)),
            "warnings": card["warnings"][:4]}


def _limitations(card: dict) -> list[str]:
    out = [w for lvl, w in card["warnings"] if w.startswith(("Small samples", "Only ", "Offline demo"))]
    settings = {(s.get("n_samples"), s.get("top_ratio")) for m in card["models"] for t in m["tasks"].values()
                if (s := t["mui_settings"])}
    if len(settings) > 1:
        out.append("MUI grows with the number of samples: tasks here use different sample counts "
                   f"({', '.join(str(n) for n, _ in sorted(settings, key=str))}), so compare MUI only "
                   "within a task.")
    a = card["analysis"] or {}
    return out + a.get("notes", [])


# --- outputs ------------------------------------------------------------------------------------

def render(run_dir: str | Path, formats=FORMATS) -> dict[str, Path]:
    """Write ``card.html`` / ``card.pdf`` and ``model-index/<slug>.yaml`` into ``run_dir``.

    Returns the written paths by key (``"html"``, ``"pdf"``, ``"model-index/<slug>"``).

    >>> render("reports/my-run", formats=("html",))["html"].name   # doctest: +SKIP
    'card.html'
    """
    from .charts import chart_specs, javascript_bundle, svg_data_uri

    if unknown := [f for f in formats if f not in FORMATS]:
        raise UserError(f"unknown card format(s) {', '.join(unknown)}; use html, pdf")
    root = Path(run_dir)
    card = load_card(root)
    specs = chart_specs(card)
    out: dict[str, Path] = {}
    if "html" in formats:
        data = {k: {x: v for x, v in s.items() if x != "$schema"} for k, s in specs.items()}  # no URL at all
        html = _template().render(card=card, mode="html", css=_asset("card.css"), vega_js=javascript_bundle(),
                                  charts=dict.fromkeys(data, ""), specs_json=json.dumps(data).replace("</", "<\\/"))
        out["html"] = _write(root / "card.html", html.encode())
    if "pdf" in formats:
        import weasyprint

        html = _template().render(card=card, mode="pdf", css=_asset("card.css"), vega_js="", specs_json="{}",
                                  charts={k: svg_data_uri(s) for k, s in specs.items()})
        out["pdf"] = _write(root / "card.pdf", weasyprint.HTML(string=html).write_pdf())
    for slug, doc in model_index(card).items():
        out[f"model-index/{slug}"] = _write(root / "model-index" / f"{slug}.yaml",
                                            yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode())
    return out


# Hugging Face dataset ids of the built-in tasks: (pretty name, hub id, config).
HF_DATASETS = {"arc_challenge": ("ARC-Challenge", "allenai/ai2_arc", "ARC-Challenge"),
               "arc_easy": ("ARC-Easy", "allenai/ai2_arc", "ARC-Easy"), "mmlu": ("MMLU", "cais/mmlu", "all"),
               "hellaswag": ("HellaSwag", "Rowan/hellaswag", None), "boolq": ("BoolQ", "google/boolq", None),
               "gsm8k": ("GSM8K", "openai/gsm8k", "main"), "math500": ("MATH-500", "HuggingFaceH4/MATH-500", None),
               "humaneval": ("HumanEval", "openai/openai_humaneval", None),
               "mbpp": ("MBPP", "google-research-datasets/mbpp", "full"), "bbh": ("BIG-Bench Hard", "lukaemon/bbh", None)}
METRICS = {"choice": "accuracy", "bool": "accuracy", "numeric": "exact_match", "exact": "exact_match",
           "math": "exact_match", "code": "pass@1", "f1": "f1"}


def model_index(card: dict) -> dict[str, dict]:
    """Hugging Face model-card ``model-index`` metadata per model slug (benchmark tasks only).

    >>> model_index(load_card("reports/my-run"))["smol"]["model-index"][0]["name"]   # doctest: +SKIP
    'smol'
    """
    out = {}
    for m in card["models"]:
        results = []
        for t in card["benchmarks"]:
            if (r := m["tasks"].get(t)) is None:
                continue
            name, hub, config = HF_DATASETS.get(t, (t, t, None))
            split = (r["source"] or "").rsplit("/", 1)[-1]
            dataset = {"name": name, "type": hub, **({"config": config} if config else {}),
                       **({"split": split} if split in ("train", "validation", "test") else {})}
            metric = METRICS.get(r["scorer"] or "", "accuracy")
            metrics = [{"type": metric, "value": round(100 * r["score"], 2),
                        "name": f"{metric} (%, n={r['n']}, 95% CI {100 * r['ci_low']:.1f}–{100 * r['ci_high']:.1f})"}]
            if r["mui"] is not None:
                metrics.append({"type": "mui", "value": round(r["mui"], 4),
                                "name": "Model Utilization Index (% of FFN neurons)"})
            results.append({"task": {"type": "text-generation", "name": "Text Generation"}, "dataset": dataset,
                            "metrics": metrics})
        if results:
            out[m["slug"]] = {"model-index": [{"name": m["name"], "results": results}]}
    return out


def _write(path: Path, data: bytes) -> Path:
    """Atomic write (temporary file + rename): a crash never leaves half a card."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _asset(name: str) -> str:
    from importlib.resources import files

    return files("reporter.template_files").joinpath(name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _template():
    import jinja2

    from . import charts as ch

    env = jinja2.Environment(loader=jinja2.FunctionLoader(_asset), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(pct=ch.fmt_pct, num=ch.fmt_num, pval=ch.fmt_p, signed=ch.fmt_signed)
    return env.get_template("card.html.j2")
