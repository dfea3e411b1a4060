"""The static site of ``reporter board``: a merged leaderboard, a page per model and per release history.

No server and no network: every page is plain HTML with its charts inlined as SVG (Altair specs drawn by
vl-convert), sorting by the vendored ``tablesort`` and two filters by a short ``board.js``. The run cards
are copied into ``runs/<label>/`` so that the site can be moved or served as it is. A rebuild copies a
run's files only when its content changed (``runs/<label>/.digest``).

>>> from reporter.analyse.board import build_board
>>> import tempfile, pathlib
>>> out = write_board(build_board([run_dir], n_resamples=200), pathlib.Path(tempfile.mkdtemp()))
>>> sorted(out)[:3], out["index"].name
(['board.json', 'index', 'model:GPT-2 base'], 'index.html')
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import altair as alt
import markupsafe

from ..analyse.task_weights import grouping, task_shares, weighted_mean
from ..errors import UserError
from ..store.atomic import write_bytes, write_json
from ..store.layout import CARD_FILES, MODEL_INDEX_DIR
from .assets import asset, html_environment
from .format import finite, fmt_num, fmt_pct
from .vega import to_svg

__all__ = ["write_board", "BOARD_ASSETS"]

#: the shipped files every page links (copied into ``assets/``)
BOARD_ASSETS = ("board.css", "board.js", "tablesort.min.js", "tablesort.LICENSE.txt")
_WIDTH = 520


def _svg(chart: alt.TopLevelMixin) -> markupsafe.Markup:
    return markupsafe.Markup(to_svg(chart.to_dict()))


def _score_cell(s: dict[str, Any] | None) -> dict[str, Any]:
    if not s or not finite(s.get("score")):
        return {"text": "—", "sort": "-1", "ci": "", "title": "not merged on this task"}
    ci = f"{fmt_pct(s.get('ci_low'))}–{fmt_pct(s.get('ci_high'))}" if finite(s.get("ci_low")) else ""
    return {"text": fmt_pct(s["score"]), "sort": f"{s['score']:.6f}", "ci": ci, "title": f"n = {s.get('n')}"}


def _mui_cell(s: dict[str, Any] | None) -> dict[str, Any]:
    if not s:
        return {"text": "—", "sort": "-1", "title": "not merged on this task"}
    if s.get("mui_not_comparable"):
        return {"text": "n/c", "sort": "-1", "title": s["mui_not_comparable"]}
    if not finite(s.get("mui")):
        return {"text": "—", "sort": "-1", "title": "MUI not measured"}
    return {"text": fmt_num(s["mui"]), "sort": f"{s['mui']:.6f}", "title": "MUI, % of FFN neurons"}


def _rows(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The leaderboard's rows as the page shows them: ranked, not ranked, references."""
    board = doc["leaderboard"]
    ranking = {r["model"]: r for r in ((board.get("ranking") or {}).get("models") or [])}
    fair = {r.get("label"): r for r in (doc["fairness"].get("per_model") or [])} if doc["fairness"].get(
        "available") else {}
    not_ranked = {r["model"]: r["reason"] for r in board.get("not_ranked") or []}
    out: dict[str, list[dict[str, Any]]] = {"ranked": [], "unranked": [], "references": []}
    # an lm-eval group counts as one task in the mean, as in the ranking
    shares, units = task_shares(doc["ranking_tasks"], *grouping(dict(enumerate(doc["rows"])), doc["ranking_tasks"]))
    for row in doc["rows"]:
        scores = {t: row["tasks"][t]["score"] for t in doc["ranking_tasks"] if t in row["tasks"]
                  and finite(row["tasks"][t].get("score"))}
        r = ranking.get(row["model"])
        f = fair.get(row["model"])
        mean = weighted_mean(scores, shares, units) if scores and len(scores) == len(doc["ranking_tasks"]) else None
        view = {"row": row, "rank": r, "fair": f, "mean": mean,
                "reason": not_ranked.get(row["model"]),
                "cells": [{"task": t, "group": _group_of(doc, t), "score": _score_cell(row["tasks"].get(t)),
                           "mui": _mui_cell(row["tasks"].get(t)),
                           "flag": (row["tasks"].get(t) or {}).get("contamination")} for t in doc["tasks"]]}
        if row["untrained"]:
            out["references"].append(view)
        elif r is not None:
            out["ranked"].append(view)
        else:
            out["unranked"].append(view)
    out["ranked"].sort(key=lambda v: (v["rank"]["rank"], v["row"]["model"]))
    return out


def _group_of(doc: dict[str, Any], task: str) -> str:
    return next((g for g, ts in doc["groups"].items() if task in ts), "reporter")


