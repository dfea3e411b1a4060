"""Utility Law fit and law-adjusted fairness, checked against float64 closed-form references."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reporter.analyse.fairness import FAIRNESS_DEFINITION, adjusted_scores, fairness
from reporter.analyse.law import LawError, describe_fit, fit_points, fit_utility_law


def ols(x, y):
    """Closed-form OLS in float64 with plain loops: (slope, intercept, r2)."""
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    b = sxy / sxx
    a = my - b * mx
    sse = sum((yy - a - b * xx) ** 2 for xx, yy in zip(x, y))
    sst = sum((yy - my) ** 2 for yy in y)
    return b, a, 1 - sse / sst


def data(n=8, seed=1, noise=0.3):
    rng = np.random.default_rng(seed)
    P = rng.uniform(5, 95, n)
    M = 20.0 - 3.0 * np.log(P) + rng.normal(0, noise, n)
    return P, M


def test_fit_matches_closed_form_ols():
    P, M = data()
    fit = fit_utility_law(P, M, seed=3)
    b, a, r2 = ols(list(np.log(P)), list(M))
    assert fit.n == 8
    assert fit.slope == pytest.approx(b, rel=1e-12)
    assert fit.intercept == pytest.approx(a, rel=1e-12)
    assert fit.r2 == pytest.approx(r2, rel=1e-12)
    assert fit.slope < 0
    # predict / invert are exact inverses; invert(MUI) = exp((MUI - a) / b)
    assert fit.predict_mui(37.0) == pytest.approx(a + b * math.log(37.0))
    assert fit.invert(5.0) == pytest.approx(math.exp((5.0 - a) / b))
    assert fit.invert(fit.predict_mui(np.array([3.0, 50.0]))) == pytest.approx([3.0, 50.0])


def test_residuals_and_leave_one_out_studentised():
    P, M = data(n=7, seed=5)
    M[2] += 4.0  # one point far above the law
    fit = fit_utility_law(P, M)
    x = list(np.log(P))
    b, a, _ = ols(x, list(M))
    e = [M[i] - (a + b * x[i]) for i in range(7)]
    assert fit.residuals == pytest.approx(e)
    s = math.sqrt(sum(v * v for v in e) / 5)
    assert fit.std_residuals == pytest.approx([v / s for v in e])
    # externally studentised residual == prediction error of the leave-one-out fit / its standard error
    for i in range(7):
        xs = [v for j, v in enumerate(x) if j != i]
        ys = [v for j, v in enumerate(M) if j != i]
        bi, ai, _ = ols(xs, ys)
        mx = sum(xs) / 6
        sxx = sum((v - mx) ** 2 for v in xs)
        s2 = sum((yy - ai - bi * xx) ** 2 for xx, yy in zip(xs, ys)) / 4
        se = math.sqrt(s2 * (1 + 1 / 6 + (x[i] - mx) ** 2 / sxx))
        assert fit.studentized_residuals[i] == pytest.approx((M[i] - ai - bi * x[i]) / se, rel=1e-9)
    assert int(np.argmax(fit.studentized_residuals)) == 2 and fit.studentized_residuals[2] > 2
    assert np.isnan(fit_utility_law([10, 20, 40], [5, 4, 3.2]).studentized_residuals).all()  # n < 4


def test_bootstrap_ci_matches_seeded_reference_loop():
    P, M = data(n=6, seed=2, noise=0.5)
    fit = fit_utility_law(P, M, seed=11, n_resamples=500)
    x = np.log(P)
    idx = np.random.default_rng(11).integers(0, 6, size=(500, 6))
    slopes, icpts = [], []
    for row in idx:
        xs, ys = [x[i] for i in row], [M[i] for i in row]
        if max(xs) - min(xs) < 1e-12:
            continue
        b, a, _ = ols(xs, ys)
        slopes.append(b)
        icpts.append(a)
    assert fit.n_resamples_used == len(slopes)
    assert fit.slope_ci == pytest.approx(tuple(np.percentile(slopes, [2.5, 97.5])), rel=1e-9)
    assert fit.intercept_ci == pytest.approx(tuple(np.percentile(icpts, [2.5, 97.5])), rel=1e-9)
    assert fit.slope_ci[0] <= fit.slope <= fit.slope_ci[1]
    assert fit_utility_law(P, M, seed=11, n_resamples=500).slope_ci == fit.slope_ci  # deterministic
    assert fit_utility_law(P, M, seed=12, n_resamples=500).slope_ci != fit.slope_ci


def test_zero_performance_excluded_and_listed():
    fit = fit_utility_law([0.0, 10, 30, 60, float("nan")], [9, 8, 6, 4, 3], labels=list("abcde"))
    assert fit.n == 3 and fit.labels == ["b", "c", "d"]
    reasons = {e["label"]: e["reason"] for e in fit.excluded}
    assert "ln P" in reasons["a"] and "non-finite" in reasons["e"]
    b, a, _ = ols(list(np.log([10, 30, 60])), [8, 6, 4])
    assert fit.slope == pytest.approx(b)


def test_fewer_than_three_points_no_fit():
    with pytest.raises(LawError, match="needs at least 3"):
        fit_utility_law([0, 20, 40], [5, 4, 3])
    with pytest.raises(LawError, match="same performance"):
        fit_utility_law([20, 20, 20], [5, 4, 3])
    fit, reason = fit_points([{"label": "m1", "P": 40, "MUI": 3}, {"label": "m2", "P": 60, "MUI": 2}])
    assert fit is None and "needs at least 3" in reason
    d = describe_fit(fit, reason, [{"label": "m1", "P": 40, "MUI": 3}])
    assert "slope" not in d and d["reason"] == reason and d["points"][0]["label"] == "m1"
    pts = [{"label": "z", "P": 0.0, "MUI": 9}, {"label": "m1", "P": 40, "MUI": 3}]
    d = describe_fit(*fit_points(pts), pts)  # no fit, but the P = 0 point is still named as excluded
    assert "slope" not in d and d["points"][0]["excluded"].startswith("P = 0") and "excluded" not in d["points"][1]


def test_describe_fit_marks_points():
    pts = [{"label": f"m{i}", "model": f"m{i}", "P": p, "MUI": m}
           for i, (p, m) in enumerate([(0, 9), (10, 8), (20, 6), (40, 5), (80, 3)])]
    fit, reason = fit_points(pts)
    d = describe_fit(fit, reason, pts)
    assert d["points"][0]["excluded"].startswith("P = 0")
    fitted = [p for p in pts if p["P"] > 0]  # each point's own residuals, by a closed-form fit and leave-one-out refits
    x, y = [math.log(p["P"]) for p in fitted], [p["MUI"] for p in fitted]
    b, a, _ = ols(x, y)
    n, mx = len(x), sum(x) / len(x)
    s = math.sqrt(sum((yy - a - b * xx) ** 2 for xx, yy in zip(x, y)) / (n - 2))
    sxx = sum((xx - mx) ** 2 for xx in x)
    for i, p in enumerate(fitted):
        row = next(r for r in d["points"] if r["label"] == p["label"])
        e = y[i] - (a + b * x[i])
        assert row["residual"] == pytest.approx(e, rel=1e-9) and row["std_residual"] == pytest.approx(e / s, rel=1e-9)
        xs, ys = x[:i] + x[i + 1:], y[:i] + y[i + 1:]
        bi, ai, _ = ols(xs, ys)
        s_i = math.sqrt(sum((yy - ai - bi * xx) ** 2 for xx, yy in zip(xs, ys)) / (n - 3))
        h = 1 / n + (x[i] - mx) ** 2 / sxx
        assert row["studentized"] == pytest.approx(e / (s_i * math.sqrt(1 - h)), rel=1e-9)
    assert d["n"] == 4 and d["excluded"][0]["label"] == "m0" and d["reason"] is None and d["slope"] == fit.slope


def test_adjusted_score_definition_and_ranking():
    pts = [{"label": n, "P": p, "MUI": m} for n, p, m in
           [("a", 20, 11.5), ("b", 35, 9.0), ("c", 50, 8.9), ("d", 70, 7.0), ("e", 90, 6.4)]]
    fit, _ = fit_points(pts)
    rows = {r["label"]: r for r in adjusted_scores(fit, pts)}
    for p in pts:
        p_law = math.exp((p["MUI"] - fit.intercept) / fit.slope)
        r = rows[p["label"]]
        assert r["P_law"] == pytest.approx(p_law)
        m_law = fit.intercept + fit.slope * math.log(p["P"])
        assert r["MUI_law"] == pytest.approx(m_law)
        assert r["adjusted"] == pytest.approx(p["P"] * m_law / p["MUI"])
        assert r["effort_ratio"] == pytest.approx(p["MUI"] / m_law)
        resid = p["MUI"] - fit.predict_mui(p["P"])
        # above the law line (more effort than the performance warrants) is penalised, below rewarded
        assert (r["adjusted"] < p["P"]) == (resid > 0) == (r["effort_ratio"] > 1)
    by_adj = sorted(pts, key=lambda p: -rows[p["label"]]["adjusted"])
    assert [rows[p["label"]]["rank_adjusted"] for p in by_adj] == [1, 2, 3, 4, 5]
    assert [rows[n]["rank_raw"] for n in "edcba"] == [1, 2, 3, 4, 5]
    for r in rows.values():
        assert r["shift"] == r["rank_raw"] - r["rank_adjusted"]


def test_fairness_block():
    pts = [{"label": n, "P": p, "MUI": m} for n, p, m in
           [("a", 20, 11.5), ("b", 35, 9.0), ("c", 50, 8.9), ("d", 70, 7.0)]]
    base = [{"label": "rnd", "P": 0.0, "MUI": 30.0, "baseline": True}]
    out = fairness(pts, {"t1": pts[:3], "t2": pts[:2]}, reference_rows=base)
    assert out["available"] and out["definition"] == FAIRNESS_DEFINITION
    assert len(out["per_model"]) == 4 and out["reference_rows"] == base
    best = min(out["per_model"], key=lambda r: r["rank_adjusted"])
    assert out["sentence"].startswith(f"Taking effort into account, {best['label']}")
    assert "fitted on these 4 models" in out["sentence"]
    assert out["per_task"]["t1"]["available"] and len(out["per_task"]["t1"]["rows"]) == 3
    assert not out["per_task"]["t2"]["available"]
    assert "no fair adjustment is possible" in out["per_task"]["t2"]["reason"]


def test_fairness_needs_three_models_and_negative_slope():
    two = fairness([{"label": "a", "P": 10, "MUI": 9}, {"label": "b", "P": 50, "MUI": 5}])
    assert not two["available"] and two["per_model"] == [] and two["sentence"] is None
    assert "no fair adjustment is possible" in two["reason"] and "2 trained models" in two["reason"]
    up = fairness([{"label": "a", "P": 10, "MUI": 3}, {"label": "b", "P": 30, "MUI": 5},
                   {"label": "c", "P": 60, "MUI": 8}])
    assert not up["available"] and "not negative" in up["reason"]
    zero = fairness([{"label": "a", "P": 0, "MUI": 9}, {"label": "b", "P": 30, "MUI": 5},
                     {"label": "c", "P": 60, "MUI": 4}])
    assert not zero["available"] and "2 usable points" in zero["reason"]


def test_definition_text():
    for s in ("P x MUI_law(P) / MUI", "exp((MUI - a) / b)", "at least 3", "baselines"):
        assert s in FAIRNESS_DEFINITION



def test_adjusted_rank_intervals_match_a_plain_loop_over_the_bootstrap_fits():
    """Each resample's (a, b) re-derived with a seeded loop (the same draws as the law's bootstrap), the adjusted
    scores and ranks recomputed in float64 one resample at a time, and the central 95% interval of each model's
    rank read off the sorted list; P(first) is the share of resamples ranking it first."""
    from reporter.analyse.fairness import adjusted_rank_intervals

    P = [18.0, 31.0, 44.0, 52.0, 70.0]
    M = [9.5, 6.0, 6.8, 3.9, 3.6]
    labels = ["e", "d", "c", "b", "a"]
    fit = fit_utility_law(P, M, labels=labels, seed=3, n_resamples=400)
    rows = adjusted_scores(fit, [{"label": lab, "P": p, "MUI": m} for lab, p, m in zip(labels, P, M)])
    info = adjusted_rank_intervals(fit, rows)

    rng = np.random.default_rng(3)
    x, y = np.log(P), np.asarray(M)
    ranks = {lab: [] for lab in labels}
    n_neg = 0
    for idx in rng.integers(0, len(P), size=(400, len(P))):
        xs, ys = x[idx], y[idx]
        sxx = float(np.sum((xs - xs.mean()) ** 2))
        if sxx <= 1e-12 * float(np.sum((x - x.mean()) ** 2)):
            continue
        b = float(np.sum((xs - xs.mean()) * (ys - ys.mean()))) / sxx
        a = float(ys.mean() - b * xs.mean())
        if not b < 0:
            continue
        n_neg += 1
        adj = {}
        for lab, p, m in zip(labels, P, M):
            m_law = a + b * math.log(p)
            adj[lab] = p * m_law / m if m_law > 0 else -math.inf
        for k, lab in enumerate(sorted(labels, key=lambda lb: (-adj[lb], lb)), 1):
            ranks[lab].append(k)
    assert info["resamples"] == n_neg > 100 and info["of"] == fit.n_resamples_used
    for r in rows:
        got = sorted(ranks[r["label"]])
        lo = got[int(math.floor(0.025 * (n_neg - 1)))]
        hi = got[int(math.ceil(0.975 * (n_neg - 1)))]
        assert r["rank_adjusted_interval"] == [lo, hi], r["label"]
        assert r["p_first"] == pytest.approx(got.count(1) / n_neg)
        assert lo <= r["rank_adjusted"] <= hi
    assert fairness([{"label": lab, "P": p, "MUI": m} for lab, p, m in zip(labels, P, M)])["rank_uncertainty"]["resamples"] > 0


@pytest.mark.parametrize("groups", [None, {"t2": "g", "t3": "g"}], ids=["tasks", "a-group-as-one-task"])
def test_joint_rank_intervals_match_a_plain_loop_over_items_and_models(groups):
    """The same draws in the same order (per task one item draw shared by every model, then one draw of the
    models), each resample's scores, OLS refit and adjusted scores in plain float64 Python, ranks by (-adjusted,
    label), and the interval read off the sorted ranks. With an lm-eval group (t2 and t3) the group is one task:
    P* is the mean of t1 and the group's pooled items."""
    from reporter.analyse.fairness import joint_rank_intervals

    tasks = ("t1", "t2", "t3")

    def mean_over_tasks(means: dict[str, float], sizes: dict[str, int]) -> float:
        if groups is None:
            return sum(means.values()) / len(means)
        pooled = (means["t2"] * sizes["t2"] + means["t3"] * sizes["t3"]) / (sizes["t2"] + sizes["t3"])
        return (means["t1"] + pooled) / 2

    gen = np.random.default_rng(4)
    labels = ["m1", "m2", "m3", "m4"]
    rates = {"m1": (0.2, 0.3, 0.1), "m2": (0.4, 0.5, 0.3), "m3": (0.6, 0.6, 0.6), "m4": (0.7, 0.9, 0.8)}
    mui = {"m1": 9.0, "m2": 6.5, "m3": 5.0, "m4": 3.0}
    items = {m: {"t1": {f"a{i}": float(gen.random() < rates[m][0]) for i in range(15)},
                 "t2": {f"b{i}": float(gen.random() < rates[m][1]) for i in range(9)},
                 "t3": {f"c{i}": float(gen.random() < rates[m][2]) for i in range(4)}} for m in labels}
    sizes = {t: len(items["m1"][t]) for t in tasks}
    P = {m: 100 * mean_over_tasks({t: float(np.mean(list(items[m][t].values()))) for t in tasks}, sizes)
         for m in labels}
    fit = fit_utility_law([P[m] for m in labels], [mui[m] for m in labels], labels=labels, seed=0)
    rows = adjusted_scores(fit, [{"label": m, "P": P[m], "MUI": mui[m]} for m in labels])
    info = joint_rank_intervals(rows, items, list(tasks), seed=7, n_resamples=300, groups=groups)

    rng = np.random.default_rng(7)
    ids = {t: sorted(items["m1"][t]) for t in tasks}
    ranks = {m: [] for m in labels}
    n_neg = 0
    for _ in range(300):
        means: dict[str, dict[str, float]] = {m: {} for m in labels}
        for t in tasks:
            draw = rng.integers(0, len(ids[t]), len(ids[t]))
            for m in labels:
                means[m][t] = sum(items[m][t][ids[t][k]] for k in draw) / len(draw)
        Ps = {m: 100 * mean_over_tasks(means[m], sizes) for m in labels}
        pick = [labels[k] for k in rng.integers(0, 4, 4) if Ps[labels[k]] > 0]
        xs = [math.log(Ps[m]) for m in pick]
        ys = [mui[m] for m in pick]
        if len(pick) < 2 or max(xs) - min(xs) <= 1e-12:
            continue
        xm, ym = sum(xs) / len(xs), sum(ys) / len(ys)
        b = sum((x - xm) * (y - ym) for x, y in zip(xs, ys)) / sum((x - xm) ** 2 for x in xs)
        if not b < 0:
            continue
        n_neg += 1
        a = ym - b * xm
        adj = {}
        for m in labels:
            law = a + b * math.log(Ps[m]) if Ps[m] > 0 else float("nan")
            adj[m] = 0.0 if Ps[m] <= 0 else (Ps[m] * law / mui[m] if law > 0 else -math.inf)
        for k, m in enumerate(sorted(labels, key=lambda lb: (-adj[lb], lb)), 1):
            ranks[m].append(k)
    assert info["resamples"] == n_neg > 100 and "resampled items" in info["what"]
    for r in rows:
        got = sorted(ranks[r["label"]])
        assert r["rank_adjusted_interval"] == [got[int(math.floor(0.025 * (n_neg - 1)))],
                                               got[int(math.ceil(0.975 * (n_neg - 1)))]], r["label"]
        assert r["p_first"] == pytest.approx(got.count(1) / n_neg)
    assert joint_rank_intervals(rows, {m: items[m] for m in labels[:3]}, ["t1"], seed=0) is None  # a model without items


