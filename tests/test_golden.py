"""Golden run: a fixed tiny configuration must give the same results.json and card text as the
committed copy in tests/data/golden (made before the package was reorganised into stage
sub-packages, and refreshed only when a change of numbers is intended).

Four tiny random-initialised models: three saved as local model directories (so the analysis
treats them as trained models: Utility Law, fairness, contamination, diversity all run) and one
``random:`` untrained baseline; three tasks (multiple choice with calibration, a generative math
task, the SPC probe); MUI, LPP, token log-probs, calibration, contamination evidence.

Timestamps, durations, the config hash and temporary paths are masked; floats are compared within
a relative 1e-4 or an absolute 1e-5 (the run is deterministic on one machine, but float32 kernels
round differently on another CPU: a fresh AMD EPYC machine moved perplexities by 5e-6 relative and
option-order z values, differences of nearby log-likelihoods, by up to 5e-6 absolute; a change of
the code moves them by far more). Correlations across models (``lpp_correlations``) are compared
within 1e-4 absolute: over three near-equal tiny models they are ill-conditioned, and torch's
scalar kernels moved a Pearson r of 0.2327 by 3.3e-5 (benchmarks/RESULTS.md, "Positive controls
across CPU kernels"). The card is compared as the sequence of words ``pdftotext`` reads from the PDF:
the machine-specific manifest fields (command line, git commit, platform, versions) are set to
fixed values and the card re-rendered first, because their length moves the page breaks; dates
and hashes are masked.

Regenerate (only for an intended change, and say why in the commit):
``REPORTER_REGENERATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py``. The copy in the
repository was made by the code before the package was reorganised (this file runs against both:
see ``_reporter_helpers``).
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from reporter.cli import main

from .conftest import TIMING_KEYS

GOLDEN = Path(__file__).parent / "data" / "golden"
#: correlations over the golden run's three near-equal tiny models: ill-conditioned (see the module docstring)
CORRELATION_ABS_TOL = 1e-4
REGENERATE = os.environ.get("REPORTER_REGENERATE_GOLDEN") == "1"
#: keys whose values change from run to run or machine to machine: the wall times (the suite's one list) and these
VOLATILE = TIMING_KEYS | {"created", "config_hash"}
#: manifest fields that differ between machines and invocations, fixed before the card is compared
FIXED_MANIFEST = {"git_commit": "0" * 40, "command": ["reporter", "run", "models.yaml"], "python": "3.11",
                  "platform": "Linux", "processor": "x86_64", "torch": "2", "transformers": "5",
                  "config_file": "models.yaml", "config_hash": "0" * 16, "device": {"cuda_available": False}}

PROFILE = """\
name: golden
mui: {top_ratio: 0.01, mode: score}
lpp: {n_texts: 4, context: 40, min_tokens: 40}
contamination: {verbatim_items: 3, reference_texts: 8}
smoke_texts: 3
tasks:
  - {name: arc_easy, limit: 6, max_new_tokens: 6}
  - {name: gsm8k, limit: 2, max_new_tokens: 12}
  - {name: spc, limit: 4, max_new_tokens: 8}
