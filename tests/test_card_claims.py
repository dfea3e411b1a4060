"""What the card says where a run is incomplete: no place, warning or verdict it cannot back.

Built from ``tests/data/run2`` (a real run of the packaged SmolLM2 and an untrained model, not analysed), edited the
way an interrupted run or a removed file leaves it.
"""
import copy
import json
import re
import shutil
from pathlib import Path

from reporter.card.data import build_card
from reporter.card.markdown import markdown_card
from reporter.card.render import render
from reporter.config.files import parse_yaml

DATA = Path(__file__).parent / "data"


def _load(name="run2"):
    return (json.loads((DATA / name / "results.json").read_text()),
            json.loads((DATA / name / "manifest.json").read_text()))


def _warnings(card):
    return [w for _, w in card["warnings"]]


def test_an_unanalysed_run_says_so_and_equal_means_share_a_place():
    results, manifest = _load()
    assert "analysis" not in results
    twin = copy.deepcopy(results["models"]["smol"])
    twin["meta"] = {**twin["meta"], "source_type": "local"}
    results["models"] = {"smol": results["models"]["smol"], "twin": twin, "tiny": results["models"]["tiny"]}
    card = build_card(results, manifest)
    ranks = {m["name"]: m["rank"] for m in card["ranked"] if m["rank"] is not None}
    assert ranks == {"smol": 1, "twin": 1}  # the same scores: one place, not 1 and 2
    # negative control: a lower mean gets the next place
    for t in twin["tasks"].values():
        t["score"], t["ci_low"] = t["score"] / 2, min(t["ci_low"], t["score"] / 2)
    ranks = {m["name"]: m["rank"] for m in build_card(results, manifest)["ranked"] if m["rank"] is not None}
    assert ranks == {"smol": 1, "twin": 2}
    assert any(w.startswith("This run has not been analysed (results.json has no analysis section)")
               for w in _warnings(card))
    analysed, manifest2 = _load("run2-analysed")
    assert not any("has not been analysed" in w for w in _warnings(build_card(analysed, manifest2)))


def test_a_model_missing_its_model_json_is_not_said_to_miss_tasks():
    """Every task there, model.json removed: "pending", and the warning said "some tasks are missing"."""
    results, manifest = _load()
    smol = results["models"]["smol"]
    smol.pop("meta")
    smol["status"] = "pending"
    card = build_card(results, manifest)
    line = next(w for w in _warnings(card) if w.startswith("smol is pending"))
    assert "model.json or smoke.json is missing" in line and "tasks" not in line
    assert not any(w.startswith("tiny is") for w in _warnings(card))  # negative control: a complete model
    smol["tasks"].pop("gsm8k")
    smol["status"] = "partial"
    line = next(w for w in _warnings(build_card(results, manifest)) if w.startswith("smol is partial"))
    assert line == "smol is partial: gsm8k is missing, so it has no mean score."
    # only a probe missing (another model ran it): named, and no claim about the mean or about model.json
    results, manifest = _load()
    results["models"]["tiny"]["tasks"]["spc"] = dict(results["models"]["tiny"]["tasks"]["arc_easy"], task="spc")
    results["models"]["smol"]["status"] = "partial"
    line = next(w for w in _warnings(build_card(results, manifest)) if w.startswith("smol is partial"))
    assert line == "smol is partial: spc is missing."


def test_untrained_references_alone_get_no_verdict_about_trained_models():
    results, manifest = _load("run2-analysed")
    results["models"].pop("smol")
    results["comparisons"] = []
    results["analysis"]["above_chance"] = [  # the untrained reference, tested (a run of references only has these)
        {"model": "tiny", "task": "arc_easy", "reference": True, "chance": 0.25, "n": 3, "score": 0.0, "p": 1.0,
         "test": "binomial-exact-one-sided", "above": False, "baseline": 0.25, "baseline_kind": "chance"}]
    card = build_card(results, manifest)
    assert card["summary"]["chance"] is None  # "every trained model beats chance" of no trained model
    assert card["summary"]["n_trained"] == 0
    text = markdown_card(card)
    assert "The run has no evaluated trained model (only untrained references" in text
    assert "No trained model finished every benchmark task" not in text and "Every trained model" not in text


