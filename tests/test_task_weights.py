"""An lm-eval group counts as one task in every mean over tasks (:mod:`reporter.analyse.task_weights`).

A profile naming lm-eval's ``mmlu`` ran its 57 subjects as 57 tasks, each counted once in the leaderboard's
score, the references' rows and the Utility Law's per-model averages: 57/60 of a model's score was MMLU. Each
mean is checked against plain float64 loops over the items, on hand-made scores and on the session's real
lm-eval run (arc_challenge and a 3-subject MMLU group, through ``reporter run``).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from reporter.analyse.law_points import averages
from reporter.analyse.leaderboard import leaderboard
from reporter.analyse.results import comparisons
from reporter.analyse.task_weights import task_shares
from reporter.analyse.training import step_interval
from reporter.metrics.ranking import bootstrap_ranks
from reporter.store.samples import read_samples

from .test_ranking import _suite


def slow_mean(task_means: dict[str, float], groups: dict[str, str], sizes: dict[str, int]) -> float:
    """The mean over units: a task outside a group is one unit, a group one unit whose value is its tasks' pooled
    item mean (sum of item scores over its items), in float64 loops."""
    units: dict[str, tuple[float, float]] = {}  # unit -> (sum, weight)
    for t, m in task_means.items():
        if t in groups:
            s, w = units.get("g:" + groups[t], (0.0, 0.0))
            units["g:" + groups[t]] = (s + m * sizes[t], w + sizes[t])
        else:
            units["t:" + t] = (m, 1.0)
    return sum(s / w for s, w in units.values()) / len(units)


def slow_weighted_ranks(scores, groups, seed, n_resamples):
    """Plain loops: per task, per resample, the same draws as the bootstrap; each resample's score per model is the
    mean over units of its resampled task means (:func:`slow_mean`)."""
    rng = np.random.default_rng(seed)
    tasks = list(scores)
    models = list(scores[tasks[0]])
    sizes = {t: len(scores[t][models[0]]) for t in tasks}
    means = [[{} for _ in models] for _ in range(n_resamples)]
    for t in tasks:
        n = sizes[t]
        for b in range(n_resamples):
            idx = rng.integers(0, n, n)
            for j, m in enumerate(models):
                means[b][j][t] = sum(float(scores[t][m][i]) for i in idx) / n
    agg = [[slow_mean(means[b][j], groups, sizes) for j in range(len(models))] for b in range(n_resamples)]
    point = [slow_mean({t: float(np.mean(scores[t][m])) for t in tasks}, groups, sizes) for m in models]
    intervals = {}
    for j, m in enumerate(models):
        ranks = sorted(1 + sum(1 for k in range(len(models)) if agg[b][k] > agg[b][j] + 1e-12)
                       for b in range(n_resamples))
        intervals[m] = (ranks[math.floor(0.025 * n_resamples)], ranks[math.ceil(0.975 * n_resamples) - 1])
    return dict(zip(models, point)), intervals


def test_the_shares_are_one_unit_per_group_split_by_items():
    shares, units = task_shares(["arc", "a", "b", "c", "boolq"], {"a": "mmlu", "b": "mmlu", "c": "mmlu"},
                                {"a": 10, "b": 30, "c": 60})
    assert units == 3 and shares == {"arc": 1.0, "a": 0.1, "b": 0.3, "c": 0.6, "boolq": 1.0}
    assert task_shares(["x", "y"], {}, {}) == ({"x": 1.0, "y": 1.0}, 2)  # no group: every task one unit
    assert task_shares(["a", "b"], {"a": "g", "b": "g"}, {}) == ({"a": 0.5, "b": 0.5}, 1)  # sizes unknown: equal


def test_the_ranking_weighs_a_group_as_one_task_and_equals_plain_loops():
    """Four models on one task and a group of five small subjects: counted once each, the subjects made the group
    5/6 of the score; as one task it is half. The point scores and rank intervals equal plain loops."""
    rng = np.random.default_rng(5)
    n_items = {"arc": 30, **{f"mmlu_{k}": n for k, n in enumerate((4, 6, 5, 8, 7))}}
    scores = _suite(rng, {"a": 0.7, "b": 0.55, "c": 0.5, "d": 0.3}, n_items)
    groups = {t: "mmlu" for t in n_items if t.startswith("mmlu_")}
    shares, units = task_shares(list(scores), groups, {t: len(scores[t]["a"]) for t in scores})
    got = bootstrap_ranks(scores, seed=4, n_resamples=200, shares=shares, units=units)
    point, intervals = slow_weighted_ranks(scores, groups, seed=4, n_resamples=200)
    for row in got["models"]:
        assert row["score"] == pytest.approx(point[row["model"]], abs=1e-12)
        assert (row["rank_low"], row["rank_high"]) == intervals[row["model"]], row["model"]
    assert got["units"] == 2 and got["shares"]["arc"] == 1.0
    assert sum(got["shares"][t] for t in groups) == pytest.approx(1.0)
    # negative control: the old rule (every task one unit) gives another score wherever arc and MMLU differ
    equal = bootstrap_ranks(scores, seed=4, n_resamples=200)
    assert "shares" not in equal and "units" not in equal
    a_equal = next(r["score"] for r in equal["models"] if r["model"] == "a")
    assert a_equal == pytest.approx(float(np.mean([scores[t]["a"].mean() for t in scores])), abs=1e-12)
    assert abs(a_equal - point["a"]) > 1e-3


def test_the_leaderboard_and_its_references_weigh_a_group_as_one_task():
    rng = np.random.default_rng(8)
    sizes = {"arc": 20, "anatomy": 4, "virology": 12}
    groups = {"anatomy": "mmlu", "virology": "mmlu"}
    per_item = {m: {t: {f"q{i}": float(rng.uniform() < p) for i in range(n)} for t, n in sizes.items()}
                for m, p in (("strong", 0.8), ("weak", 0.4), ("untrained", 0.25))}

    def entry(m, source):
        return {"source": source, "status": "complete",
                "lm_eval_groups": {"mmlu": {"subtasks": ["anatomy", "virology"]}},  # a run before the flag: by items
                "tasks": {
            t: {"score": float(np.mean(list(per_item[m][t].values()))), "chance": 0.25, "n": n,
                **({"lm_eval": {"group": groups[t], "task": t}} if t in groups else {})} for t, n in sizes.items()}}
    results = {"models": {"strong": entry("strong", "./s"), "weak": entry("weak", "./w"),
                          "untrained": entry("untrained", "random:llama")},
               "comparisons": comparisons(per_item, seed=0)}
    lb = leaderboard(results, per_item, seed=0, n_resamples=200)
    for row in lb["ranking"]["models"]:
        want = slow_mean({t: float(np.mean(list(per_item[row["model"]][t].values()))) for t in sizes}, groups, sizes)
        assert row["score"] == pytest.approx(want, abs=1e-12)
    assert "counts as one task" in lb["ranking"]["method"] and "weight_by_size" in lb["ranking"]["method"]
    untrained = next(r for r in lb["references"] if r["kind"] == "chance")
    assert untrained["score"] == pytest.approx(slow_mean(
        {t: results["models"]["untrained"]["tasks"][t]["score"] for t in sizes}, groups, sizes), abs=1e-12)
    theoretical = next(r for r in lb["references"] if r["kind"] == "theoretical")
    assert theoretical["score"] == pytest.approx(0.25)


def test_the_law_averages_and_the_training_steps_weigh_a_group_as_one_task():
    groups = {"anatomy": "mmlu", "virology": "mmlu"}
    sizes = {"arc": 20, "anatomy": 4, "virology": 12}
    by_model = {m: {t: {"label": m, "model": m, "task": t, "P": p + d, "MUI": u + d / 10}
                    for t, d in (("arc", 0.0), ("anatomy", 30.0), ("virology", -10.0))}
                for m, p, u in (("a", 40.0, 8.0), ("b", 55.0, 6.0))}
    pts, common, _ = averages(by_model, groups, sizes)
    for p in pts:
        for key in ("P", "MUI"):
            want = slow_mean({t: by_model[p["model"]][t][key] for t in common}, groups, sizes)
            assert p[key] == pytest.approx(want, abs=1e-12)
    plain, _, _ = averages(by_model)  # negative control: no groups, the plain mean
    assert plain[0]["P"] == pytest.approx(np.mean([by_model["a"][t]["P"] for t in common]), abs=1e-12)
    assert abs(plain[0]["P"] - pts[0]["P"]) > 1

    rng = np.random.default_rng(2)
    items = {m: {t: {f"q{i}": float(rng.uniform() < p) for i in range(n)} for t, n in sizes.items()}
             for m, p in (("a", 0.3), ("b", 0.6))}
    # a step's interval: the resampled mean over units of the item differences, by plain loops
    lo, hi = step_interval(items["a"], items["b"], list(sizes), seed=3, n_resamples=300, groups=groups)
    rng2 = np.random.default_rng(3)
    draws = {}
    for t in sizes:
        ids = sorted(items["a"][t])
        d = [100.0 * (items["b"][t][i] - items["a"][t][i]) for i in ids]
        draws[t] = [sum(d[k] for k in row) / len(d) for row in rng2.integers(0, len(d), size=(300, len(d)))]
    total = sorted(slow_mean({t: draws[t][b] for t in sizes}, groups, sizes) for b in range(300))
    assert (lo, hi) == (pytest.approx(float(np.percentile(total, 2.5)), abs=1e-9),
                        pytest.approx(float(np.percentile(total, 97.5)), abs=1e-9))

    # (the adjusted ranks' joint bootstrap with a group: tests/test_law.py's plain loop)


def test_the_real_lm_eval_runs_rows_count_its_mmlu_group_as_one_task(lm_eval_run):
    """The session's lm-eval run (arc_challenge, 6 items; a group of 3 MMLU subjects, 2 items each; two random
    models, so reference rows): each row's score is half arc_challenge and half the group's pooled items, from the
    samples."""
    run = lm_eval_run["run"]
    res = json.loads((run / "results.json").read_text())
    tasks = ["arc_challenge", "mmlu_anatomy", "mmlu_astronomy", "mmlu_virology"]
    groups = {t: "mmlu_mini" for t in tasks[1:]}

    def score(model: str) -> float:
        slug = res["models"][model]["slug"]
        means, sizes = {}, {}
        for t in tasks:
            s = [float(x["score"]) for x in read_samples(run / "models" / slug / "tasks" / t / "samples.jsonl").values()]
            means[t], sizes[t] = sum(s) / len(s), len(s)
        return slow_mean(means, groups, sizes)

    refs = {r["model"]: r for r in res["analysis"]["references"] if r["kind"] == "chance"}
    assert sorted(refs) == ["Llama chat", "Untrained"]  # both random: reference rows, by the same mean
    for model, ref in refs.items():
        assert ref["score"] == pytest.approx(score(model), abs=1e-12)
        # negative control: the four tasks counted once each give another number on this run
        plain = float(np.mean([res["models"][model]["tasks"][t]["score"] for t in tasks]))
        assert abs(plain - ref["score"]) > 1e-6, (model, plain)


def test_the_cards_mean_score_of_the_real_lm_eval_run_counts_its_group_as_one_task(lm_eval_run):
    """The card computes each model's mean score (and its approximate CI and mean MUI) from the task summaries: the
    same mean over units as the analysis, the CI half-widths combined with the units' weights."""
    from reporter.card.data import load_card

    card = load_card(lm_eval_run["run"])
    groups = {t: "mmlu_mini" for t in ("mmlu_anatomy", "mmlu_astronomy", "mmlu_virology")}
    for m in card["models"]:
        ts = {t: m["tasks"][t] for t in card["benchmarks"]}
        sizes = {t: s["n"] for t, s in ts.items()}
        assert m["avg"] == pytest.approx(slow_mean({t: s["score"] for t, s in ts.items()}, groups, sizes), abs=1e-12)
        assert m["avg_mui"] == pytest.approx(slow_mean({t: s["mui"] for t, s in ts.items()}, groups, sizes),
                                             abs=1e-12)
        w = {t: 0.5 if t not in groups else 0.5 * sizes[t] / sum(sizes[g] for g in groups) for t in ts}
        half = math.sqrt(sum((w[t] * (s["score"] - s["ci_low"])) ** 2 for t, s in ts.items()))
        assert m["avg_lo"] == pytest.approx(max(0.0, m["avg"] - half), abs=1e-12)


