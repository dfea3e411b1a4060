"""The option-order test's calibrated null, on tiny models trained in the test (issue #36).

A benchmark whose published orders follow a convention for some of its items (here: a quarter of
the items list their options by colour, red, green, blue, black, like MMLU's fixed grids and 2 x 2
structures) makes a clean model that learnt the convention prefer the published order of items
it never saw. The exchangeable null turns that into a warning; the calibrated null, whose
preference share comes from another clean model of the same benchmark
(``benchmarks/option_order_null.py``'s :func:`preference_bound`), must not, and must still catch
a model trained on the test items themselves. The study's own statistics (ranks, the shuffled
publication, the report) are checked against plain loops on the same real passes.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from reporter.analyse.contamination import EXCHANGEABLE, apply_fdr, option_order_signal, order_null_for
from reporter.collect.option_order import option_order_evidence
from reporter.metrics.rank_tests import order_fisher_pvalue
from reporter.tasks import Item
from reporter.tasks.base import mc_question

from .conftest import benchmark_script, tiny_lm, train_on

COLOURS = ("red", "green", "blue", "black")
WORDS = ("apple", "river", "stone", "cloud", "horse", "glass", "paper", "music", "bread", "chair", "light",
         "money", "plant", "sugar", "table", "water", "house", "night", "field", "dream")


def _items(prefix: str, n: int, rng: np.random.Generator, convention_share: float = 0.25) -> list[Item]:
    """``n`` items; a share of them lists its options by colour in a fixed order (the convention)."""
    out = []
    for i in range(n):
        if i < round(n * convention_share):
            choices = [f"{c} {rng.integers(10, 99)}" for c in COLOURS]
        else:
            choices = [f"{w} {rng.integers(10, 99)}" for w in rng.choice(WORDS, 4, replace=False)]
        out.append(Item(f"{prefix}{i}", mc_question(f"Item {prefix}{i}: which one?", choices), "A", choices))
    return out


def _order(lm, items):
    return option_order_evidence(lm, items, n_perms=8, max_items=None, seed=0, window=6, batch_size=16)


@pytest.fixture(scope="module")
def models():
    """A convention learnt by two clean models (other items, other seeds); a third also trained on half the test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rng = np.random.default_rng(3)
        test = _items("t", 96, rng)
        study = benchmark_script("option_order_null")
        out = {"test": test, "study": study}
        for name, seed in (("clean", 1), ("reference", 2)):
            lm = tiny_lm("llama", vocab="small", seed=seed)
            # 30 steps at 2e-2 learn the convention as 60 at 1e-2 did (bound w 0.33 against 0.31, the clean model's
            # exchangeable p 1.5e-5 against 6.7e-5) in half the time; the contaminated model keeps its 80 at 1e-2
            train_on(lm, [it.question for it in _items(f"{name}-", 64, np.random.default_rng(seed))], steps=30,
                     lr=2e-2)
            out[name] = (lm, _order(lm, test))
        lm = out["clean"][0]
        trained = {it.id for it in test[::2]}
        contaminated = tiny_lm("llama", vocab="small", seed=1)
        contaminated.model.load_state_dict(lm.model.state_dict())
        train_on(contaminated, [it.question for it in test if it.id in trained], steps=80)
        out["contaminated"] = (contaminated, _order(contaminated, test))
        out["trained"] = trained
        yield out
    finally:
        torch.set_num_threads(threads)


def _ranks(order):
    return ([sum(v >= it["ll"] - 1e-6 * max(1.0, abs(it["ll"])) for v in it["perm_ll"]) for it in order["per_item"]],
            [len(it["perm_ll"]) for it in order["per_item"]])


