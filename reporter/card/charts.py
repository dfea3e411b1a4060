"""Altair charts of the model card, as Vega-Lite specs (interactive HTML) or static SVG (PDF).

Charts are registered by name in :data:`CHARTS` (a card section lists the charts it shows).
Every chart has a title and unit-labelled axes and uses the Okabe–Ito colour-blind-safe
palette; models keep the same colour in every chart. A chart whose data the run lacks is simply
absent from :func:`chart_specs`, and the card says why in words. :mod:`reporter.card.vega` turns a
spec into SVG and inlines the Vega bundle.

>>> from reporter.card.data import load_card
>>> specs = chart_specs(load_card(run_dir))
>>> "task_scores" in specs, specs["task_scores"]["title"]["text"] != ""
(True, True)
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import altair as alt

from ..registry import Registry
from .chart_rows import _ROWS, _data, with_rows
from .format import finite as _finite
from .format import num_or_none as _n
from .format import pct_or_none as _pct
from .readings import PARTIAL
from .text import chart_safe
from .vega import validated

#: chart builders by name: ``fn(card) -> Vega-Lite spec``, or None when the run has no data for it
CHARTS: Registry[Callable[[dict[str, Any]], "dict[str, Any] | None"]] = Registry("chart")
#: the print version of a built-in chart whose interactive one draws a mark per item (thousands on a large card,
#: which the PDF would draw one by one): by name, ``(the interactive builder, the print builder)``; the print
#: builder returns None where the interactive version prints well enough (a small card). A chart registered again
#: (a plugin's) is no longer the interactive builder named here and keeps no print version; see :func:`print_specs`
STATIC: dict[str, tuple[Callable[[dict[str, Any]], Any], Callable[[dict[str, Any]], "dict[str, Any] | None"]]] = {}
#: the most item marks a chart draws in the PDF before its print version replaces it (WeasyPrint draws about 600
#: a second: `make demo`'s 444 stay points, the 9-model fixture's 2,816 become box plots)
PRINT_POINTS = 1000

# Okabe & Ito (2008), with grey in place of yellow (unreadable as a line on white).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#999999"]
#: tasks can outnumber models: Okabe & Ito's 8, then 7 of Paul Tol's "muted" scheme (also colour-blind safe), so
#: that up to 15 tasks (`make demo` has 11) never share a colour
TASK_PALETTE = PALETTE + ["#882255", "#117733", "#332288", "#999933", "#AA4499", "#44AA99", "#DDCC77"]
SHAPES = ["circle", "square", "triangle-up", "diamond", "cross", "triangle-down", "triangle-right", "triangle-left"]
FONT = "Liberation Sans, Arial, Helvetica, sans-serif"
WIDTH = 560


def _title(text: str, subtitle: str | list[str] | None = None) -> alt.TitleParams:
    return alt.TitleParams(text, subtitle=subtitle or "", anchor="start", fontSize=14, subtitleFontSize=11,
                           subtitleColor="#444")


def _finish(chart: Any, title: str, subtitle: Any = None) -> dict[str, Any]:
    chart = chart.properties(title=_title(title, subtitle)).configure(font=FONT, background="white")
    chart = chart.configure_axis(labelFontSize=11, titleFontSize=12, gridColor="#e6e6e6")
    chart = chart.configure_legend(labelFontSize=11, titleFontSize=11, labelLimit=220)
    spec = chart.configure_view(stroke=None).configure_header(labelFontSize=11, titleFontSize=12).to_dict(
        validate=False)
    with_rows(spec, str(title))
    return validated(spec)


def _charted(card: dict[str, Any]) -> list[str]:
    """Models that appear in charts (anything measured), in card order: fixes each model's colour."""
    return [m["name"] for m in card["models"] if m["tasks"] or m.get("lpp")]


def _model_scale(card: dict[str, Any], names: list[str] | None = None, marks: list[str] = PALETTE) -> alt.Scale:
    """Colour (or shape) per model, the same in every chart even when a chart shows only ``names``."""
    everyone = _charted(card)
    names = [n for n in everyone if names is None or n in names]
    return alt.Scale(domain=names, range=[marks[everyone.index(n) % len(marks)] for n in names])


