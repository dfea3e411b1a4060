"""The model card: HTML (opened in headless Chromium), PDF (read back with poppler's pdftotext and pdfimages),
model-index YAML.

Fixtures: tests/data/full (every results.json key, internally consistent, the analysis made by
reporter.analyse itself; regenerate with tests/data/make_full_fixture.py), tests/data/run2 (a real
two-model run, results.json and manifest.json only) and tests/data/run2-analysed (the same run
after `reporter analyse`: every analysis key present but most say why there is no fit).
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from reporter.card.data import build_card
from reporter.card.render import render
from reporter.errors import SchemaError as CardDataError
from reporter.errors import UserError
from reporter.models.packaged import PACKAGED, expected_sha256

DATA = Path(__file__).parent / "data"
FULL_CHARTS = {"task_scores", "law_pooled", "law_per_task", "mui_layers", "lpp_entropy", "lpp_pr_er", "overlap",
               "saturation", "training", "contamination_items"}
SECTIONS = ["Summary", "Leaderboard", "Per-task scores", "Pairwise significance", "Utility Law",
            "Law-adjusted ranking", "MUI per-layer profile", "LPP signature", "Probe results", "Calibration",
            "Contamination", "Dataset diversity", "Training phases", "Methods and reproducibility", "Manifest",
            "Limitations", "Appendix"]


def _copy(name: str, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp(name) / "run"
    shutil.copytree(DATA / name, dst)
    return dst


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    root = _copy("full", tmp_path_factory)
    return root, render(root)


@pytest.fixture(scope="module")
def run2(tmp_path_factory):
    root = _copy("run2", tmp_path_factory)
    return root, render(root)


@pytest.fixture(scope="module")
def run2_analysed(tmp_path_factory):
    root = _copy("run2-analysed", tmp_path_factory)
    return root, render(root, formats=("html",))


def _load(name: str) -> tuple[dict, dict]:
    return (json.loads((DATA / name / "results.json").read_text()),
            json.loads((DATA / name / "manifest.json").read_text()))


class _Refs(HTMLParser):
    """Every URL-bearing attribute, the chart containers, and the text outside scripts."""

    def __init__(self):
        super().__init__()
        self.refs, self.charts, self.text, self._skip = [], [], [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.refs += [(tag, k, v) for k, v in attrs if k in ("src", "href", "srcset", "data", "action", "poster")]
        if "data-chart" in a:
            self.charts.append(a["data-chart"])
        self._skip = tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip = False

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def _parse(html: str) -> _Refs:
    p = _Refs()
    p.feed(html)
    return p


# --- outputs ------------------------------------------------------------------------------------

def test_render_writes_card_and_model_index(full):
    root, paths = full
    assert paths["html"] == root / "card.html" and paths["pdf"] == root / "card.pdf"
    slugs = {k.split("/", 1)[1] for k in paths if k.startswith("model-index/")}
    assert slugs == {"Qwen2.5-1.5B-Instruct", "Qwen2.5-0.5B-Instruct", "Gemma-3-270M", "SmolLM2-135M-Instruct",
                     "smol-ft-step1000", "smol-ft-step2000", "smol-ft-step3000"}  # failed model, untrained: none
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths.values())
    assert not list(root.glob(".*.*"))  # no temporary files left behind


def test_formats_argument(tmp_path):
    shutil.copytree(DATA / "run2", tmp_path / "run")
    paths = render(tmp_path / "run", formats=("html",))
    assert "html" in paths and "pdf" not in paths and not (tmp_path / "run" / "card.pdf").exists()
    with pytest.raises(UserError, match="unknown card format"):
        render(tmp_path / "run", formats=("docx",))
    with pytest.raises(UserError, match="no such run directory"):
        render(tmp_path / "nothing-here")


def test_model_index_is_hugging_face_eval_results(full):
    from huggingface_hub.repocard_data import model_index_to_eval_results

    root, _ = full
    results, _ = _load("full")
    doc = yaml.safe_load((root / "model-index" / "Qwen2.5-1.5B-Instruct.yaml").read_text())
    name, evals = model_index_to_eval_results(doc["model-index"])
    assert name == "Qwen2.5-1.5B-Instruct"
    acc = {(e.dataset_type, e.dataset_config, e.metric_type): e.metric_value for e in evals}
    tasks = results["models"]["Qwen2.5-1.5B-Instruct"]["tasks"]
    assert acc[("allenai/ai2_arc", "ARC-Challenge", "accuracy")] == pytest.approx(100 * tasks["arc_challenge"]["score"])
    assert acc[("openai/gsm8k", "main", "exact_match")] == pytest.approx(100 * tasks["gsm8k"]["score"])
    assert acc[("openai/openai_humaneval", None, "pass@1")] == pytest.approx(100 * tasks["humaneval"]["score"])
    assert all(e.task_type == "text-generation" for e in evals)
    assert not {e.dataset_type for e in evals} & {"spc", "ar"}  # probes are not benchmark results


# --- HTML -----------------------------------------------------------------------------------------

def test_html_is_self_contained(full):
    html = full[1]["html"].read_text()
    p = _parse(html)
    external = [r for r in p.refs if re.match(r"\s*(https?:)?//", r[2] or "")]
    assert not external, external
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", html) and "@import" not in html
    # The only http(s) strings are inside the inlined Vega bundle (XML namespaces, help texts), never loads.
    outside = re.sub(r'<script id="vega-bundle">.*?</script>', "", html, flags=re.S)
    assert "http://" not in outside and "https://" not in outside
    assert "vegaEmbed" in html and "@media print" in html
    assert set(p.charts) == FULL_CHARTS


def test_html_charts_are_interactive_and_labelled(full):
    html = full[1]["html"].read_text()
    specs = json.loads(re.search(r'<script type="application/json" id="chart-specs">(.*?)</script>', html,
                                 re.S).group(1))
    assert set(specs) == FULL_CHARTS
    for name, spec in specs.items():
        text = json.dumps(spec)
        assert '"tooltip"' in text, name
        assert spec["title"]["text"], name
        titles = {"x": set(), "y": set()}
        _axis_titles(spec, titles)
        assert titles["x"] and titles["y"], (name, titles)
    colours = json.dumps(specs["task_scores"])
    assert "#0072B2" in colours and "#E69F00" in colours  # Okabe–Ito


def _axis_titles(node, out: dict) -> None:
    """Collect the titles of every x / y encoding in a Vega-Lite spec."""
    if isinstance(node, dict):
        for ch in ("x", "y"):
            enc = (node.get("encoding") or {}).get(ch)
            if isinstance(enc, dict) and enc.get("title"):
                out[ch].add(enc["title"])
        for v in node.values():
            _axis_titles(v, out)
    elif isinstance(node, list):
        for v in node:
            _axis_titles(v, out)


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert exe is not None, "headless Chromium is missing: `make test` installs it (apt-get install chromium)"
    return exe


def _open_in_chromium(html: Path, tmp: Path) -> tuple[str, list[str]]:
    """The DOM after scripts ran (virtual time), and the page's console messages; network is off."""
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp}", "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom", html.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, [line for line in r.stderr.splitlines() if ":CONSOLE" in line]