def _law_chart(doc: dict[str, Any]) -> markupsafe.Markup | None:
    """Per-model averages (P, MUI) of every trained row with the fitted law, when there is a fit."""
    avg = (doc["law"].get("per_model_average") or {})
    pts = [p for p in avg.get("points") or [] if finite(p.get("P")) and finite(p.get("MUI"))]
    if len(pts) < 2:
        return None
    data = [{"model": p["label"], "P": p["P"], "MUI": p["MUI"]} for p in pts]
    base = alt.Chart(alt.Data(values=data))
    dots = base.mark_circle(size=70, color="#0072B2").encode(
        x=alt.X("P:Q", title="performance P (%, mean over tasks)", scale=alt.Scale(type="log")),
        y=alt.Y("MUI:Q", title="MUI (% of FFN neurons)"), tooltip=["model:N", "P:Q", "MUI:Q"])
    labels = base.mark_text(align="left", dx=6, fontSize=9).encode(x="P:Q", y="MUI:Q", text="model:N")
    layers: list[Any] = [dots, labels]
    if finite(avg.get("slope")) and finite(avg.get("intercept")):
        import math

        lo, hi = min(p["P"] for p in pts), max(p["P"] for p in pts)
        grid = [lo * (hi / lo) ** (k / 40) for k in range(41)]
        line = [{"P": x, "MUI": avg["intercept"] + avg["slope"] * math.log(x)} for x in grid]
        layers.insert(0, alt.Chart(alt.Data(values=line)).mark_line(color="#D55E00").encode(x="P:Q", y="MUI:Q"))
    return _svg(alt.layer(*layers).properties(width=_WIDTH, height=300, title="Utility Law over the ranked trained models"))


def _history_charts(h: dict[str, Any], tasks: list[str]) -> list[dict[str, Any]]:
    """Per task: score with CI over versions, significant changes marked; MUI and LPP over versions."""
    label = {v["model"]: str(v["version"]) for v in h["versions"]}  # the x axis: versions (or runs), short
    order = [label[v["model"]] for v in h["versions"]]
    changed = {(label[s["to"]], r["task"]): r["status"] for s in h["steps"] for r in s.get("rows") or []
               if r.get("significant")}
    out = []
    rows = []
    for v in h["versions"]:
        for t, s in v["tasks"].items():
            if t in tasks and finite(s.get("score")):
                rows.append({"version": label[v["model"]], "task": t, "score": 100 * s["score"],
                             "lo": 100 * s["ci_low"] if finite(s.get("ci_low")) else 100 * s["score"],
                             "hi": 100 * s["ci_high"] if finite(s.get("ci_high")) else 100 * s["score"],
                             "change": changed.get((label[v["model"]], t), "no significant change")})
    if rows:
        x = alt.X("version:N", sort=order, title=None, axis=alt.Axis(labelAngle=0, labelLimit=160))
        base = alt.Chart(alt.Data(values=rows))
        ci = base.mark_rule(strokeWidth=2, opacity=0.6).encode(x=x, y=alt.Y("lo:Q", title="score (%)"), y2="hi:Q",
                                                               color=alt.Color("task:N"))
        line = base.mark_line(point=True).encode(x=x, y="score:Q", color="task:N",
                                                 tooltip=["task:N", "version:N", "score:Q", "lo:Q", "hi:Q", "change:N"])
        sig = base.transform_filter("datum.change != 'no significant change'").mark_point(
            filled=True, size=220, color="#D55E00", opacity=0.9).encode(
            x=x, y="score:Q",
            shape=alt.Shape("change:N", title="significant change",
                            scale=alt.Scale(domain=["regression", "improvement"], range=["triangle-down", "triangle-up"])))
        out.append({"id": "scores", "caption": "Score per task over versions with 95 % CIs (vertical bars); a red "
                    "triangle marks a significant change from the previous version (paired test, Holm-adjusted)",
                    "svg": _svg(alt.layer(ci, line, sig).resolve_scale(shape="independent")
                                .properties(width=_WIDTH, height=260))})
    mui = [{"version": label[v["model"]], "task": t, "MUI": s["mui"]} for v in h["versions"] for t, s in v["tasks"].items()
           if t in tasks and finite(s.get("mui"))]
    if mui:
        out.append({"id": "mui", "caption": "MUI per task over versions (% of FFN neurons)", "svg": _svg(
            alt.Chart(alt.Data(values=mui)).mark_line(point=True).encode(
                x=alt.X("version:N", sort=order, title=None, axis=alt.Axis(labelAngle=0, labelLimit=160)),
                y=alt.Y("MUI:Q", title="MUI (%)"), color="task:N")
            .properties(width=_WIDTH, height=200))})
    lpp = [{"version": label[v["model"]], "metric": k.replace("_", " "), "value": val} for v in h["versions"]
           for k, val in (v.get("lpp") or {}).items() if finite(val)]
    if lpp:
        out.append({"id": "lpp", "caption": "LPP latent signature over versions", "svg": _svg(
            alt.Chart(alt.Data(values=lpp)).mark_line(point=True).encode(
                x=alt.X("version:N", sort=order, title=None, axis=alt.Axis(labelAngle=0)), y=alt.Y("value:Q", title=None))
            .properties(width=160, height=140).facet(column=alt.Column("metric:N", title=None))
            .resolve_scale(y="independent"))})
    return out