def test_equal_scores_share_their_raw_rank_whatever_their_float_noise():
    """Two models with the same mean score (one computed as 32.708333333333336, the other as 32.70833333333333)
    are tied on the leaderboard; the law-adjusted table gives them one raw rank too, and the next model the rank
    after both (competition ranking)."""
    from reporter.analyse.fairness import adjusted_scores
    from reporter.analyse.law import fit_utility_law
    fit = fit_utility_law([20, 40, 80], [8, 6, 4])
    pts = [{"label": "a", "P": 32.708333333333336, "MUI": 5.0}, {"label": "b", "P": 32.70833333333333, "MUI": 5.5},
           {"label": "c", "P": 60.0, "MUI": 5.0}, {"label": "d", "P": 10.0, "MUI": 7.0}]
    ranks = {r["label"]: r["rank_raw"] for r in adjusted_scores(fit, pts)}
    assert ranks == {"c": 1, "a": 2, "b": 2, "d": 4}


def test_the_same_mui_for_every_model_is_no_fit_not_an_analysis_the_schema_refuses():
    """Three tiny models with MUI 3.125 % each (every item its own key neurons): R² was 0/0, written as null, and the
    schema refused the analysis: no card, and `analyse` failed the same way forever."""
    from reporter.analyse.law_points import law_and_fairness

    with pytest.raises(LawError, match=r"same MUI \(3.125%\)"):
        fit_utility_law([25, 50, 75], [3.125] * 3)
    settings = {"top_ratio": 0.01, "mode": "score", "definition": "paper", "unit": "neurons", "n_samples": 4}
    results = {"models": {m: {"source": f"./{m}", "status": "complete", "meta": {"n_params": 1000},
                              "tasks": {"faq": {"score": s, "mui": 3.125, "mui_settings": settings, "n": 4}}}
                          for m, s in (("a", 0.25), ("b", 0.5), ("c", 0.75))}}
    per_item = {m: {"faq": {f"q{i}": float(i < 4 * s) for i in range(4)}} for m, s in (("a", 0.25), ("b", 0.5),
                                                                                     ("c", 0.75))}
    out = law_and_fairness(results, per_item, seed=0, n_resamples=200)
    assert "slope" not in out.law["pooled"] and "same MUI" in out.law["pooled"]["reason"]