def test_an_unquoted_version_keeps_the_text_written():
    """`version: 1.10` was the number 1.1: a board put "1.10" before "1.9" and labelled it 1.1."""
    data = parse_yaml("models:\n  - {name: A, source: random:llama, version: 1.10, release: 2}\n", "m.yaml")
    assert data["models"][0]["version"] == "1.10" and data["models"][0]["release"] == "2"
    assert parse_yaml("seed: 1.10\n", "m.yaml") == {"seed": 1.1}  # only labels keep their text


def test_a_run_without_comparisons_describes_no_pairwise_method():
    """One model: no comparison, and card.md said "pairwise tests: , with the 95% interval , Holm-adjusted"."""
    results, manifest = _load()
    results["models"].pop("tiny")
    results["comparisons"] = []
    text = markdown_card(build_card(results, manifest))
    assert "pairwise tests" not in text and "interval ," not in text
    results, manifest = _load()
    assert "pairwise tests (McNemar's exact test, with the 95% interval" in markdown_card(build_card(results, manifest))


def test_an_ar_probe_whose_flags_could_not_be_read_states_no_overconfidence(tmp_path):
    """The probe table showed "0.0" over-confidence for models none of whose flags could be read (unparsed_flag 1):
    the card's view dropped ``unparsed_flag``, so the template's "not stated" never applied."""
    import shutil

    from reporter.card.render import render

    results, manifest = _load("full")
    results["models"]["Gemma-3-270M"]["tasks"]["ar"]["ar"].update(
        flag_accuracy=0.0, overconfidence=0.0, unparsed_flag=1.0)
    card = build_card(copy.deepcopy(results), manifest)
    rows = {m["name"]: m["tasks"]["ar"] for m in card["models"] if "ar" in m["tasks"]}
    assert rows["Gemma-3-270M"]["unparsed_flag"] == 1.0 and rows["SmolLM2-135M-Instruct"]["unparsed_flag"] == 0.0
    shutil.copytree(DATA / "full", tmp_path / "run")
    (tmp_path / "run" / "results.json").write_text(json.dumps(results))
    page = Path(render(tmp_path / "run", formats=("html",))["html"]).read_text()
    assert page.count("— (no flag read)") == 1  # Gemma's row alone; the others show their rates
    # the share unparsed was listed again under "Other measurements" as a bare 1, read as one item
    assert not [f for f in card["extra_measurements"] if f["field"] in ("unparsed_flag", "flag_accuracy")]
    assert "<h3>unparsed flag</h3>" not in page
    # the same page states the shares of neurons top_ratio keeps (test below)
    assert "The same top_ratio keeps other shares here." in page and "SmolLM2-135M-Instruct 1 of 1,536 (0.065 %)" in page