def _assert_charts_drawn(dom: str, console: list[str], expected: set[str]) -> None:
    assert not console, console
    box = re.search(r'<pre id="js-errors"[^>]*>(.*?)</pre>', dom, re.S)
    assert box and not box.group(1).strip(), box and box.group(1)
    drawn = set()
    for m in re.finditer(r'data-chart="([^"]+)"', dom):
        body = dom[m.end():dom.index("</figure>", m.end())]
        if 'data-rendered="1"' in dom[m.start() - 200:m.end() + 200] and re.search(r'<svg[^>]*class="marks"', body):
            assert body.count("<path") + body.count("<text") > 10, m.group(1)  # real marks, not an empty frame
            drawn.add(m.group(1))
    assert drawn == expected


@pytest.mark.browser
def test_html_charts_render_offline_in_chromium(full, tmp_path):
    dom, console = _open_in_chromium(full[1]["html"], tmp_path / "profile")
    _assert_charts_drawn(dom, console, FULL_CHARTS)


@pytest.mark.browser
def test_minimal_run_in_chromium(run2, tmp_path):
    dom, console = _open_in_chromium(run2[1]["html"], tmp_path / "profile")
    _assert_charts_drawn(dom, console, {"task_scores", "law_pooled", "mui_layers"})


def test_analysed_minimal_run_says_why_there_is_no_fit(run2_analysed, tmp_path):
    html = run2_analysed[1]["html"].read_text()
    visible = " ".join(_parse(html).text)
    # nothing fits and nothing could be tested: each empty table or chart is one line (tests/test_empty_sections.py)
    for line in ("pooled: the points come from 1 model with P > 0; the law compares models and needs at least 3",
                 "No per-task fit: arc_easy, boolq: 1 usable point (P > 0); the law needs at least 3.",
                 "Not available: no fair adjustment is possible: 1 model was compared; the law needs at least 3",
                 "Contamination: no test could be run, or none that ran could fire, on any model × task pair",
                 "Correlations of LPP metrics with benchmark scores: not computed in this run"):
        assert line in visible, line
    dom, console = _open_in_chromium(run2_analysed[1]["html"], tmp_path / "profile")
    _assert_charts_drawn(dom, console, {"task_scores", "law_pooled", "mui_layers", "overlap", "saturation"})


# --- PDF ------------------------------------------------------------------------------------------

def _pdf_text(path: Path) -> list[str]:
    """The text of each page as poppler's pdftotext reads it (what lies on the page; a tenth of pypdf's time)."""
    text = subprocess.run(["pdftotext", str(path), "-"], check=True, capture_output=True, text=True).stdout
    pages = text.split("\f")
    assert pages[-1].strip() == "", "pdftotext ends every page with a form feed"
    return pages[:-1]


@pytest.mark.browser
def test_pdf_has_sections_tables_and_vector_charts(full):
    from pypdf import PdfReader

    pdf = full[1]["pdf"]
    pages = _pdf_text(pdf)
    text = "\n".join(pages)
    for heading in SECTIONS:
        assert heading in text, heading
    # tables
    assert "Qwen2.5-1.5B-Instruct" in text and "59.2" in text and "smol-ft-step3000" in text
    assert "Entropy floor" in text and "ECE" in text and "Core sets" in text and "config_hash" in text
    # charts drawn as vector graphics: their titles and axis labels are PDF text, and no raster images
    for label in ("Score per task", "Score (%)", "Utility Law: MUI against score", "MUI (% of FFN neurons)",
                  "Layer (0 = first)", "Prefix length m (tokens)", "Samples (n)", "Checkpoint (training step)",
                  "Jaccard (0–1)", "Key neurons in the union", "Effective rank"):
        assert label in text, label
    # poppler's list of every raster image on every page: its two header lines and no row (pypdf's
    # page.images gives the same answer in 15 s on this card, as its search is quadratic in the objects)
    listed = subprocess.run(["pdfimages", "-list", str(pdf)], check=True, capture_output=True, text=True).stdout
    assert listed.splitlines()[0].split()[:3] == ["page", "num", "type"] and len(listed.splitlines()) == 2, listed
    # running header (date) and page numbers on every page
    n = len(pages)
    assert n == len(PdfReader(pdf).pages)
    for i, page in enumerate(pages, 1):
        assert f"Page {i} of {n}" in page and "2026-11-28" in page