def test_equal_points_count_once_and_fewer_than_three_distinct_are_no_fit():
    """Three points of which two coincide (one model's weights twice) fitted a perfect line through two points: R² 1,
    a slope CI of zero width and p 1e-10. A point twice is one point; repeated P with other MUI is still data."""
    with pytest.raises(LawError, match=r"2 distinct \(P, MUI\) points among the 3 usable ones .* needs at least 3"):
        fit_utility_law([40.0, 40.0, 75.0], [6.0, 6.0, 4.5])
    fit, reason = fit_points([{"label": m, "P": p, "MUI": u} for m, p, u in
                              (("a", 40.0, 6.0), ("b", 75.0, 4.5), ("c", 40.0, 6.0), ("z", 0.0, 9.0))])
    assert fit is None and reason.startswith("2 distinct (P, MUI) points among the 3 usable ones")
    P, M = [40.0, 40.0, 75.0], [6.0, 6.5, 4.5]  # the same score, other effort: three points
    fit = fit_utility_law(P, M)
    b, a, r2 = ols(list(np.log(P)), M)
    assert fit.n == 3 and fit.slope == pytest.approx(b, rel=1e-12) and fit.r2 == pytest.approx(r2, rel=1e-12)
    assert fit.r2 < 1


def _results(rows, key="mui"):
    """A results-shaped document: (name, identity, score, MUI, settings) per model, one task "t"."""
    return {"models": {name: {"source": f"./{name}", "status": "complete",
                              "meta": {"n_params": 1000, **({"identity": ident} if ident else {})},
                              "tasks": {"t": {"score": s, key: u, f"{key}_settings": st, "n": 8}}}
                       for name, ident, s, u, st in rows}}


