"""Build results.json from a run directory's artifacts alone (no model needed).

>>> build_results("reports/my-run")["schema_version"]   # doctest: +SKIP
1
"""
from __future__ import annotations

from pathlib import Path

from .artifacts import SCHEMA_VERSION, RunDir, read_json, write_json


def build_results(run_dir: str | Path) -> dict:
    """Assemble the machine-readable result of a run from its artifacts."""
    rd = RunDir(run_dir)
    manifest = read_json(rd.manifest, {})
    models_cfg = manifest.get("resolved", {}).get("config", {}).get("models", [])
    profile = manifest.get("resolved", {}).get("profile") or {}
    from .evaluate import read_samples
    from .stats import all_pairs

    out_models: dict[str, dict] = {}
    per_item: dict[str, dict[str, dict[str, float]]] = {}
    for m in models_cfg:
        from .config import slugify

        slug = slugify(m["name"])
        mdir = rd.model_dir(slug)
        entry: dict = {"slug": slug, "source": m["source"], "status": "pending"}
        meta = read_json(mdir / "model.json")
        if meta is not None:
            entry["meta"] = meta
        smoke = read_json(mdir / "smoke.json")
        if smoke is not None:
            entry["smoke"] = smoke
        lpp = read_json(mdir / "lpp.json")
        if lpp is not None:
            entry["lpp"] = lpp
        tasks = {}
        for t in profile.get("tasks", []):
            tdir = rd.task_dir(slug, t["name"])
            summary = read_json(tdir / "summary.json")
            if summary is not None:
                validation = read_json(tdir / "validation.json")
                tasks[t["name"]] = {**summary, **({"validation": validation} if validation else {})}
                per_item.setdefault(m["name"], {})[t["name"]] = {
                    r["id"]: r["score"] for r in read_samples(tdir / "samples.jsonl").values()}
        entry["tasks"] = tasks
        err = read_json(mdir / "error.json")
        if err is not None:
            entry["status"] = "failed"
            entry["error"] = err.get("error")
        elif meta is not None and smoke is not None and len(tasks) == len(profile.get("tasks", [])):
            entry["status"] = "complete"
        elif meta is not None:
            entry["status"] = "partial"
        out_models[m["name"]] = entry
    from .correlations import lpp_correlations

    res = {
        "schema_version": SCHEMA_VERSION,
        "run": {
            "created": manifest.get("created"),
            "reporter_version": manifest.get("reporter_version"),
            "seed": manifest.get("seed"),
            "config_hash": manifest.get("config_hash"),
            "profile": profile.get("name"),
        },
        "models": out_models,
        "comparisons": [c.to_dict() for c in all_pairs(per_item, seed=manifest.get("seed") or 0)],
    }
    res["lpp_correlations"] = lpp_correlations(res)
    return res


def write_results(run_dir: str | Path) -> dict:
    res = build_results(run_dir)
    write_json(RunDir(run_dir).results, res)
    return res