@pytest.mark.browser
def test_minimal_run_pdf_and_honest_lines(run2):
    root, paths = run2
    html = paths["html"].read_text()
    visible = " ".join(_parse(html).text)
    for line in ("LPP signature: not measured in this run.", "Probes (SPC, AR): not measured in this run.",
                 "No law fit: needs ≥3 trained models (this run has 1).",
                 "Law-adjusted ranking: needs ≥3 trained models (this run has 1).",
                 "Contamination checks: not run in this run.", "Dataset diversity: not measured in this run.",
                 "Training phases: no checkpoint series in this run."):
        assert line in visible, line
    assert "smol has the highest mean score over 4 benchmark tasks: 12.5%" in visible
    text = "\n".join(_pdf_text(paths["pdf"]))
    assert "Per-task scores" in text and "Score (% correct)" in text and "not measured in this run" in text
    assert sorted(k for k in paths if k.startswith("model-index/")) == ["model-index/smol"]  # tiny: untrained


@pytest.mark.parametrize("which", ["full", "run2", "run2_analysed"])
def test_no_placeholders_or_python_leaks(which, request):
    html = request.getfixturevalue(which)[1]["html"].read_text()
    visible = " ".join(_parse(html).text)
    for bad in ("None", "nan", "NaN", "null", "TODO", "lorem", "{{", "{%"):  # StrictUndefined catches the rest
        assert not re.search(rf"(?<![\w-]){re.escape(bad)}(?![\w-])", visible), bad


# --- the card's content, from results alone --------------------------------------------------------

def test_summary_names_winners_and_warnings(full):
    visible = " ".join(_parse(full[1]["html"].read_text()).text)
    assert ("Qwen2.5-1.5B-Instruct has the highest mean score over 4 benchmark tasks: 59.2% (≈95% CI 53.1–65.0). "
            "Runner-up Qwen2.5-0.5B-Instruct scores 36.8%; the lead is significant on 4 of 4 tasks (paired 95% "
            "bootstrap CI).") in visible  # results.json from before the Holm adjustment
    assert "Law-adjusted, Qwen2.5-1.5B-Instruct ranks first: law-adjusted score" in visible
    # results recorded before MUI definitions were named say which one their numbers use
    assert "Definition in this run: contribution (recorded before definitions were named)" in re.sub(r"\s+", " ", visible)
    card = build_card(*_load("full"))
    s = card["summary"]
    assert (s["winner"]["name"], s["runner_up"]["name"], s["wins"]) == ("Qwen2.5-1.5B-Instruct", "Qwen2.5-0.5B-Instruct", 4)
    levels = [lvl for lvl, _ in s["warnings"]]
    assert levels == sorted(levels, key=["high", "medium", "low"].index) and len(levels) <= 4
    assert any("smol-ft-step3000 on gsm8k" in w for _, w in s["warnings"])
    assert any("Llama-3.2-1B-Instruct failed" in w for _, w in s["warnings"])
    # the untrained reference is a row below the ranked models, never ranked; the failed model has no rank
    assert [m["name"] for m in card["ranked"]][-2:] == ["untrained", "Llama-3.2-1B-Instruct"]
    assert card["ranked"][-2]["rank"] is None and card["ranked"][-1]["rank"] is None
    for m in card["ranked"]:
        if m["avg"] is not None:
            assert m["avg_lo"] <= m["avg"] <= m["avg_hi"]


def test_neighbour_comparisons_are_oriented():
    card = build_card(*_load("full"))
    first = card["neighbours"][0]
    assert (first["a"], first["b"]) == ("Qwen2.5-1.5B-Instruct", "Qwen2.5-0.5B-Instruct")
    raw = {(c["model_a"], c["model_b"], c["task"]): c for c in card["comparisons"]}
    swapped = 0
    for pair in card["neighbours"]:
        a, b = pair["a"], pair["b"]
        for task, c in pair["cells"].items():
            assert c["model_a"] == a and c["model_b"] == b and c["ci_low"] <= c["mean_diff"] <= c["ci_high"]
            if (a, b, task) in raw:  # stored as a minus b: shown as it is
                r = raw[(a, b, task)]
                assert (c["mean_diff"], c["ci_low"], c["ci_high"], c["n01"]) == (r["mean_diff"], r["ci_low"],
                                                                                r["ci_high"], r["n01"])
            else:  # stored as b minus a: every sign and the discordant counts turned
                r, swapped = raw[(b, a, task)], swapped + 1
                assert (c["mean_diff"], c["ci_low"], c["ci_high"], c["n01"], c["n10"]) == (
                    -r["mean_diff"], -r["ci_high"], -r["ci_low"], r["n10"], r["n01"])
        wins = losses = 0
        for c in pair["cells"].values():
            if c["significant"]:
                wins, losses = wins + (c["mean_diff"] > 0), losses + (c["mean_diff"] < 0)
        assert (pair["wins"], pair["losses"]) == (wins, losses)
    assert swapped > 0  # the fixture holds pairs stored the other way round


def test_missing_keys_render_honest_lines(tmp_path):
    results, manifest = _load("full")
    del results["analysis"]["diversity"], results["analysis"]["training"], results["lpp_correlations"]
    for m in results["models"].values():
        m.pop("lpp", None)
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    html = render(tmp_path, formats=("html",))["html"].read_text()
    visible = " ".join(_parse(html).text)
    for line in ("LPP signature: not measured in this run.", "Dataset diversity: not measured in this run.",
                 "Training phases: no checkpoint series in this run.",
                 "Correlations of LPP metrics with benchmark scores: not computed in this run"):
        assert line in visible, line
    assert set(_parse(html).charts) == FULL_CHARTS - {"lpp_entropy", "lpp_pr_er", "training", "overlap", "saturation"}