def _task_scale(tasks: list[str]) -> alt.Scale:
    return alt.Scale(domain=tasks, range=[TASK_PALETTE[i % len(TASK_PALETTE)] for i in range(len(tasks))])


# --- the charts ---------------------------------------------------------------------------------

def chart_specs(card: dict[str, Any], names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Vega-Lite specs by name for every chart (of ``names``; default all) whose data this run has.

    Built-in names: ``task_scores``, ``law_pooled``, ``law_per_task``, ``mui_layers``,
    ``lpp_entropy``, ``lpp_pr_er``, ``overlap``, ``saturation``, ``training``, ``contamination_items``.
    """
    out = {}
    try:
        for name in (CHARTS.names() if names is None else names):
            if (spec := CHARTS.get(name)(card)) is not None:
                out[name] = chart_safe(spec)  # names neutral, labels cut on grapheme boundaries
    finally:
        _ROWS.clear()  # the finished specs hold their rows
    return out


def print_specs(card: dict[str, Any], names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The print versions (:data:`STATIC`) of the charts of ``names`` that need one on this card, by name; the PDF
    draws these in place of the interactive specs, and every other chart as it is.

    >>> from reporter.card.data import load_card
    >>> print_specs(load_card(run_dir), ["contamination_items", "task_scores"])  # a small card: none needed
    {}
    """
    out = {}
    try:
        for name in names:
            interactive, build = STATIC.get(name, (None, None))
            if build is not None and CHARTS.get(name) is interactive and (spec := build(card)) is not None:
                out[name] = chart_safe(spec)
    finally:
        _ROWS.clear()
    return out


#: the task-score chart's tick for the score of always giving a task's most common answer
MOST_COMMON = "always the most common answer"


@CHARTS.register("task_scores")
def _task_scores(card: dict[str, Any]) -> dict[str, Any] | None:
    """Grouped bars of each trained model's score per task with 95% CI error bars; the task's theoretical
    chance level, the score of always giving its most common answer where that is higher, and each untrained
    reference model's score as tick marks across the task's group.
    """
    tasks = card["benchmarks"] + card["probes"]
    trained = [m for m in card["models"] if not m["reference"]]
    rows = [{"model": m["name"], "task": t, "score": _pct(r["score"]), "lo": _pct(r["ci_low"]),
             "hi": _pct(r["ci_high"]), "n": r["n"], "chance": "not above chance (or its most common answer)" if r.get("at_chance") else ""}
            for m in trained for t in tasks if (r := m["tasks"].get(t))]
    refs = [{"reference": f"untrained: {m['name']}", "task": t, "score": _pct(r["score"]), "n": r["n"]}
            for m in card["models"] if m["reference"] for t in tasks if (r := m["tasks"].get(t))]
    levels = {t: card["levels"][t] for t in card["benchmarks"] if t in card["levels"]}
    refs += [{"reference": "theoretical chance", "task": t, "score": _pct(v["chance"]), "n": None}
             for t, v in levels.items() if v["chance"] is not None]
    # where always giving the most common answer scores more than chance
    common = {t: v["common"]["share"] for t, v in levels.items() if v["common"] is not None}
    refs += [{"reference": MOST_COMMON, "task": t, "score": _pct(c), "n": None} for t, c in common.items()]
    if not rows and not refs:
        return None
    x = alt.X("task:N", sort=tasks, title="Task", axis=alt.Axis(labelAngle=-30 if len(tasks) > 6 else 0, labelLimit=120))
    bar_models = [n for n in _charted(card) if n in {m["name"] for m in trained}]
    off = alt.XOffset("model:N", sort=bar_models)
    tip = [alt.Tooltip("model:N", title="Model"), alt.Tooltip("task:N", title="Task"),
           alt.Tooltip("score:Q", title="Score (%)", format=".1f"), alt.Tooltip("lo:Q", title="CI low (%)", format=".1f"),
           alt.Tooltip("hi:Q", title="CI high (%)", format=".1f"), alt.Tooltip("n:Q", title="Items"),
           alt.Tooltip("chance:N", title="Chance")]
    partial = sorted({t for m in trained for t in tasks if (r := m["tasks"].get(t)) and r.get("scorer") in PARTIAL})
    y = alt.Y("score:Q", title="Score (%)" if partial else "Score (% correct)", scale=alt.Scale(domain=[0, 100]))
    step = max(6, min(36, 480 // max(1, len(tasks) * max(1, len(bar_models)))))
    layers = []
    if rows:
        base = alt.Chart(_data(rows)).encode(x=x, xOffset=off)
        layers.append(base.mark_bar().encode(y=y, color=alt.Color("model:N", scale=_model_scale(card, bar_models),
                                                                   title="Model"), tooltip=tip))
        layers.append(base.mark_rule(color="#222", strokeWidth=1.2).encode(y="lo:Q", y2="hi:Q", tooltip=tip))
    if refs:
        fixed = {"theoretical chance": "#d62728", MOST_COMMON: "#ff7f0e"}
        kinds = sorted({r["reference"] for r in refs}, key=lambda k: (k not in fixed, list(fixed).index(k)
                                                                      if k in fixed else 0, k))
        colours = [fixed.get(k) or ["#111111", "#7f7f7f", "#8c564b"][i % 3] for i, k in enumerate(kinds)]
        layers.append(alt.Chart(_data(refs)).mark_tick(thickness=2.5, size=max(8, step * max(1, len(bar_models)) - 4))
                      .encode(x=x, y=y, color=alt.Color("reference:N", scale=alt.Scale(domain=kinds, range=colours),
                                                        title="Reference"),
                              tooltip=[alt.Tooltip("reference:N", title="Reference"), alt.Tooltip("task:N", title="Task"),
                                       alt.Tooltip("score:Q", title="Score (%)", format=".1f")]))
    # a fixed width, not a step: the reference layer has no xOffset, and two layers must not disagree on the step
    width = step * len(tasks) * max(1, len(bar_models)) / 0.8
    chart = alt.layer(*layers).resolve_scale(color="independent").properties(width=width, height=240)
    return _finish(chart, "Score per task", "bars: trained models, black lines: 95% CI; ticks: theoretical chance "
                                            "(red), " + ("always the most common answer (orange), " if common else "")
                   + "untrained reference models" + (f"; % correct, partial credit on {', '.join(partial)}"
                                                     if partial else ""))


def _law_points(card: dict[str, Any], fit: dict[str, Any] | None = None, task: str | None = None) -> list[dict[str, Any]]:
    """(P %, MUI %) points: the ones ``fit`` was made from when it lists them, else every trained
    model × benchmark task with a score and MUI (untrained references and the LPP probes are never law points;
    "no fit" where no fit was made, a failed one included).
    """
    if fit and fit.get("points"):
        return [{"model": p["model"] or "", "task": p["task"] or task or "", "P": _n(p["P"]), "MUI": _n(p["MUI"]),
                 "kind": "point", "note": p["excluded"] or "in the fit"} for p in fit["points"]]
    fitted = bool(fit and "slope" in fit)
    bench = set(card.get("benchmarks") or [])
    return [{"model": m["name"], "task": t, "P": _pct(r["score"]), "MUI": _n(r["mui"]), "kind": "point",
             "note": ("in the fit" if r["score"] > 0 else "P = 0: not in the fit") if fitted else "no fit"}
            for m in card["models"] if not m["reference"] for t, r in m["tasks"].items()
            if (not bench or t in bench) and (task is None or t == task) and _finite(r["mui"])]


def _curve(fit: dict[str, Any] | None, pmin: float, pmax: float, **extra: Any) -> list[dict[str, Any]]:
    """Points of MUI = intercept + slope · ln(P), P in %."""
    if not fit or "slope" not in fit:
        return []
    lo, hi = max(pmin, 0.5), max(pmax, pmin + 1, 1.0)
    ps = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    return [{"P": round(p, 3), "MUI": round(fit["intercept"] + fit["slope"] * math.log(p), 5), "kind": "curve", **extra}
            for p in ps]


def equation(fit: dict[str, Any] | None) -> str:
    """The fitted law in words (P in %), or the reason there is no fit.

    >>> equation({"slope": -0.21, "intercept": 1.23, "r2": 0.84, "n": 12})
    'MUI = 1.23 − 0.21·ln(P), R² = 0.84, n = 12'
    >>> equation({"reason": "needs 3 models"})
    'no fit: needs 3 models'
    """
    if not fit:
        return "no fit in this run"
    if "slope" not in fit:
        return f"no fit: {fit['reason']}"
    sign = "−" if fit["slope"] < 0 else "+"
    return (f"MUI = {fit['intercept']:.3g} {sign} {abs(fit['slope']):.3g}·ln(P), "
            f"R² = {fit['r2']:.2f}, n = {fit['n']}")


def _law_tasks(card: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    seen = {r["task"] for r in rows if r.get("kind") == "point"}
    return [t for t in card["benchmarks"] + card["probes"] if t in seen] + sorted(seen - set(card["benchmarks"])
                                                                                  - set(card["probes"]))


def _scatter_layers(card: dict[str, Any], tasks: list[str], models: list[str]) -> tuple[Any, Any]:
    tip = [alt.Tooltip("model:N", title="Model"), alt.Tooltip("task:N", title="Task"),
           alt.Tooltip("P:Q", title="Score P (%)", format=".1f"), alt.Tooltip("MUI:Q", title="MUI (%)", format=".3f"),
           alt.Tooltip("note:N", title="Law fit")]
    pts = alt.Chart().transform_filter("datum.kind == 'point'").mark_point(size=70, filled=True, opacity=0.85).encode(
        x=alt.X("P:Q", title="Score P (% correct)"), y=alt.Y("MUI:Q", title="MUI (% of FFN neurons)"),
        color=alt.Color("task:N", scale=_task_scale(tasks), title="Task"),
        shape=alt.Shape("model:N", scale=_model_scale(card, models, SHAPES), title="Model"), tooltip=tip)
    line = alt.Chart().transform_filter("datum.kind == 'curve'").mark_line(color="#222", strokeWidth=1.5).encode(
        x="P:Q", y="MUI:Q")
    return pts, line


@CHARTS.register("law_pooled")
def _law_pooled(card: dict[str, Any]) -> dict[str, Any] | None:
    """Utility Law scatter (every model × task point) with the pooled fit MUI = a + b·ln(P)."""
    pooled = ((card["analysis"] or {}).get("law") or {}).get("pooled")
    pts = _law_points(card, pooled)
    if not pts:
        return None
    ps = [p["P"] for p in pts if p["P"]] or [1.0]
    rows = pts + _curve(pooled, min(ps), max(ps))
    p, line = _scatter_layers(card, _law_tasks(card, pts), [p["model"] for p in pts])
    chart = alt.layer(*([p, line] if len(rows) > len(pts) else [p]), data=_data(rows))
    chart = chart.properties(width=WIDTH - 140, height=300)
    return _finish(chart, "Utility Law: MUI against score, every model × task",
                   f"pooled fit (black line): {equation(pooled)}" if pooled and "slope" in pooled
                   else f"no line: {equation(pooled)}")


@CHARTS.register("law_per_task")
def _law_per_task(card: dict[str, Any]) -> dict[str, Any] | None:
    """One panel per task with that task's own law fit; None when no task has a fit (the card says why in one
    line, :func:`reporter.card.data.empty_elements`, instead of a grid of unfitted panels).
    """
    per = ((card["analysis"] or {}).get("law") or {}).get("per_task") or {}
    tasks = [t for t in card["benchmarks"] + card["probes"] if t in per] + sorted(
        set(per) - set(card["benchmarks"]) - set(card["probes"]))
    if not any("slope" in (per[t] or {}) for t in tasks):
        return None
    panels, models = [], []
    for t in tasks:
        pts = _law_points(card, per[t], t)
        ps = [p["P"] for p in pts if p["P"]] or [1.0]
        curve = _curve(per[t], min(ps), max(ps), task=t)
        if pts:
            models += [r["model"] for r in pts]
            panels.append((pts + curve, bool(curve), f"{t}: {equation(per[t])}"))
    if not panels:
        return None
    p, line = _scatter_layers(card, tasks, models)  # the scales must list every model
    chart = alt.concat(*[alt.layer(*([p, line] if has else [p]), data=_data(rows)).properties(
        width=250, height=160, title=alt.TitleParams(label, fontSize=10, fontWeight="normal"))
        for rows, has, label in panels], columns=2).resolve_scale(x="independent", y="independent")
    return _finish(chart, "Utility Law per task", "each panel: that task's fit MUI = a + b·ln(P), P in %")


@CHARTS.register("mui_layers")
def _mui_layers(card: dict[str, Any]) -> dict[str, Any] | None:
    """MUI per layer (depth profile) per model, one line per task."""
    rows = [{"model": m["name"], "task": t, "layer": i, "mui": _n(v)}
            for m in card["models"] for t, r in m["tasks"].items() if r["mui_per_layer"]
            for i, v in enumerate(r["mui_per_layer"])]
    if not rows:
        return None
    tasks = card["benchmarks"] + card["probes"]
    chart = alt.Chart(_data(rows)).mark_line(strokeWidth=1.3).encode(
        x=alt.X("layer:Q", title="Layer (0 = first)", axis=alt.Axis(tickMinStep=1, format="d")), y=alt.Y("mui:Q", title="MUI (% of layer's neurons)"),
        color=alt.Color("task:N", scale=_task_scale(tasks), title="Task"),
        tooltip=[alt.Tooltip("model:N", title="Model"), alt.Tooltip("task:N", title="Task"),
                 alt.Tooltip("layer:Q", title="Layer"), alt.Tooltip("mui:Q", title="MUI (%)", format=".3f")],
    ).properties(width=165, height=110).facet(
        facet=alt.Facet("model:N", title=None, sort=_charted(card)), columns=3,
    ).resolve_scale(x="independent")
    return _finish(chart, "MUI per layer", "share of each layer's FFN neurons that are key neurons, per task")


def _lpp_models(card: dict[str, Any]) -> list[str]:
    return [m["name"] for m in card["models"] if m.get("lpp")]


def _prefix_rows(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"model": m["name"], **{k: _n(v) for k, v in p.items()}}
            for m in card["models"] if m.get("lpp") for p in m["lpp"]["per_prefix"]]


@CHARTS.register("lpp_entropy")
def _lpp_entropy(card: dict[str, Any]) -> dict[str, Any] | None:
    """LPP: normalised next-token entropy at each prefix length, per model."""
    rows = _prefix_rows(card)
    if not rows:
        return None
    chart = alt.Chart(_data(rows)).mark_line(point=True).encode(
        x=alt.X("m:Q", title="Prefix length m (tokens)"),
        y=alt.Y("entropy:Q", title="Next-token entropy (÷ ln|V|, 0–1)"),
        color=alt.Color("model:N", scale=_model_scale(card, _lpp_models(card)), title="Model"),
        tooltip=[alt.Tooltip("model:N", title="Model"), alt.Tooltip("m:Q", title="Prefix (tokens)"),
                 alt.Tooltip("entropy:Q", title="Entropy (normalised)", format=".3f")],
    ).properties(width=WIDTH - 160, height=220)
    return _finish(chart, "LPP: entropy across prefixes", "the minimum over prefixes is the entropy floor")


@CHARTS.register("lpp_pr_er")
def _lpp_pr_er(card: dict[str, Any]) -> dict[str, Any] | None:
    """LPP: participation ratio and effective rank at each prefix length (normalised by min(N, d))."""
    rows = [{"model": r["model"], "m": r["m"], "metric": name, "value": r[key]}
            for r in _prefix_rows(card) for key, name in (("pr", "Participation ratio"), ("er", "Effective rank"))
            if r.get(key) is not None]
    if not rows:
        return None
    chart = alt.Chart(_data(rows)).mark_line(point=True).encode(
        x=alt.X("m:Q", title="Prefix length m (tokens)"),
        y=alt.Y("value:Q", title="Value (÷ min(N, d), 0–1)"),
        color=alt.Color("model:N", scale=_model_scale(card, _lpp_models(card)), title="Model"),
        tooltip=[alt.Tooltip("model:N", title="Model"), alt.Tooltip("metric:N", title="Metric"),
                 alt.Tooltip("m:Q", title="Prefix (tokens)"), alt.Tooltip("value:Q", title="Value", format=".4f")],
    ).properties(width=215, height=200).facet(
        column=alt.Column("metric:N", title=None, sort=["Participation ratio", "Effective rank"])
    ).resolve_scale(y="independent")
    return _finish(chart, "LPP: participation ratio and effective rank across prefixes",
                   "last-layer hidden states; the report takes the maximum over prefixes")


def _diversity(card: dict[str, Any]) -> dict[str, Any]:
    return (card["analysis"] or {}).get("diversity") or {}


@CHARTS.register("overlap")
def _overlap(card: dict[str, Any]) -> dict[str, Any] | None:
    """Heatmaps of key-neuron overlap between tasks, one panel per model."""
    div = {m: d["overlap"] for m, d in _diversity(card).items() if d["overlap"]}
    if not div:
        return None
    kinds = {o.get("matrix_kind") or "overlap" for o in div.values()}
    kind = kinds.pop() if len(kinds) == 1 else "overlap"
    rows = [{"model": m, "a": a, "b": b, "v": _n(o["matrix"][i][j])}
            for m, o in div.items() for i, a in enumerate(o["tasks"]) for j, b in enumerate(o["tasks"])]
    base = alt.Chart().encode(x=alt.X("a:N", title="Task", axis=alt.Axis(labelAngle=-40)), y=alt.Y("b:N", title="Task"))
    rect = base.mark_rect().encode(
        color=alt.Color("v:Q", scale=alt.Scale(scheme="viridis", domain=[0, 1]), title=f"{kind.capitalize()} (0–1)",
                        legend=alt.Legend(type="symbol", values=[0, 0.2, 0.4, 0.6, 0.8, 1], symbolType="square",
                                          symbolSize=150)),
        tooltip=[alt.Tooltip("model:N", title="Model"), alt.Tooltip("a:N", title="Task"),
                 alt.Tooltip("b:N", title="Task"), alt.Tooltip("v:Q", title=kind.capitalize(), format=".2f")])
    n_tasks = max(len(o["tasks"]) for o in div.values())
    side = max(110, min(180, 30 * n_tasks))
    # the values as text where a cell holds them (two decimals up to 6 tasks, one up to 12), else colour and tooltip
    digits, size = (".2f", 9) if n_tasks <= 6 else (".1f", 7) if n_tasks <= 12 else (None, 0)
    layers = [rect] if digits is None else [rect, base.mark_text(fontSize=size).encode(
        text=alt.Text("v:Q", format=digits),
        color=alt.condition("datum.v < 0.6", alt.value("white"), alt.value("black")))]
    chart = alt.layer(*layers, data=_data(rows)).properties(width=side, height=side).facet(
        facet=alt.Facet("model:N", title=None, sort=list(div)), columns=3)
    return _finish(chart, "Key-neuron overlap between tasks",
                   f"{kind.capitalize()} overlap of the tasks' key-neuron unions, per model (1 = the same neurons)")


@CHARTS.register("saturation")
def _saturation(card: dict[str, Any]) -> dict[str, Any] | None:
    """Saturation curves (key-neuron union as samples are added) per task, one panel per model, n95 dashed."""
    div = {m: d["saturation"] for m, d in _diversity(card).items() if d["saturation"]}
    if not div:
        return None
    tasks = [t for t in card["benchmarks"] + card["probes"] if any(t in s for s in div.values())]
    tasks += sorted({t for s in div.values() for t in s} - set(tasks))
    rows = [{"model": m, "task": t, "n": n, "union": _n(u), "kind": "curve"}
            for m, sat in div.items() for t, s in sat.items() for n, u in zip(s["n"], s["union"])]
    rows += [{"model": m, "task": t, "n95": s["n95"], "kind": "n95"}
             for m, sat in div.items() for t, s in sat.items() if _finite(s["n95"])]
    color = alt.Color("task:N", scale=_task_scale(tasks), title="Task")
    lines = alt.Chart().transform_filter("datum.kind == 'curve'").mark_line().encode(
        x=alt.X("n:Q", title="Samples (n)"), y=alt.Y("union:Q", title="Key neurons in the union"), color=color,
        tooltip=[alt.Tooltip("model:N", title="Model"), alt.Tooltip("task:N", title="Task"),
                 alt.Tooltip("n:Q", title="Samples"), alt.Tooltip("union:Q", title="Key neurons", format=",d")])
    rules = alt.Chart().transform_filter("datum.kind == 'n95'").mark_rule(strokeDash=[4, 3]).encode(
        x="n95:Q", color=color, tooltip=[alt.Tooltip("task:N", title="Task"),
                                         alt.Tooltip("n95:Q", title="Samples to 95% of the union")])
    chart = alt.layer(lines, rules, data=_data(rows)).properties(width=170, height=120).facet(
        facet=alt.Facet("model:N", title=None, sort=list(div)), columns=3).resolve_scale(y="independent")
    return _finish(chart, "Saturation of key neurons", "union of key neurons as samples are added; dashed: n95, "
                   "the samples needed for 95% of the final union")


@CHARTS.register("training")
def _training(card: dict[str, Any]) -> dict[str, Any] | None:
    """Score and MUI along a checkpoint series, points coloured by training phase."""
    tr = (card["analysis"] or {}).get("training")
    if not tr or not tr["model_series"]:
        return None
    rows = [{"order": i, "checkpoint": str(_checkpoint(s["checkpoint"])), "model": s["model"],
             "phase": s["phase"] or "start", "Score (%)": _pct(s["P"]), "MUI (%)": _n(s["MUI"])}
            for i, s in enumerate(tr["model_series"])]
    order = [r["checkpoint"] for r in rows]
    phases = ["start", "evolving", "accumulating", "coarsening", "collapsing", "stable"]
    phases += sorted({r["phase"] for r in rows} - set(phases))
    panels = []
    for field in ("Score (%)", "MUI (%)"):
        base = alt.Chart(_data(rows)).encode(x=alt.X("checkpoint:N", sort=order, title="Checkpoint (training step)",
                                                     axis=alt.Axis(labelAngle=0)),
                                             y=alt.Y(f"{field}:Q", title=field, scale=alt.Scale(zero=False)))
        pts = base.mark_point(size=90, filled=True).encode(
            color=alt.Color("phase:N", scale=alt.Scale(domain=phases, range=PALETTE[6:7] + PALETTE[:len(phases) - 1]),
                            title="Phase"),
            shape=alt.Shape("phase:N", scale=alt.Scale(domain=phases, range=SHAPES[:len(phases)]), title="Phase"),
            tooltip=["model:N", "checkpoint:N", "phase:N", alt.Tooltip(f"{field}:Q", format=".3f")])
        panels.append(alt.layer(base.mark_line(color="#777"), pts).properties(width=220, height=180))
    return _finish(alt.hconcat(*panels), "Training phases along checkpoints",
                   "phase from the signs of ΔP and ΔMUI between consecutive checkpoints")


_CONTAMINATION_STATS = {"option_order": "option order: z of the published order",
                        "split_min_k": "Min-K% Prob vs the other split's items",
                        "verbatim": "verbatim: share of tokens continued",
                        "min_k": "Min-K% Prob vs prose (shown only)"}


def _contamination_rows(card: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per item value of each measured test: model, task, test, value, kind (benchmark item or reference)."""
    rows: list[dict[str, Any]] = []
    seen_ref: set[tuple[str, str]] = set()
    for c in (card.get("analysis") or {}).get("contamination") or []:
        for k, label in _CONTAMINATION_STATS.items():
            s = (c.get("signals") or {}).get(k) or {}
            if not s.get("measured") or "item_values" not in s:
                continue
            rows += [{"model": c["model"], "task": c["task"], "test": label, "value": _n(v), "kind": "benchmark item"}
                     for v in s["item_values"]]
            if k == "verbatim" and (c["model"], k) in seen_ref:  # one held-out set per model
                continue
            seen_ref.add((c["model"], k))
            rows += [{"model": c["model"], "task": c["task"] if k != "verbatim" else "held-out text", "test": label,
                      "value": _n(v), "kind": "reference"} for v in s.get("reference_values") or []]
    return rows


def _contamination_panels(card: dict[str, Any], rows: list[dict[str, Any]],
                          mark: Callable[[list[dict[str, Any]], alt.Scale], Any]) -> Any:
    """One row of per-model panels for each test, the ``rows`` (:func:`_contamination_rows`) drawn by
    ``mark(a test's rows, colour scale)``; None without rows.
    """
    if not rows:
        return None
    models = [m for m in _charted(card) if any(r["model"] == m for r in rows)]
    scale = _model_scale(card, models)
    panels = []
    for label in _CONTAMINATION_STATS.values():
        sub = [r for r in rows if r["test"] == label]
        if not sub:
            continue
        shown = [m for m in models if any(r["model"] == m for r in sub)]
        panels.append(mark(sub, scale).properties(width=170, height=60).facet(
            column=alt.Column("model:N", title=None, sort=shown)).resolve_scale(x="independent"))
    return alt.vconcat(*panels)


@CHARTS.register("contamination_items")
def _contamination_items(card: dict[str, Any]) -> dict[str, Any] | None:
    """Per model and test, each benchmark item's statistic against its no-contamination reference (strip plot)."""
    def strip(rows: list[dict[str, Any]], scale: alt.Scale) -> Any:
        label = rows[0]["test"]
        return alt.Chart(_data(rows)).mark_point(size=28, opacity=0.7).encode(
            x=alt.X("value:Q", title=label),
            y=alt.Y("kind:N", title="Items", sort=["benchmark item", "reference"]),
            yOffset=alt.YOffset("jitter:Q"),
            color=alt.Color("model:N", scale=scale, title="Model"),
            fill=alt.condition(alt.datum.kind == "benchmark item", alt.Color("model:N", scale=scale, legend=None),
                               alt.value("transparent")),
            tooltip=[alt.Tooltip("model:N", title="Model"), alt.Tooltip("task:N", title="Task"),
                     alt.Tooltip("test:N", title="Test"), alt.Tooltip("value:Q", title="Value", format=".3f")],
        ).transform_calculate(jitter="random()")

    chart = _contamination_panels(card, _contamination_rows(card), strip)
    if chart is None:
        return None
    return _finish(chart, "Contamination evidence per item",
                   "each benchmark item (filled) against the same statistic without contamination (hollow); "
                   "further right = more like a memorised item")


def _contamination_items_static(card: dict[str, Any]) -> dict[str, Any] | None:
    """The print version of ``contamination_items`` on a card of more than :data:`PRINT_POINTS` item values (None
    below: the strip plot prints as it is): a box plot per model, test and kind of items, with the items beyond its
    whiskers as points. A 9-model card drew some 3,000 points, which took WeasyPrint 4.7 s of the PDF; the items
    that stand out (a memorised item lies far right) are still drawn one by one. The tasks of a model are pooled
    in its box, as the strip plot pools them (its tooltip names an item's task; the PDF's table of warnings does).
    """
    rows = _contamination_rows(card)
    if len(rows) <= PRINT_POINTS:
        return None  # few enough to draw every item

    def boxes(rows: list[dict[str, Any]], scale: alt.Scale) -> Any:
        return alt.Chart(_data(rows)).mark_boxplot(extent=1.5, size=14, median={"color": "white"},
                                                   outliers={"size": 16}).encode(
            x=alt.X("value:Q", title=rows[0]["test"]),
            y=alt.Y("kind:N", title="Items", sort=["benchmark item", "reference"]),
            color=alt.Color("model:N", scale=scale, title="Model"),
        )

    chart = _contamination_panels(card, rows, boxes)
    if chart is None:
        return None
    return _finish(chart, "Contamination evidence per item",
                   "benchmark items against the same statistic without contamination (reference); box: the middle "
                   "half of the items, whiskers: the furthest items within 1.5 box widths of it, points: the items "
                   "beyond; further right = more like a memorised item")


STATIC["contamination_items"] = (_contamination_items, _contamination_items_static)


def _checkpoint(c: Any) -> Any:
    if isinstance(c, float) and c.is_integer():
        c = int(c)
    if isinstance(c, int) and c >= 1000:
        return f"{c / 1000:g}k"
    return c
