"""`reporter board`: one leaderboard over many real runs of tiny local models.

Four runs of one profile (a 40-item multiple-choice task whose gold answers are model v1's own answers):

- ``r1``: Release 1.0 (v1, so 100 %), Beta, and an untrained reference;
- ``r2``: Release 1.1, the same model with one MLP's weights scaled (the regression, built for real);
- ``r3``: Beta again (identical results: one row) and Gamma (a third trained model: the law can be fitted);
- ``odd``: Release 1.0 on 30 of the items: its items differ, so it is left out on that task.

The merged ranking is checked against a plain recomputation from the runs' samples; the page is opened
in headless Chromium, a header is clicked there and the row order read back from the DOM.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from reporter.analyse.board import BoardCache, build_board
from reporter.cli import main
from reporter.store.samples import read_samples
from tests.conftest import small_tokenizer_dir
from tests.test_compare import N_ITEMS, _items  # the same 40 colour questions
from tests.test_golden import _save_local_model

PROFILE = """\
name: board
mui: {{top_ratio: 0.01, mode: score}}
lpp: {{enabled: false}}
contamination: {{verbatim_items: 0, reference_texts: 4, order_items: 0, split_items: 0}}
smoke_texts: 2
tasks:
  - {{name: mine, type: jsonl, path: mine.jsonl, prompt_field: q, answer_field: a, choices_field: options,
      scorer: choice, shots: 0, max_new_tokens: 2, limit: {limit}}}
"""


def _run(root: Path, name: str, models: list[str], limit: int = N_ITEMS, profile: str | None = None) -> Path:
    (root / f"{name}.profile.yaml").write_text(profile or PROFILE.format(limit=limit))
    (root / f"{name}.yaml").write_text(f"profile: {name}.profile.yaml\nseed: 5\nmodels:\n"
                                       + "".join(f"  - {m}\n" for m in models))
    r = CliRunner().invoke(main, ["run", str(root / f"{name}.yaml"), "-o", str(root / name), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    return root / name


def _copy_tokenizer(src: Path, dest: Path) -> None:
    """The tokenizer's files and its chat template (without it a release ran as a base model, prompted otherwise)."""
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (src / f).exists():
            (dest / f).write_bytes((src / f).read_bytes())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("board")
    tok = small_tokenizer_dir()
    for d, seed in (("v1", 1), ("b1", 2), ("g1", 3)):
        _save_local_model(root / d, "llama", seed, tok)
    model = __import__("transformers").AutoModelForCausalLM.from_pretrained(root / "v1")
    with torch.no_grad():  # the damaged release: one MLP's output scaled
        model.model.layers[1].mlp.down_proj.weight.mul_(4.0)
    model.save_pretrained(root / "v2")
    _copy_tokenizer(root / "v1", root / "v2")
    (root / "mine.jsonl").write_text(_items())
    probe = _run(root, "probe", ["{name: Release, source: ./v1}"])
    got = read_samples(probe / "models/Release/tasks/mine/samples.jsonl")
    (root / "mine.jsonl").write_text(_items([got[f"q{i}"]["extracted"] for i in range(N_ITEMS)]))
    shutil.rmtree(probe)
    small = "random: {layers: 2, hidden: 64, intermediate: 96, heads: 4, tokenizer: " + str(tok) + "}"
    out = {"root": root,
           "r1": _run(root, "r1", ["{name: Release, source: ./v1, version: '1.0'}", "{name: Beta, source: ./b1}",
                                   "{name: Untrained, source: 'random:llama', " + small + "}"]),
           "r2": _run(root, "r2", ["{name: Release, source: ./v2, version: '1.1'}"]),
           "r3": _run(root, "r3", ["{name: Beta, source: ./b1}", "{name: Gamma, source: ./g1}"]),
           "odd": _run(root, "odd", ["{name: Release, source: ./v1, version: '1.0'}"], limit=30)}
    r = CliRunner().invoke(main, ["render", str(out["r1"]), "--format", "html,md"])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def site(runs):
    out = runs["root"] / "site"
    r = CliRunner().invoke(main, ["board", str(runs["r1"]), str(runs["r2"]), str(runs["r3"]), str(runs["odd"]),
                                  str(runs["root"] / "missing"), "-o", str(out), "--title", "Shortlist",
                                  "--resamples", "500"])
    assert r.exit_code == 0, r.output
    return {"dir": out, "doc": json.loads((out / "board.json").read_text()), "output": r.output}


def _scores(run: Path, model: str) -> dict[str, float]:
    return {i: float(s["score"]) for i, s in read_samples(run / f"models/{model}/tasks/mine/samples.jsonl").items()}


@pytest.mark.slow
def test_merges_the_runs_with_rank_intervals_over_all_models(runs, site):
    doc = site["doc"]
    rows = {r["model"]: r for r in doc["rows"]}
    assert set(rows) == {"Release (1.0)", "Release (1.1)", "Beta", "Gamma", "Untrained"}
    assert rows["Beta"]["runs"] == ["r1", "r3"]  # identical results in two runs: one row, a note says so
    assert any(n.startswith("Beta: evaluated in 2 runs (r1, r3) with identical results") for n in doc["notes"])
    assert any(n.startswith("Release: evaluated in 2 runs that do not give one identical set of results") for n in doc["notes"])
    ranking = doc["leaderboard"]["ranking"]
    ranked = {m["model"]: m for m in ranking["models"]}
    assert set(ranked) == {"Release (1.0)", "Release (1.1)", "Beta", "Gamma"}  # the untrained row is a reference
    assert ranking["n_items"] == {"mine": N_ITEMS}
    # the scores behind the ranking, recomputed from each run's own samples
    plain = {"Release (1.0)": _scores(runs["r1"], "Release"), "Release (1.1)": _scores(runs["r2"], "Release"),
             "Beta": _scores(runs["r1"], "Beta"), "Gamma": _scores(runs["r3"], "Gamma")}
    for m, s in plain.items():
        assert ranked[m]["score"] == pytest.approx(np.mean(list(s.values())))
        assert ranked[m]["rank_low"] <= ranked[m]["rank"] <= ranked[m]["rank_high"]
    assert ranked["Release (1.0)"]["score"] == 1.0 and ranked["Release (1.0)"]["rank"] == 1
    order = sorted(plain, key=lambda m: -np.mean(list(plain[m].values())))
    assert [m["model"] for m in ranking["models"]] == order
    refs = doc["leaderboard"]["references"]
    assert any(r["model"] == "Untrained" and r["kind"] == "chance" for r in refs)
    assert any(r["kind"] == "theoretical" and r["score"] == pytest.approx(0.25) for r in refs)
    theory = next(r for r in refs if r["kind"] == "theoretical")  # it names the tasks it averages
    assert theory["reason"].endswith(f"averaged over the tasks of the mean score ({', '.join(doc['ranking_tasks'])})")