def _copy_run_files(run: dict[str, Any], root: Path) -> dict[str, str]:
    """Copy a run's cards and model-index files into ``runs/<label>/`` (only when its digest changed)."""
    src, dest = Path(run["dir"]), root / "runs" / run["label"]
    stamp = dest / ".digest"
    names = ["card.html", "card.pdf", "card.md", CARD_FILES, MODEL_INDEX_DIR]
    if not (stamp.is_file() and stamp.read_text() == run["digest"]):
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for n in names:
            if (src / n).is_dir():
                shutil.copytree(src / n, dest / n)
            elif (src / n).is_file():
                shutil.copy2(src / n, dest / n)
        stamp.write_text(run["digest"])
    return {n: f"runs/{run['label']}/{n}" for n in names if (dest / n).exists()}


def write_board(doc: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write the site of the board document ``doc`` (:func:`reporter.analyse.board.build_board`) into ``out_dir``.

    Returns the written pages by name (``index``, ``board.json``, ``model:<row>``, ``history:<release>``).
    """
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    env = html_environment()
    for name in BOARD_ASSETS:
        write_bytes(root / "assets" / name, asset(name).encode())
    copied = {r["label"]: _copy_run_files(r, root) for r in doc["runs"]}
    history_of = {h["release"]: h for h in doc["history"]}
    common = {"doc": doc, "pct": fmt_pct, "num": fmt_num, "finite": finite}
    write_json(root / "board.json", doc)
    out: dict[str, Path] = {"board.json": root / "board.json"}
    page = env.get_template("board_index.html.j2")
    out["index"] = write_bytes(root / "index.html", page.render(
        **common, base=".", rows=_rows(doc), law_chart=_law_chart(doc), history=doc["history"],
        group_of={t: _group_of(doc, t) for t in doc["tasks"]}).encode())
    model_page = env.get_template("board_model.html.j2")
    for row in doc["rows"]:
        files = {k: f"../{copied[row['run']][v]}" for k, v in (("html", "card.html"), ("pdf", "card.pdf"),
                                                                ("md", "card.md")) if v in copied[row["run"]]}
        mi = row["files"].get("model_index")
        if mi and (root / "runs" / row["run"] / mi).is_file():
            files["model_index"] = f"../runs/{row['run']}/{mi}"
        h = history_of.get(row["release"])
        out[f"model:{row['model']}"] = write_bytes(root / "models" / f"{row['slug']}.html", model_page.render(
            **common, base="..", row=row, files=files, history=h).encode())
    hist_page = env.get_template("board_history.html.j2")
    slug_of = {r["model"]: r["slug"] for r in doc["rows"]}
    for h in doc["history"]:
        page_path = root / "history" / f"{h['slug']}.html"
        # a history whose inputs did not change keeps its page (its charts are most of a rebuild's drawing)
        inputs = json.dumps([h, doc["tasks"], doc["title"], doc["version"], len(doc["runs"]), doc["seed"],
                             doc["n_resamples"], slug_of, code_stamp()], sort_keys=True, default=str)
        stamp = root / ".cache" / "pages" / f"{h['slug']}.sha256"
        digest = hashlib.sha256(inputs.encode()).hexdigest()
        if page_path.is_file() and stamp.is_file() and stamp.read_text() == digest:
            out[f"history:{h['release']}"] = page_path
            continue
        out[f"history:{h['release']}"] = write_bytes(page_path, hist_page.render(
            **common, base="..", h=h, charts=_history_charts(h, doc["tasks"]), slug_of=slug_of).encode())
        try:
            write_bytes(stamp, digest.encode())
        except (OSError, UserError):
            pass
    _remove_stale(root, doc)
    return out


def _remove_stale(root: Path, doc: dict[str, Any]) -> None:
    """Remove what an earlier build of this board wrote for runs, rows and histories it no longer has: the site is
    copied to a host as it is, and an old page would go with it. Only the board's own files: ``runs/<label>/``
    directories it stamped, and the ``.html`` pages of ``models/`` and ``history/``.
    """
    labels = {r["label"] for r in doc["runs"]}
    keep = {"models": {f"{r['slug']}.html" for r in doc["rows"]},
            "history": {f"{h['slug']}.html" for h in doc["history"]}}
    for d in (root / "runs").glob("*"):
        if d.is_dir() and d.name not in labels and (d / ".digest").is_file():
            shutil.rmtree(d)
    for folder, names in keep.items():
        for page in (root / folder).glob("*.html"):
            if page.name not in names:
                page.unlink()
                (root / ".cache" / "pages" / f"{page.stem}.sha256").unlink(missing_ok=True)


def code_stamp() -> str:
    """The sha256 of the board's templates and this module: a new reporter draws every page again."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for name in ("board_base.html.j2", "board_history.html.j2", "board.css"):
        h.update(asset(name).encode())
    return h.hexdigest()