def test_a_board_of_the_real_lm_eval_run_counts_its_group_as_one_task(lm_eval_run):
    """``reporter board`` reads the same run back from its files: its leaderboard's reference rows and the page's
    Mean column weigh the group as one task too."""
    from reporter.analyse.board import build_board
    from reporter.card.board import _rows

    run = lm_eval_run["run"]
    res = json.loads((run / "results.json").read_text())
    doc = build_board([run], n_resamples=100)
    groups = {t: "mmlu_mini" for t in ("mmlu_anatomy", "mmlu_astronomy", "mmlu_virology")}
    tasks = ["arc_challenge", *groups]
    want = {m: slow_mean({t: e["tasks"][t]["score"] for t in tasks}, groups, {t: e["tasks"][t]["n"] for t in tasks})
            for m, e in res["models"].items()}
    refs = {r["model"]: r["score"] for r in doc["leaderboard"]["references"] if r["kind"] == "chance"}
    assert refs == {m: pytest.approx(v, abs=1e-12) for m, v in want.items()}
    views = {v["row"]["model"]: v["mean"] for v in _rows(doc)["references"]}
    assert views == {m: pytest.approx(v, abs=1e-12) for m, v in want.items()}


def test_a_group_that_weighs_its_tasks_equally_shares_its_unit_equally():
    """lm-eval averages a group whose YAML sets ``weight_by_size: false`` over its tasks, each as one, whatever
    their sizes: the group's part of the mean is that simple mean, as lm-eval's own aggregate is."""
    from reporter.analyse.task_weights import Group, groups_of

    sizes = {"arc": 20, "a": 4, "b": 12}
    assert task_shares(["arc", "a", "b"], {"a": Group("g", by_size=False), "b": Group("g", by_size=False)}, sizes) \
        == ({"arc": 1.0, "a": 0.5, "b": 0.5}, 2)
    rng = np.random.default_rng(4)
    per_item = {m: {t: {f"q{i}": float(rng.uniform() < p) for i in range(n)} for t, n in sizes.items()}
                for m, p in (("strong", 0.8), ("weak", 0.4))}
    for flag, leaf_weights in ((False, {"a": 0.5, "b": 0.5}), (True, {"a": 0.25, "b": 0.75})):
        def entry(m):
            return {"source": f"./{m}", "status": "complete",
                    "lm_eval_groups": {"g": {"subtasks": ["a", "b"], "weight_by_size": {"acc": flag}}},
                    "tasks": {t: {"score": float(np.mean(list(per_item[m][t].values()))), "chance": 0.25, "n": n,
                                  **({"lm_eval": {"group": "g", "metric": "acc,none"}} if t != "arc" else {})}
                              for t, n in sizes.items()}}
        results = {"models": {m: entry(m) for m in per_item}, "comparisons": comparisons(per_item, seed=0)}
        assert groups_of(results["models"], ["a"])["a"].by_size is flag
        lb = leaderboard(results, per_item, seed=0, n_resamples=100)
        for row in lb["ranking"]["models"]:
            means = {t: float(np.mean(list(per_item[row["model"]][t].values()))) for t in sizes}
            want = (means["arc"] + sum(w * means[t] for t, w in leaf_weights.items())) / 2
            assert row["score"] == pytest.approx(want, abs=1e-12), flag