"""


def _reporter_helpers():
    """``random_config`` and ``tokenizer_dir`` where this version of reporter keeps them (the golden copy was
    made by the version before the package was reorganised, which kept them in top-level modules)."""
    try:  # the pre-reorganisation layout first: this layout has no such modules
        from reporter.adapters import random_config  # type: ignore[import-not-found]
        from reporter.packaged import PACKAGED, tokenizer_dir  # type: ignore[import-not-found]
    except ImportError:
        from reporter.models.packaged import PACKAGED, tokenizer_dir
        from reporter.models.random_archs import random_config
    return random_config, PACKAGED, tokenizer_dir


def _save_local_model(path: Path, family: str, seed: int, tokenizer: Path | None = None) -> None:
    """A tiny random model of ``family`` with the packaged SmolLM2 tokenizer (or the ``tokenizer`` directory:
    the other tests pass conftest's small_tokenizer_dir; the golden copy keeps the packaged one), as a model
    directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    random_config, PACKAGED, tokenizer_dir = _reporter_helpers()

    tok = AutoTokenizer.from_pretrained(str(tokenizer or tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    cfg = random_config(family, vocab=len(tok), layers=2, hidden=64, intermediate=96, heads=4, kv_heads=2)
    cfg.initializer_range = 0.5  # peaked next-token distributions: greedy decoding is not decided by rounding
    cfg.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    cfg.eos_token_id, cfg.bos_token_id = tok.eos_token_id, tok.bos_token_id
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(path)
    tok.save_pretrained(path)


def _models_yaml(root: Path) -> Path:
    _save_local_model(root / "llama-chat", "llama", 1)
    _save_local_model(root / "qwen-base", "qwen2", 2)
    _save_local_model(root / "gpt2-base", "gpt2", 3)
    (root / "profile.yaml").write_text(PROFILE)
    text = f"""\
profile: {root / 'profile.yaml'}
seed: 5
models:
  - {{name: Llama chat, source: ./llama-chat}}
  - {{name: Qwen base, source: ./qwen-base, kind: base}}
  - {{name: GPT-2 base, source: ./gpt2-base, kind: base}}
  - name: Untrained
    source: random:llama
    random: {{layers: 2, hidden: 64, intermediate: 96, heads: 4, kv_heads: 2, seed: 9}}
"""
    path = root / "models.yaml"
    path.write_text(text)
    return path


def _normalise(x, tmp: str):
    """Volatile keys dropped, temporary paths masked."""
    if isinstance(x, dict):
        return {k: _normalise(v, tmp) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [_normalise(v, tmp) for v in x]
    if isinstance(x, str):
        return x.replace(tmp, "<TMP>")
    return x


def _diff(a, b, where="results") -> list[str]:
    """Differences between two JSON values; floats within a relative 1e-4 or an absolute 1e-5."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: only in the golden copy" for k in a.keys() - b.keys()]
        out += [f"{where}.{k}: only in this run" for k in b.keys() - a.keys()]
        for k in a.keys() & b.keys():
            out += _diff(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items in the golden copy, {len(b)} in this run"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{where}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        abs_tol = CORRELATION_ABS_TOL if ".lpp_correlations[" in where else 1e-5
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
                and math.isclose(a, b, rel_tol=1e-4, abs_tol=abs_tol):
            return []
    elif a == b:
        return []
    return [f"{where}: golden {json.dumps(a)[:80]} != run {json.dumps(b)[:80]}"]


def _card_words(pdf: Path, tmp: str) -> list[str]:
    """The card's words as pdftotext reads them, with run-specific values masked."""
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    text = text.replace(tmp, "<TMP>")
    text = re.sub(r"\d{4}-\d{2}-\d{2}(T[\d:]+(\+00:00)?)?", "<date>", text)
    text = re.sub(r"\bconfig [0-9a-f]{16}\b", "config <hash>", text)
    return text.split()


@pytest.fixture(scope="module")
def golden_run():
    # a path of fixed width (the card prints model paths, and their width decides where lines wrap:
    # mkdtemp's random letters have different glyph widths, digits share one)
    root = Path(f"/tmp/golden-{os.getpid():010d}")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    yaml_path = _models_yaml(root)
    out = root / "run"
    # no card yet: it is rendered below, once the manifest's run-specific values are fixed
    r = CliRunner().invoke(main, ["run", str(yaml_path), "-o", str(out), "--no-progress", "--no-render"])
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, **FIXED_MANIFEST}, indent=2))
    r = CliRunner().invoke(main, ["render", str(out), "--format", "pdf"])
    assert r.exit_code == 0, r.output
    yield root, out
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_results_json_matches_the_golden_copy(golden_run):
    root, out = golden_run
    got = _normalise(json.loads((out / "results.json").read_text()), str(root))
    if REGENERATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        (GOLDEN / "results.json").write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads((GOLDEN / "results.json").read_text())
    diffs = _diff(want, got)
    assert not diffs, f"{len(diffs)} difference(s):\n" + "\n".join(diffs[:40])
    # the configuration is not degenerate: every stage has something to say
    assert want["analysis"]["law"]["per_model_average"].get("slope") is not None
    assert want["analysis"]["fairness"]["available"] is True
    assert set(want["analysis"]["diversity"]) == {"Llama chat", "Qwen base", "GPT-2 base"}
    llama = want["models"]["Llama chat"]
    assert llama["meta"]["kind"] == "instruct" and llama["tasks"]["arc_easy"]["shots"] == 0
    assert "calibration" in llama["tasks"]["arc_easy"] and llama["lpp"]["n_texts"] == 4
    assert want["models"]["Qwen base"]["tasks"]["gsm8k"]["shots"] == 1
    # the leaderboard: trained models ranked with intervals, the untrained model a reference row
    ranked = [r["model"] for r in want["analysis"]["ranking"]["models"]]
    assert sorted(ranked) == ["GPT-2 base", "Llama chat", "Qwen base"]
    assert [r["model"] for r in want["analysis"]["references"] if r["kind"] == "chance"] == ["Untrained"]
    assert 0.2 <= llama["tasks"]["arc_easy"]["chance"] <= 0.34 and llama["tasks"]["gsm8k"]["chance"] == 0.0
    assert all("p_holm" in c for c in want["comparisons"])


_NUMBER = re.compile(r"[-+\u2212]?\d[\d,]*(?:\.(\d+))?%?")


def _same_word(a: str, b: str) -> bool:
    """Words of the card equal; printed numbers within the float tolerance of :func:`_diff`, or, when
    printed with decimals, one unit of their last digit apart (another CPU's rounding can cross a
    rounding edge). Whole numbers (counts, ranks) must be equal."""
    if a == b:
        return True
    ma, mb = _NUMBER.fullmatch(a), _NUMBER.fullmatch(b)
    if not (ma and mb):
        return False
    x, y = (float(w.rstrip("%").replace(",", "").replace("\u2212", "-")) for w in (a, b))
    decimals = max(len(ma.group(1) or ""), len(mb.group(1) or ""))
    if not decimals:
        return False
    return math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-5) or abs(x - y) <= 10.0 ** -decimals * 1.000001