def test_a_learnt_convention_is_a_false_alarm_under_exchangeability_and_quiet_under_the_calibrated_null(models):
    study = models["study"]
    w = study.preference_bound(*_ranks(models["reference"][1]))["w"]
    assert 0.15 < w < 0.6  # the reference model prefers the convention's items' published order, not the others'
    null = {"name": "calibrated", "preference": w, "source": "the reference model"}
    rows = {name: (option_order_signal(models[name][1]), option_order_signal(models[name][1], null))
            for name in ("clean", "contaminated")}
    apply_fdr([{"option_order": e} for e, _ in rows.values()])
    apply_fdr([{"option_order": c} for _, c in rows.values()])
    clean_e, clean_c = rows["clean"]
    assert clean_e["fires"], {k: clean_e.get(k) for k in ("p_value", "p_adjusted", "top_share", "chance_share")}
    assert not clean_c["fires"] and clean_c["null"]["name"] == "calibrated", (w, clean_c["top_share"], clean_c["p_value"])
    assert clean_c["chance_share"] == pytest.approx(w + (1 - w) / 9)
    cont_e, cont_c = rows["contaminated"]
    # fires, and by a margin: its p moves with the reference's bound w, which moves with the float rounding of the
    # tiny models' training (p 1.5e-6 at w 0.33 with AVX2 kernels, 1.1e-5 at 0.35 with AVX-512, 1.1e-3 at 0.38
    # with scalar kernels); its published order tops 62 of the 96 items with every kernel set
    assert cont_c["fires"] and cont_c["p_adjusted"] < 0.005, (w, cont_c["top_share"], cont_c["p_value"])
    assert cont_c["p_value"] >= cont_c["p_value_exchangeable"]
    # the warning's drivers are items whose published order the model has a reason to prefer: trained ones, or
    # convention items, which a clean model prefers too. The 48 trained and 12 untrained convention items all put
    # their published order first, so which of them lead is float rounding (3 to 5 of 5 trained across kernels);
    # an untrained item of random order (36, 2 of them with the published order first) led under no kernel set
    convention = {it.id for it in models["test"] if it.choices[0].startswith(COLOURS[0])}
    drivers = [d["id"] for d in cont_c["drivers"]]
    assert len(drivers) == 5 and set(drivers) <= models["trained"] | convention, drivers
    assert sum(d in models["trained"] for d in drivers) >= 3, drivers


def _shuffled_ranks(study, rec, seed):
    """Per item, the seeded shuffled publication's rank among the other unpublished orders, and how many (a loop)."""
    ranks, m = [], []
    for it in rec["per_item"]:
        ll = it["ll"]
        k = 1 + study.shuffled_order(it["id"], it["orders"][1:], seed)
        ranks.append(sum(ll[j] >= ll[k] - 1e-6 * max(1.0, abs(ll[k])) for j in range(1, len(ll)) if j != k))
        m.append(len(ll) - 2)
    return ranks, m


def test_the_shuffled_publication_is_null_even_for_the_contaminated_model(models):
    """A seeded "published" order among the orders nobody published: its rank is uniform whatever the model saw.

    One seed's p-value is one draw from the null, below 0.01 once in a hundred seeds (seed 5 drew 0.0066 for the
    contaminated model on a 2-vCPU AMD EPYC, whose floats train the tiny models a little differently): the
    claim is checked on the p-values of 40 seeds, whose median a uniform null puts near 0.5.
    """
    study = models["study"]
    for name in ("clean", "contaminated"):
        rec = study.score_record(models[name][1], models["test"])
        r = study.item_ranks(rec, seed=5)
        assert r["published"]["p_fisher"] < 1e-3
        ps = np.array([order_fisher_pvalue(*_shuffled_ranks(study, rec, s)) for s in range(40)])
        assert r["shuffled"]["p_fisher"] == pytest.approx(ps[5])
        assert np.median(ps) > 0.25 and np.mean(ps < 0.05) <= 0.2, (name, np.median(ps), np.sort(ps)[:5])
        for it, pub, shuf in zip(rec["per_item"], r["ranks"], r["shuffled_ranks"]):  # a plain loop
            ll = it["ll"]
            k = 1 + study.shuffled_order(it["id"], it["orders"][1:], 5)
            assert pub == sum(x >= ll[0] - 1e-6 * max(1.0, abs(ll[0])) for x in ll[1:])
            assert shuf == sum(ll[j] >= ll[k] - 1e-6 * max(1.0, abs(ll[k])) for j in range(1, len(ll)) if j != k)
        # the draw depends on the seed and the item, never on the scores
        assert [study.shuffled_order(it["id"], it["orders"][1:], 5) for it in rec["per_item"]] == \
            [study.shuffled_order(it["id"], it["orders"][1:], 5)
             for it in study.score_record(models["clean"][1], models["test"])["per_item"]]


