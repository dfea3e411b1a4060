"""The option-order test's null at scale: clean and untrained models, hundreds of items per benchmark (issue #36).

The option-order contamination test (:mod:`reporter.collect.option_order`) is exact if, for a
model that never saw a benchmark, the *published* order of an item's options is exchangeable
with its other orders. This study measures whether it is, on the benchmarks reporter ships:

1. For each model (default: both packaged models and the untrained baseline) and benchmark
   (MMLU, ARC-Challenge, ARC-Easy, HellaSwag), it takes ``--items`` testable items (the test's
   own filter: :func:`~reporter.collect.option_order.order_variants`; ARC's validation and test
   splits pooled, since the validation split alone has fewer than 300 items) and scores each item
   in its published order and ``--perms`` other orders (8 by default, so that the null can be read at any
   run's m <= 8 orders, the profile's default being 3; 23 = every order of 4 options), with the test's own scoring (the first ``--window`` tokens of
   each option line).
2. Per item it records the log-likelihood of every order scored, so that any statistic can be
   recomputed from ``DIR/<model>/<benchmark>.json`` without a model.
3. It reports, per model x benchmark:

   * the **published order**: its top share against chance, Fisher's exact p (the test's) and
     the histogram of its rank among all orders;
   * the **shuffled publication**: the same items with their options shuffled once by a seed
     and "published" in that order, ranked among the orders nobody published. Its rank is uniform
     by construction for *any* model, contaminated or not (a uniformly random order is
     exchangeable with the other random ones): it checks the implementation (ties, windows,
     the shared stem), and it shows that an excess of the published order belongs to that order,
     not to a model's taste in orders in general;
   * the **convention probe**: how the model's log-likelihood of the orders nobody published
     follows a listing convention (options from shortest to longest; alphabetical), as Spearman's
     rho per item, and how far the published orders follow it (Kendall's tau, 0 for random
     orders). Exposure favours only the order that was published; a convention favours every
     order that follows it, published or not.

Usage::

    python benchmarks/option_order_null.py -o null --items 300 --seed 4321
    python benchmarks/option_order_null.py -o null --report     # tables and charts from stored scores

The test suite runs a small version on tiny models (tests/test_option_order_null.py).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

MODELS = {"SmolLM2-135M-Instruct": "packaged:smollm2-135m-instruct",
          "Gemma-3-270M": "packaged:gemma-3-270m",
          "Random-init baseline": "random:llama"}
BENCHMARKS = ("mmlu", "arc_challenge", "arc_easy", "hellaswag")


# ----------------------------------------------------------------------------- items

def benchmark_items(name: str) -> list[Any]:
    """Every item of a benchmark that ships offline; ARC's validation and test splits pooled (ids unique)."""
    from reporter.collect.plan import build_task
    from reporter.config import TaskConfig

    task = build_task(TaskConfig(name=name))
    items = list(task.items())
    if name.startswith("arc_") and task.other_split is not None:
        seen = {str(it.id) for it in items}
        items += [it for it in task.other_split() if str(it.id) not in seen]
    return items


def shuffled_order(item_id: str, perms: Sequence[Sequence[int]], seed: int) -> int:
    """The index (into ``perms``) of the item's seeded "shuffled publication": one of its non-published orders,
    drawn uniformly from the orders scored, by a seed and the item's id alone (never by a model's scores).

    >>> shuffled_order("q1", [[1, 0], [0, 1]], 0) == shuffled_order("q1", [[1, 0], [0, 1]], 0)
    True
    """
    rng = np.random.default_rng([seed, zlib.crc32(item_id.encode())])
    return int(rng.integers(len(perms)))


def rank_of(values: np.ndarray, k: int) -> int:
    """How many of the other values are at least ``values[k]`` (ties count against the order, as the test counts)."""
    v = float(values[k])
    tol = 1e-6 * max(1.0, abs(v))
    return int(np.sum(np.delete(values, k) >= v - tol))


def order_tau(options: Sequence[str], order: Sequence[int], key: Any) -> float:
    """Kendall's tau between the position of each option in ``order`` and its ``key`` (1 = listed by ascending key).

    >>> order_tau(["a", "bb", "ccc"], [0, 1, 2], len), order_tau(["a", "bb", "ccc"], [2, 1, 0], len)
    (1.0, -1.0)
    """
    from scipy.stats import kendalltau

    keys = [key(options[j]) for j in order]
    if len(set(keys)) < 2:
        return 0.0
    t = kendalltau(range(len(keys)), keys).statistic
    return 0.0 if t != t else float(t)