def test_a_local_source_under_home_is_shown_from_home(tmp_path, monkeypatch):
    """A card handed on names a locally built model's directory from ``~``, never the author's home;
    hub ids and sources outside home are shown as given, and the artifacts keep the path whole."""
    home = tmp_path / "home" / "ana"
    monkeypatch.setenv("HOME", str(home))
    results, manifest = _load("full")
    results["models"]["smol-ft-step1000"]["source"] = str(home / ".cache/reporter/showcase/rc-1/step-12")
    results["models"]["smol-ft-step2000"]["source"] = str(tmp_path / "elsewhere" / "step-24")
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(results))
    (run / "manifest.json").write_text(json.dumps(manifest))
    html = render(run, formats=("html",))["html"].read_text()
    visible = " ".join(_parse(html).text)
    assert visible.count("~/.cache/reporter/showcase/rc-1/step-12") == 2  # the leaderboard and the Methods table
    assert str(home) not in html
    assert str(tmp_path / "elsewhere" / "step-24") in visible
    assert "Qwen/Qwen2.5-1.5B-Instruct" in visible
    assert json.loads((run / "results.json").read_text())["models"]["smol-ft-step1000"]["source"].startswith(str(home))


@pytest.mark.parametrize("path, value, message", [
    (("models", "smol", "tasks", "arc_easy", "score"), "0.25",
     r'models\.smol\.tasks\.arc_easy\.score: expected a fraction in \[0, 1\], got str "0\.25"'),
    (("models", "smol", "tasks", "arc_easy", "mui_per_layer"), [0.1, "x"],
     r"mui_per_layer\[1\]: expected a number, got str"),
    (("models", "smol", "lpp"), {"entropy_floor": 0.2}, r"models\.smol\.lpp\.participation_ratio: missing"),
    (("analysis",), {"fairness": {"per_model": [{"model": "smol", "score": 25.0, "mui": 1, "p_law": 0.2,
                                                 "adjusted": 0.1, "rank_raw": 1, "rank_adjusted": 1, "shift": 0}]}},
     r"analysis\.fairness\.per_model\[0\]\.score: expected a fraction in \[0, 1\], got 25\.0"),
    (("analysis",), {"contamination": [{"model": "smol", "task": "gsm8k", "severity": "high"}]},
     r"severity: 'high' is not one of strong, weak, none"),
    (("analysis",), {"law": {"pooled": {"slope": -0.5, "intercept": 2, "r2": "0.8", "n": 5}}},
     r"analysis\.law\.pooled\.r2: expected a number"),
    (("comparisons",), {"model_a": "smol"}, r"comparisons: expected a list"),
])
def test_schema_errors_are_clear(path, value, message):
    results, manifest = _load("run2")
    results = copy.deepcopy(results)
    node = results
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(CardDataError, match=message):
        build_card(results, manifest)


def test_optional_analysis_shapes_are_accepted():
    results, manifest = _load("run2")
    results["analysis"] = {"law": {"pooled": {"reason": "needs ≥3 trained models"}, "per_task": {},
                                   "excluded": ["tiny (untrained)"], "notes": []},
                           "fairness": {"reason": "needs ≥3 trained models"}, "contamination": [],
                           "diversity": {}, "training": None}
    card = build_card(results, manifest)
    assert card["summary"]["top_adjusted"] is None
    assert card["analysis"]["law"]["pooled"] == {"reason": "needs ≥3 trained models"}


@pytest.mark.browser
def test_pdf_core_sets_table_keeps_every_task_on_the_page(tmp_path_factory):
    """A run with many tasks: the core-set table has a row per task, so none runs off the PDF page
    (it had a column per task, and the 11 tasks of `make demo` were cut at the right edge)."""
    root = _copy("full", tmp_path_factory)
    res = json.loads((root / "results.json").read_text())
    tasks = [f"task_number_{i:02d}" for i in range(12)]
    for d in res["analysis"]["diversity"].values():
        core, sat = next(iter(d["core_sets"].values())), next(iter(d["saturation"].values()))
        d["core_sets"] = {t: core for t in tasks}
        d["saturation"] = {t: sat for t in tasks}
    # sections this test does not read, left out for a shorter PDF (18 pages to 10; 14 s to 7 s in the suite): the
    # law, fairness, contamination, training, LPP, pairwise significance, calibration and per-layer MUI
    for key in ("law", "fairness", "contamination", "training"):
        res["analysis"].pop(key)
    res["comparisons"] = []
    res.pop("lpp_correlations", None)
    for m in res["models"].values():
        m.pop("lpp", None)
        for t in m["tasks"].values():
            t.pop("calibration", None)
            t.pop("mui_per_layer", None)
    (root / "results.json").write_text(json.dumps(res))
    pdf = render(root, formats=("pdf",))["pdf"]
    # pdftotext keeps only what lies on the page (pypdf would also return text drawn past its edge)
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True, text=True).stdout
    section = text[text.index("Core sets"):]
    section = section[:section.index("Core set: the fewest items")]
    missing = [t for t in tasks if t not in section]
    assert not missing, missing


@pytest.mark.browser
def test_pdf_lpp_correlations_keep_every_task_on_the_page(tmp_path_factory):
    """A run with many tasks and LPP on 3+ models: the table of LPP metrics against scores has a row per task and a
    column per metric (3), so no task's correlations run off the PDF page (it had a column per task)."""
    root = _copy("full", tmp_path_factory)
    res = json.loads((root / "results.json").read_text())
    tasks = [f"task_number_{i:02d}" for i in range(12)]
    metrics = ("entropy_floor", "participation_ratio", "effective_rank")
    res["lpp_correlations"] = [
        {"metric": m, "task": t, "n": 5, "pearson_r": round(-0.9 + 0.01 * i + 0.3 * j, 2), "pearson_p": 0.04,
         "spearman_r": 0.5, "spearman_p": 0.2, "reliable": True}
        for j, m in enumerate(metrics) for i, t in enumerate(tasks)]
    for key in ("law", "fairness", "contamination", "training", "diversity"):  # sections this test does not read
        res["analysis"].pop(key, None)
    res["comparisons"] = []
    (root / "results.json").write_text(json.dumps(res))
    out = render(root, formats=("pdf", "html"))
    text = subprocess.run(["pdftotext", "-layout", str(out["pdf"]), "-"], check=True, capture_output=True,
                          text=True).stdout
    section = text[text.index("LPP metrics against benchmark scores"):]
    section = section[:section.index("Pearson r and Spearman")]
    assert [t for t in tasks if t not in section] == []
    want = sorted(f"r {c['pearson_r']:.2f}" for c in res["lpp_correlations"])
    got = sorted(re.findall(r"r [−-]?\d\.\d\d", section))
    assert got == want
    html = out["html"].read_text()
    head = html[html.index("LPP metrics against benchmark scores"):]
    head = head[:head.index("</thead>")]
    assert all(m.replace("_", " ") in head for m in metrics) and not any(t in head for t in tasks)