def test_copies_of_one_models_weights_are_one_point_in_a_run():
    """Two entries of one models YAML with the same weights (equal meta.identity) are one model: the first keeps its
    point, naming the copy, and the copy is left out saying whose point stands for it; a model with no identity is
    never merged. The SAE law reads the same points."""
    from reporter.analyse.law_points import law_and_fairness, law_points

    st = {"definition": "paper", "mode": "score", "top_ratio": 0.01, "rho": None, "n_samples": 8}
    rows = [("acme", "packaged:smollm2:" + "ab" * 32, 0.40, 6.0, st), ("vendor", "packaged:smollm2:" + "ab" * 32,
            0.41, 6.1, st), ("beta", "local:cd", 0.70, 4.0, st), ("p1", None, 0.55, 5.2, st), ("p2", None, 0.55, 5.0, st)]
    per_item = {m: {"t": {f"q{i}": float(i < 8 * s) for i in range(8)}} for m, _, s, _, _ in rows}
    out = law_and_fairness(_results(rows), per_item, seed=0, n_resamples=200)
    avg = out.law["per_model_average"]
    kept = [r for r in rows if r[0] != "vendor"]
    assert [p["model"] for p in avg["points"]] == [r[0] for r in kept] and avg["n"] == 4
    assert avg["slope"] == pytest.approx(ols([math.log(100 * r[2]) for r in kept], [r[3] for r in kept])[0], rel=1e-9)
    assert avg["points"][0]["same_weights"] == ["vendor"]
    (copy,) = [x for x in out.law["left_out"] if x["model"] == "vendor"]
    assert copy == {"model": "vendor", "task": "t", "same_weights_as": "acme",
                    "reason": "the same weights as acme (meta.identity packaged:smollm2:abababababab…): one model is one "
                              "point of the law, acme's"}
    assert "acme and vendor are the same weights (equal meta.identity)" in " ".join(out.law["notes"])
    assert sorted(r["label"] for r in out.fairness["per_model"]) == sorted(r[0] for r in kept)
    sae = law_points(_results(rows, "mui_sae"), "mui_sae", "mui_sae_settings", ("rho", "n_samples"))[0]
    assert sorted(sae) == sorted(r[0] for r in kept)
    # with only the copies and one other model left, no fit: the reason names the copy that counted once
    two = law_and_fairness(_results(rows[:3]), per_item, seed=0, n_resamples=200).law
    for blk in (two["pooled"], two["per_model_average"], two["per_task"]["t"]):
        assert "slope" not in blk and "needs at least 3" in blk["reason"]
        assert blk["reason"].endswith("; copies of the same weights are one model (acme for vendor)")