@pytest.mark.parametrize("flag", [True, False])
def test_the_collect_stage_records_how_lm_evals_group_yaml_weighs_its_tasks(lmeval_env, tmp_path, flag):
    """lm-eval's own Group object, from a group YAML of three packaged MMLU subjects, gives ``weight_by_size`` per
    aggregated metric; lm_eval_groups.json records it."""
    from reporter.collect.lm_eval_score import _weight_by_size
    from reporter.tasks.lm_eval_source import resolve

    name = f"mmlu_mini_{str(flag).lower()}"
    (tmp_path / f"{name}.yaml").write_text(
        f"group: {name}\ntask: [mmlu_anatomy, mmlu_astronomy, mmlu_virology]\naggregate_metric_list:\n"
        f"  - metric: acc\n    weight_by_size: {str(flag).lower()}\nmetadata:\n  version: 1.0\n")
    resolved = resolve(name, (lmeval_env["packaged"], str(tmp_path)))
    assert _weight_by_size(resolved.loaded["groups"][name]) == {"acc": flag}


def test_a_group_yaml_weighing_two_metrics_otherwise_weighs_the_tasks_by_the_metric_they_report(lmeval_env, tmp_path):
    """lm-eval decides ``weight_by_size`` per aggregated metric: a group YAML may average ``acc`` by items and
    ``acc_norm`` over its tasks equally. Reporter reads one metric of each task (``acc,none`` here), so the group's
    tasks weigh as that metric's flag says, in the ranking's mean and in the group row's chance level; they were
    weighed equally for any metric once one flag was false."""
    from reporter.analyse.task_weights import groups_of
    from reporter.card.lm_eval import lm_eval_view
    from reporter.collect.lm_eval_score import _weight_by_size
    from reporter.tasks.lm_eval_source import resolve

    (tmp_path / "mmlu_two.yaml").write_text(
        "group: mmlu_two\ntask: [mmlu_anatomy, mmlu_virology]\naggregate_metric_list:\n"
        "  - metric: acc\n    weight_by_size: true\n  - metric: acc_norm\n    weight_by_size: false\n"
        "metadata:\n  version: 1.0\n")
    resolved = resolve("mmlu_two", (lmeval_env["packaged"], str(tmp_path)))
    recorded = _weight_by_size(resolved.loaded["groups"]["mmlu_two"])
    assert recorded == {"acc": True, "acc_norm": False}  # lm-eval's own Group object, as lm_eval_groups.json has it

    sizes = {"arc": 20, "a": 4, "b": 12}
    rng = np.random.default_rng(5)
    per_item = {m: {t: {f"q{i}": float(rng.uniform() < p) for i in range(n)} for t, n in sizes.items()}
                for m, p in (("strong", 0.8), ("weak", 0.4))}
    for metric, leaf_weights in (("acc,none", {"a": 0.25, "b": 0.75}), ("acc_norm,none", {"a": 0.5, "b": 0.5})):
        block = {"group": "mmlu_two", "metric": metric, "output_type": "multiple_choice", "n_shot": 0}

        def entry(m):
            return {"name": m, "source": f"./{m}", "status": "complete",
                    "lm_eval_groups": {"mmlu_two": {"subtasks": ["a", "b"], "weight_by_size": recorded,
                                                    "metrics": {metric: 0.5}}},
                    "tasks": {t: {"score": float(np.mean(list(per_item[m][t].values()))), "n": n,
                                  "chance": 0.25 if t == "a" else 0.5, **({"lm_eval": block} if t != "arc" else {})}
                              for t, n in sizes.items()}}
        models = {m: entry(m) for m in per_item}
        assert groups_of(models, ["a"])["a"].by_size is (metric == "acc,none")
        lb = leaderboard({"models": models, "comparisons": comparisons(per_item, seed=0)}, per_item, seed=0,
                         n_resamples=100)
        for row in lb["ranking"]["models"]:
            means = {t: sum(per_item[row["model"]][t].values()) / len(per_item[row["model"]][t]) for t in sizes}
            want = (means["arc"] + sum(w * means[t] for t, w in leaf_weights.items())) / 2
            assert row["score"] == pytest.approx(want, abs=1e-12), metric
        card = {"benchmarks": ["arc", "a", "b"], "probes": [], "models": list(models.values())}
        (group_row,) = lm_eval_view(card)["groups"]
        assert group_row["chance"] == pytest.approx(0.25 * leaf_weights["a"] + 0.5 * leaf_weights["b"], abs=1e-15)


