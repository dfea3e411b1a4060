"""Release notes from a comparison (:func:`reporter.analyse.compare.compare_runs`): Markdown, HTML, PDF.

``write_compare(doc, out_dir)`` writes ``compare.json``, ``compare.md`` (with its chart as
``compare_files/deltas.png``), ``compare.html`` and ``compare.pdf``. Every page lists
significant regressions first, then significant improvements, then what did not change
significantly; the chart shows every task's delta with its CI, one panel per paired model.

>>> import tempfile
>>> from reporter.analyse.compare import compare_runs
>>> paths = write_compare(compare_runs(run_dir, run_dir), tempfile.mkdtemp())
>>> sorted(paths), paths["md"].read_text().splitlines()[0]
(['html', 'json', 'md', 'pdf'], '# What changed from run to run')
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import altair as alt

from ..analyse.compare import LPP_KEYS
from ..analyse.numbers import json_ready
from ..analyse.task_weights import Group, task_shares, weighted_mean
from ..store.atomic import write_bytes, write_json
from .assets import asset, html_environment, markdown_environment
from .chart_rows import _ROWS
from .charts import PALETTE, _data, _finish
from .format import fmt_signed, md_escape
from .vega import svg_data_uri, vl_version

__all__ = ["COMPARE_FILES", "compare_chart", "compare_markdown", "write_compare"]

#: the folder of compare.md's chart image, beside it
COMPARE_FILES = "compare_files"
_ALT = "Score change per task (new minus base, percentage points) with 95% CIs, one panel per model"
_STATUS_COLOURS = {"regression": PALETTE[3], "improvement": PALETTE[2], "no significant change": "#999999"}


def compare_chart(doc: dict[str, Any]) -> dict[str, Any]:
    """The Vega-Lite spec of the per-task deltas with CIs, one panel per paired model."""
    rows = [{"model": _pair_label(r), "task": r["task"], "delta": round(100 * r["delta"], 3),
             "lo": round(100 * r["ci_low"], 3), "hi": round(100 * r["ci_high"], 3), "status": r["status"],
             "p": r["p_holm"]} for r in doc["rows"]]
    tasks = sorted({r["task"] for r in rows})
    y = alt.Y("task:N", sort=tasks, title=None)
    colour = alt.Color("status:N", title="Holm-adjusted", scale=alt.Scale(domain=list(_STATUS_COLOURS),
                                                                         range=list(_STATUS_COLOURS.values())))
    base = alt.Chart().encode(y=y)
    lo = min([-10.0] + [r["lo"] for r in rows if r["lo"] is not None])
    hi = max([10.0] + [r["hi"] for r in rows if r["hi"] is not None])
    x = alt.X("lo:Q", title="Δ score, pp (new − base)", scale=alt.Scale(domain=[lo, hi], nice=True))
    bars = base.mark_rule(strokeWidth=2).encode(x=x, x2="hi:Q", color=colour)
    points = base.mark_point(filled=True, size=60).encode(
        x="delta:Q", color=colour, tooltip=["model:N", "task:N", "delta:Q", "lo:Q", "hi:Q", "p:Q", "status:N"])
    zero = alt.Chart().mark_rule(color="#444", strokeDash=[3, 3]).encode(x=alt.datum(0))
    height = max(60, 20 * len(tasks))
    several = len(doc["pairs"]) > 1
    layered = alt.layer(zero, bars, points, data=_data(rows)).properties(width=230 if several else 420, height=height)
    chart = layered.facet(facet=alt.Facet("model:N", title=None, sort=[_pair_label({"base_model": p["base"], "new_model": p["new"]})
                                                            for p in doc["pairs"]]), columns=2) if several else layered
    try:
        return _finish(chart, "Score change per task", "new − base, pp, with 95% CIs (see Method)")
    finally:
        _ROWS.clear()


def _row_shares(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, float], int, list[str]]:
    """Each task's share of the mean over one pair's tasks, the number of units, and the lm-eval groups that count
    as one (:func:`reporter.analyse.task_weights.task_shares`; a row's ``lm_eval_unit``, sizes from its ``n``).
    """
    groups = {r["task"]: Group(r["lm_eval_unit"], r.get("lm_eval_group_by_size") is not False)
              for r in rows if r.get("lm_eval_unit")}
    shares, units = task_shares([r["task"] for r in rows], groups, {r["task"]: r["n"] for r in rows})
    return shares, units, sorted(set(groups.values()))


def _pair_label(r: dict[str, Any]) -> str:
    old, new = r.get("base_model"), r.get("new_model")
    return str(new) if old == new else f"{old} → {new}"


def _context(doc: dict[str, Any], escape: bool) -> dict[str, Any]:
    rows = doc["rows"]
    esc = md_escape if escape else str
    several = len(doc["pairs"]) > 1

    def model(r: dict[str, Any]) -> str:
        return esc(_pair_label(r))

    def who(r: dict[str, Any]) -> str:
        if not several:
            return ""
        return f"**{model(r)}**: " if escape else f"{model(r)}: "

    mui_rows = [r for r in rows if r.get("mui")]
    mui_lines = []
    for pair in doc["pairs"]:
        mine = [r for r in mui_rows if (r["base_model"], r["new_model"]) == (pair["base"], pair["new"])]
        if mine:
            shares, units, grouped = _row_shares(mine)

            def mean(values: dict[str, float]) -> float:  # no group: the plain mean, as before groups weighed one
                return weighted_mean(values, shares, units) if grouped else sum(values.values()) / len(values)

            b = mean({r["task"]: r["mui"]["base"] for r in mine})
            n = mean({r["task"]: r["mui"]["new"] for r in mine})
            s = mean({r["task"]: r["delta"] for r in mine})
            effort = "more" if n > b else "less" if n < b else "the same"
            sig = sum(r["status"] in ("regression", "improvement") for r in mine)
            over = (f"{units} tasks ({len(mine)} compared; the lm-eval group{'s' if len(grouped) > 1 else ''} "
                    f"{', '.join(grouped)} count{'' if len(grouped) > 1 else 's'} as one, "
                    "its tasks weighted as lm-eval weighs them)" if grouped else f"{len(mine)} tasks")
            mui_lines.append(f"{_pair_label(mine[0])}: mean MUI over {over} {b:.3f}% → {n:.3f}% "
                             f"({fmt_signed((n - b) / b, 0)}% relative, {effort} effort; MUI has no test here), while "
                             f"the task scores moved by {fmt_signed(s)} pp on average (the "
                             + ("mean of the task changes, weighted the same way" if grouped
                                else f"unweighted mean of the {len(mine)} task changes")
                             + f", {sig or 'none'} of them significant)"
                             if b else f"{_pair_label(mine[0])}: MUI {b:.3f}% → {n:.3f}%")
    return {"doc": doc, "model": model, "who": who, "lpp_names": LPP_KEYS,
            "pair_name": lambda lp: esc(lp["new_model"] if lp["base_model"] == lp["new_model"]
                                        else f"{lp['base_model']} → {lp['new_model']}"),
            "regressions": [r for r in rows if r["status"] == "regression"],
            "improvements": [r for r in rows if r["status"] == "improvement"],
            "unchanged": [r for r in rows if r["status"] == "no significant change"],
            "mui_rows": mui_rows, "mui_lines": mui_lines,
            "contamination": [r for r in rows if r["contamination"]["change"] in ("new", "cleared", "changed")],
            "steady": sum(r["contamination"]["change"] == "unchanged" for r in rows),
            "unmeasured": sum(r["contamination"]["change"] == "not measured" for r in rows)}


def compare_markdown(doc: dict[str, Any], chart_path: str | None = None) -> str:
    """compare.md's text (GitHub-flavoured Markdown); ``chart_path`` links the chart image when given."""
    import re


    env = markdown_environment()
    chart = {"path": chart_path, "alt": _ALT} if chart_path else None
    text = env.get_template("compare.md.j2").render(**_context(doc, escape=True), chart=chart)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def write_compare(doc: dict[str, Any], out_dir: str | Path,
                  formats: Sequence[str] = ("json", "md", "html", "pdf")) -> dict[str, Path]:
    """Write the comparison's files into ``out_dir``; returns their paths by format."""
    import vl_convert

    from ..store.lock import refuse_linked_folders

    root = Path(out_dir)
    refuse_linked_folders(root, (COMPARE_FILES,))  # the only folder it writes into
    out: dict[str, Path] = {}
    spec = compare_chart(doc)
    if "json" in formats:
        write_json(root / "compare.json", json_ready(doc))
        out["json"] = root / "compare.json"
    if "md" in formats:
        png = vl_convert.vegalite_to_png(spec, vl_version=vl_version(), scale=2)
        write_bytes(root / COMPARE_FILES / "deltas.png", png)
        out["md"] = write_bytes(root / "compare.md",
                                compare_markdown(doc, f"{COMPARE_FILES}/deltas.png").encode())
    pages = [f for f in ("html", "pdf") if f in formats]
    if pages:
        page = html_environment().get_template("compare.html.j2")
        context = {**_context(doc, escape=False), "css": asset("card.css"),
                   "chart": {"uri": svg_data_uri(spec), "alt": _ALT}}
        if "html" in formats:
            out["html"] = write_bytes(root / "compare.html", page.render(**context, mode="html").encode())
        if "pdf" in formats:
            import weasyprint

            html = page.render(**context, mode="pdf")
            out["pdf"] = write_bytes(root / "compare.pdf", weasyprint.HTML(string=html).write_pdf())
    return out