def test_the_study_report_and_calibration_file(models, tmp_path):
    study = models["study"]
    for name in ("clean", "reference", "contaminated"):
        rec = study.score_record(models[name][1], models["test"])
        d = tmp_path / name
        d.mkdir()
        (d / "synthetic.json").write_text(json.dumps({"model": name, "source": "tiny", "benchmark": "synthetic",
                                                      "seconds": 0.0, **rec}))
    (tmp_path / "trained_items.json").write_text(json.dumps({"synthetic": sorted(models["trained"])}))
    md = study.report(tmp_path, 5, clean=("clean", "reference"))
    cal = json.loads((tmp_path / "calibration.json").read_text())
    bounds = cal["benchmarks"]["synthetic"]["models"]
    assert cal["benchmarks"]["synthetic"]["preference"] == pytest.approx(max(b["w"] for b in bounds.values()), abs=1e-4)
    ver = {v["model"]: v for v in json.loads((tmp_path / "verdicts.json").read_text())}
    assert ver["clean"]["preference"] == pytest.approx(bounds["reference"]["w"])  # left out: the other model's bound
    assert ver["contaminated"]["calibrated"]["fires"] and not ver["clean"]["calibrated"]["fires"]
    assert "| contaminated | synthetic | contaminated |" in md
    assert (tmp_path / "rank_histograms.png").stat().st_size > 1000


def test_the_shipped_calibration_names_its_benchmarks():
    """The run uses the calibrated null on the benchmarks the study measured, and says so; elsewhere it is exchangeable."""
    for task in ("mmlu", "mmlu_anatomy", "arc_challenge", "arc_easy", "hellaswag"):
        null = order_null_for(task)
        assert null["name"] == "calibrated" and 0 < null["preference"] < 0.5 and "study" in null["source"]
    # measured, no top-share preference detected: the bound all the same (a graded lean fired clean models above
    # the nominal rate under exchangeability), and the source says so
    hs = order_null_for("hellaswag")
    assert "no top-share preference detected" in hs["source"] and "largest upper 95% bound" in hs["source"]
    assert order_null_for("my-own-data") == EXCHANGEABLE


def test_an_undetected_preference_still_takes_its_bound():
    """The study's calibration: a benchmark where the clean models' top share shows nothing still gets the largest
    upper bound of their preference (the graded lean that HellaSwag's clean models showed); the reason says so."""
    study = benchmark_script("option_order_null")
    rows = []
    for name, seed in (("a", 5), ("b", 6)):
        # ranks a little high but first no more often than chance: a graded lean among 4 orders
        ranks = np.random.default_rng(seed).choice(4, size=200, p=[0.25, 0.33, 0.23, 0.19]).tolist()
        rows.append({"model": name, "benchmark": "graded", "ranks": ranks, "m": [3] * 200,
                     "published": {"p_fisher": order_fisher_pvalue(ranks, [3] * 200)}})
    d = study.calibration(rows, ["a", "b"])["graded"]
    assert not d["detected"] and d["p_combined"] > 0.05
    bounds = [study.preference_bound(r["ranks"], r["m"])["w"] for r in rows]
    assert d["preference"] == pytest.approx(max(bounds)) and d["preference"] > 0
    assert "no top-share preference detected" in d["why"] and f"{d['preference']:.0%}" in d["why"]


def test_the_card_names_the_null_of_each_option_order_test(models):
    """The card's contamination section and its signal cells say where the calibrated null was used."""
    from reporter.analyse.contamination import combine
    from reporter.card.assets import html_environment

    def row(model, task, order, null):
        sig = {"option_order": option_order_signal(order, null)}
        apply_fdr([sig])
        severity, evidence = combine(sig)
        return {"model": model, "task": task, "severity": severity, "measured": True, "signals": sig,
                "evidence": evidence, "baseline": False}

    mmlu = order_null_for("mmlu")
    rows = [row("contaminated", "mmlu", models["contaminated"][1], mmlu),
            row("clean", "my-own-data", models["clean"][1], None)]
    env = html_environment()
    page = env.from_string('{% import "macros.j2" as ui with context %}{% include "contamination.j2" %}').render(
        charts={}, mode="html",
        card={"analysis": {"contamination": rows, "definitions": {"contamination_meaning": "m"}}, "empty": {}})
    assert "calibrated null</b> on mmlu" in page and f"mmlu {round(100 * mmlu['preference'])}% of items first under the null" in page
    assert "· calibrated null" in page  # the flagged row's cell
    assert "expected under the calibrated null" in page  # the warning's evidence sentence
    # a run without a calibrated task says the orders were assumed exchangeable
    page = env.from_string('{% import "macros.j2" as ui with context %}{% include "contamination.j2" %}').render(
        charts={}, mode="html",
        card={"analysis": {"contamination": rows[1:], "definitions": {"contamination_meaning": "m"}}, "empty": {}})
    assert "calibrated null" not in page and "assumes exchangeable orders on every task it tested" in page