def test_the_real_lm_eval_run_records_its_groups_weighting(lm_eval_run):
    res = json.loads((lm_eval_run["run"] / "results.json").read_text())
    for e in res["models"].values():
        assert e["lm_eval_groups"]["mmlu_mini"]["weight_by_size"] == {"acc": True}  # the conftest YAML's


def test_a_tag_or_a_group_lm_eval_does_not_aggregate_leaves_its_tasks_as_tasks():
    """Only a group lm-eval computed a score for (``lm_eval_groups.json``) is one task. A tag (``ai2_arc``) or a group
    without an aggregate (``openllm``) names the profile entry in every task summary, but lm-eval gives it no score:
    its tasks count one each, except those of a group inside it that lm-eval aggregated (``openllm``'s ``mmlu``,
    whose subgroups fold into it)."""
    from reporter.analyse.task_weights import aggregated_groups, groups_of

    tasks = ["arc_challenge", "hellaswag", "mmlu_anatomy", "mmlu_virology", "arc_easy"]
    entry = {"lm_eval_groups": {  # as lm-eval 0.4.13 reports openllm's: mmlu and its four subgroups, not openllm
        "mmlu_other": {"subtasks": ["mmlu_virology"], "leaves": ["mmlu_virology"], "weight_by_size": {"acc": True}},
        "mmlu": {"subtasks": ["mmlu_stem", "mmlu_other"], "leaves": ["mmlu_anatomy", "mmlu_virology"],
                 "weight_by_size": {"acc": True}},
        "mmlu_stem": {"subtasks": ["mmlu_anatomy"], "leaves": ["mmlu_anatomy"], "weight_by_size": {"acc": False}}},
        "tasks": {t: {"lm_eval": {"group": "openllm" if t != "arc_easy" else "ai2_arc", "metric": "acc,none"}}
                  for t in tasks}}
    placed = groups_of({"m": entry}, tasks)
    assert placed == {"mmlu_anatomy": "mmlu", "mmlu_virology": "mmlu"} and placed["mmlu_anatomy"].by_size
    shares, units = task_shares(tasks, placed, {"arc_challenge": 30, "hellaswag": 90, "mmlu_anatomy": 10,
                                                "mmlu_virology": 30, "arc_easy": 20})
    assert units == 4 and shares == {"arc_challenge": 1.0, "hellaswag": 1.0, "mmlu_anatomy": 0.25,
                                     "mmlu_virology": 0.75, "arc_easy": 1.0}
    # an older run recorded no leaves: the subtasks, subgroups expanded, say the same
    old = {g: {k: v for k, v in info.items() if k != "leaves"} for g, info in entry["lm_eval_groups"].items()}
    assert aggregated_groups({"lm_eval_groups": old}) == aggregated_groups(entry)
    assert groups_of({"m": {**entry, "lm_eval_groups": {}}}, tasks) == {}  # no aggregate at all: five tasks