CONVENTIONS = {"shortest_first": len, "alphabetical": lambda s: s.strip().lower()}


def _summary(ranks: Sequence[int], m: Sequence[int]) -> dict[str, Any]:
    from reporter.metrics.rank_tests import order_fisher_pvalue

    r, mm = np.asarray(ranks, int), np.asarray(m, int)
    if not r.size:
        return {"n": 0, "top_share": None, "chance": None, "p_fisher": None, "mean_rank_quantile": None}
    return {"n": int(r.size), "top_share": float(np.mean(r == 0)), "chance": float(np.mean(1.0 / (mm + 1))),
            "p_fisher": order_fisher_pvalue(r.tolist(), mm.tolist()),
            "mean_rank_quantile": float(np.mean(r / np.maximum(mm, 1)))}


def item_ranks(rec: dict[str, Any], seed: int) -> dict[str, Any]:
    """Per item of a study record: the published order's rank among all orders scored, the seeded shuffled
    publication's rank among the orders nobody published (uniform for any model), and the convention probe.

    The probe, per convention: Spearman's rho, per item, between the log-likelihood of the orders nobody
    published and how far each follows the convention (:func:`order_tau`), its mean over items with a Wilcoxon
    signed-rank p against 0; and the mean tau of the published orders (0 for randomly ordered options).
    """
    from scipy.stats import spearmanr, wilcoxon

    ranks, m, shuffled, shuffled_m, ids = [], [], [], [], []
    rhos: dict[str, list[float]] = {c: [] for c in CONVENTIONS}
    taus: dict[str, list[float]] = {c: [] for c in CONVENTIONS}
    for it in rec["per_item"]:
        ll = np.asarray(it["ll"], np.float64)
        ids.append(it["id"])
        ranks.append(rank_of(ll, 0))
        m.append(ll.size - 1)
        others = ll[1:]
        if others.size >= 2:
            k = shuffled_order(it["id"], it["orders"][1:], seed)
            shuffled.append(rank_of(others, k))
            shuffled_m.append(others.size - 1)
        for c, key in CONVENTIONS.items():
            taus[c].append(order_tau(it["choices"], it["orders"][0], key))
            t = [order_tau(it["choices"], o, key) for o in it["orders"][1:]]
            if others.size >= 3 and len(set(t)) > 1 and np.ptp(others) > 0:
                rhos[c].append(float(spearmanr(others, t).statistic))
    conventions = {}
    for c in CONVENTIONS:
        x = np.asarray([v for v in rhos[c] if v == v])
        p = float(wilcoxon(x).pvalue) if x.size >= 10 and np.any(x != 0) else None
        conventions[c] = {"n": int(x.size), "mean_rho": float(x.mean()) if x.size else None, "p": p,
                          "published_tau": float(np.mean(taus[c])) if taus[c] else None}
    top = int(max(m, default=0))
    return {"published": _summary(ranks, m), "shuffled": _summary(shuffled, shuffled_m), "conventions": conventions,
            "rank_hist": np.bincount(np.asarray(ranks, int), minlength=top + 1).tolist() if ranks else [],
            "ranks": ranks, "shuffled_ranks": shuffled, "m": m, "ids": ids}


def study_items(bench: str, tokenizer: Any, *, n_items: int, n_perms: int, seed: int) -> list[Any]:
    """The items the study scores on ``bench``: the test's own sample of ``n_items`` testable items (it depends on
    the items' text and the seed, not on the model).
    """
    from reporter.collect.option_order import order_variants

    pool = benchmark_items(bench)
    plan, _, _, _ = order_variants(tokenizer, pool, n_perms=n_perms, max_items=n_items, seed=seed, sample="seeded")
    ids = {p["id"] for p in plan}
    return [it for it in pool if str(it.id) in ids]


# ----------------------------------------------------------------------------- the positive control