@pytest.mark.slow
def test_the_board_shows_the_most_common_answer_on_the_rows_items(site, tmp_path):
    """The card shows the constant answers' score on the evaluated items beside their score over the split; the
    board's reference row did not."""
    import copy

    from reporter.card.board import write_board

    doc = copy.deepcopy(site["doc"])
    doc["leaderboard"]["references"] = [r for r in doc["leaderboard"]["references"] if r["kind"] != "majority"] + [
        {"model": None, "kind": "majority", "score": 0.3, "evaluated_score": 0.5, "reason": "always …"}]
    write_board(doc, tmp_path / "b")
    page = (tmp_path / "b" / "index.html").read_text()
    row = page[page.index("always the most common answer"):].split("</tr>")[0]
    assert "30.0" in row and "50.0 on these items" in row
    doc["leaderboard"]["references"][-1]["evaluated_score"] = 0.3  # the same figure (a core-set run): said once
    write_board(doc, tmp_path / "c")
    page = (tmp_path / "c" / "index.html").read_text()
    assert "on these items" not in page[page.index("always the most common answer"):].split("</tr>")[0]


@pytest.mark.slow
def test_the_run_on_other_items_is_left_out_saying_so(site):
    doc = site["doc"]
    out = [x for x in doc["left_out"] if x["run"] == "odd"]
    assert [x.get("task") for x in out] == ["mine", None]
    assert "evaluated mine on other items (30 items, not the 40 items of r1, r2, r3)" in out[0]["reason"]
    assert out[1]["model"] == "Release" and "none of its tasks is merged" in out[1]["reason"]
    assert all("odd" not in r["runs"] for r in doc["rows"])
    assert site["doc"]["warnings"] == [f"{Path(doc['runs'][0]['dir']).parent / 'missing'}: left out: "
                                       f"{Path(doc['runs'][0]['dir']).parent / 'missing'}: no such run directory; "
                                       "board reads the output directory of `reporter run`"]
    index = (site["dir"] / "index.html").read_text()
    assert "run odd, task mine: evaluated mine on other items" in index


@pytest.mark.slow
def test_a_run_on_reworded_items_is_left_out_saying_so(runs, tmp_path):
    """The same ids and gold answers under other questions (a task's data reworded): the items key (ids, gold
    answers, source) is the same, so the board merged them. Each sample's content digest now tells them apart."""
    reworded = tmp_path / "r3"
    shutil.copytree(runs["r3"], reworded)
    for samples in reworded.glob("models/*/tasks/mine/samples.jsonl"):  # what a run on reworded questions records
        rows = [json.loads(line) for line in samples.read_text().splitlines()]
        assert all(len(r["item_sha256"]) == 64 for r in rows)
        samples.write_text("".join(json.dumps({**r, "item_sha256": "0" * 64} if r["id"] in ("q3", "q7") else r)
                                   + "\n" for r in rows))
    doc = build_board([runs["r1"], runs["r2"], reworded], n_resamples=200)
    out = [x for x in doc["left_out"] if x["run"] == "r3"]
    assert out and out[0]["task"] == "mine" and "on 2 item(s) whose question or options are not the other runs'" in \
        out[0]["reason"]
    assert all("r3" not in r["runs"] for r in doc["rows"])
    assert not [x for x in build_board([runs["r1"], runs["r2"], runs["r3"]], n_resamples=200)["left_out"]
                if x["run"] == "r3"]  # the same run unchanged is merged
    # three runs, each reworded on another item: a vote per item left every run out (and the board then failed);
    # the runs' whole sets of digests are voted on, and the earliest run's wins the tie
    copies = []
    for n, item in enumerate(("q3", "q5", "q7")):
        copies.append(tmp_path / f"c{n}")
        shutil.copytree(runs["r3"], copies[-1])
        for samples in copies[-1].glob("models/*/tasks/mine/samples.jsonl"):
            rows = [json.loads(line) for line in samples.read_text().splitlines()]
            samples.write_text("".join(json.dumps({**r, "item_sha256": "1" * 64} if r["id"] == item else r) + "\n"
                                       for r in rows))
    doc = build_board(copies, n_resamples=200)
    assert sorted(x["run"] for x in doc["left_out"] if x.get("task") == "mine") == ["c1", "c2"]
    assert any("c0" in r["runs"] for r in doc["rows"])


@pytest.mark.slow
def test_with_as_many_runs_each_way_the_items_more_models_answered_win(runs):
    doc = build_board([runs["odd"], runs["r1"]], n_resamples=200)  # one run each; r1: 3 models on 40 items
    assert [x["run"] for x in doc["left_out"] if x.get("task")] == ["odd"]
    doc = build_board([runs["odd"], runs["r2"]], n_resamples=200)  # one model each: the 40 items win over 30
    assert [x["run"] for x in doc["left_out"] if x.get("task")] == ["odd"]