def test_same_word_tolerates_rounding_only():
    assert _same_word("104974090.6", "104974603.1") and _same_word("0.42", "0.43") and _same_word("1,024", "1,024")
    assert not _same_word("0.42", "0.44") and not _same_word("12%", "15%") and not _same_word("weak", "none")
    assert not _same_word("2", "3") and not _same_word("1,024", "1,025")  # counts are exact


def test_diff_tolerates_float_rounding_and_no_more():
    """Scalar kernels' move of an LPP correlation passes; the same move of a score, or a correlation moved by a
    code change's size, does not."""
    corr = {"lpp_correlations": [{"pearson_r": 0.2327340445373551}]}
    assert _diff(corr, {"lpp_correlations": [{"pearson_r": 0.232701}]}) == []
    assert _diff(corr, {"lpp_correlations": [{"pearson_r": 0.2337}]})
    assert _diff({"score": 0.2327340445373551}, {"score": 0.232701})
    assert _diff({"x": 47.12709}, {"x": 47.12747}) == []  # 8e-6 relative: float32 summation order


@pytest.mark.slow
@pytest.mark.browser
def test_card_text_matches_the_golden_copy(golden_run):
    root, out = golden_run
    got = _card_words(out / "card.pdf", str(root))
    if REGENERATE:
        (GOLDEN / "card.txt").write_text(" ".join(got) + "\n")
    want = (GOLDEN / "card.txt").read_text().split()
    if len(got) != len(want) or not all(map(_same_word, want, got)):
        i = next((k for k, (a, b) in enumerate(zip(want, got)) if not _same_word(a, b)), min(len(want), len(got)))
        raise AssertionError(f"card text differs at word {i}: golden {' '.join(want[max(0, i - 12):i + 12])!r} "
                             f"vs run {' '.join(got[max(0, i - 12):i + 12])!r}")