def contaminate(out: Path, benches: Sequence[str], formats: Sequence[str], *, n_items: int, n_perms: int, seed: int,
                epochs: int, lr: float) -> dict[str, str]:
    """SmolLM2-135M-Instruct fine-tuned on a seeded half of the study's items of ``benches``, once per format
    (``contamination_control.py``'s (a) raw text and (b) chat prompt + gold answer); returns name -> model directory.
    The trained ids go to ``out/trained_items.json``.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from contamination_control import build_contaminated, chat_text, raw_text, trained_half

    from reporter.config.models import parse_config
    from reporter.models.loading import load_model
    from reporter.models.packaged import PACKAGED, model_dir

    base = model_dir(PACKAGED["smollm2-135m-instruct"])
    spec = parse_config({"models": [{"name": "base", "source": "packaged:smollm2-135m-instruct"}]}).models[0]
    lm = load_model(spec, run_device="cpu")
    items = {b: study_items(b, lm.tokenizer, n_items=n_items, n_perms=n_perms, seed=seed) for b in benches}
    trained = {b: trained_half(its, seed) for b, its in items.items()}
    (out / "trained_items.json").write_text(json.dumps({b: sorted(v) for b, v in trained.items()}, indent=1))
    made = {}
    for fmt in formats:
        mdir = out / "models" / f"contaminated-{fmt}"
        if not (mdir / "config.json").is_file():
            texts = [raw_text(it) if fmt == "a" else chat_text(lm, b, it)
                     for b, its in items.items() for it in its if str(it.id) in trained[b]]
            t0 = time.perf_counter()
            build_contaminated(base, mdir, texts, epochs=epochs, lr=lr, seed=seed,
                               log=lambda m: print(m, file=sys.stderr, flush=True))
            print(f"fine-tuned ({fmt}) on {len(texts)} texts in {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
        made[f"SmolLM2-contaminated-{fmt}"] = str(mdir)
    del lm
    return made


# ----------------------------------------------------------------------------- scoring

def score_model(lm: Any, items: Sequence[Any], *, n_items: int, n_perms: int, seed: int, window: int,
                batch_size: int) -> dict[str, Any]:
    """The log-likelihood of every scored order of ``n_items`` testable items (the test's sample and scoring)."""
    from reporter.collect.option_order import option_order_evidence

    t0 = time.perf_counter()
    ev = option_order_evidence(lm, items, n_perms=n_perms, max_items=n_items, seed=seed, batch_size=batch_size,
                               window=window or None, sample="seeded")  # the study's sample, as it was recorded
    return {**score_record(ev, items), "seed": seed, "window": window, "seconds": time.perf_counter() - t0}


def score_record(ev: dict[str, Any], items: Sequence[Any]) -> dict[str, Any]:
    """The study's record of one model x benchmark from an ``option_order_evidence`` result: per item its options
    and every scored order with its log-likelihood (the published order first).
    """
    by_id = {str(it.id): it for it in items}
    per_item = []
    for rec in ev["per_item"]:
        it = by_id[rec["id"]]
        per_item.append({"id": rec["id"], "choices": list(it.choices), "answer": it.answer,
                         "orders": [list(range(len(it.choices)))] + rec["perms"],
                         "ll": [rec["ll"], *rec["perm_ll"]]})
    return {"n": ev["n"], "skipped": ev["skipped"], "n_perms": ev["n_perms"], "per_item": per_item}


# ----------------------------------------------------------------------------- calibration

def preference_bound(ranks: Sequence[int], m: Sequence[int], level: float = 0.95) -> dict[str, float]:
    """The largest convention share ``w`` that one clean model's ranks allow, at one-sided ``level``.

    The calibrated null (:func:`reporter.metrics.rank_tests.order_fisher_pvalue`'s ``preference``) puts an
    item's published order first with probability ``w``, and otherwise ranks it uniformly. Two upper bounds,
    the larger is kept: from the top share (Clopper-Pearson upper bound of P(rank 0) = w + (1 - w)/(m + 1)),
    and from the mean of the items' Fisher scores ln((m + 1)/(r + 1)) (its upper t bound matched to the mean
    of that mixture), so that a preference spread over the first few ranks is covered as well as one at the top.

    >>> b = preference_bound([0] * 50 + [4] * 50, [8] * 100); 0.45 < b["w"] < 0.6
    True
    """
    from scipy import stats

    r, mm = np.asarray(ranks, int), np.asarray(m, int)
    n = r.size
    c = float(np.mean(1.0 / (mm + 1)))
    t_hi = float(stats.binomtest(int(np.sum(r == 0)), n).proportion_ci(level, method="exact").high) \
        if n else 1.0
    w_top = (t_hi - c) / (1 - c)
    score = np.log((mm + 1.0) / (r + 1.0))
    uniform = np.asarray([np.mean(np.log((k + 1.0) / np.arange(1, k + 2))) for k in mm])
    top = np.log(mm + 1.0)
    s_hi = float(score.mean() + stats.t.ppf(level, n - 1) * score.std(ddof=1) / np.sqrt(n)) if n > 1 else float(top.mean())
    w_score = (s_hi - float(uniform.mean())) / float(np.mean(top - uniform))
    return {"w": float(np.clip(max(w_top, w_score), 0.0, 0.95)), "w_top": float(w_top), "w_score": float(w_score),
            "top_share": float(np.mean(r == 0)), "chance": c, "n": int(n)}


DETECT_P = 0.05  # the clean models' preference counts as detected at this level (recorded; the share is the bound)


def calibration(rows: Sequence[dict[str, Any]], clean: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per benchmark, the calibrated null's preference share and why.

    The share is the largest :func:`preference_bound` over the clean models, on every benchmark the study
    measured. The clean models' exchangeable p-values are combined (Fisher's method,
    :func:`scipy.stats.combine_pvalues`) and recorded as ``detected`` (combined p < :data:`DETECT_P`), which the
    reason states; it no longer decides the share. Until 2026-12-05 an undetected preference left the orders
    exchangeable, and HellaSwag's clean models then fired a run's one test on 2.5-3.6 % of draws against the
    nominal 1 % (a graded lean that the top-share detection misses; ``evidence_power.py --null-study`` on a second
    200-item sample). Each model's bound is kept for the record.

    >>> rows = [{"model": "a", "benchmark": "b", "ranks": [0, 1, 2, 3] * 10, "m": [3] * 40,
    ...          "published": {"p_fisher": 0.6}}]
    >>> d = calibration(rows, ["a"])["b"]; d["detected"], d["preference"] == d["bound"] > 0
    (False, True)
    """
    from scipy.stats import combine_pvalues

    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["model"] not in clean:
            continue
        b = preference_bound(r["ranks"], r["m"])
        d = out.setdefault(r["benchmark"], {"preference": 0.0, "models": {}, "bound": 0.0})
        d["models"][r["model"]] = {**b, "p_fisher": r["published"]["p_fisher"]}
        d["bound"] = max(d["bound"], b["w"])
    for bench, d in out.items():
        ps = [m["p_fisher"] for m in d["models"].values()]
        d["p_combined"] = float(combine_pvalues(ps, method="fisher").pvalue) if len(ps) > 1 else float(ps[0])
        d["detected"] = bool(d["p_combined"] < DETECT_P)
        d["preference"] = d["bound"]
        seen = "; ".join(f"{name} {m['top_share']:.0%} of {m['n']} (p {m['p_fisher']:.2g})"
                         for name, m in d["models"].items())
        chance = max(m["chance"] for m in d["models"].values())
        d["why"] = (f"clean models put the published order first for {seen}, chance {chance:.0%}; "
                    + (f"the share {d['preference']:.0%} is the largest upper 95% bound of that preference"
                       if d["detected"] else
                       f"no top-share preference detected (combined p {d['p_combined']:.2g}), but a graded lean "
                       f"that this misses made clean models fire above the nominal rate under exchangeability, so the "
                       f"share {d['preference']:.0%} is the largest upper 95% bound all the same"))
    return out


def verdicts(rows: Sequence[dict[str, Any]], recs: dict[tuple[str, str], dict[str, Any]],
             cal: dict[str, dict[str, Any]], *, leave_out: bool = True) -> list[dict[str, Any]]:
    """The option-order test of a run over the study's rows, under the exchangeable and the calibrated null, with
    the run-wide Benjamini-Hochberg correction of :func:`reporter.analyse.contamination.apply_fdr` (each null
    corrected on its own). ``leave_out``: a clean model's calibrated null is the bound of the *other* clean
    models only, so that no model is judged against a null fitted on itself.
    """
    from reporter.analyse.contamination import EXCHANGEABLE, apply_fdr, option_order_signal

    out, sig_e, sig_c = [], [], []
    for r in rows:
        rec = recs[(r["model"], r["benchmark"])]
        order = {"n": rec["n"], "per_item": [{"id": it["id"], "ll": it["ll"][0], "perm_ll": it["ll"][1:]}
                                             for it in rec["per_item"]]}
        bench = cal.get(r["benchmark"], {"models": {}})
        others = [b["w"] for mname, b in bench["models"].items() if not (leave_out and mname == r["model"])]
        w = max(others, default=0.0)
        null = {"name": "calibrated", "preference": w, "source": "study"} if w > 0 else EXCHANGEABLE
        e, c = option_order_signal(order), option_order_signal(order, null)  # type: ignore[arg-type]
        sig_e.append({"option_order": e})
        sig_c.append({"option_order": c})
        out.append({"model": r["model"], "benchmark": r["benchmark"], "preference": w, "exchangeable": e,
                    "calibrated": c})
    apply_fdr(sig_e)
    apply_fdr(sig_c)
    return out


# ----------------------------------------------------------------------------- report

CLEAN = ("SmolLM2-135M-Instruct", "Gemma-3-270M")


def report(out: Path, seed: int, clean: Sequence[str] = CLEAN) -> str:
    """Markdown tables, ``calibration.json`` (the shipped null's format) and ``rank_histograms.png`` / ``.json``
    (a Vega-Lite chart), from the stored scores.
    """
    rows, recs = [], {}
    for f in sorted(out.glob("*/*.json")):
        rec = json.loads(f.read_text())
        recs[(rec["model"], rec["benchmark"])] = rec
        rows.append({"model": rec["model"], "benchmark": rec["benchmark"], "seconds": rec["seconds"],
                     **item_ranks(rec, seed)})
    cal = calibration(rows, clean)
    trained = json.loads((out / "trained_items.json").read_text()) if (out / "trained_items.json").is_file() else {}
    lines = ["| model | benchmark | n | published on top | chance | Fisher p | shuffled on top | chance | Fisher p "
             "| rho(ll, shortest-first) | p | rho(ll, alphabetical) | p | published tau: length | alphabetical |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{x:.0%}"

    def pv(x: float | None) -> str:
        return "—" if x is None else f"{x:.2g}"

    def num(x: float | None) -> str:
        return "—" if x is None else f"{x:+.2f}"

    for r in rows:
        p, s, c = r["published"], r["shuffled"], r["conventions"]
        ln, al = c["shortest_first"], c["alphabetical"]
        lines.append(f"| {r['model']} | {r['benchmark']} | {p['n']} | {pct(p['top_share'])} | {pct(p['chance'])} | "
                     f"{pv(p['p_fisher'])} | {pct(s['top_share'])} | {pct(s['chance'])} | {pv(s['p_fisher'])} | "
                     f"{num(ln['mean_rho'])} | {pv(ln['p'])} | {num(al['mean_rho'])} | {pv(al['p'])} | "
                     f"{num(ln['published_tau'])} | {num(al['published_tau'])} |")
    lines += ["", "Calibrated null per benchmark (share = the largest upper 95 % bound over the clean models, "
              f"whether or not their combined p < {DETECT_P:g} detects a preference):", "",
              "| benchmark | combined p | detected | preference share | "
              + " | ".join(f"{m}: top share, bound" for m in clean) + " |",
              "|---|---|---|---|" + "---|" * len(clean)]
    for b, d in sorted(cal.items()):
        cells = [f"{pct(d['models'][m]['top_share'])}, {d['models'][m]['w']:.3f}" if m in d["models"] else "—"
                 for m in clean]
        lines.append(f"| {b} | {d['p_combined']:.2g} | {'yes' if d['detected'] else 'no'} | {d['preference']:.3f} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Agreement between the clean models, item by item (Spearman's rho of the ranks): for the published "
              "order, and for the shuffled publication, which nobody published. Equal agreement means the models "
              "share a taste in orders, not a memory of the published one.", "",
              "| benchmark | models | published order | shuffled publication |", "|---|---|---|---|"]
    for bench, a, b, rp, rs in agreement(rows, clean):
        lines.append(f"| {bench} | {a} vs {b} | {rp:+.2f} | {rs:+.2f} |")
    ver = verdicts(rows, recs, cal)
    lines += ["", "The test over the study as one run (Benjamini-Hochberg over all rows; a clean model's calibrated "
              "null from the other clean models only):", "",
              "| model | benchmark | role | top share | exchangeable: adjusted p | fires | calibrated preference | "
              "calibrated: adjusted p | fires | AUC trained vs held out |", "|---|---|---|---|---|---|---|---|---|---|"]
    for v in ver:
        e, c = v["exchangeable"], v["calibrated"]
        ids = set(trained.get(v["benchmark"], [])) if "contaminated" in v["model"] else set()
        role = ("contaminated" if ids else "untouched" if "contaminated" in v["model"] else
                "clean" if v["model"] in clean else "untrained" if "Random" in v["model"] else "other")
        auc = _auc(e, ids) if ids else None
        lines.append(f"| {v['model']} | {v['benchmark']} | {role} | {pct(e.get('top_share'))} | "
                     f"{pv(e.get('p_adjusted'))} | {'**yes**' if e.get('fires') else 'no'} | {v['preference']:.3f} | "
                     f"{pv(c.get('p_adjusted'))} | {'**yes**' if c.get('fires') else 'no'} | "
                     f"{'—' if auc is None else f'{auc:.2f}'} |")
        v["role"] = role
    (out / "null_study.json").write_text(json.dumps(rows, indent=1))
    (out / "verdicts.json").write_text(json.dumps(ver, indent=1, default=str))
    (out / "calibration.json").write_text(json.dumps(calibration_file(cal, seed, clean, rows), indent=1) + "\n")
    _chart(rows, out)
    return "\n".join(lines)


def agreement(rows: Sequence[dict[str, Any]], clean: Sequence[str]) -> list[tuple[str, str, str, float, float]]:
    """Per benchmark and pair of clean models, Spearman's rho between their per-item ranks of the published order
    and of the shuffled publication (the same items, in the same order).
    """
    from itertools import combinations

    from scipy.stats import spearmanr

    by = {(r["model"], r["benchmark"]): r for r in rows}
    out = []
    for bench in sorted({r["benchmark"] for r in rows}):
        for a, b in combinations([m for m in clean if (m, bench) in by], 2):
            ra, rb = by[(a, bench)], by[(b, bench)]
            if ra["ids"] != rb["ids"] or len(ra["ids"]) < 3:
                continue
            out.append((bench, a, b, float(spearmanr(ra["ranks"], rb["ranks"]).statistic),
                        float(spearmanr(ra["shuffled_ranks"], rb["shuffled_ranks"]).statistic)))
    return out


def calibration_file(cal: dict[str, dict[str, Any]], seed: int, clean: Sequence[str],
                     rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The shipped null's format (``reporter/data/option_order_null.json``, read by
    :func:`reporter.analyse.contamination.order_null_for`).
    """
    n = sorted({r["published"]["n"] for r in rows if r["model"] in clean})
    orders = sorted({int(x) + 1 for r in rows for x in set(r["m"])})
    return {"name": f"option-order null study (benchmarks/option_order_null.py, seed {seed}, "
                    f"{'/'.join(map(str, n))} items, {'/'.join(map(str, orders))} orders per item)",
            "seed": seed, "clean_models": list(clean),
            # the clean models by content: a run's model with the same weights is the null's own (the card says so)
            **({"clean_identities": ids} if len(ids := {r["model"]: r["identity"] for r in rows
                                                        if r["model"] in clean and r.get("identity")}) == len(clean)
               else {}),
            "detect_p": DETECT_P,
            "benchmarks": {b: {"preference": round(d["preference"], 4), "why": d["why"], "detected": d["detected"],
                               "p_combined": d["p_combined"], "models": d["models"]} for b, d in sorted(cal.items())}}


def _auc(signal: dict[str, Any], trained: set[str]) -> float | None:
    """Trained-on vs held-out items' AUC of the published order's z-score among its orders."""
    from scipy.stats import mannwhitneyu

    vals = dict(zip(signal.get("item_ids") or [], signal.get("item_values") or []))
    pos = [x for k, x in vals.items() if k in trained]
    neg = [x for k, x in vals.items() if k not in trained]
    if not pos or not neg:
        return None
    return float(mannwhitneyu(pos, neg).statistic) / (len(pos) * len(neg))


def _chart(rows: Sequence[dict[str, Any]], out: Path) -> None:
    """Per model x benchmark, the histogram of the published order's rank among the orders scored (uniform = clean)."""
    import altair as alt
    import pandas as pd

    data = []
    for r in rows:
        m = np.asarray(r["m"])
        ranks = np.asarray(r["ranks"])
        for k in range(int(m.max()) + 1 if m.size else 0):
            data.append({"model": r["model"], "benchmark": r["benchmark"], "rank": k + 1,
                         "share": float(np.mean(ranks == k)) if ranks.size else 0.0,
                         "chance": float(np.mean(np.where(k <= m, 1.0 / (m + 1), 0.0)))})
    df = pd.DataFrame(data)
    # one facet grid per set of benchmarks measured (the controls score fewer), so no panel is empty
    sets = df.groupby("model")["benchmark"].agg(lambda b: tuple(sorted(set(b))))
    grids = []
    for benches in sorted(set(sets), key=len, reverse=True):
        part = df[df["model"].isin(sets[sets == benches].index)]
        base = alt.Chart(part).encode(x=alt.X("rank:O", title="rank (1 = most likely)"))
        bars = base.mark_bar().encode(y=alt.Y("share:Q", title="share of items", axis=alt.Axis(format="%")))
        line = base.mark_tick(color="black", thickness=2).encode(y="chance:Q")
        grids.append((bars + line).properties(width=220, height=110).facet(
            row=alt.Row("model:N", title=None), column=alt.Column("benchmark:N", title=None)))
    chart = alt.vconcat(*grids).properties(
        title=alt.TitleParams("Rank of the published option order among the orders scored, per item "
                              "(black: chance; uniform = no preference)", anchor="start"))
    (out / "rank_histograms.json").write_text(chart.to_json())
    import vl_convert as vlc

    (out / "rank_histograms.png").write_bytes(vlc.vegalite_to_png(chart.to_dict(), scale=1.5))


# ----------------------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--models", default=",".join(MODELS), help="names of MODELS, or name=source pairs")
    ap.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    ap.add_argument("--items", type=int, default=300, help="testable items per benchmark")
    ap.add_argument("--perms", type=int, default=8, help="other orders per item (8: the null read at any m <= 8; the profile's default is 3; 23 = all of 4 options)")
    ap.add_argument("--window", type=int, default=6, help="tokens scored per option line (the profile's default)")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--contaminate", default="", help="also: SmolLM2 fine-tuned on half of the study's items of these "
                                                     "benchmarks (the positive control), e.g. arc_challenge,mmlu")
    ap.add_argument("--formats", default="a,b", help="the control's formats: a = raw text, b = chat prompt + answer")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--report", action="store_true", help="only the tables and charts, from the stored scores")
    ap.add_argument("--ship", action="store_true", help="also write the calibration into the package "
                                                       "(reporter/data/option_order_null.json)")
    args = ap.parse_args(argv)
    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        from reporter.config import ModelSpec
        from reporter.models.identity import model_identity
        from reporter.models.loading import load_model

        entries = [m for m in args.models.split(",") if m]
        if args.contaminate:
            made = contaminate(out, [b for b in args.contaminate.split(",") if b],
                               [f for f in args.formats.split(",") if f], n_items=args.items, n_perms=args.perms,
                               seed=args.seed, epochs=args.epochs, lr=args.lr)
            entries += [f"{n}={d}" for n, d in made.items()]
        for entry in entries:
            name, source = entry.split("=", 1) if "=" in entry else (entry, MODELS[entry])
            lm = None
            for bench in [b for b in args.benchmarks.split(",") if b]:
                f = out / name.replace(" ", "_") / f"{bench}.json"
                if f.is_file():
                    continue
                if lm is None:
                    lm = load_model(ModelSpec(name=name, source=source, dtype="float32",
                                              kind="base" if source.startswith("random:") else None),
                                    run_device="cpu", run_dtype="float32", run_seed=args.seed)
                rec = score_model(lm, benchmark_items(bench), n_items=args.items, n_perms=args.perms, seed=args.seed,
                                  window=args.window, batch_size=args.batch_size)
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps({"model": name, "source": source, "identity": model_identity(lm),
                                         "benchmark": bench, **rec}))
                print(f"{name} {bench}: {rec['n']} items in {rec['seconds']:.0f} s", file=sys.stderr, flush=True)
            del lm
    md = report(out, args.seed)
    (out / "null_study.md").write_text(md + "\n")
    if args.ship:
        shipped = Path(__file__).resolve().parents[1] / "reporter" / "data" / "option_order_null.json"
        shipped.write_text((out / "calibration.json").read_text())
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