@pytest.mark.slow
def test_version_history_marks_the_regression(runs, site):
    (h,) = site["doc"]["history"]
    assert h["release"] == "Release" and h["order"] == "by version"
    assert [v["model"] for v in h["versions"]] == ["Release (1.0)", "Release (1.1)"]
    (step,) = h["steps"]
    assert step["same_weights"] is False  # v1 and the damaged v2 differ by content
    (row,) = step["rows"]
    assert row["task"] == "mine" and row["status"] == "regression" and row["significant"]
    base, new = _scores(runs["r1"], "Release"), _scores(runs["r2"], "Release")
    lost = sum(base[i] == 1 and new[i] == 0 for i in base)
    assert row["n_regressed"] == lost >= 10
    assert row["delta"] == pytest.approx(np.mean([new[i] - base[i] for i in base]))
    page = (site["dir"] / "history" / "Release.html").read_text()
    assert re.search(r'<tr class="sig"><td>mine</td>.*?<td class="status">regression</td>', page, re.S)
    assert 'data-chart="scores"' in page and 'data-chart="mui"' in page
    # the method the step used, as recorded: right/wrong scores, McNemar (it said "Wilcoxon" and "bootstrap" for all)
    assert row["test"] == "mcnemar-exact" and row["ci_method"] == "mcnemar-compatible-exact"
    method = page.split("Each step is the paired comparison")[1].split("</p>")[0]
    assert "McNemar&#39;s exact test" in method and "Wilcoxon" not in method and "bootstrap" not in method