def test_one_group_has_one_weighting_whichever_model_places_its_tasks():
    """A resumed run or a board can hold one model whose lm_eval_groups.json predates the flag (by items) and one
    with ``weight_by_size: false``: the group's tasks must share one unit, not 0.75 + 0.5."""
    from reporter.analyse.task_weights import groups_of

    old = {"lm_eval_groups": {"g": {"subtasks": ["a"]}}, "tasks": {"a": {}}}
    new = {"lm_eval_groups": {"g": {"subtasks": ["a", "b"], "weight_by_size": {"acc": False}}},
           "tasks": {"a": {}, "b": {}}}
    placed = groups_of({"old": old, "new": new}, ["a", "b"])
    shares, units = task_shares(["a", "b"], placed, {"a": 30, "b": 10})
    assert units == 1 and sum(shares.values()) == pytest.approx(1.0)
    # the weighting recorded wins over the default assumed for the older file, whichever model comes first
    assert shares == {"a": 0.5, "b": 0.5}
    assert task_shares(["a", "b"], groups_of({"new": new, "old": old}, ["a", "b"]), {"a": 30, "b": 10})[0] == shares


def test_a_wrapper_around_one_subgroup_is_the_unit_whatever_their_names():
    """A group whose only member is one subgroup holds the same tasks as it: the wrapper is the outermost group and
    its weighting is the one lm-eval applies (its aggregate runs over every leaf with its own flag)."""
    from reporter.analyse.task_weights import aggregated_groups

    for outer, inner in (("a_wrapper", "z_inner"), ("z_wrapper", "a_inner")):
        entry = {"lm_eval_groups": {
            inner: {"subtasks": ["t1", "t2"], "weight_by_size": {"acc": True}},
            outer: {"subtasks": [inner], "weight_by_size": {"acc": False}}}}
        placed = aggregated_groups(entry)
        assert {t: (str(g), g.by_size) for t, g in placed.items()} == {"t1": (outer, False), "t2": (outer, False)}