def test_a_test_too_small_to_fire_is_not_called_not_measured_on_the_board(golden_run):
    """The board merged "no test could run" and "a test ran but could not fire at this size" into "not measured",
    where the run's card said "too small to fire"."""
    from reporter.analyse.board import build_board
    from reporter.analyse.board_runs import contamination_state

    run = golden_run[1]
    rows = json.loads((run / "results.json").read_text())["analysis"]["contamination"]
    doc = build_board([run], n_resamples=50)
    shown = {(r["model"], t): s.get("contamination") for r in doc["rows"] for t, s in r["tasks"].items()}
    want = {}
    for row in rows:  # the reference: a plain reading of each row's signals
        signals = [s for s in row["signals"].values() if isinstance(s, dict)]
        if row["measured"]:
            state = row["severity"]
        elif any(s.get("measured") and s.get("test", True) and s.get("in_correction") is False for s in signals):
            state = "too small to fire"
        else:
            state = "not measured"
        assert contamination_state(row) == state
        want[(row["model"], row["task"])] = state
    assert "too small to fire" in want.values()  # the case the board lost
    assert {k: v for k, v in shown.items() if k in want} == {k: v for k, v in want.items() if k in shown}


def test_replies_cut_before_their_answer_are_told_and_answers_read_first_are_not(golden_run):
    """The controls of the analysis's 'cut' rows (:mod:`reporter.analyse.responses`) at the golden run's sizes: the
    three tiny trained models never finish a GSM8K answer in 12 tokens (positive); their multiple-choice and SPC
    replies are cut too but are read from their first words, and the untrained reference is not told about
    (negative). The expected rows are a plain reading of the samples (tests/test_replies.py's ``ref_check``)."""
    from tests.test_replies import ref_check

    root, out = golden_run
    results = json.loads((out / "results.json").read_text())
    rows = {(r["model"], r["task"]): r["kind"] for r in results["analysis"]["responses"]}
    want, cut_anyway = {}, set()
    for name, entry in results["models"].items():
        for task, summary in entry["tasks"].items():
            records = [json.loads(line) for line in
                       (out / "models" / entry["slug"] / "tasks" / task / "samples.jsonl").read_text().splitlines()]
            if any(r["stopped_by"] == "length" for r in records):
                cut_anyway.add((name, task))
            kind = ref_check(records, summary["scorer"])
            if kind is not None and name != "Untrained":
                want[(name, task)] = kind
    assert rows == want
    assert {t for (_, t), k in rows.items() if k == "cut"} == {"gsm8k"} and len(rows) == 3  # fires where it must
    assert {("Llama chat", "arc_easy"), ("Llama chat", "spc"), ("Untrained", "gsm8k")} <= cut_anyway  # not vacuous


def test_spc_exact_match_beside_char_f1_is_a_plain_count_of_the_samples(golden_run):
    """The LPP authors' code reports exact match beside the paper's char-F1, which ignores the order of characters
    (a mirror item answered by copying its sequence scores 1.0): the summary's share is the samples' own count."""
    root, out = golden_run
    results = json.loads((out / "results.json").read_text())
    for name, entry in results["models"].items():
        spc = entry["tasks"]["spc"]
        records = [json.loads(line) for line in
                   (out / "models" / entry["slug"] / "tasks" / "spc" / "samples.jsonl").read_text().splitlines()]
        exact = reordered = 0
        for r in records:
            got, gold = r["extracted"] or "", r["gold"]
            if got == gold:
                exact += 1
            elif sorted(got) == sorted(gold):
                reordered += 1
        assert spc["spc"] == {"n": len(records), "exact_match": exact / len(records),
                              "reordered": reordered / len(records)}, name