def test_the_settings_note_names_what_differs_with_each_models_value():
    """Checked against a plain loop over the settings and the models; with many models, how many have each value."""
    from reporter.analyse.law_points import MUI_SETTINGS, law_and_fairness

    base = {"definition": "paper", "mode": "score", "top_ratio": 0.01, "rho": None, "n_samples": 8}
    rows = [("a", None, 0.3, 7.0, base), ("b", None, 0.5, 5.5, {**base, "n_samples": 7}),
            ("c", None, 0.7, 4.0, {**base, "top_ratio": 0.02}), ("d", None, 0.8, 3.9, base)]
    per_item = {m: {"t": {f"q{i}": float(i < 8 * s) for i in range(8)}} for m, _, s, _, _ in rows}
    notes = law_and_fairness(_results(rows), per_item, seed=0, n_resamples=200).law["notes"]
    parts = []
    for k in MUI_SETTINGS:
        values: list[tuple[object, list[str]]] = []
        for m, _, _, _, st in rows:
            for v, ms in values:
                if v == st.get(k):
                    ms.append(m)
                    break
            else:
                values.append((st.get(k), [m]))
        if len(values) > 1:
            parts.append(f"{k}: " + " vs ".join(f"{v} ({', '.join(ms)})" for v, ms in values))
    assert parts == ["top_ratio: 0.01 (a, b, d) vs 0.02 (c)", "n_samples: 8 (a, c, d) vs 7 (b)"]
    assert [n for n in notes if "settings differ" in n] == [
        f"task t: MUI settings differ between models ({'; '.join(parts)}); MUI is only comparable at equal settings "
        "and sample counts"]
    many = [(f"model-with-a-long-name-{i}", None, 0.2 + 0.05 * i, 8.0 - 0.3 * i, {**base, "n_samples": 7 + i % 2})
            for i in range(12)]
    per_item = {m: {"t": {f"q{i}": float(i < 8 * s) for i in range(8)}} for m, _, s, _, _ in many}
    (note,) = [n for n in law_and_fairness(_results(many), per_item, seed=0, n_resamples=200).law["notes"]
               if "settings differ" in n]
    assert "(n_samples: 7 (6 models) vs 8 (6 models));" in note


def test_a_run_of_untrained_references_only_says_why_the_law_has_no_per_model_fit():
    """Untrained models' MUI is measured but they are never points of the law: a run of them alone said "no model
    has a task with both a score and MUI", though every one had both."""
    from reporter.analyse.law_points import law_points, law_section

    results = {"models": {m: {"source": "random:llama", "status": "complete",
                              "tasks": {"arc_easy": {"score": 0.25, "mui": 1.04, "mui_settings": {}}}}
                          for m in ("untrained-a", "untrained-b")}}
    law, base, left_out = law_points(results)
    assert law == {} and set(base) == {"untrained-a", "untrained-b"}
    section, _, _ = law_section(law, seed=0, n_resamples=50)
    reason = section["per_model_average"]["reason"]
    assert reason.startswith("no trained model has a task with both a score and MUI") and "untrained" in reason
