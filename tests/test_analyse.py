"""End-to-end analysis on synthetic run directories written file by file (no model needed)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from reporter.analyse import analyse, write_analysis
from reporter.analyse.law import fit_utility_law
from reporter.store.layout import slugify
from reporter.store.logprobs import save_logprobs
from reporter.store.neurons import save_neuron_sets

L, D_FF, N_ITEMS = 4, 2048, 20
TASKS = ("arc", "gsm")


def law_mui(P, noise=0.0):
    return 20.0 - 3.0 * math.log(P) + noise


def neuron_sets(mui_pct, rng):
    """Per-item key-neuron sets whose union is exactly round(mui% * L * D_FF) neurons."""
    size = int(round(mui_pct / 100 * L * D_FF))
    union = rng.choice(L * D_FF, size=size, replace=False)
    owner = rng.integers(0, N_ITEMS, size)  # every union neuron belongs to some item ...
    sets = [set(union[owner == i].tolist()) for i in range(N_ITEMS)]
    for s in sets:  # ... plus popular neurons shared across items
        s.update(rng.choice(union[: max(1, size // 10)], size=3).tolist())
    return [np.array(sorted(s), dtype=np.int64) for s in sets], 100.0 * size / (L * D_FF)


def make_run(root, models, *, seed=7, results=False):
    """models: [{name, source, source_type, checkpoint?, tasks: {task: (P%, MUI%)}, extras?}] -> expected points."""
    rng = np.random.default_rng(0)
    manifest = {"created": "2026-01-01T00:00:00", "reporter_version": "0.1.0", "seed": seed, "config_hash": "abc",
                "resolved": {"config": {"models": [{"name": m["name"], "source": m["source"]} for m in models]},
                             "profile": {"name": "synthetic", "tasks": [{"name": t} for t in TASKS]}}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    truth = {}
    for m in models:
        mdir = root / "models" / slugify(m["name"])
        meta = {"source": m["source"], "source_type": m["source_type"], "n_layers": L, "d_ff": D_FF,
                **({"checkpoint": m["checkpoint"]} if "checkpoint" in m else {})}
        (mdir / "tasks").mkdir(parents=True)
        (mdir / "model.json").write_text(json.dumps(meta))
        (mdir / "smoke.json").write_text(json.dumps({"perplexity": 30.0, "n_texts": 16}))
        for task, (P, mui) in m["tasks"].items():
            tdir = mdir / "tasks" / task
            tdir.mkdir()
            ids = [f"{task}-{i:03d}" for i in range(N_ITEMS)]
            n_right = int(round(P / 100 * N_ITEMS))
            scores = [1.0] * n_right + [0.0] * (N_ITEMS - n_right)
            with open(tdir / "samples.jsonl", "w") as fh:
                for i, s in zip(ids, scores):
                    fh.write(json.dumps({"id": i, "prompt": f"Q {i}", "response": "A", "extracted": "A", "gold": "A",
                                         "score": s, "prompt_tokens": 30, "response_tokens": 3,
                                         "stopped_by": "eos", "batch": 0}) + "\n")
            sets, mui_exact = neuron_sets(mui, rng)
            save_neuron_sets(tdir / "neurons.npz", ids, sets,
                             {"model": m["name"], "n_layers": L, "d_ff": D_FF, "top_ratio": 0.001, "mode": "score",
                              "rho": 0.9})
            summary = {"task": task, "scorer": "choice", "shots": 0, "limit": N_ITEMS, "score": n_right / N_ITEMS,
                       "ci_low": 0.0, "ci_high": 1.0, "n": N_ITEMS, "seed": seed, "method": "bootstrap-bca",
                       "mui": mui_exact, "mui_per_layer": [mui_exact] * L,
                       "mui_settings": {"mode": "score", "top_ratio": 0.001, "rho": 0.9, "n_samples": N_ITEMS,
                                        "n_layers": L, "d_ff": D_FF}}
            (tdir / "summary.json").write_text(json.dumps(summary))
            truth[(m["name"], task)] = (100.0 * n_right / N_ITEMS, mui_exact)
            extra = m.get("extras", {}).get(task, {})
            if "logprobs" in extra:
                mean = extra["logprobs"]
                lps = [rng.normal(mean, 1.0, 40).astype(np.float32) for _ in ids]
                save_logprobs(tdir / "logprobs.npz", ids, lps, [np.zeros(3, np.float32)] * N_ITEMS,
                              [(5, 35)] * N_ITEMS, {"model": m["name"], "kind": "benchmark"})
                refs = [rng.normal(-3.0, 1.0, 80).astype(np.float32) for _ in range(30)]
                save_logprobs(mdir / "reference_logprobs.npz", [f"ref-{j:04d}" for j in range(30)], refs,
                              meta={"kind": "reference"})
            if "verbatim" in extra:
                rate = extra["verbatim"]
                per = [{"id": i, "exact": k < rate * 10, "token_match": 1.0 if k < rate * 10 else 0.1, "n_target": 32}
                       for k, i in enumerate(ids[:10])]
                (tdir / "verbatim.json").write_text(json.dumps(
                    {"n": 10, "n_skipped": 0, "n_tokens": 32, "rate": rate,
                     "token_match": float(np.mean([p["token_match"] for p in per])), "per_item": per}))
                ref = [{"id": f"ref-{j}", "exact": False, "token_match": 0.1, "n_target": 24} for j in range(20)]
                (mdir / "reference_verbatim.json").write_text(json.dumps(
                    {"n": 20, "n_skipped": 0, "n_tokens": 32, "rate": 0.0, "token_match": 0.1, "per_item": ref}))
            if "order" in extra:  # "prefer": the published option order is the most likely; "null": exchangeable
                per = []
                for i in ids[:12]:
                    lls = rng.normal(-60.0, 2.0, 9)
                    if extra["order"] == "prefer":
                        lls[0] = lls.max() + 1.0
                    per.append({"id": i, "ll": float(lls[0]), "perm_ll": lls[1:].tolist(), "perms": [], "n_tokens": 40})
                (tdir / "option_order.json").write_text(json.dumps({"n": 12, "n_perms": 8, "per_item": per}))
            if "split" in extra:  # "prefer": items more familiar than their other-split partners; "null": exchangeable
                mean = -0.3 if extra["split"] == "prefer" else -3.0
                pairs = [{"benchmark_id": i, "reference_id": f"other-{j}", "stratum": "",
                          "benchmark_logprobs": rng.normal(mean, 1.0, 30).round(4).tolist(),
                          "reference_logprobs": rng.normal(-3.0, 1.0, 30).round(4).tolist()}
                         for j, i in enumerate(ids[:12])]
                (tdir / "split_reference.json").write_text(json.dumps(
                    {"n": 12, "source": "the test split", "stratified": False, "pairs": pairs}))
    if results:
        from reporter.analyse import write_results

        write_results(root)
    return truth


def standard_models():
    Ps = {"m-a": (20, 15), "m-b": (35, 30), "m-c": (50, 40), "m-d": (65, 55), "m-e": (75, 70)}
    noise = {"m-a": 0.15, "m-b": -0.1, "m-c": 0.05, "m-d": -0.15, "m-e": 0.1}
    models = [{"name": n, "source": f"org/{n}", "source_type": "hub",
               "tasks": {t: (P, law_mui(P, noise[n])) for t, P in zip(TASKS, ps)}} for n, ps in Ps.items()]
    models.append({"name": "leaky", "source": "./leaky", "source_type": "local",  # memorised arc: far above the law
                   "tasks": {"arc": (90, law_mui(90) + 4.0), "gsm": (0, 14.0)},
                   "extras": {"arc": {"logprobs": -0.3, "verbatim": 0.6, "order": "prefer", "split": "prefer"}}})
    models[0]["extras"] = {"arc": {"logprobs": -3.0, "verbatim": 0.0, "order": "null", "split": "null"}}  # m-a: clean
    models.append({"name": "untrained", "source": "random:llama", "source_type": "random",
                   "tasks": {"arc": (25, 35.0), "gsm": (0, 38.0)}})
    return models


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    truth = make_run(root, standard_models())
    return root, truth, analyse(root)


def strict_json(path):
    def bad(c):
        raise ValueError(f"non-standard JSON constant {c}")
    return json.loads(path.read_text(), parse_constant=bad)


def test_law_fits_match_direct_fits(run):
    root, truth, a = run
    law = a["law"]
    trained = ["m-a", "m-b", "m-c", "m-d", "m-e", "leaky"]
    for task in TASKS:
        P = [truth[(m, task)][0] for m in trained]
        M = [truth[(m, task)][1] for m in trained]
        direct = fit_utility_law(P, M, seed=7)
        got = law["per_task"][task]
        assert got["slope"] == pytest.approx(direct.slope) and got["intercept"] == pytest.approx(direct.intercept)
        assert got["slope_ci"] == pytest.approx(list(direct.slope_ci)) and got["n"] == direct.n
    assert law["per_task"]["arc"]["n"] == 6 and law["per_task"]["gsm"]["n"] == 5
    assert law["pooled"]["n"] == 11 and law["pooled"]["reason"] is None
    avg = law["per_model_average"]
    assert avg["tasks"] == list(TASKS) and avg["n"] == 6
    direct = fit_utility_law([np.mean([truth[(m, t)][0] for t in TASKS]) for m in trained],
                             [np.mean([truth[(m, t)][1] for t in TASKS]) for m in trained], seed=7)
    assert avg["slope"] == pytest.approx(direct.slope) and avg["slope"] < 0


def test_zero_performance_and_baseline_exclusion(run):
    _, _, a = run
    law = a["law"]
    assert [(e["model"], e["task"], e["scopes"]) for e in law["excluded"]] == [("leaky", "gsm", ["pooled", "task gsm"])]
    assert all("ln P" in e["reason"] for e in law["excluded"])
    for blk in [law["pooled"], law["per_model_average"], *law["per_task"].values()]:
        assert all(p.get("model") != "untrained" for p in blk["points"])
    assert any(r["model"] == "untrained" and "baseline" in r["reason"] for r in law["left_out"])
    fair = a["fairness"]
    assert [r["model"] for r in fair["reference_rows"]] == ["untrained"]
    assert {r["label"] for r in fair["per_model"]} == {"m-a", "m-b", "m-c", "m-d", "m-e", "leaky"}
    assert any("untrained" in n for n in a["notes"])


def test_fairness(run):
    _, _, a = run
    fair = a["fairness"]
    assert fair["available"] and fair["sentence"].startswith("Taking effort into account")
    ranks = sorted(r["rank_adjusted"] for r in fair["per_model"])
    assert ranks == [1, 2, 3, 4, 5, 6]
    for r in fair["per_model"]:
        assert r["adjusted"] == pytest.approx(r["P"] * r["MUI_law"] / r["MUI"])
        assert r["shift"] == r["rank_raw"] - r["rank_adjusted"]
    assert fair["per_task"]["arc"]["available"] and len(fair["per_task"]["arc"]["rows"]) == 6
    assert "P x MUI_law(P) / MUI" in a["definitions"]["fairness"]
    # the memorising model sits above the law line: more effort than its performance warrants,
    # so the law-adjusted ranking moves it down, never up
    leaky = next(r for r in fair["per_model"] if r["label"] == "leaky")
    assert leaky["effort_ratio"] > 1 and leaky["adjusted"] < leaky["P"] and leaky["shift"] <= 0


def test_contamination_rows(run):
    _, _, a = run
    rows = {(r["model"], r["task"]): r for r in a["contamination"]}
    assert len(rows) == 14
    leaky = rows[("leaky", "arc")]
    assert leaky["severity"] == "strong"
    assert all(leaky["signals"][k]["fires"] for k in ("option_order", "split_min_k", "verbatim"))
    assert leaky["signals"]["split_min_k"]["source"] == "the test split" and leaky["signals"]["split_min_k"]["n"] == 12
    assert leaky["signals"]["law_residual"]["z"] > 2 and leaky["signals"]["law_residual"]["measured"]
    assert not leaky["signals"]["min_k"]["fires"] and leaky["signals"]["min_k"]["auc"] > 0.9  # shown, never counted
    assert "option order" in leaky["evidence"] and "verbatim completion" in leaky["evidence"]
    n_tests = leaky["signals"]["verbatim"]["n_tests"]  # one BH family over the run, of the tests that could fire
    ran = [s for r in rows.values() for s in r["signals"].values() if s.get("test") and s.get("measured")]
    assert n_tests == sum(1 for s in ran if s["p_min"] < 0.01) == sum(1 for s in ran if s["in_correction"])
    small = [s for s in ran if not s["in_correction"]]  # e.g. a verbatim check with no exact continuation anywhere
    assert small and all("p_adjusted" not in s and not s["fires"] and "cannot fire" in s["reason"] for s in small)
    clean = rows[("m-a", "arc")]
    assert clean["severity"] == "none" and clean["signals"]["min_k"]["measured"]
    assert clean["signals"]["verbatim"]["measured"] and not clean["signals"]["verbatim"]["fires"]
    assert clean["signals"]["option_order"]["measured"] and not clean["signals"]["option_order"]["fires"]
    assert clean["signals"]["split_min_k"]["measured"] and not clean["signals"]["split_min_k"]["fires"]
    other = rows[("m-c", "gsm")]
    assert other["severity"] == "none" and other["signals"]["law_residual"]["measured"]
    assert not other["signals"]["min_k"]["measured"] and "logprobs.npz" in other["signals"]["min_k"]["reason"]
    assert "Not measured: option order, Min-K% vs the other split, verbatim completion" in other["evidence"]
    assert other["signals"]["split_min_k"]["reason"] == "no split_reference.json for this task"
    zero = rows[("leaky", "gsm")]["signals"]["law_residual"]
    assert not zero["measured"] and "P = 0" in zero["reason"]
    base = rows[("untrained", "arc")]
    assert base["baseline"] and base["severity"] == "none" and base["measured"] is False
    assert "baseline" in base["signals"]["law_residual"]["reason"]
    assert "contamination_meaning" in a["definitions"]


def test_diversity_section(run):
    _, _, a = run
    div = a["diversity"]
    assert set(div) == {"m-a", "m-b", "m-c", "m-d", "m-e", "leaky"}
    d = div["m-b"]
    assert d["overlap"]["tasks"] == list(TASKS)
    for task in TASKS:
        core = d["core_sets"][task]
        assert core["coverage"] >= 0.95 and core["size"] == len(core["items"]) <= N_ITEMS
        assert all(i.startswith(task) for i in core["items"])
        assert d["saturation"][task]["n_samples"] == N_ITEMS
        assert d["saturation"][task]["total"] == round(core["total"])
    # advice: at most five decisions, each with its evidence and uncertainty, biggest impact first
    assert 1 <= len(d["advice"]) <= 5
    assert all(a["action"] in ("drop", "keep", "add", "core set") and a["evidence"] and a["uncertainty"]
               for a in d["advice"])
    assert [a["impact"] for a in d["advice"]] == sorted((a["impact"] for a in d["advice"]), reverse=True)


def test_write_analysis_merges_into_results(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    make_run(root, standard_models(), results=True)
    before = strict_json(root / "results.json")
    assert "analysis" not in before
    a = write_analysis(root)
    after = strict_json(root / "results.json")
    assert after["analysis"] == json.loads(json.dumps(a))
    assert after["models"] == before["models"] and after["comparisons"] == before["comparisons"]
    assert a["training"] is None and a["seed"] == 7
    write_analysis(root)  # re-runnable on an old run directory: same result
    assert strict_json(root / "results.json")["analysis"] == after["analysis"]
    assert not list(root.glob(".results.json.*"))  # atomic write leaves no temporary file


def test_fewer_than_three_models(tmp_path):
    models = [{"name": n, "source": f"org/{n}", "source_type": "hub", "tasks": {t: (P, law_mui(P)) for t in TASKS}}
              for n, P in (("one", 30), ("two", 60))]
    models.append({"name": "untrained", "source": "random:llama", "source_type": "random",
                   "tasks": {t: (10, 30.0) for t in TASKS}})
    make_run(tmp_path, models)
    a = write_analysis(tmp_path)  # results.json missing: built first
    assert (tmp_path / "results.json").is_file()
    law = a["law"]
    for blk in [law["pooled"], law["per_model_average"], *law["per_task"].values()]:
        assert "slope" not in blk and "at least 3" in blk["reason"]
    # pooled: 2 models x 2 tasks = 4 points, but the law compares models
    assert law["pooled"]["reason"].startswith("the points come from 2 models")
    assert law["per_task"]["arc"]["reason"] == "2 usable points (P > 0); the law needs at least 3"
    fair = a["fairness"]
    assert not fair["available"] and "no fair adjustment is possible" in fair["reason"]
    assert fair["per_model"] == [] and fair["sentence"] is None
    assert not fair["per_task"]["arc"]["available"]
    for r in a["contamination"]:
        assert r["severity"] == "none" and not r["measured"]
        assert ("negative control" in r["evidence"]) if r["baseline"] else ("could be run" in r["evidence"])


def test_training_phases_from_checkpoints(tmp_path):
    series = [(1000, 20, 12.0), (2000, 35, 9.0), (3000, 45, 10.5), (4000, 30, 13.0)]
    models = [{"name": f"ckpt-{c}", "source": f"./ckpt/{c}", "source_type": "local", "checkpoint": c,
               "tasks": {t: (P, mui) for t in TASKS}} for c, P, mui in series]
    models.append({"name": "untrained", "source": "random:llama", "source_type": "random",
                   "tasks": {t: (0, 30.0) for t in TASKS}, "checkpoint": 0})
    make_run(tmp_path, models[::-1])
    tr = analyse(tmp_path)["training"]
    assert [s["label"] for s in tr["series"]] == [f"ckpt-{c}" for c, _, _ in series]
    assert [s["phase"] for s in tr["steps"]] == ["evolving", "accumulating", "collapsing"]
    assert tr["collapse"] and tr["collapse_steps"] == ["ckpt-3000 -> ckpt-4000"]
    assert set(tr["per_task"]) == set(TASKS) and tr["tasks"] == list(TASKS)


def test_untrained_baseline_is_a_negative_control(tmp_path):
    """A test that fires on an untrained model (which saw no data) is not evidence on that task."""
    models = standard_models()
    base = next(m for m in models if m["name"] == "untrained")
    base["extras"] = {"arc": {"order": "prefer"}}  # the untrained model 'prefers' the published order: a broken null
    make_run(tmp_path, models)
    a = analyse(tmp_path)
    rows = {(r["model"], r["task"]): r for r in a["contamination"]}
    b = rows[("untrained", "arc")]
    assert b["baseline"] and b["severity"] == "none" and "negative control" in b["evidence"]
    assert b["signals"]["option_order"]["fires"]  # shown, but discounted
    leaky = rows[("leaky", "arc")]
    oo = leaky["signals"]["option_order"]
    assert oo["confounded"] and not oo["fires"] and "untrained baseline" in oo["reason"]
    # leaky keeps its verbatim evidence, which the baseline does not share
    assert leaky["signals"]["verbatim"]["fires"] and leaky["severity"] in ("weak", "strong")
    assert "option order" not in leaky["evidence"].split("Not measured")[0]