def test_the_share_of_neurons_top_ratio_keeps_is_stated_where_the_models_differ():
    """k = max(1, ⌊top_ratio·d_ff⌋) is a whole number, so at top_ratio 0.001 SmolLM2-135M (d_ff 1,536) keeps 1 neuron a
    layer, 0.065 %, and Gemma-3-270M (2,048) 2, 0.098 %: the card said "compare at equal top_ratio" as if the shares
    were equal. Against a plain count; models that share one d_ff get no sentence (the negative control)."""
    results, manifest = _load("full")
    card = build_card(copy.deepcopy(results), manifest)
    want = {}
    for name, m in results["models"].items():
        if str(m.get("source", "")).startswith("random:") or not m.get("tasks"):  # untrained; a failed model
            continue
        d_ff = next(iter(m["tasks"].values()))["mui_settings"]["d_ff"]
        k = 1
        while (k + 1) * 1000 <= d_ff:  # the largest whole k with k <= 0.001 * d_ff, at least 1
            k += 1
        want[name] = (k, d_ff, k / d_ff)
    assert {r["model"]: (r["k"], r["d_ff"], r["share"]) for r in card["mui_kept"]} == want
    assert want["SmolLM2-135M-Instruct"][:2] == (1, 1536) and want["Gemma-3-270M"][:2] == (2, 2048)
    md = markdown_card(card)
    assert "so the share kept differs between these models (" in md and "Gemma-3-270M 2 of 2,048, 0.098 %" in md
    smol = copy.deepcopy(results)  # the fine-tuned checkpoints and their base: one d_ff
    smol["models"] = {n: m for n, m in smol["models"].items() if n.startswith(("smol", "SmolLM2", "untrained"))}
    card = build_card(smol, manifest)
    assert card["mui_kept"] == [] and "share kept differs" not in markdown_card(card)
    # MUI-Eval's k = int(top_ratio * d_ff) keeps none below d_ff 1,000 (a review found the card giving max(1, ...))
    ev = copy.deepcopy(smol)
    for name, m in ev["models"].items():
        for t in m["tasks"].values():
            t["mui_settings"]["definition"] = "mui-eval"
            t["mui_settings"]["d_ff"] = 960 if name == "smol-ft-step1000" else 2048
    card = build_card(ev, manifest)
    kept = {r["model"]: (r["k"], r["rule"]) for r in card["mui_kept"]}
    assert kept["smol-ft-step1000"] == (0, "int(top_ratio·d_ff), MUI-Eval's")
    assert kept["SmolLM2-135M-Instruct"] == (2, "int(top_ratio·d_ff), MUI-Eval's")
    md = markdown_card(card)
    assert "k = int(top_ratio·d_ff), MUI-Eval's, so the share kept differs" in md and "max(1," not in md
    assert "smol-ft-step1000 0 of 960, 0.000 %" in md and "A model that keeps none (k = 0) has an MUI of 0" in md


def test_the_markdown_card_states_each_kind_of_pair_with_its_own_test_and_interval(tmp_path):
    """With right/wrong and partial-credit comparisons the sentence read "with the 95% interval right/wrong scores:
    ...", and a missing law-adjusted ranking "not available: no fair adjustment is possible: ...\""""
    results, manifest = _load("full")
    for c in results["comparisons"]:  # as this code records them: SPC is partial credit, the rest right/wrong
        partial = c["task"] == "spc"
        c.update(test="sign-flip" if partial else "mcnemar-exact",
                 method="sign-flip-exact" if partial else "mcnemar-compatible-exact")
    text = markdown_card(build_card(copy.deepcopy(results), manifest))
    assert ("pairwise tests (right/wrong scores: McNemar's exact test, with the 95% interval the exact interval that "
            "agrees with McNemar's test") in text
    assert "; partial credit: the paired sign-flip test of the mean difference, with the 95% interval" in text
    assert "with the 95% interval right/wrong" not in text
    results["analysis"]["fairness"] = {"available": False, "reason": "no fair adjustment is possible: 2 trained "
                                       "models were compared; the law needs at least 3", "rows": []}
    for m in results["models"].values():
        for t in m["tasks"].values():
            t.pop("fair", None)
        m.pop("fair", None)
    text = markdown_card(build_card(results, manifest))
    assert "not available: 2 trained models were compared; the law needs at least 3" in text
    assert "not available: no fair adjustment" not in text


def test_the_power_headline_gives_what_the_other_tasks_need_too():
    """The headline is the largest task (ties: the fewest items needed); the others needed up to 3,200 items while
    the summary named only the headline's 1,200."""
    from reporter.card.data import _power_sentence

    rows = [{"task": "arc", "n": 8, "n_needed": 1211}, {"task": "mmlu", "n": 8, "n_needed": 1634},
            {"task": "boolq", "n": 5, "n_needed": 3190}, {"task": "gsm8k", "n": 3, "n_needed": None}]
    pw = {"models": ["A", "B"], "planned_difference": 0.05, "power": 0.8, "per_task": rows,
          "underpowered": ["arc", "mmlu", "boolq", "gsm8k"], "headline": {"task": "arc", "n": 8, "n_needed": 1211}}
    text = _power_sentence({"power": pw})
    assert text.endswith("this run used 8. Also underpowered: mmlu, boolq (about 1,600–3,200 items needed); gsm8k (no "
                         "disagreement or spread to plan from).")
    rows[1]["n_needed"] = rows[2]["n_needed"] = None  # nothing known to plan from elsewhere: no range
    assert _power_sentence({"power": pw}).endswith("Also underpowered: mmlu, boolq, gsm8k.")