def test_the_same_weights_evaluated_otherwise_are_not_called_a_new_version(runs, tmp_path):
    """Release 1.0's weights again, under another instruction: other outcomes on the same items, so another row of
    the release; its step is the evaluation's change, and the board says so."""
    src, root = runs["root"], tmp_path  # not beside the fixture's runs: other tests read that directory
    (root / "r4.profile.yaml").write_text(PROFILE.format(limit=N_ITEMS).replace(
        "max_new_tokens: 2,", "max_new_tokens: 2, instruction: 'Pick the colour. Reply with the letter only.',")
        .replace("path: mine.jsonl", f"path: {src / 'mine.jsonl'}"))
    (root / "r4.yaml").write_text("profile: r4.profile.yaml\nseed: 5\nmodels:\n"
                                  f"  - {{name: Release, source: {src / 'v1'}, version: '1.0-reworded'}}\n")
    r = CliRunner().invoke(main, ["run", str(root / "r4.yaml"), "-o", str(root / "r4"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    assert _scores(root / "r4", "Release") != _scores(runs["r1"], "Release")  # the outcomes differ
    ids = {json.loads((d / "models/Release/model.json").read_text())["identity"] for d in (runs["r1"], root / "r4")}
    assert len(ids) == 1 and ids.pop().startswith("local:")
    r = CliRunner().invoke(main, ["board", str(runs["r1"]), str(root / "r4"), "-o", str(tmp_path / "site"),
                                  "--resamples", "200"])
    assert r.exit_code == 0, r.output
    (h,) = json.loads((tmp_path / "site" / "board.json").read_text())["history"]
    assert [v["model"] for v in h["versions"]] == ["Release (1.0)", "Release (1.0-reworded)"]
    (step,) = h["steps"]
    assert step["same_weights"] is True
    page = " ".join((tmp_path / "site" / "history" / "Release.html").read_text().split())
    assert "Not a new version of the model: both rows evaluated the same weights" in page


@pytest.mark.slow
def test_law_fit_once_three_trained_models_exist_across_runs(runs, site):
    avg = site["doc"]["law"]["per_model_average"]
    assert avg.get("reason") is None and avg["n"] >= 3
    pts = {p["label"]: p for p in avg["points"]}
    assert {"Release (1.0)", "Beta", "Gamma"} <= set(pts)
    assert "Untrained" not in pts  # a reference, never a point of the law
    # a plain OLS of MUI on ln P over the fitted points
    used = [p for p in avg["points"] if "excluded" not in p]
    x = np.log([p["P"] for p in used])
    y = np.array([p["MUI"] for p in used])
    slope = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2)
    assert avg["slope"] == pytest.approx(slope, rel=1e-9)
    # one run alone has two trained models: no fit there
    alone = build_board([runs["r1"]], n_resamples=200)
    assert "needs at least 3" in alone["law"]["per_model_average"]["reason"]


def _run_elsewhere(runs, root: Path, name: str, models: list[str], profile: str = PROFILE) -> Path:
    """A run in ``root`` (not beside the fixture's runs: other tests glob that directory) on the fixture's items;
    ``SRC`` in ``models`` is the fixture's directory (its model directories v1, b1, g1)."""
    src = runs["root"]
    return _run(root, name, [m.replace("SRC", str(src)) for m in models],
                profile=profile.format(limit=N_ITEMS).replace("path: mine.jsonl", f"path: {src / 'mine.jsonl'}"))


def _ols_slope(points: list[dict]) -> float:
    """Plain float64 OLS slope of MUI on ln P."""
    x = [float(np.log(p["P"])) for p in points]
    y = [p["MUI"] for p in points]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def _runs_of(doc: dict, row: str) -> list[int]:
    """The positions (in the board's run order) of the runs a row was evaluated in."""
    order = [r["label"] for r in doc["runs"]]
    return [order.index(lab) for lab in next(r for r in doc["rows"] if r["model"] == row)["runs"]]


@pytest.mark.slow
def test_copies_of_the_same_weights_are_one_point_of_the_law(runs, tmp_path):
    """Release 1.0's weights twice more in one run, as Acme and as VendorB in bfloat16, beside Beta: the run's law was
    fitted over three "models" that are two, and a board over it and the fixture's runs fitted five rows of three
    models' weights as five. Copies of one model's weights (equal meta.identity) are one point of the law; with fewer
    than three models there is no fit, saying why, as with too few models."""
    import markupsafe

    from reporter.analyse.law import fit_points
    from reporter.analyse.law_points import law_signal
    from reporter.card.board import write_board

    dup = _run_elsewhere(runs, tmp_path, "dup", ["{name: Acme, source: SRC/v1, version: '1.0'}",
                                                 "{name: VendorB, source: SRC/v1, dtype: bfloat16}",
                                                 "{name: Beta, source: SRC/b1}"])
    ids = {m: json.loads((dup / f"models/{m}/model.json").read_text())["identity"] for m in ("Acme", "VendorB", "Beta")}
    assert ids["Acme"] == ids["VendorB"] != ids["Beta"]
    res = json.loads((dup / "results.json").read_text())
    law = res["analysis"]["law"]
    # one run: two models' weights, so no fit, and the reason names the copy that counted once
    for blk in [law["pooled"], law["per_model_average"], *law["per_task"].values()]:
        assert "slope" not in blk and "the law" in blk["reason"] and "needs at least 3" in blk["reason"], blk
        assert blk["reason"].endswith("; copies of the same weights are one model (Acme for VendorB)"), blk["reason"]
    assert [p["model"] for p in law["per_model_average"]["points"]] == ["Acme", "Beta"]
    assert [(x["model"], x["task"]) for x in law["left_out"] if "same weights" in x["reason"]] == [("VendorB", "mine")]
    (note,) = [n for n in law["notes"] if "same weights" in n]
    assert note.startswith("Acme and VendorB are the same weights (equal meta.identity): one model, so one point of "
                           "the law, Acme's")
    assert not res["analysis"]["fairness"]["available"]
    r = CliRunner().invoke(main, ["render", str(dup), "--format", "html"])
    assert r.exit_code == 0, r.output
    assert str(markupsafe.escape(note)) in (dup / "card.html").read_text()

    # a board over it and the fixture's runs: three models' weights under six names
    doc = build_board([runs["r1"], runs["r3"], dup], n_resamples=200)
    trained = {r["model"]: r["identity"] for r in doc["rows"] if not r["untrained"]}
    assert len(trained) == 5 and len(set(trained.values())) == 3  # Beta: identical results in three runs, one row
    avg = doc["law"]["per_model_average"]
    assert avg["reason"] is None and avg["n"] == 3
    used = {p["model"]: p for p in avg["points"]}
    first = {}  # each set of weights by its first row in the board's order (the runs by creation time)
    for m, ident in trained.items():
        if ident not in first or min(_runs_of(doc, m)) < min(_runs_of(doc, first[ident])):
            first[ident] = m
    assert set(used) == set(first.values())
    assert avg["slope"] == pytest.approx(_ols_slope(list(used.values())), rel=1e-9)
    fit = fit_points(avg["points"])[0]
    for ident, keep in first.items():
        copies = sorted(m for m, i in trained.items() if i == ident and m != keep)
        assert sorted(used[keep].get("same_weights", [])) == copies
        for c in copies:
            assert any(x["model"] == c and x["same_weights_as"] == keep for x in doc["law"]["left_out"])
            assert law_signal(c, "mine", False, {"mine": (fit, None, avg["points"])}) == {
                "measured": False, "fires": False,
                "reason": f"the same weights as {keep}, whose point stands for its copies in the law fit: no residual of "
                          "its own"}
    merged = [n for n in doc["notes"] if "are the same weights (equal meta.identity)" in n]
    assert merged == ["Release, Acme and VendorB are the same weights (equal meta.identity): one model, so one point "
                      "of the law, Release's; the law compares models, and the same weights under another name, dtype "
                      "or run are one model at one parameter count"]
    assert {r["model"] for r in doc["fairness"]["per_model"]} == set(first.values())
    site = tmp_path / "site"
    write_board(doc, site)
    assert str(markupsafe.escape(merged[0])) in (site / "index.html").read_text()


@pytest.mark.slow
def test_the_law_note_names_only_the_settings_that_differ(runs, tmp_path):
    """A base model holds one item out as its few-shot example, so its MUI counts one sample fewer than the instruct
    model's: the note named every MUI setting (definition, mode, top_ratio, rho, n_samples) where only the sample
    count differed. It names the settings that differ, with each model's value."""
    from reporter.analyse.law_points import MUI_SETTINGS

    run = _run_elsewhere(runs, tmp_path, "shots", ["{name: base-model, source: SRC/v1, kind: base}",
                                                   "{name: Chat, source: SRC/b1}"],
                         profile=PROFILE.replace("shots: 0, ", ""))
    res = json.loads((run / "results.json").read_text())
    settings = {m: e["tasks"]["mine"]["mui_settings"] for m, e in res["models"].items()}
    assert settings["base-model"]["n_samples"] == settings["Chat"]["n_samples"] - 1 == N_ITEMS - 1
    parts = []  # the reference: every recorded setting, compared model by model
    for k in MUI_SETTINGS:
        values = [(m, settings[m].get(k)) for m in settings]
        if any(v != values[0][1] for _, v in values):
            parts.append(f"{k}: " + " vs ".join(f"{v} ({m})" for m, v in values))
    assert parts == [f"n_samples: {N_ITEMS - 1} (base-model) vs {N_ITEMS} (Chat)"]
    note = (f"task mine: MUI settings differ between models ({'; '.join(parts)}); MUI is only comparable at equal "
            "settings and sample counts")
    assert [n for n in res["analysis"]["law"]["notes"] if "settings differ" in n] == [note]
    r = CliRunner().invoke(main, ["render", str(run), "--format", "html"])
    assert r.exit_code == 0, r.output
    assert note in (run / "card.html").read_text()
    # the scores too are over different items: the card says so (the means read as over the same items)
    n = {m: e["tasks"]["mine"]["n"] for m, e in res["models"].items()}
    assert n == {"base-model": N_ITEMS - 1, "Chat": N_ITEMS}
    assert (f"Trained models were scored on different numbers of items on mine ({N_ITEMS - 1}: base-model; "
            f"{N_ITEMS}: Chat): a base model holds its few-shot example out") in " ".join(
        (run / "card.html").read_text().split())


@pytest.mark.slow
def test_model_pages_link_their_run_cards(site):
    page = (site["dir"] / "models" / "Beta.html").read_text()
    assert 'href="../runs/r1/card.html"' in page and 'href="../runs/r1/card.md"' in page
    assert (site["dir"] / "runs" / "r1" / "card.html").is_file()
    assert 'href="../runs/r1/model-index/Beta.yaml"' in page
    gamma = (site["dir"] / "models" / "Gamma.html").read_text()
    assert "has no rendered card" in gamma  # r3 was not rendered


@pytest.mark.slow
def test_rebuild_after_adding_a_run_reads_only_the_new_one(runs, tmp_path):
    cache = BoardCache(tmp_path / "cache")
    first = build_board([runs["r1"], runs["r3"]], n_resamples=200, cache=cache)
    assert first["cache"]["runs_read"] == 2 and first["history"] == []
    cache = BoardCache(tmp_path / "cache")
    second = build_board([runs["r1"], runs["r3"], runs["r2"]], n_resamples=200, cache=cache)
    assert (second["cache"]["runs_read"], second["cache"]["runs_cached"]) == (1, 2)
    # a glob over the runs' directory matches their YAML files and, built once, the board's own output: neither is
    # a run, and neither is warned about
    for _ in range(2):
        r = CliRunner().invoke(main, ["board", str(runs["root"] / "r*"), "-o", str(runs["root"] / "r-board"),
                                      "--resamples", "200"])
        assert r.exit_code == 0 and "warning" not in r.stderr, r.output
    assert "from 3 runs" in r.stdout
    # the same glob unquoted: the shell names the YAML files and the board's own directory; it was refused as
    # "a run directory" and the files were warned about
    expanded = sorted(str(p) for p in runs["root"].glob("r*"))
    assert str(runs["root"] / "r-board") in expanded and any(p.endswith(".yaml") for p in expanded)
    r = CliRunner().invoke(main, ["board", *expanded, "-o", str(runs["root"] / "r-board"), "--resamples", "200"])
    assert r.exit_code == 0 and "warning" not in r.stderr and "from 3 runs" in r.stdout, r.output
    # a run's results.json stands for its directory; any other file named is still a warning, not skipped silently
    (runs["root"] / "notes.txt").write_text("x")
    r = CliRunner().invoke(main, ["board", str(runs["r1"] / "results.json"), str(runs["r3"]),
                                  str(runs["root"] / "notes.txt"), "-o", str(tmp_path / "b2"), "--resamples", "200"])
    assert r.exit_code == 0 and "from 2 runs" in r.stdout, r.output
    assert "notes.txt: left out: " in r.stderr and "is a file, not a run directory" in r.stderr, r.output
    assert second["cache"]["compared"] == 1
    cache = BoardCache(tmp_path / "cache")
    third = build_board([runs["r1"], runs["r3"], runs["r2"]], n_resamples=200, cache=cache)
    assert third["cache"] == {"runs_read": 0, "runs_cached": 3, "compared": 0, "comparisons_cached": 1}
    strip = lambda d: {k: v for k, v in d.items() if k not in ("seconds", "cache")}  # noqa: E731
    assert strip(third) == strip(second)  # what was read back equals what was computed
    for entry in (tmp_path / "cache" / "runs").glob("*.json"):  # a damaged cache is read past, never blamed on a run
        entry.write_text("garbage")
    fourth = build_board([runs["r1"], runs["r3"], runs["r2"]], n_resamples=200, cache=BoardCache(tmp_path / "cache"))
    assert (fourth["cache"]["runs_read"], fourth["cache"]["runs_cached"]) == (3, 0) and strip(fourth) == strip(second)


@pytest.mark.slow
def test_the_cache_reads_a_run_again_after_a_new_label_a_new_card_or_another_reporter(runs, tmp_path, monkeypatch):
    """A run's ``version:`` label (the manifest's: a rerun with a new label changes no result) and its rendered card
    are what the board shows too: a cached run with the old label kept the old version order, and a card rendered
    later stayed unlinked. Another reporter reads and compares every run again.
    """
    import reporter.analyse.board_runs as board_runs

    r1, r2 = (Path(shutil.copytree(runs[n], tmp_path / n)) for n in ("r1", "r2"))
    for n in ("card.html", "card.md", "card.pdf"):
        (r1 / n).unlink(missing_ok=True)
    cache = tmp_path / "cache"

    def board():
        return build_board([r1, r2], n_resamples=200, cache=BoardCache(cache))

    first = board()
    assert first["cache"]["runs_read"] == 2
    assert [v["model"] for v in first["history"][0]["versions"]] == ["Release (1.0)", "Release (1.1)"]
    assert board()["cache"] == {"runs_read": 0, "runs_cached": 2, "compared": 0, "comparisons_cached": 1}
    # a rerun of r1 with Release relabelled 1.2: "already complete", a new manifest, the same results
    (runs["root"] / "r1-relabelled.yaml").write_text(
        (runs["root"] / "r1.yaml").read_text().replace("version: '1.0'", "version: '1.2'"))
    r = CliRunner().invoke(main, ["run", str(runs["root"] / "r1-relabelled.yaml"), "-o", str(r1), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0 and "already complete" in r.output, r.output
    relabelled = board()
    assert (relabelled["cache"]["runs_read"], relabelled["cache"]["runs_cached"]) == (1, 1)
    assert [v["model"] for v in relabelled["history"][0]["versions"]] == ["Release (1.1)", "Release (1.2)"]
    assert {row["version"] for row in relabelled["rows"] if row["name"] == "Release"} == {"1.1", "1.2"}
    r = CliRunner().invoke(main, ["render", str(r1), "--format", "md"])  # a card rendered after the board was built
    assert r.exit_code == 0, r.output
    assert all("md" not in row["files"] for row in relabelled["rows"] if row["run_dir"] == str(r1))
    carded = board()
    assert carded["cache"]["runs_read"] == 1
    assert all(row["files"]["md"] == "card.md" for row in carded["rows"] if row["run_dir"] == str(r1))
    assert board()["cache"]["runs_read"] == 0
    os.utime(r1 / "card.md", ns=(1, 1))  # rendered again (by a newer reporter, say): copied again
    assert board()["cache"]["runs_read"] == 1
    monkeypatch.setattr(board_runs, "reporter_digest", lambda: "0" * 64)  # another reporter, the same runs
    assert board()["cache"] == {"runs_read": 2, "runs_cached": 0, "compared": 1, "comparisons_cached": 0}


@pytest.mark.slow
def test_rows_prompted_with_other_shots_on_the_same_items_are_noted(runs, site, tmp_path):
    """Two runs of one profile but its shots (ARC-Easy's shots come from its own split, so the evaluated items are the
    same) merged into one column and one ranking with nothing said; the board now notes it, and the token limit that
    differs too. The same shots and limits in every run (the shared site's): no note."""
    profile = ("lpp: {{enabled: false}}\nsmoke_texts: 1\n"
               "contamination: {{verbatim_items: 0, reference_texts: 0, order_items: 0, split_items: 0}}\n"
               "tasks:\n  - {{name: arc_easy, limit: 4, max_new_tokens: 2, shots: {}}}\n")
    root = runs["root"]
    zero = _run(tmp_path, "zero", [f"{{name: M1, source: {root / 'b1'}, kind: base}}",
                                   f"{{name: M3, source: {root / 'g1'}, kind: base}}"], profile=profile.format(0))
    two = _run(tmp_path, "two", [f"{{name: M2, source: {root / 'v1'}, kind: base}}"],
               profile=profile.format(2).replace("max_new_tokens: 2", "max_new_tokens: 3"))
    doc = build_board([zero, two], n_resamples=200)
    assert {row["model"]: row["tasks"]["arc_easy"]["shots"] for row in doc["rows"]} == {"M1": 0, "M2": 2, "M3": 0}
    assert doc["left_out"] == []  # the same items: one column
    assert ("task arc_easy: its base rows were prompted with different shots (zero-shot: M1, M3; 2-shot: M2); a "
            "difference between them is partly the prompt's, not only the model's") in doc["notes"]
    # the token limit too differs (task_sha256): named, with the rows each way
    assert ("task arc_easy: its rows were prompted or scored otherwise (their instruction, answer prefix, scorer, "
            "token limit or stop sequences differ: M1, M3; M2); a difference between them is partly the task's, not "
            "only the model's") in doc["notes"]
    assert not [n for n in site["doc"]["notes"] if "shots" in n or "otherwise" in n]
    # M1 again with the longer token limit: the same outcomes on every item, but prompted otherwise, so two
    # measurements that agree, not one (merged into one row "with identical results", the note above was silent)
    longer = _run(tmp_path, "longer", [f"{{name: M1, source: {root / 'b1'}, kind: base}}"],
                  profile=profile.format(0).replace("max_new_tokens: 2", "max_new_tokens: 3"))
    outcomes = [{i: s["score"] for i, s in read_samples(run / "models/M1/tasks/arc_easy/samples.jsonl").items()}
                for run in (zero, longer)]
    assert outcomes[0] == outcomes[1]
    doc = build_board([zero, longer], n_resamples=200)
    assert sorted(row["model"] for row in doc["rows"]) == ["M1 (longer)", "M1 (zero)", "M3"]
    assert not [n for n in doc["notes"] if "with identical results" in n]
    assert ("task arc_easy: its rows were prompted or scored otherwise (their instruction, answer prefix, scorer, "
            "token limit or stop sequences differ: M1 (longer); M1 (zero), M3); a difference between them is partly "
            "the task's, not only the model's") in doc["notes"]


@pytest.mark.slow
def test_a_history_whose_inputs_did_not_change_keeps_its_page(site, tmp_path):
    from reporter.card.board import write_board

    doc = site["doc"]
    page = write_board(doc, tmp_path)["history:Release"]
    before = (page.stat().st_mtime_ns, page.read_bytes())
    assert write_board(doc, tmp_path)["history:Release"].stat().st_mtime_ns == before[0]  # not drawn again
    changed = write_board({**doc, "title": "Another title"}, tmp_path)["history:Release"]
    assert changed.read_bytes() != before[1] and "Another title" in changed.read_text()


@pytest.mark.slow
def test_a_rebuild_with_fewer_runs_leaves_no_page_of_the_old_ones(runs, tmp_path):
    """The site is copied to a host as it is: pages of runs, rows and histories the board no longer has must go
    (a review found an old run's cards and model pages still there), and a user's own file stays."""
    out = tmp_path / "site"
    r = CliRunner().invoke(main, ["board", str(runs["r1"]), str(runs["r2"]), str(runs["r3"]), "-o", str(out),
                                  "--resamples", "200"])
    assert r.exit_code == 0, r.output
    (out / "models" / "notes.txt").write_text("mine")
    before = {p.relative_to(out) for p in out.rglob("*.html")}
    r = CliRunner().invoke(main, ["board", str(runs["r1"]), "-o", str(out), "--resamples", "200"])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "board.json").read_text())
    pages = {p.relative_to(out) for p in out.rglob("*.html")}
    assert {p.parent.name for p in out.glob("runs/*/card.html")} == {run["label"] for run in doc["runs"]}
    assert {p.name for p in out.glob("models/*.html")} == {f"{row['slug']}.html" for row in doc["rows"]}
    assert {p.name for p in out.glob("history/*.html")} == {f"{h['slug']}.html" for h in doc["history"]}
    assert len(pages) < len(before) and (out / "models" / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_different_mui_settings_show_no_mui_with_the_reason(runs, tmp_path):
    other = tmp_path / "other-mui"
    shutil.copytree(runs["r3"], other)
    path = other / "models" / "Gamma" / "tasks" / "mine" / "summary.json"
    res = json.loads((other / "results.json").read_text())
    res["models"]["Gamma"]["tasks"]["mine"]["mui_settings"]["top_ratio"] = 0.02
    (other / "results.json").write_text(json.dumps(res))
    assert path.is_file()
    doc = build_board([runs["r1"], other], n_resamples=200)
    gamma = next(r for r in doc["rows"] if r["model"] == "Gamma")["tasks"]["mine"]
    assert "mui" not in gamma and "top_ratio 0.02" in gamma["mui_not_comparable"]
    assert doc["mui_settings"]["mine"]["top_ratio"] == 0.01
    law_points = {p["label"] for p in doc["law"]["per_model_average"]["points"]}
    assert "Gamma" not in law_points


def test_damaged_runs_are_warnings_and_nothing_usable_is_one_line(tmp_path):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "manifest.json").write_text("[1, 2]")
    r = CliRunner().invoke(main, ["board", str(tmp_path / "foreign"), str(tmp_path / "nope*"), "-o",
                                  str(tmp_path / "site")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("error: no run directory could be read (") and "not a JSON object (a list)" in lines[-1]
    assert not (tmp_path / "site" / "index.html").exists()


@pytest.mark.slow
def test_a_damaged_run_among_good_ones_is_one_warning(runs, tmp_path):
    bad = tmp_path / "torn"
    shutil.copytree(runs["r3"], bad)
    (bad / "results.json").write_text('{"schema_vers')
    r = CliRunner().invoke(main, ["board", str(runs["r1"]), str(bad), "-o", str(tmp_path / "site"),
                                  "--resamples", "200"])
    assert r.exit_code == 0, r.output
    (warning,) = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert f"{bad}: left out: {bad / 'results.json'}: damaged, not valid JSON at line 1" in warning
    doc = json.loads((tmp_path / "site" / "board.json").read_text())
    assert [x["label"] for x in doc["runs"]] == ["r1"] and "Traceback" not in r.output


@pytest.mark.slow
def test_an_output_that_cannot_be_written_is_one_line(runs, tmp_path):
    blocker = tmp_path / "site"
    blocker.write_text("a file where the site would go")
    r = CliRunner().invoke(main, ["board", str(runs["r1"]), "-o", str(blocker), "--resamples", "200"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(blocker) in lines[0], lines


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert exe is not None, "headless Chromium is missing: `make test` installs it (apt-get install chromium)"
    return exe


def _dom_after(page: Path, script: str, tmp: Path) -> tuple[str, str]:
    """The DOM of ``page`` after the page's own scripts and then ``script`` ran (a copy of the page with it appended)."""
    probe = page.with_name(f"probe-{page.name}")
    probe.write_text(page.read_text().replace("</body>", f"<script>{script}</script></body>"))
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-extensions", f"--user-data-dir={tmp}", "--proxy-server=127.0.0.1:9",
           "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    probe.unlink()
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, "\n".join(line for line in r.stderr.splitlines() if ":CONSOLE" in line)


@pytest.mark.slow
@pytest.mark.browser
def test_sort_and_filter_work_in_chromium(site, tmp_path):
    click = """
    window.addEventListener('load', function () {
      var h = Array.prototype.find.call(document.querySelectorAll('#leaderboard th'),
                                        function (th) { return th.textContent.trim() === 'Model'; });
      h.dispatchEvent(new MouseEvent('click', {bubbles: true}));
      document.getElementById('show-references').click();
      document.body.setAttribute('data-order', Array.prototype.map.call(
        document.querySelectorAll('#ranked tr'), function (tr) { return tr.getAttribute('data-model'); }).join('|'));
    });"""
    dom, console = _dom_after(site["dir"] / "index.html", click, tmp_path / "profile")
    assert not console, console
    assert 'data-ready="1"' in dom  # board.js ran and tablesort was there
    order = re.search(r'data-order="([^"]*)"', dom).group(1).split("|")
    assert order == sorted(order)  # sorted by model name, ascending, after the click
    ranked_before = [m["model"] for m in site["doc"]["leaderboard"]["ranking"]["models"]]
    assert ranked_before != sorted(ranked_before)  # the fixture's ranking is not by name: the click must reorder
    assert sorted(order) == sorted(ranked_before) and order != ranked_before
    assert re.search(r'<tbody id="references" style="display: none;?"', dom)  # the reference rows hidden
    # every chart of the history page is drawn (inline SVG with marks)
    hist, console = _dom_after(site["dir"] / "history" / "Release.html", "", tmp_path / "profile2")
    assert not console, console
    for chart in ("scores", "mui"):
        body = hist.split(f'data-chart="{chart}"')[1].split("</figure>")[0]
        assert re.search(r'<svg[^>]*class="marks"', body) and body.count("<path") > 3, chart
    index = site["dir"] / "index.html"
    assert 'data-chart="law"' in index.read_text()


def _with_second_task(run: Path, dest: Path) -> Path:
    """A copy of ``run`` whose models also answered "mine2" (the same items, another lm-eval group): two groups."""
    shutil.copytree(run, dest)
    res = json.loads((dest / "results.json").read_text())
    for name, e in res["models"].items():
        tasks = dest / "models" / e["slug"] / "tasks"
        shutil.copytree(tasks / "mine", tasks / "mine2")
        e["tasks"]["mine2"] = {**e["tasks"]["mine"], "task": "mine2", "lm_eval_group": "second"}
    (dest / "results.json").write_text(json.dumps(res))
    return dest


@pytest.mark.slow
@pytest.mark.browser
def test_the_group_filter_hides_the_other_groups_columns_in_chromium(runs, tmp_path):
    run = _with_second_task(runs["r1"], tmp_path / "two-groups")
    r = CliRunner().invoke(main, ["board", str(run), "-o", str(tmp_path / "site"), "--resamples", "200"])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "site" / "board.json").read_text())
    assert doc["groups"] == {"reporter": ["mine"], "second": ["mine2"]}
    pick = """
    window.addEventListener('load', function () {
      var g = document.getElementById('group-filter');
      g.value = 'second';
      g.dispatchEvent(new Event('change'));
      function shown(sel) {
        return Array.prototype.filter.call(document.querySelectorAll(sel),
          function (c) { return getComputedStyle(c).display !== 'none'; }).length;
      }
      document.body.setAttribute('data-shown', [shown('#ranked [data-group=reporter]'),
        shown('#ranked [data-group=second]'), shown('thead [data-group=reporter]')].join(','));
    });"""
    dom, console = _dom_after(tmp_path / "site" / "index.html", pick, tmp_path / "profile")
    assert not console, console
    hidden_first, shown_second, head_first = map(int, re.search(r'data-shown="([^"]*)"', dom).group(1).split(","))
    assert (hidden_first, head_first) == (0, 0) and shown_second == 2 * 2  # 2 ranked rows × (score, MUI)


@pytest.mark.slow
def test_the_board_warns_where_a_ranked_row_does_not_beat_the_constant_answer_on_its_items(runs, site, tmp_path):
    """The card warned when a ranked model's mean was not above the constant answers' score on the evaluated items;
    the board showed that score but said nothing. Positive control: the board's own runs, whose gold answers are
    Release 1.0's answers, three quarters one letter, so every row but Release 1.0 (100 %) scores no more than always
    giving that letter; negative: Release 1.1's run with that letter right on none of the items (the level is chance,
    25 %, which its 32.5 % beats; Beta's 22.5 % would not)."""
    def below(doc, level):
        return {r["model"]: r["score"] for r in doc["leaderboard"]["ranking"]["models"] if r["score"] <= level}

    doc = site["doc"]
    level = next(r for r in doc["leaderboard"]["references"] if r["kind"] == "majority")["evaluated_score"]
    rows = below(doc, level)
    assert level == pytest.approx(0.75) and rows and "Release (1.0)" not in rows
    assert doc["cautions"] == [
        "On the items the rows answered, always giving each task's most common answer (or guessing, where that does "
        "better) scores 75.0%, as much as or more than " + ", ".join(f"{m} ({100 * v:.1f}%)" for m, v in rows.items())
        + ": on these items their mean scores show nothing a constant answer would not get."]
    assert doc["cautions"][0] in html.unescape((site["dir"] / "index.html").read_text())
    copies = []
    for name in ("r2",):
        shutil.copytree(runs[name], tmp_path / name)
        res = json.loads((tmp_path / name / "results.json").read_text())
        for e in res["models"].values():
            e["tasks"]["mine"]["majority"]["evaluated"] = 0.0
        (tmp_path / name / "results.json").write_text(json.dumps(res))
        copies.append(tmp_path / name)
    doc = build_board(copies, n_resamples=200, seed=0)
    level = next(r for r in doc["leaderboard"]["references"] if r["kind"] == "majority")["evaluated_score"]
    assert level == pytest.approx(0.25) and not below(doc, level) and doc["cautions"] == []


def test_a_version_added_to_an_older_run_takes_its_place_by_its_own_date(runs, tmp_path):
    """A release's versions without version labels are ordered by date, and a model's date was its run directory's:
    a third version added later to the first run's directory (a resume) sorted beside the first, and the board
    compared the versions out of order (1 → 3 → 2). Each model now records when it was first measured there."""
    src, root = runs["root"], tmp_path
    profile = PROFILE.format(limit=10).replace("path: mine.jsonl", f"path: {src / 'mine.jsonl'}")

    def run(name, out, models):
        (root / f"{name}.profile.yaml").write_text(profile)
        (root / f"{name}.yaml").write_text(f"profile: {name}.profile.yaml\nseed: 5\nmodels:\n"
                                           + "".join(f"  - {{name: {m}, source: {src / d}, release: R}}\n"
                                                     for m, d in models))
        r = CliRunner().invoke(main, ["run", str(root / f"{name}.yaml"), "-o", str(root / out), "--no-progress",
                                      "--no-render"])
        assert r.exit_code == 0, r.output

    run("first", "first", [("R-one", "v1")])
    run("second", "second", [("R-two", "v2")])  # within the same second, maybe: the dates are to the millisecond
    run("first-again", "first", [("R-one", "v1"), ("R-three", "b1")])  # the first run, resumed with one more
    meta = {m: json.loads((root / "first" / "models" / m / "model.json").read_text()) for m in ("R-one", "R-three")}
    assert meta["R-one"]["first_measured"] < meta["R-three"]["first_measured"]  # the resume kept R-one's date
    r = CliRunner().invoke(main, ["board", str(root / "first"), str(root / "second"), "-o", str(root / "site"),
                                  "--resamples", "200"])
    assert r.exit_code == 0, r.output
    (h,) = json.loads((root / "site" / "board.json").read_text())["history"]
    assert h["order"].startswith("by run date")
    assert [v["model"] for v in h["versions"]] == ["R-one", "R-two", "R-three"]
    assert [(s["from"], s["to"]) for s in h["steps"]] == [("R-one", "R-two"), ("R-two", "R-three")]