@pytest.mark.browser
def test_pdf_plugin_measurements_of_many_tasks_stay_on_the_page(tmp_path_factory):
    """A plugin's per-task field over many tasks: the "Other measurements" table puts tasks in rows (the fewer of
    models and tasks are its columns), so every task's value is on the PDF page (it had a column per task)."""
    root = _copy("run2", tmp_path_factory)
    res = json.loads((root / "results.json").read_text())
    tasks = [f"task_number_{i:02d}" for i in range(12)]
    for k, m in enumerate(res["models"].values()):
        base = next(iter(m["tasks"].values()))
        for i, t in enumerate(tasks):
            m["tasks"][t] = {**base, "toy_norm": [1.0, 2.0 + i + 0.1 * k]}
    (root / "results.json").write_text(json.dumps(res))
    out = render(root, formats=("pdf", "html"))
    text = subprocess.run(["pdftotext", "-layout", str(out["pdf"]), "-"], check=True, capture_output=True,
                          text=True).stdout
    section = re.sub(r"\s+", " ", text[text.index("Other measurements"):])
    assert [t for t in tasks if t not in section] == []
    for k in range(len(res["models"])):
        for i in range(12):
            assert f"mean {(3.0 + i + 0.1 * k) / 2:.3f} over 2 values" in section, (k, i)


@pytest.mark.browser
def test_pdf_tables_with_a_column_per_model_stay_on_the_page(full):
    """The per-task scores, the pairwise significance and the core sets have a column per model: with the fixture's 9 models the
    PDF showed five or six of them and cut the rest at the page's right edge. Every confidence interval the HTML
    shows in those tables must also be on the PDF page (pdftotext reads only what lies on the page)."""
    root, out = full
    html = " ".join(_parse(out["html"].read_text()).text)
    pdf = subprocess.run(["pdftotext", "-layout", str(out["pdf"]), "-"], check=True, capture_output=True,
                         text=True).stdout
    ci = re.compile(r"\[[−+\d.]+, [−+\d.]+\]")

    def tables(text: str) -> tuple[list[str], list[str]]:
        a = text.index("Per-task scores")
        b = text.index("Pairwise significance", a)
        c = text.index("Utility Law", b)
        return sorted(ci.findall(text[a:b])), sorted(ci.findall(text[b:c]))

    (tasks_html, pairs_html), (tasks_pdf, pairs_pdf) = tables(html), tables(pdf)
    assert len(tasks_html) == 32 and len(pairs_html) == 24  # 4 benchmark tasks x 8 models, and x 6 neighbour pairs
    assert tasks_pdf == tasks_html
    assert pairs_pdf == pairs_html
    cells = re.compile(r"\d+\s*/\s*\d+\s*·\s*\d+")  # the core-set table: "core / n · n95" per model and task

    def core_sets(text: str) -> list[str]:
        a = text.index("Core sets")
        return sorted(re.sub(r"\s", "", c) for c in cells.findall(text[a:text.index("Core set: the fewest", a)]))

    assert len(core_sets(html)) >= 12 and core_sets(pdf) == core_sets(html)


def test_the_vega_bundle_is_kept_in_the_cache_checked_and_never_required(tmp_path, monkeypatch):
    """The inlined Vega bundle is made once per machine: read back when its sha256 holds, made again when the
    file is damaged, and a cache that cannot be written only costs the bundling."""
    import vl_convert

    from reporter.card.vega import javascript_bundle, vl_version

    want = vl_convert.javascript_bundle(vl_version=vl_version())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    javascript_bundle.cache_clear()
    try:
        assert javascript_bundle() == want
        (cached,) = (tmp_path / "cache" / "reporter" / "vega").iterdir()
        digest, text = cached.read_text().split("\n", 1)
        assert text == want and len(digest) == 64
        cached.write_text(f"{digest}\n{text[:-100]}")  # torn: the digest no longer matches
        javascript_bundle.cache_clear()
        assert javascript_bundle() == want and cached.read_text() == f"{digest}\n{want}"  # made and kept again
        cached.write_text(f"{digest}\nalert('not vega')")
        javascript_bundle.cache_clear()
        assert javascript_bundle() == want
        (tmp_path / "ro").write_text("a file where the cache directory should be")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "ro"))
        javascript_bundle.cache_clear()
        assert javascript_bundle() == want
    finally:
        javascript_bundle.cache_clear()


def _calibration_table(page: str) -> tuple[list[str], list[list[str]]]:
    """The calibration table of a card's HTML as (header cells, body rows of cells), tags and whitespace stripped."""
    import html as _html

    section = page[page.index("<h3>Calibration</h3>"):]
    table = section[:section.index("</table>")]

    def cells(row: str) -> list[str]:
        found = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, flags=re.S)
        return [" ".join(_html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in found]

    rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)
    return cells(rows[0]), [cells(r) for r in rows[1:]]


