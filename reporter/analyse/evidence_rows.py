"""The contamination table of a run from its artifacts: every signal per model x task, corrected together.

Reads, per model x task, ``option_order.json``, ``split_reference.json``, ``verbatim.json``
and ``logprobs.npz``, and per model ``reference_logprobs.npz`` and ``reference_verbatim.json``;
adds the law residual from the law's per-task fits. The signals themselves, the correction and
the severity rule are :mod:`reporter.analyse.contamination`.

>>> from reporter.analyse.results import build_results
>>> from reporter.analyse.law_points import law_and_fairness
>>> from reporter.analyse.leaderboard import per_item_scores
>>> from reporter.store.layout import RunDir
>>> res = build_results(run_dir)
>>> fits = law_and_fairness(res, per_item_scores(res, run_dir), seed=0, n_resamples=200).fits
>>> rows = contamination_rows(res, RunDir(run_dir), fits)  # the tiny run's models are untrained baselines
>>> len(rows) > 0, {(r["baseline"], r["severity"]) for r in rows}
(True, {(True, 'none')})
"""
from __future__ import annotations

from pathlib import Path

from ..metrics.min_k import question_logprobs
from ..schema import is_untrained
from ..store.atomic import read_json, read_record
from ..store.layout import (
    LOGPROBS,
    OPTION_ORDER,
    REFERENCE_LOGPROBS,
    REFERENCE_VERBATIM,
    SPLIT_REFERENCE,
    STEP_ERRORS,
    VERBATIM,
    RunDir,
)
from ..store.logprobs import load_logprobs
from ..store.ragged import ragged_ok
from ..tasks import is_probe
from .contamination import TESTS, ContaminationVerdict, apply_fdr, assess
from .control_power import POWER_TESTS, power_at_size, why_not
from .law_points import law_signal
from .order_null import order_null_for
from .signals import SignalResult, min_k_signal, option_order_signal, split_signal, verbatim_signal

__all__ = ["contamination_rows", "min_k_from_artifacts"]

#: per signal, the evidence passes it reads: (task scope?, pass name, for a model-scope pass the file of it whose
#: absence the signal's reason must name: otherwise the signal lacks something else, and the pass is not the reason)
_PASSES = {"option_order": ((True, "option_order", None),), "split_min_k": ((True, "split_reference", None),),
           "verbatim": ((True, "verbatim", None), (False, "reference", REFERENCE_VERBATIM)),
           "min_k": ((False, "reference", REFERENCE_LOGPROBS),)}


def min_k_from_artifacts(task_dir: Path, ref_path: Path, baseline: bool = False) -> SignalResult:
    """Min-K% of a task's questions against the model's held-out reference, from their log-prob files."""
    lp_path = task_dir / LOGPROBS
    if not lp_path.is_file():
        return {"measured": False, "fires": False, "reason": f"no {LOGPROBS} for this task"}
    if not ref_path.is_file():
        why = (" (held-out text is not scored for untrained baselines unless contamination.untrained is true)"
               if baseline else "")
        return {"measured": False, "fires": False, "reason": f"no {REFERENCE_LOGPROBS} for this model{why}"}
    for path in (lp_path, ref_path):
        if not ragged_ok(path):
            return {"measured": False, "fires": False,
                    "reason": f"{path.name} is damaged; rerun `reporter run` to recompute it"}
    bench, _ = load_logprobs(lp_path)
    ref, _ = load_logprobs(ref_path)
    q = [question_logprobs(v["prompt"], v["question_span"]) for v in bench.values()]
    out = min_k_signal(q, [v["prompt"] for v in ref.values()], ids=list(bench))
    out["question_spans_known"] = sum(v["question_span"] is not None for v in bench.values())
    return out