def test_a_board_reads_a_groups_equal_weighting_from_the_runs_files(lm_eval_run, tmp_path):
    """The same real run, its group's YAML taken as ``weight_by_size: false`` (lm_eval_groups.json and results.json
    edited on a copy): the board's rows weigh the three subjects equally, from the flag it keeps with each task."""
    from reporter.analyse.board import build_board
    from reporter.card.board import _rows

    from .conftest import copy_run

    run = copy_run(lm_eval_run["run"], tmp_path / "run")
    res = json.loads((run / "results.json").read_text())
    for e in res["models"].values():
        e["lm_eval_groups"]["mmlu_mini"]["weight_by_size"] = {"acc": False}
        (run / "models" / e["slug"] / "lm_eval_groups.json").write_text(json.dumps(e["lm_eval_groups"]))
    (run / "results.json").write_text(json.dumps(res))
    doc = build_board([run], n_resamples=100)
    subjects = ("mmlu_anatomy", "mmlu_astronomy", "mmlu_virology")
    want = {m: (e["tasks"]["arc_challenge"]["score"] + sum(e["tasks"][t]["score"] for t in subjects) / 3) / 2
            for m, e in res["models"].items()}
    refs = {r["model"]: r["score"] for r in doc["leaderboard"]["references"] if r["kind"] == "chance"}
    assert refs == {m: pytest.approx(v, abs=1e-12) for m, v in want.items()}
    assert {v["row"]["model"]: v["mean"] for v in _rows(doc)["references"]} == \
        {m: pytest.approx(v, abs=1e-12) for m, v in want.items()}
    row = next(iter(doc["rows"]))
    assert row["tasks"]["mmlu_anatomy"]["lm_eval_unit"] == "mmlu_mini"
    assert row["tasks"]["mmlu_anatomy"]["lm_eval_group_by_size"] is False