@pytest.mark.parametrize("calibrated_models", [8, 2])
def test_calibration_table_puts_each_number_under_its_model_and_task(tmp_path_factory, calibrated_models):
    """More calibrated models than tasks (8 models, 2 tasks): one row per model, so the table fits the PDF page
    (with a column per model it ran off the page); otherwise (2 and 2) one row per task. In both, every cell is
    that model's ECE · Brier on that task, as results.json has it."""
    from reporter.card.format import fmt_num

    root = _copy("full", tmp_path_factory)
    res = json.loads((root / "results.json").read_text())
    keep = [m for m, v in res["models"].items() if any(r.get("calibration") for r in v.get("tasks", {}).values())]
    keep = keep[:calibrated_models]
    assert len(keep) == calibrated_models
    for m, v in res["models"].items():
        for r in v.get("tasks", {}).values():
            if m not in keep:
                r.pop("calibration", None)
    (root / "results.json").write_text(json.dumps(res))
    header, body = _calibration_table(render(root, formats=("html",))["html"].read_text())
    tasks = sorted({t for m in keep for t, r in res["models"][m]["tasks"].items() if r.get("calibration")})
    by_model = calibrated_models > len(tasks)
    assert header[0] == ("Model" if by_model else "Task")
    names = [h.removesuffix(" ECE · Brier") for h in header[1:]]
    assert sorted(names) == sorted(tasks if by_model else keep)
    assert sorted(r[0] for r in body) == sorted(keep if by_model else tasks)
    for row in body:
        for col, cell in zip(names, row[1:]):
            model, task = (row[0], col) if by_model else (col, row[0])
            cal = res["models"][model]["tasks"][task]["calibration"]
            assert cell == f"{fmt_num(cal['ece'], 3)} · {fmt_num(cal['brier'], 3)}", (model, task, cell)


def test_the_cached_chart_validator_agrees_with_altairs_own_on_every_chart_and_on_broken_ones():
    """``validated`` builds the Vega-Lite validator once (altair rebuilds it, a deep copy of the schema, per call).
    Its verdict must be altair's: every chart of the 9-model fixture passes both, and each broken variant (a wrong
    mark, a wrong type, an unknown property, a bad encoding channel) is refused by both, with altair's error."""
    import jsonschema
    from altair.utils.schemapi import validate_jsonschema

    from reporter.card import charts, vega

    card = build_card(*_load("full"))
    specs = charts.chart_specs(card)
    assert len(specs) >= 5
    validator = vega._vl_validator()
    assert validator is not None  # the fast path is the one under test
    schema = vega._vl_schema()

    def altair_ok(spec):
        return validate_jsonschema(spec, schema, raise_error=False) is None

    broken = []
    for k, (name, spec) in enumerate(specs.items()):
        rows = vega._without_rows(spec)
        assert validator.is_valid(rows) and altair_ok(rows), name
        if k >= 2:  # altair ranks an invalid spec's errors slowly: two charts' broken variants are enough
            continue
        for mutate in (lambda s: s.update(mark="pointy"), lambda s: s.update(width="wide"),
                       lambda s: s.update(no_such_property=1),
                       lambda s: s.setdefault("encoding", {}).update(x={"field": "a", "type": "nominalish"})):
            bad = copy.deepcopy(rows)
            mutate(bad)
            broken.append((name, bad))
    for name, bad in broken:
        assert not validator.is_valid(bad) and not altair_ok(bad), name
    with pytest.raises(jsonschema.ValidationError):
        vega.validated(broken[0][1])


@pytest.mark.browser
def test_the_pdf_draws_the_per_item_contamination_chart_as_box_plots_with_the_items_beyond_the_whiskers(full):
    """The per-item strip plot drew every item (about 3,000 points on the 9-model fixture, 4.7 s of WeasyPrint);
    the PDF draws a box plot per model, test and kind of items, and as points exactly the items beyond 1.5 box
    widths (float64 quartiles, numpy's linear rule, as Vega's), while the HTML keeps every item. A card of few
    items prints the strip plot itself."""
    import collections
    import re

    import numpy as np

    from reporter.card import charts
    from reporter.card.data import load_card
    from reporter.card.vega import to_svg

    root, out = full
    card = load_card(root)
    # values the card shows as missing (a NaN or infinite statistic): in no box, no quartile and no point
    sig = next(s for c in card["analysis"]["contamination"] for s in (c.get("signals") or {}).values()
               if isinstance(s, dict) and len(s.get("item_values") or []) > 8)
    sig["item_values"][:3] = [None] * 3
    strip = to_svg(charts.chart_specs(card, ["contamination_items"])["contamination_items"])
    boxes = to_svg(charts.print_specs(card, ["contamination_items"])["contamination_items"])
    groups: dict = collections.defaultdict(list)
    for r in charts._contamination_rows(card):
        if r["value"] is not None:
            groups[(r["test"], r["model"], r["kind"])].append(r["value"])
    beyond = 0
    for values in groups.values():
        v = np.asarray(values, dtype=np.float64)
        q1, q3 = np.quantile(v, [0.25, 0.75])
        beyond += int(((v < q1 - 1.5 * (q3 - q1)) | (v > q3 + 1.5 * (q3 - q1))).sum())

    def points(svg: str) -> int:
        marks = re.findall(r'<g class="mark-symbol role-mark[^"]*"[^>]*>(.*?)</g>', svg, flags=re.S)
        return sum(m.count("<path") for m in marks)

    assert points(strip) == sum(len(v) for v in groups.values()) > 2000
    assert 0 < points(boxes) == beyond < 100
    assert boxes.count("<path") * 5 < strip.count("<path")
    for model in {r[1] for r in groups}:  # every model's panels in both (and the box plots' colour legend)
        assert boxes.count(f">{model}</text>") >= strip.count(f">{model}</text>") > 0
    pdf = "\n".join(_pdf_text(out["pdf"]))
    assert "as box plots with the items beyond the whiskers drawn as points" in re.sub(r"\s+", " ", pdf)
    assert "as box plots" not in out["html"].read_text()
    # few items: the strip plot prints as it is, and the caption says filled and hollow
    small = copy.deepcopy(card)
    for c in small["analysis"]["contamination"]:
        for sig in (c.get("signals") or {}).values():
            for key in ("item_values", "reference_values"):
                if isinstance(sig, dict) and key in sig:
                    sig[key] = sig[key][:2]
    assert 0 < len(charts._contamination_rows(small)) <= charts.PRINT_POINTS
    assert charts.print_specs(small, ["contamination_items"]) == {}