def test_every_warning_is_on_the_pdf_card_when_the_summary_has_no_room(golden_run):
    """The summary shows the top four warnings; the rest were on no page of the HTML or PDF card (only card.md
    listed them): with the replies' warning added, "No LPP–benchmark correlation is reliable" vanished from the
    golden card. The others now sit under Limitations, and the summary says how many."""
    from reporter.card.data import SUMMARY_WARNINGS, load_card

    root, out = golden_run
    card = load_card(out)
    assert len(card["warnings"]) > SUMMARY_WARNINGS  # the case: more than the summary shows
    words = " ".join(_card_words(out / "card.pdf", str(root)))
    flat = re.sub(r"\s+", " ", words.replace("- ", ""))
    for _, text in card["warnings"]:
        want = re.sub(r"\s+", " ", text.replace(str(root), "<TMP>"))
        assert want[:60] in flat, want  # the first words: a long sentence may break across a page
    more = len(card["warnings"]) - SUMMARY_WARNINGS
    assert f"{more} more warning{'s' * (more != 1)}, none more severe than these: under Limitations" in flat


def _undeclared(value, hint, where: str) -> list[str]:
    """The keys of ``value`` that the schema type ``hint`` does not declare, by path (dicts of a type walked)."""
    import typing

    def is_typeddict(t) -> bool:  # typing's and typing_extensions' TypedDicts alike
        return isinstance(t, type) and hasattr(t, "__required_keys__")

    def strip(t):
        while typing.get_origin(t) in (typing.Required, typing.NotRequired, typing.Annotated):
            t = typing.get_args(t)[0]
        return t

    t = strip(hint)
    origin = typing.get_origin(t)
    if origin is typing.Union or type(t).__name__ == "UnionType":
        for arm in map(strip, typing.get_args(t)):
            if isinstance(value, dict) and (is_typeddict(arm) or typing.get_origin(arm) is dict) \
                    or isinstance(value, list) and typing.get_origin(arm) is list:
                return _undeclared(value, arm, where)
        return []
    out = []
    if is_typeddict(t) and isinstance(value, dict):
        hints = typing.get_type_hints(t, include_extras=True)
        for k, v in value.items():
            out += [f"{where}.{k} ({t.__name__})"] if k not in hints else _undeclared(v, hints[k], f"{where}.{k}")
    elif origin is list and isinstance(value, list):
        out += [x for v in value for x in _undeclared(v, typing.get_args(t)[0], f"{where}[]")]
    elif origin is dict and isinstance(value, dict):
        out += [x for k, v in value.items() for x in _undeclared(v, typing.get_args(t)[1], f"{where}.*")]
    return out


def test_results_json_holds_no_key_the_reference_does_not_list(golden_run):
    """The results.json reference (docs/reference/results-json.md, generated from the schema) said it "cannot drift
    from the code", while about 100 keys reporter writes were in no table (a review found them: the law fits'
    p-values, the contamination signals' counts, the LPP signature's prefix lengths …). Every key of the golden run's
    results.json, its task summaries and its lpp.json is now declared; a new one fails here until it is."""
    from reporter.schema import documents

    root, out = golden_run
    results = json.loads((out / "results.json").read_text())
    missing = sorted(set(_undeclared(results, documents.Results, "results")))
    for summary in out.glob("models/*/tasks/*/summary.json"):
        missing += _undeclared(json.loads(summary.read_text()), documents.TaskSummary, summary.name)
    for lpp in out.glob("models/*/lpp.json"):
        missing += _undeclared(json.loads(lpp.read_text()), documents.LPPProfile, lpp.name)
    assert not missing, missing
    assert _undeclared({"analysis": {"law": {"pooled": {"slope": 1.0, "surprise": 2}}}}, documents.Results, "r") == \
        ["r.analysis.law.pooled.surprise (LawFit)"]  # the check itself finds an undeclared key