def test_the_board_page_says_how_much_each_task_weighs_in_the_mean(lm_eval_run, tmp_path):
    """The board's columns show each of a group's tasks, and its Mean is not their plain mean: the page says each
    task's weight. (One model of the real run taken as trained, on a copy, so that the board ranks it.)"""
    import re

    from reporter.analyse.board import build_board
    from reporter.card.board import write_board

    from .conftest import copy_run

    run = copy_run(lm_eval_run["run"], tmp_path / "run")
    res = json.loads((run / "results.json").read_text())
    res["models"]["Llama chat"]["source"] = str(tmp_path / "a-local-model")
    res["models"]["Llama chat"]["meta"]["source_type"] = "local"
    (run / "results.json").write_text(json.dumps(res))
    doc = build_board([run], n_resamples=100)
    assert [m["model"] for m in doc["leaderboard"]["ranking"]["models"]] == ["Llama chat"]
    text = re.sub(r"<[^>]+>|\s+", " ", write_board(doc, tmp_path / "site")["index"].read_text())
    assert ("count an lm-eval group as one task, its tasks weighted as lm-eval weighs them in the group: "
            "arc_challenge 50.0 %, mmlu_anatomy 16.7 %, mmlu_astronomy 16.7 %, mmlu_virology 16.7 % of the mean") in text


def test_the_law_and_the_training_phases_of_a_results_document_weigh_a_group_as_one_task():
    """law_and_fairness and training_section take the grouping from the document itself: the per-model average
    points of three trained checkpoints (one task and a two-subject group of unequal sizes) against plain means."""
    from reporter.analyse.law_points import law_and_fairness, training_section

    rng = np.random.default_rng(11)
    sizes = {"arc": 20, "anatomy": 4, "virology": 12}
    per_item, models = {}, {}
    for k, (m, p, mui) in enumerate((("c1", 0.3, 9.0), ("c2", 0.5, 6.0), ("c3", 0.8, 4.0))):
        per_item[m] = {t: {f"q{i}": float(rng.uniform() < p + 0.05 * j) for i in range(n)}
                       for j, (t, n) in enumerate(sizes.items())}
        models[m] = {"source": f"./{m}", "status": "complete", "meta": {"checkpoint": 100 * (k + 1)},
                     "lm_eval_groups": {"mmlu": {"subtasks": ["anatomy", "virology"], "weight_by_size": {"acc": True}}},
                     "tasks": {t: {"score": float(np.mean(list(per_item[m][t].values()))), "n": n,
                                   "mui": mui + j, "mui_settings": {"n_samples": n}}
                               for j, (t, n) in enumerate(sizes.items())}}
    results = {"models": models}
    groups = {"anatomy": "mmlu", "virology": "mmlu"}
    out = law_and_fairness(results, per_item, seed=0, n_resamples=100)
    points = {p["model"]: p for p in out.law["per_model_average"]["points"]}
    for m, e in models.items():
        for key, field in (("P", "score"), ("MUI", "mui")):
            want = slow_mean({t: (100.0 if key == "P" else 1.0) * e["tasks"][t][field] for t in sizes}, groups, sizes)
            assert points[m][key] == pytest.approx(want, abs=1e-9), (m, key)
    training = training_section(results, out.points, per_item, seed=0)
    assert training is not None
    series = {p["model"]: p for p in training["model_series"]}
    for m in models:
        assert 100 * series[m]["P"] == pytest.approx(points[m]["P"], abs=1e-9)
    # each step's interval is the grouped one (step_interval is checked against plain loops above)
    lo, hi = step_interval(per_item["c1"], per_item["c2"], sorted(sizes), seed=0, groups=groups)
    assert series["c2"]["dP_ci"] == [pytest.approx(lo / 100, abs=1e-12), pytest.approx(hi / 100, abs=1e-12)]