def test_a_chart_registered_again_keeps_no_built_in_print_version():
    """A plugin that replaces ``contamination_items`` gets its own chart in the PDF too, never the built-in box plots."""
    from reporter.card import charts

    card = build_card(*_load("full"))
    assert list(charts.print_specs(card, ["contamination_items"])) == ["contamination_items"]
    builtin = charts.CHARTS.get("contamination_items")
    charts.CHARTS.remove("contamination_items")
    try:
        charts.CHARTS.add("contamination_items", lambda c: builtin(c))
        assert charts.print_specs(card, ["contamination_items"]) == {}
    finally:
        charts.CHARTS.remove("contamination_items")
        charts.CHARTS.add("contamination_items", builtin)


def test_the_cards_own_chance_marks_are_not_shown_as_a_plugins_measurement():
    """The chance test's p-value is the card's (analysis.above_chance), not a collector plugin's: it stays out of
    "Other measurements", while a field no section shows goes in."""
    from reporter.card.data import extra_measurements
    card = {"models": [{"name": "m", "tasks": {"t": {"score": 0.5, "at_chance": False, "chance_p": 0.0,
                                                     "layer_norm": 2.0}}}]}
    assert [e["field"] for e in extra_measurements(card)] == ["layer_norm"]


def test_law_points_without_a_fit_are_benchmark_points_marked_no_fit():
    """With a fit that failed (no slope, no points) the chart's points are the trained models' benchmark tasks (never
    a probe, never a reference), each 'no fit'; with a fit, P > 0 is in it and P = 0 is not."""
    from reporter.card.charts import _law_points
    card = {"benchmarks": ["arc"], "models": [
        {"name": "a", "reference": False, "tasks": {"arc": {"score": 0.4, "mui": 3.0}, "spc": {"score": 0.9, "mui": 2.0}}},
        {"name": "b", "reference": False, "tasks": {"arc": {"score": 0.0, "mui": 4.0}}},
        {"name": "u", "reference": True, "tasks": {"arc": {"score": 0.3, "mui": 1.0}}}]}
    failed = {"reason": "the points come from 2 models with P > 0; the law compares models and needs at least 3"}
    got = _law_points(card, failed)
    assert [(p["model"], p["task"], p["note"]) for p in got] == [("a", "arc", "no fit"), ("b", "arc", "no fit")]
    fitted = _law_points(card, {"slope": -1.0, "intercept": 5.0})
    assert [p["note"] for p in fitted] == ["in the fit", "P = 0: not in the fit"]


def test_a_model_named_like_the_null_studys_own_clean_models_is_told_so(tmp_path):
    """The calibrated option-order null was measured on clean models; a model of the run with one of their names
    may be that very model, whose own preference is then part of its null: the card says so, and only then."""
    from reporter.analyse.order_null import order_null_for
    null = order_null_for("arc_challenge")
    assert null["name"] == "calibrated" and "Gemma-3-270M" in null["clean_models"]
    root = tmp_path / "run"
    shutil.copytree(DATA / "full", root)
    res = json.loads((root / "results.json").read_text())
    for row in res["analysis"]["contamination"]:
        o = row["signals"].get("option_order")
        if row["task"] == "arc_challenge" and isinstance(o, dict) and o.get("measured"):
            o["null"] = null
    (root / "results.json").write_text(json.dumps(res))
    text = " ".join(" ".join(render(root, formats=("html",))["html"].read_text().split()).split())
    assert ("The null study's clean models were SmolLM2-135M-Instruct and Gemma-3-270M; Gemma-3-270M and "
            "SmolLM2-135M-Instruct in this run carry those names") in text.replace("<b>", "").replace("</b>", "")
    # by content where the run recorded its models' identities: the packaged Gemma is the null's own model whatever
    # its name; a packaged model named like SmolLM2 whose GGUF differs is not mentioned at all
    assert null["clean_identities"] == [f"packaged:{n}:{expected_sha256(PACKAGED[n])}"
                                        for n in ("smollm2-135m-instruct", "gemma-3-270m")]
    res["models"]["Gemma-3-270M"]["meta"]["identity"] = null["clean_identities"][1]
    res["models"]["SmolLM2-135M-Instruct"]["meta"]["identity"] = "packaged:smollm2-135m-instruct:" + "0" * 64
    (root / "results.json").write_text(json.dumps(res))
    text = " ".join(render(root, formats=("html",))["html"].read_text().split()).replace("<b>", "").replace("</b>", "")
    assert ("The null study's clean models were SmolLM2-135M-Instruct and Gemma-3-270M; Gemma-3-270M in this run is, "
            "by content hash, one of those models: its own preference is part of the null") in text
    assert "carr" not in text.split("The null study's clean models")[1].split("</p>")[0]
    # from the hub, its commit cannot be compared with the GGUF's hash: the name is all there is, and the card says so
    res["models"]["SmolLM2-135M-Instruct"]["meta"]["identity"] = "hub:HuggingFaceTB/SmolLM2-135M-Instruct@abc123"
    (root / "results.json").write_text(json.dumps(res))
    text = " ".join(render(root, formats=("html",))["html"].read_text().split()).replace("<b>", "").replace("</b>", "")
    assert ("Gemma-3-270M in this run is, by content hash, one of those models: its own preference is part of the null, "
            "and a preference it already had cannot show as contamination; SmolLM2-135M-Instruct in this run carries "
            "that name: if it is the same model") in text
    for m in res["models"].values():
        (m.get("meta") or {}).pop("identity", None)
    for row in res["analysis"]["contamination"]:  # renamed and no identity: nothing to say
        row["model"] = {"Gemma-3-270M": "G", "SmolLM2-135M-Instruct": "S"}.get(row["model"], row["model"])
    (root / "results.json").write_text(json.dumps(res))
    html = render(root, formats=("html",))["html"].read_text()
    assert "carry those names" not in html and "null study's clean models were" not in html


