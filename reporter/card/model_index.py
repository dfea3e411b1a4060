"""Hugging Face model-card ``model-index`` metadata, one YAML document per model (benchmark tasks only).

The dataset of a built-in task comes from its registration (:class:`reporter.tasks.HubDataset`).

>>> from reporter.card.data import load_card
>>> doc = model_index(load_card(run_dir))["Llama-chat"]["model-index"][0]
>>> doc["name"], doc["results"][0]["dataset"]["type"]
('Llama chat', 'allenai/ai2_arc')
"""
from __future__ import annotations

from typing import Any

from ..tasks import TASKS, get_task

#: the model-index metric of each scorer
METRICS = {"choice": "accuracy", "bool": "accuracy", "numeric": "exact_match", "exact": "exact_match",
           "math": "exact_match", "code": "pass@1", "f1": "f1"}


def _dataset(task: str, source: str | None) -> dict[str, Any]:
    hub = get_task(task).hub if task in TASKS else None
    name, path, config = (hub.name, hub.path, hub.config) if hub else (task, task, None)
    split = (source or "").rsplit("/", 1)[-1]
    return {"name": name, "type": path, **({"config": config} if config else {}),
            **({"split": split} if split in ("train", "validation", "test") else {})}


def model_index(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{slug: {"model-index": [...]}}`` for every model with a benchmark result."""
    out = {}
    for m in card["models"]:
        results = []
        for t in card["benchmarks"]:
            if (r := m["tasks"].get(t)) is None:
                continue
            metric = METRICS.get(r["scorer"] or "", "accuracy")
            metrics = [{"type": metric, "value": round(100 * r["score"], 2),
                        "name": f"{metric} (%, n={r['n']}, 95% CI {100 * r['ci_low']:.1f}–{100 * r['ci_high']:.1f})"}]
            if r["mui"] is not None:
                metrics.append({"type": "mui", "value": round(r["mui"], 4),
                                "name": "Model Utilization Index (% of FFN neurons)"})
            results.append({"task": {"type": "text-generation", "name": "Text Generation"},
                            "dataset": _dataset(t, r["source"]), "metrics": metrics})
        if results:
            out[m["slug"]] = {"model-index": [{"name": m["name"], "results": results}]}
    return out
