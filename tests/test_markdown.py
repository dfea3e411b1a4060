"""card.md and the Hugging Face README: real Markdown parsers read them back.

card.md goes through markdown-it-py (CommonMark with GFM tables) and the leaderboard table in
the resulting HTML must hold each model's mean score, recomputed here from results.json with a
plain loop. The README of one model must parse with huggingface_hub's ``ModelCard`` (offline) and
give back that model's scores.
"""
from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from reporter.card.render import render
from reporter.cli import main

DATA = Path(__file__).parent / "data"
PROBES = {"spc", "ar"}


class _Tables(HTMLParser):
    """Every <table> of an HTML page as rows of cell texts, with the heading before it."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.heading, self._in_h, self._cell = "", False, None

    def handle_starttag(self, tag, attrs):
        if tag in ("h1", "h2", "h3"):
            self._in_h, self.heading = True, ""
        elif tag == "table":
            self.tables.append((self.heading, []))
        elif tag == "tr":
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3"):
            self._in_h = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1][-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._in_h:
            self.heading += data
        if self._cell is not None:
            self._cell += data


def _gfm(text: str) -> dict[str, list[list[str]]]:
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(text)
    p = _Tables()
    p.feed(html)
    return {heading: rows for heading, rows in p.tables}


def _means(results: dict) -> dict[str, float]:
    """Each complete model's plain mean over the benchmark tasks (the leaderboard's score)."""
    bench = sorted({t for m in results["models"].values() for t in m.get("tasks", {})} - PROBES)
    out = {}
    for name, m in results["models"].items():
        scores = [m["tasks"][t]["score"] for t in bench if t in m.get("tasks", {})]
        if len(scores) == len(bench):
            total = 0.0
            for s in scores:
                total += s
            out[name] = total / len(scores)
    return out


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    root = tmp_path_factory.mktemp("md") / "run"
    shutil.copytree(DATA / "full", root)
    return root, render(root, formats=("md",))


def test_card_md_is_gfm_with_the_leaderboard_numbers(full):
    root, paths = full
    assert set(paths) >= {"md"} and not (root / "card.html").exists()
    text = paths["md"].read_text()
    tables = _gfm(text)
    board = tables["Leaderboard"]
    assert board[0][:4] == ["Rank (95% interval)", "Tier", "Model", "Score % [≈95% CI]"]
    rows = {r[2].replace("\\", ""): r for r in board[1:]}
    results = json.loads((root / "results.json").read_text())
    means = _means(results)
    assert means and set(means) <= set(rows)
    for name, mean in means.items():
        assert rows[name][3].split(" [")[0] == f"{100 * mean:.1f}", name
    ranked = [r for r in board[1:] if re.match(r"\d", r[0])]
    assert [int(r[0].split()[0]) for r in ranked] == sorted(int(r[0].split()[0]) for r in ranked)
    assert any(r[0] == "reference: untrained" for r in board[1:])  # untrained: never ranked
    # the per-task table: one row per benchmark task, every model's score with its CI
    tasks = tables["Per-task scores"]
    arc = next(r for r in tasks[1:] if r[0].replace("\\", "") == "arc_challenge")
    qwen = results["models"]["Qwen2.5-1.5B-Instruct"]["tasks"]["arc_challenge"]
    col = [h.replace("\\", "") for h in tasks[0]].index("Qwen2.5-1.5B-Instruct")
    assert arc[col].startswith(f"{100 * qwen['score']:.1f} [{100 * qwen['ci_low']:.1f}, {100 * qwen['ci_high']:.1f}]")
    # the charts: PNG files beside it, linked relatively with alt text
    links = re.findall(r"!\[([^\]]+)\]\(([^)]+)\)", text)
    assert links and all(alt and not src.startswith(("/", "http")) for alt, src in links)
    assert all((root / src).read_bytes()[:4] == b"\x89PNG" for _, src in links)
    assert "card.html" in text and "](card.html" not in text  # a pointer, not a link
    assert len(text.splitlines()) < 150
    # the weights as evaluated: card.md is what a release pastes, and a score depends on the dtype and device (only
    # card.html's Models table said them)
    weights = next(line for line in text.splitlines() if line.startswith("Weights as evaluated"))
    for name, m in results["models"].items():
        meta = m.get("meta") or {}
        assert f"{name} {meta.get('dtype') or '?'} on {meta.get('device') or '?'}" in weights.replace("\\", ""), name


def test_card_md_sections_print_alone():
    r = CliRunner().invoke(main, ["render", str(DATA / "full"), "--format", "md", "--section", "leaderboard"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("## Leaderboard") and "## Per-task scores" not in r.stdout
    bad = CliRunner().invoke(main, ["render", str(DATA / "full"), "--format", "md", "--section", "nope"])
    assert bad.exit_code == 2 and "unknown card section 'nope'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    bad = CliRunner().invoke(main, ["render", str(DATA / "full"), "--format", "html", "--section", "summary"])
    assert bad.exit_code == 2 and "use it with --format md (not html)" in bad.stderr


def test_hf_readme_parses_with_huggingface_hub_and_gives_the_scores(tmp_path):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    shutil.copytree(DATA / "full", tmp_path / "run")
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    for m in res["models"].values():  # the level each task was tested against, and how its answers were read
        if "arc_challenge" in m["tasks"]:
            m["tasks"]["arc_challenge"].update(chance=0.25, majority={"answer": "D", "share": 0.278, "over": 299})
    qwen = res["models"]["Qwen2.5-1.5B-Instruct"]
    qwen["tasks"]["arc_challenge"]["answer_from_logprob_share"] = 0.25
    qwen["meta"]["identity"] = "hub:Qwen/Qwen2.5-1.5B-Instruct@0123abcd"
    (tmp_path / "run" / "results.json").write_text(json.dumps(res))
    r = CliRunner().invoke(main, ["render", str(tmp_path / "run"), "--format", "hf",
                                  "--model", "Qwen2.5-1.5B-Instruct"])
    assert r.exit_code == 0, r.output
    readme = tmp_path / "run" / "hf" / "Qwen2.5-1.5B-Instruct" / "README.md"
    card = ModelCard.load(readme)  # a local path: no network
    name, evals = model_index_to_eval_results(card.data.to_dict()["model-index"])
    assert name == "Qwen2.5-1.5B-Instruct"
    tasks = json.loads((tmp_path / "run" / "results.json").read_text())["models"][name]["tasks"]
    got = {(e.dataset_type, e.dataset_config, e.metric_type): e.metric_value for e in evals}
    assert got[("allenai/ai2_arc", "ARC-Challenge", "accuracy")] == pytest.approx(100 * tasks["arc_challenge"]["score"])
    assert got[("openai/gsm8k", "main", "exact_match")] == pytest.approx(100 * tasks["gsm8k"]["score"])
    assert card.text.lstrip().startswith("# Qwen2.5-1.5B-Instruct")
    shots = {e.dataset_type: (e.dataset_args or {}).get("num_few_shot") for e in evals}  # as the run ran them
    assert shots["allenai/ai2_arc"] == tasks["arc_challenge"]["shots"] and shots["openai/gsm8k"] == tasks["gsm8k"]["shots"]
    source = json.loads((tmp_path / "run" / "results.json").read_text())["models"][name]["source"]
    assert f"The weights evaluated: `{source}`" in card.text
    assert "; by content, `hub:Qwen/Qwen2.5-1.5B-Instruct@0123abcd`." in card.text
    assert '| 25.0 (always "D": 27.8) |' in card.text
    # a local directory: its name, not the path on the machine that ran (a README is pasted onto the hub)
    res["models"]["Qwen2.5-1.5B-Instruct"].update(source="/home/alice/private/ckpt/qwen-ft/")
    res["models"]["Qwen2.5-1.5B-Instruct"]["meta"].update(source="/home/alice/private/ckpt/qwen-ft/",
                                                          source_type="local")
    (tmp_path / "run" / "results.json").write_text(json.dumps(res))
    assert CliRunner().invoke(main, ["render", str(tmp_path / "run"), "--format", "hf",
                                     "--model", "Qwen2.5-1.5B-Instruct"]).exit_code == 0
    text = readme.read_text()
    assert ("The weights evaluated: a local directory, `qwen-ft` (its path, on the machine that ran, is on the run's "
            "own card)") in text and "/home/alice" not in text
    assert "Answers read from the option log-probs where the response named no option (part of the score): " \
           "arc\\_challenge 25%." in card.text
    assert f"{100 * tasks['mmlu']['score']:.1f} [" in card.text
    bad = CliRunner().invoke(main, ["render", str(tmp_path / "run"), "--format", "hf"])
    assert bad.exit_code == 2 and "--model NAME" in bad.stderr
    bad = CliRunner().invoke(main, ["render", str(tmp_path / "run"), "--format", "hf", "--model", "Nope"])
    assert bad.exit_code == 2 and "is not a model of this run" in bad.stderr
    stale = tmp_path / "run" / "model-index" / "untrained.yaml"  # as a render before this change wrote it
    stale.write_text("model-index: []\n")
    stale_hf = tmp_path / "run" / "hf" / "untrained" / "README.md"
    stale_hf.parent.mkdir(parents=True)
    stale_hf.write_text("---\n")
    bad = CliRunner().invoke(main, ["render", str(tmp_path / "run"), "--format", "hf", "--model", "untrained"])
    assert bad.exit_code == 2 and "is an untrained reference (random weights)" in bad.stderr, bad.output
    r = CliRunner().invoke(main, ["render", str(tmp_path / "run"), "--format", "md"])
    assert r.exit_code == 0 and not stale.exists() and not stale_hf.exists()  # for a model nobody publishes
    assert (tmp_path / "run" / "model-index" / "Qwen2.5-1.5B-Instruct.yaml").is_file()


def test_render_writes_card_md_by_default(tmp_path):
    shutil.copytree(DATA / "run2", tmp_path / "run")
    paths = render(tmp_path / "run")  # what `reporter run` calls after a run
    assert {"html", "pdf", "md"} <= set(paths)
    assert (tmp_path / "run" / "card.md").read_text().startswith("# Model card:")


def test_every_section_prints_alone_and_dotted_task_names_render():
    from reporter.card.data import build_card
    from reporter.card.markdown import MD_SECTIONS, markdown_card

    for section in MD_SECTIONS:  # each block renders on its own (the summary needs the macros)
        r = CliRunner().invoke(main, ["render", str(DATA / "full"), "--format", "md", "--section", section])
        assert r.exit_code == 0, (section, r.output)
    res = json.loads((DATA / "full" / "results.json").read_text())
    manifest = json.loads((DATA / "full" / "manifest.json").read_text())
    for m in res["models"].values():  # a task name with dots (names like gsm8k-v1.1 are valid)
        if "gsm8k" in m["tasks"]:
            m["tasks"]["gsm8k-v1.1"] = {**m["tasks"].pop("gsm8k"), "chance": 0.0}
    for t in manifest["resolved"]["profile"]["tasks"]:
        if t["name"] == "gsm8k":
            t["name"] = "gsm8k-v1.1"
    res.pop("analysis")
    res["analysis"] = None
    text = markdown_card(build_card(res, manifest))
    row = next(r for r in _gfm(text)["Per-task scores"] if r[0].replace("\\", "") == "gsm8k-v1.1")
    assert row[1] == "0.0"  # its chance level, found although the name has a dot


def test_hf_warnings_name_the_model_not_a_longer_name():
    from reporter.card.data import load_card
    from reporter.card.markdown import hf_readme

    card = load_card(DATA / "full")
    card["warnings"] = [("high", "gpt2-large failed to load"), ("medium", "gpt2 is quantised"),
                        ("medium", "Small samples: tasks have 2–8 items")]
    card["models"][0]["name"], card["models"][1]["name"] = "gpt2", "gpt2-large"
    text = hf_readme(card, "gpt2")
    assert "gpt2 is quantised" in text and "gpt2-large failed" not in text
    assert "Small samples: tasks have 2–8 items" in text  # a run-wide warning names no model: every README has it