def test_answers_read_from_the_log_probs_are_named_on_the_card(tmp_path):
    """A model's multiple-choice answers read from its option log-probs (its response named no option) are part of
    its score: the per-task section names the model, the task and the share; none is named where none was read."""
    root = tmp_path / "run"
    shutil.copytree(DATA / "full", root)
    res = json.loads((root / "results.json").read_text())
    name, m = next((n, m) for n, m in res["models"].items() if m.get("tasks") and not n.lower().startswith("untrained"))
    task = next(iter(m["tasks"]))
    m["tasks"][task]["answer_from_logprob_share"] = 0.375
    (root / "results.json").write_text(json.dumps(res))
    text = " ".join(render(root, formats=("html",))["html"].read_text().split())
    n = m["tasks"][task]["n"]
    assert f"Part of these trained models' scores is that reading, not a generated answer: {name} on {task} 38% of {n}." \
        in text
    m["tasks"][task]["answer_from_logprob_share"] = 0.0
    (root / "results.json").write_text(json.dumps(res))
    assert "Part of these trained models' scores" not in render(root, formats=("html",))["html"].read_text()


def test_a_failed_models_reason_ending_in_a_period_gets_no_second_one():
    """"…is not a valid JSON file.." on the card: the sentence added its own period to one that had it."""
    from reporter.card.warnings import card_warnings

    card = {"models": [{"name": "m", "status": "failed", "error": "model 'm': tokenizer.json is not a valid JSON file.",
                        "reference": False, "tasks": {}, "meta": {}},
                       {"name": "n", "status": "failed", "error": "model 'n': out of memory", "reference": False,
                        "tasks": {}, "meta": {}}],
            "analysis": None, "manifest": {}, "lpp_correlations": [], "benchmarks": [], "probes": [], "ranked": []}
    said = [w for _, w in card_warnings(card) if "failed to evaluate" in w]
    assert said == ["m failed to evaluate: model 'm': tokenizer.json is not a valid JSON file.",
                    "n failed to evaluate: model 'n': out of memory."]


def test_charts_carry_their_rows_by_name_and_give_the_spec_altair_gives_inline_rows(monkeypatch):
    """The charts are built with their rows as a named dataset (Altair deep-copies inline rows at every method
    call); the finished spec must be the one inline rows give, to the byte: every chart and print version of the
    9-model fixture, the compare chart, and no rows left behind."""
    import json as _json

    from reporter.card import charts, compare

    card = build_card(*_load("full"))

    def every_spec():
        specs = charts.chart_specs(card)
        specs.update({f"print {k}": v for k, v in charts.print_specs(card, list(charts.STATIC)).items()})
        return specs

    named = every_spec()
    assert not charts._ROWS  # the finished specs hold their rows; none are kept after
    assert "contamination_items" in named and "print contamination_items" in named and len(named) >= 10
    assert all(named[k].get("datasets") for k in named)
    monkeypatch.setattr(charts, "_data", lambda rows: {"values": rows})  # how Altair is given rows inline
    inline = every_spec()
    assert list(named) == list(inline)
    for k in named:
        assert _json.dumps(named[k]) == _json.dumps(inline[k]), k
    # release notes' chart (compare.py), two pairs: a faceted layer
    doc = {"pairs": [{"base": "a", "new": "b"}, {"base": "c", "new": "d"}],
           "rows": [{"base_model": o, "new_model": n, "task": t, "delta": 0.01 * i, "ci_low": -0.1, "ci_high": 0.2,
                     "status": "no significant change", "p_holm": 0.5}
                    for i, (o, n, t) in enumerate([("a", "b", "arc"), ("a", "b", "mmlu"), ("c", "d", "arc")])]}
    monkeypatch.undo()
    named = compare.compare_chart(doc)
    assert len(next(iter(named["datasets"].values()))) == 3 and not charts._ROWS
    monkeypatch.setattr(compare, "_data", lambda rows: {"values": rows})
    assert _json.dumps(compare.compare_chart(doc)) == _json.dumps(named)


def test_two_charts_of_the_same_rows_built_together_each_keep_them():
    """Two charts whose rows are equal (one dataset name), both built before either is finished: each finished
    spec holds the rows; a name whose rows were dropped mid-build is an error, not a chart without data."""
    import altair as alt

    from reporter.card import charts

    rows = [{"x": 1, "y": 2}, {"x": 2, "y": 3}]
    a = alt.Chart(charts._data(rows)).mark_point().encode(x="x:Q", y="y:Q")
    b = alt.Chart(charts._data(list(rows))).mark_line().encode(x="x:Q", y="y:Q")
    for chart in (charts._finish(a, "a"), charts._finish(b, "b")):
        assert list(chart["datasets"].values()) == [rows] and chart["data"] == {"name": next(iter(chart["datasets"]))}
    # one empty row: Altair names it "empty", not by its hash
    empty = charts._finish(alt.Chart(charts._data([{}])).mark_text(text="none"), "e")
    assert empty["datasets"] == {"empty": [{}]} == charts._finish(alt.Chart({"values": [{}]}).mark_text(text="none"),
                                                                  "e")["datasets"]
    c = alt.Chart(charts._data([{"x": 9}])).mark_point().encode(x="x:Q")
    charts._ROWS.clear()
    with pytest.raises(RuntimeError, match="chart 'c': the rows of dataset"):
        charts._finish(c, "c")
