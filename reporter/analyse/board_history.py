"""Release histories of a board (:mod:`reporter.analyse.board`): a release's versions in order, and the paired tests
of ``reporter compare`` between consecutive ones, cached by the two runs' content.

>>> sorted(["1.10", "1.9", "1.2"], key=natural_key)
['1.2', '1.9', '1.10']
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ..errors import UserError
from ..store.layout import slugify
from ..tasks import is_probe
from .board_runs import BOARD_VERSION, BoardCache, BoardRun

__all__ = ["histories", "natural_key"]


def natural_key(text: str) -> list[Any]:
    """Sort key that orders ``1.10`` after ``1.9`` and ``v2`` before ``v10``.

    >>> sorted(["1.10", "1.9", "1.2"], key=natural_key)
    ['1.2', '1.9', '1.10']
    """
    return [(0, int(t), "") if t.isdigit() else (1, 0, t.lower()) for t in re.findall(r"\d+|[^\d]+", text)]


def histories(rows: dict[str, dict[str, Any]], runs: list[BoardRun], cache: BoardCache) -> list[dict[str, Any]]:
    """Per release with two or more rows: its versions in order, and the paired tests between consecutive ones."""
    from .compare import compare_runs

    by_release: dict[str, list[dict[str, Any]]] = {}
    for row in rows.values():
        if not row["untrained"]:
            by_release.setdefault(row["release"], []).append(row)
    digest = {r.label: r.digest for r in runs}
    out = []
    for release, members in sorted(by_release.items()):
        if len(members) < 2:
            continue
        if all(m.get("version") for m in members):
            members.sort(key=lambda m: natural_key(str(m["version"])))
            order = "by version"
        else:
            members.sort(key=lambda m: (m["created"], m["run"]))
            order = "by run date (not every version has a version: label)"
        steps = []
        for a, b in zip(members, members[1:]):
            key = hashlib.sha256(json.dumps([digest[a["run"]], digest[b["run"]], a["name"], b["name"], BOARD_VERSION])
                                 .encode()).hexdigest()[:20]
            got = cache.get("compare", key)
            if got is None:
                got = _compare(compare_runs, a, b)
                cache.put("compare", key, got)
            # the same weights by content in both: what changed is the evaluation (settings, items), not the model
            same = bool(a.get("identity")) and a.get("identity") == b.get("identity")
            steps.append({"from": a["model"], "to": b["model"], "same_weights": same, **got})
        out.append({"release": release, "slug": slugify(release), "order": order,
                    "versions": [{"model": m["model"], "version": m.get("version") or m["run"], "run": m["run"],
                                  "created": m["created"],
                                  "tasks": {t: {k: s.get(k) for k in ("score", "ci_low", "ci_high", "n", "mui")}
                                            for t, s in m["tasks"].items() if not is_probe(t)},
                                  "lpp": m.get("lpp")} for m in members],
                    "steps": steps})
    return out


def _compare(compare_runs: Any, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The paired tests of ``reporter compare`` between two versions, per task (MUI compared where it can be)."""
    doc = None
    why = None
    for kw in ({}, {"mui": False}, {"mui": False, "shared_only": True}):
        try:
            doc = compare_runs(a["run_dir"], b["run_dir"], pairs=[(a["name"], b["name"])], **kw)
            break
        except UserError as e:
            why = e.lines[0] if e.lines else str(e)
    if doc is None:
        return {"compared": False, "reason": why, "rows": []}
    keep = ("task", "status", "significant", "delta", "ci_low", "ci_high", "p_holm", "n", "n_regressed", "n_improved",
            "base_score", "new_score", "test", "ci_method")  # the page says which test and interval each used
    return {"compared": True, "reason": None, "family": doc.get("family"),
            "rows": [{k: r.get(k) for k in keep} | {"mui": r.get("mui")} for r in doc["rows"] if not is_probe(r["task"])]}