def _crashed(sig: dict, tdir: Path, mdir: Path) -> dict:
    """``sig`` with an unmeasured signal's reason saying which of its passes failed, and how, where one did
    (:func:`reporter.collect.failures.record_step_failure` kept it), instead of only the file it lacks.
    """
    out = dict(sig)
    for key, passes in _PASSES.items():
        s = out.get(key)
        if not s or s.get("measured"):
            continue
        for task_scope, name, names in passes:
            if names is not None and names not in str(s.get("reason")):
                continue
            path = (tdir if task_scope else mdir) / STEP_ERRORS / f"{name}.json"
            err = read_record(path)
            if err is not None and isinstance(err.get("failure"), str):
                rel = path.relative_to(mdir.parent.parent).as_posix()  # models/<slug>/...
                kept = f"the traceback is in {rel}" if "traceback" in err else f"see {rel}"
                out[key] = {**s, "reason": f"its pass '{name}' {err['failure']} ({kept}); rerun `reporter run` "
                                           "to measure it"}
                break
    return out


def contamination_rows(results: dict, rd: RunDir, fits: dict) -> list[ContaminationVerdict]:
    """Rows per model x task, tests corrected together over the run (Benjamini-Hochberg).

    Untrained baselines are a negative control: they cannot have seen any data, so a test that
    fires on a baseline for a task is not counted as evidence for any model on it.
    """
    signals = {}
    profile = ((read_json(rd.manifest) or {}).get("resolved") or {}).get("profile") or {}
    user_data = {t.get("name") for t in profile.get("tasks") or [] if isinstance(t, dict) and t.get("type") == "jsonl"}
    for name, e in (results.get("models") or {}).items():
        slug = e.get("slug", name)
        baseline = is_untrained(e)
        ref_verbatim = read_json(rd.model_dir(slug) / REFERENCE_VERBATIM)
        for task in sorted(e.get("tasks") or {}):
            if is_probe(task):  # generated probes have no published text that could have leaked
                continue
            tdir = rd.task_dir(slug, task)
            signals[(name, task)] = (baseline, {
                "option_order": option_order_signal(read_json(tdir / OPTION_ORDER), order_null_for(task, user_data=task in user_data)),
                "split_min_k": split_signal(read_json(tdir / SPLIT_REFERENCE)),
                "verbatim": verbatim_signal(read_json(tdir / VERBATIM), ref_verbatim),
                "law_residual": law_signal(name, task, baseline, fits),
                "min_k": min_k_from_artifacts(tdir, rd.model_dir(slug) / REFERENCE_LOGPROBS, baseline)})
            signals[(name, task)] = (baseline, _crashed(signals[(name, task)][1], tdir, rd.model_dir(slug)))
    apply_fdr([sig for _, sig in signals.values()])
    for (_, task), (_, sig) in signals.items():
        for name in POWER_TESTS:
            s = sig.get(name)
            if s and s.get("measured") and s.get("test") and not s.get("in_correction", True):
                s["power_reason"] = "it cannot fire at this size (left out of the correction)"
            elif s and s.get("measured") and s.get("test"):
                items, n_tests, orders = int(s["n"]), int(s["n_tests"]), s.get("orders")
                own = None if task in user_data else task  # a benchmark's own control is not the user's file's
                at = power_at_size(name, items=items, n_tests=n_tests, orders=orders, task=own)
                if at is not None:
                    s["power_at_size"] = at
                else:
                    s["power_reason"] = str(why_not(name, items=items, n_tests=n_tests, orders=orders, task=own))
    confounded = {(task, k) for (name, task), (baseline, sig) in signals.items() if baseline
                  for k, v in sig.items() if v and v.get("fires")}
    rows = []
    for (name, task), (baseline, sig) in signals.items():
        if baseline:
            fired = [k for k, v in sig.items() if v and v.get("fires")]
            row = assess(name, task, sig)
            row.update({"severity": "none",
                        "evidence": "untrained baseline: a negative control that cannot be contaminated"
                        + (f"; its firing test(s) ({', '.join(fired)}) are discounted for every model on this task"
                           if fired else "" if any(v and v.get("measured") for k, v in sig.items() if k in TESTS) else
                           " (no evidence is collected for untrained models: with no knowledge of language their "
                           "option orders and continuations are chance by construction)")})
        else:
            sig = {k: ({**v, "fires": False, "confounded": True,
                        "reason": "also fires on the untrained baseline (negative control): not evidence on this task"}
                       if (task, k) in confounded and v and v.get("fires") else v) for k, v in sig.items()}
            row = assess(name, task, sig)
        row["baseline"] = baseline
        rows.append(row)
    return rows