def test_release_notes_mean_change_counts_the_group_as_one_task(lm_eval_run):
    """compare.md's mean MUI and mean score change over a pair's tasks count an lm-eval group as one task, its tasks
    weighted by their compared items as lm-eval weighs them; a plain loop over the rows gives the same numbers, and
    the old unweighted mean (which the line no longer gives) differs."""
    from reporter.analyse.compare import compare_runs
    from reporter.card.compare import _context

    run = lm_eval_run["run"]
    doc = compare_runs(run, run, pairs=[("Untrained", "Llama chat")])
    rows = [r for r in doc["rows"] if r.get("mui")]
    group = {r["task"] for r in rows if r.get("lm_eval_unit") == "mmlu_mini"}
    assert group == {"mmlu_anatomy", "mmlu_astronomy", "mmlu_virology"} and "arc_challenge" in {r["task"] for r in rows}
    assert all(r["lm_eval_group_by_size"] is True for r in rows if r["task"] in group)
    assert all("lm_eval_unit" not in r for r in rows if r["task"] not in group)
    # the run has 2 items per subject, where weighing by items and weighing equally agree: other counts, as compared
    # items of subjects of other sizes would give, tell the two apart
    for r, n in zip([r for r in rows if r["task"] in group], (1, 2, 7)):
        r["n"] = n
    size = sum(r["n"] for r in rows if r["task"] in group)
    want = {}
    for key, get in (("base", lambda r: r["mui"]["base"]), ("new", lambda r: r["mui"]["new"]),
                     ("delta", lambda r: r["delta"])):
        total = 0.0
        for r in rows:
            total += get(r) * (r["n"] / size if r["task"] in group else 1.0)
        want[key] = total / 2  # two units: arc_challenge and the group
    line = _context(doc, escape=False)["mui_lines"][0]
    assert f"mean MUI over 2 tasks ({len(rows)} compared; the lm-eval group mmlu_mini counts as one" in line, line
    assert f"{want['base']:.3f}% → {want['new']:.3f}%" in line, (want, line)
    from reporter.card.format import fmt_signed

    assert f"moved by {fmt_signed(want['delta'])} pp on average (the mean of the task changes, weighted" in line, line
    plain = sum(r["delta"] for r in rows) / len(rows)
    assert fmt_signed(plain) != fmt_signed(want["delta"])  # the negative control: the old mean says otherwise
    equal = sum(r["mui"]["base"] * (1 / 3 if r["task"] in group else 1.0) for r in rows) / 2
    assert f"{equal:.3f}%" != f"{want['base']:.3f}%"  # and weighing the group's tasks equally would too


@pytest.mark.parametrize("by_size, want", [(True, 0.25 * 0.75 + 0.5 * 0.25), (False, (0.25 + 0.5) / 2)])
def test_a_group_rows_chance_level_weighs_its_tasks_as_its_score_does(by_size, want):
    """The card's row of an lm-eval group shows lm-eval's aggregate, which weighs its tasks by their items (or
    equally, ``weight_by_size: false``): its chance level is the same weighting of the tasks' chance levels (it was
    their plain mean, 0.375 here for both)."""
    from reporter.card.lm_eval import lm_eval_view

    block = {"group": "mix", "metric": "acc,none", "output_type": "multiple_choice", "n_shot": 0}
    tasks = {"four_way": {"chance": 0.25, "n": 30, "lm_eval": block}, "yes_no": {"chance": 0.5, "n": 10, "lm_eval": block}}
    groups = {"mix": {"subtasks": ["four_way", "yes_no"], "metrics": {"acc,none": 0.4}, "weight_by_size": {"acc": by_size}}}
    card = {"benchmarks": ["four_way", "yes_no"], "probes": [],
            "models": [{"name": "m", "tasks": tasks, "lm_eval_groups": groups}]}
    (row,) = lm_eval_view(card)["groups"]
    assert row["chance"] == pytest.approx(want, abs=1e-15)
