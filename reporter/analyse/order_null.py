"""The option-order test's null per task: exchangeable orders, or the calibrated preference the null study measured.

``benchmarks/option_order_null.py`` scores clean models on the shipped benchmarks and writes
``reporter/data/option_order_null.json`` (``--ship``): per benchmark, the share ``w`` of items whose published
order clean models may put first by themselves (the largest upper 95% bound over them, on every benchmark it
measured, whether or not a preference was detected). The test then uses
:func:`reporter.metrics.rank_tests.order_fisher_pvalue`'s mixture null with that share.

>>> order_null_for("mmlu")["name"], order_null_for("my-own-data") == EXCHANGEABLE
('calibrated', True)
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..schema import OrderNullDoc

__all__ = ["OrderNull", "EXCHANGEABLE", "USER_DATA", "order_null_for", "calibrated_benchmarks"]


#: the null as results.json records it (name, share, source, the calibration's hash)
OrderNull = OrderNullDoc


EXCHANGEABLE: OrderNull = {"name": "exchangeable", "preference": 0.0,
                           "source": "every order of an item's options equally likely without contamination"}


@lru_cache(maxsize=1)
def _calibration() -> dict[str, Any]:
    """``reporter/data/option_order_null.json``: the null study's preference share per benchmark."""
    import hashlib
    import json
    from importlib.resources import files

    raw = files("reporter.data").joinpath("option_order_null.json").read_bytes()
    return {**json.loads(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def _is_mmlu_subtask(task: str) -> bool:
    """lm-eval's MMLU subjects and groups (``mmlu_anatomy``, ``mmlu_professional_law``), not MMLU-Pro or -Redux.

    >>> [_is_mmlu_subtask(t) for t in ("mmlu_professional_law", "mmlu_pro", "mmlu_pro_math", "mmlu_redux_2")]
    [True, False, False, False]
    """
    return task.startswith("mmlu_") and task != "mmlu_pro" and not task.startswith(("mmlu_pro_", "mmlu_redux"))


#: the null of a task read from the user's own file (``type: jsonl``), whatever its name
USER_DATA: OrderNull = {"name": "exchangeable", "preference": 0.0,
                        "source": "every order of an item's options equally likely without contamination (the task "
                                  "reads the user's own file: the null study measured the shipped benchmarks' data, "
                                  "not it, whatever the task's name)"}


def order_null_for(task: str, *, user_data: bool = False) -> OrderNull:
    """The option-order test's null for ``task``: the calibrated one on the benchmarks the null study measured on
    clean models (``benchmarks/option_order_null.py``; lm-eval's ``mmlu_<subject>`` tasks take MMLU's), else
    exchangeability. A task that reads the user's own file (``user_data``: ``type: jsonl``) is exchangeable under
    any name: the study measured the shipped data, and a private set named ``mmlu_inhouse`` is not MMLU.

    >>> [order_null_for(t)["name"] for t in ("my-own-data", "mmlu", "mmlu_anatomy", "mmlu_pro", "hellaswag")]
    ['exchangeable', 'calibrated', 'calibrated', 'exchangeable', 'calibrated']
    >>> order_null_for("mmlu_inhouse", user_data=True) == USER_DATA
    True
    """
    if user_data:
        return USER_DATA
    cal = _calibration()
    bench = task if task in cal["benchmarks"] else "mmlu" if _is_mmlu_subtask(task) else None
    if bench is None:
        return EXCHANGEABLE
    b = cal["benchmarks"][bench]
    w = float(b["preference"])
    out: OrderNull = {"name": "calibrated" if w > 0 else "exchangeable", "preference": w,
                      "source": f"{cal['name']}: {b['why']}", "calibration_sha256": cal["sha256"],
                      "clean_models": [str(m) for m in cal.get("clean_models") or []]}
    if isinstance(cal.get("clean_identities"), dict):
        out["clean_identities"] = [str(x) for x in cal["clean_identities"].values()]
    return out


def calibrated_benchmarks() -> list[str]:
    """The benchmarks whose option-order test uses the calibrated null (for the rule's text).

    >>> calibrated_benchmarks()
    ['arc_challenge', 'arc_easy', 'hellaswag', 'mmlu']
    """
    return sorted(b for b, v in _calibration()["benchmarks"].items() if float(v["preference"]) > 0)