def test_calibration_on_few_items_is_called_noise_and_on_enough_it_is_not(tmp_path):
    """ECE over 10 bins on 6-8 items showed three decimals and no caveat (the untrained model 'best calibrated')."""
    import shutil

    from reporter.card.render import render

    results, manifest = _load("full")  # 100 items a task: no caveat
    shutil.copytree(DATA / "full", tmp_path / "run")
    page = Path(render(tmp_path / "run", formats=("html",))["html"]).read_text()
    assert "Calibration" in page and "these values are noise" not in page
    for m in results["models"].values():
        for t in m["tasks"].values():
            if t.get("calibration"):
                t["n"] = t["calibration"]["n"] = 8
    (tmp_path / "run" / "results.json").write_text(json.dumps(results))
    page = Path(render(tmp_path / "run", formats=("html",))["html"]).read_text()
    assert "with fewer than 5 items a confidence bin (10 bins), ECE and Brier are noise" in page


def _chance_row(model, task, above, reference=False):
    return {"model": model, "task": task, "reference": reference, "chance": 0.25, "n": 8, "score": 0.5,
            "p": 0.01 if above else 0.5, "test": "binomial-exact-one-sided", "above": above, "baseline": 0.25,
            "baseline_kind": "chance"}


def test_the_chance_sentence_says_what_the_tests_found_and_nothing_untested():
    """The summary's chance sentence and the ≈c marks, read against the chance tests a plain loop tallies: no test,
    no sentence (it said "every trained model beats chance" of a run that tested nothing); the untrained reference at
    chance is never marked; a trained model at chance on at most half the tasks is named task by task, on more than
    half counted ("3 of 4 tasks (all but boolq)")."""
    results, manifest = _load("run2-analysed")
    bench = build_card(results, manifest)["benchmarks"]
    assert len(bench) == 4
    assert build_card(results, manifest)["summary"]["chance"] is None  # no chance test in the run
    untestable = [dict(_chance_row("smol", t, None), p=None) for t in bench]  # partial credit: no test
    results["analysis"]["above_chance"] = untestable
    assert build_card(results, manifest)["summary"]["chance"] is None

    def card_for(smol_at_chance):
        results["analysis"]["above_chance"] = (
            [_chance_row("smol", t, t not in smol_at_chance) for t in bench]
            + [_chance_row("tiny", t, False, reference=True) for t in bench])
        card = build_card(results, manifest)
        marked = {(m["name"], t) for m in card["models"] for t, r in m["tasks"].items() if r["at_chance"]}
        assert marked == {("smol", t) for t in smol_at_chance}  # the reference, at chance everywhere: no mark
        return card["summary"]["chance"]

    assert card_for([]).startswith("Every trained model beats chance on every benchmark task.")
    one, two, three = bench[:1], bench[:2], bench[:3]
    lead = "Not significantly above chance (one-sided exact binomial test, α = 0.05): smol on "
    assert card_for(one) == lead + f"{one[0]}."
    assert card_for(two) == lead + f"{two[0]}, {two[1]}."  # half: still named
    assert card_for(three) == lead + f"3 of 4 tasks (all but {bench[3]})."
    assert card_for(bench) == lead + "4 of 4 tasks (all)."
    # a task without a chance test for the model (no chance level) is in neither list: "all but" names only tasks it
    # was tested on and found above chance (it named the untested task, as if the model had beaten chance there)
    results["analysis"]["above_chance"] = ([_chance_row("smol", t, False) for t in bench[:3]]
                                           + [dict(_chance_row("smol", bench[3], None), p=None)])
    assert build_card(results, manifest)["summary"]["chance"] == lead + "3 of 3 tasks tested (1 had no chance level) (all)."
    results["analysis"]["above_chance"] = ([_chance_row("smol", t, False) for t in bench[:2]]
                                           + [_chance_row("smol", bench[2], True)]
                                           + [dict(_chance_row("smol", bench[3], None), p=None)])
    assert build_card(results, manifest)["summary"]["chance"] == \
        lead + f"2 of 3 tasks tested (1 had no chance level) (all but {bench[2]})."


def _card_text(path: Path) -> str:
    html = re.sub(r"<script.*?</script>|<style.*?</style>", " ", path.read_text(), flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#39;", "'")


def test_the_methods_name_the_tasks_whose_items_earn_partial_credit(finished_run, tmp_path):
    """Every card's methods said "Each item scores 0 or 1", also where a task's scorer gives partial credit (SPC's
    character F1, a JSONL task's token F1): the tasks that do are named, each with how it credits an item."""
    rule = "scores 0 or 1, right or wrong (code: the generated function passes its tests)"
    text = _card_text(finished_run / "card.html")  # arc_easy (choice) and spc (character F1)
    assert (rule + ", except on spc (character F1 against the answer), where an item earns partial credit in [0, 1]."
            in text)
    run = tmp_path / "run"
    shutil.copytree(DATA / "run2", run)  # negative control: every task right or wrong
    render(run, formats=("html",))
    text = _card_text(run / "card.html")
    assert rule + ". A task's score" in text and "partial credit in [0, 1]" not in text
    results = json.loads((run / "results.json").read_text())
    for m in results["models"].values():  # a task scored by token F1 (a JSONL task's scorer: f1)
        m["tasks"]["gsm8k"]["scorer"] = "f1"
    (run / "results.json").write_text(json.dumps(results))
    render(run, formats=("html",))
    assert (rule + ", except on gsm8k (token F1 against the answer), where an item earns partial credit in [0, 1]."
            in _card_text(run / "card.html"))


def test_equal_mean_scores_name_no_winner():
    """Byte-identical weights under two names, equal scores: the summary said "twin has the highest mean score …
    Runner-up smol scores …", a ranking the data does not hold."""
    results, manifest = _load()
    twin = copy.deepcopy(results["models"]["smol"])
    twin["meta"] = {**twin["meta"], "source_type": "local"}
    results["models"] = {"smol": results["models"]["smol"], "twin": twin, "tiny": results["models"]["tiny"]}
    card = build_card(copy.deepcopy(results), manifest)
    mean = f"{100 * card['summary']['winner']['avg']:.1f}"
    line = next(ln for ln in markdown_card(card).splitlines() if ln.startswith("- **Raw score.**"))
    assert line == (f"- **Raw score.** smol and twin share the highest mean score over 4 benchmark tasks, {mean}% each: on "
                    "raw score none is ahead.")
    for t in twin["tasks"].values():  # negative control: a lower mean is the runner-up
        t["score"], t["ci_low"] = t["score"] / 2, min(t["ci_low"], t["score"] / 2)
    line = next(ln for ln in markdown_card(build_card(results, manifest)).splitlines()
                if ln.startswith("- **Raw score.**"))
    assert line.startswith("- **Raw score.** smol has the highest mean score over 4 benchmark tasks") and "Runner-up twin" in line


def test_why_no_contamination_test_ran_is_said_per_test_and_task():
    """The reasons were one list with duplicates dropped across every test and task: "(4 items could be permuted; the
    test needs at least 5; split_items is 0; no law fit …; …)", none saying which test or task it was about."""
    results, manifest = _load("run2-analysed")
    line = build_card(results, manifest)["empty"]["contamination"]
    assert line == ("Contamination: no test could be run, or none that ran could fire, on any model × task pair "
                    "(verbatim completion: no verbatim-completion check was run (every task); law residual: no law fit "
                    "for this task: 1 usable point (P > 0); the law needs at least 3 (arc_easy, boolq); no law fit for "
                    "this task: 0 usable points (P > 0); the law needs at least 3 (gsm8k, humaneval); Min-K% Prob: no "
                    "logprobs.npz for this task (every task)).")
    # each reason's tasks, by a plain loop over the rows
    rows = [c for c in results["analysis"]["contamination"] if not c.get("baseline")]
    for c in rows:
        for name, s in c["signals"].items():
            if isinstance(s, dict) and s.get("reason"):
                assert s["reason"] in line
