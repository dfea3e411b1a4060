"""Replies that measure the generation settings, not the model (:mod:`reporter.analyse.responses`): the analysis's
``responses`` rows and the card's warnings, on real models.

Positive control of 'empty' here: a model whose every reply is the end of text (a GPT-2 whose last layer norm always
points at its EOS embedding), on GSM8K; on ARC-Easy its empty replies are scored by its option log-probs, and are not
told about. The golden run (tests/test_golden.py) holds the controls of 'cut': three tiny trained
models that never finish a GSM8K answer in 12 tokens are told; the same models' multiple-choice and SPC replies, cut
as well but read from their first words, and the untrained reference are not. The rule itself is checked against a
plain count.
"""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from reporter.analyse.responses import ANSWER_LAST, check_replies
from reporter.card.data import load_card
from reporter.card.markdown import markdown_card
from reporter.cli import main

from .conftest import small_tokenizer_dir


def ref_check(records, scorer):
    """The rule by plain loops: the generated replies, then 'empty' if half or more hold no text, ended at once and
    were scored as empty, else 'cut' if half or more were cut at the limit and scored 0 on a task whose scorer reads
    the end or the whole of the reply."""
    n = empty = cut_wrong = cut_unread = 0
    for r in records:
        if r.get("stopped_by") not in ("eos", "stop", "length"):
            continue
        n += 1
        if str(r.get("response") or "").strip() == "" and r["stopped_by"] in ("eos", "stop") \
                and r.get("answer_source") != "logprob":
            empty += 1
        if r["stopped_by"] == "length" and float(r.get("score") or 0) == 0.0:
            cut_wrong += 1
            if r.get("extracted") in ("[invalid]", "", " "):  # lm-eval's filter found no answer in it
                cut_unread += 1
    if n == 0:
        return None
    if empty * 2 >= n:
        return "empty"
    if scorer in ("numeric", "math", "code") and cut_wrong * 2 >= n:
        return "cut"
    if scorer == "lm_eval" and cut_unread * 2 >= n:
        return "cut"
    return None


def _rec(text, why, score=0.0, tokens=3):
    return {"response": text, "stopped_by": why, "score": score, "response_tokens": tokens}


CASES = [
    ([_rec("", "stop", tokens=0)] * 2 + [_rec("4", "eos", 1.0)] * 2, "numeric"),  # exactly half empty
    ([_rec("", "stop", tokens=0)] + [_rec("4", "eos", 1.0)] * 2, "numeric"),  # fewer than half
    ([_rec(" \n", "eos", tokens=1)] * 3, "choice"),  # whitespace is empty, on any task
    ([_rec("Let x be", "length", tokens=6)] * 2 + [_rec("5", "eos", 1.0)] * 2, "numeric"),  # half cut and wrong
    ([_rec("Let x be", "length", tokens=6)] + [_rec("5", "eos", 1.0)] * 2, "numeric"),
    ([_rec("The answer is 5 because", "length", 1.0, 6)] * 4, "numeric"),  # cut but right: the answer came first
    ([_rec("A. blue and", "length", tokens=4)] * 4, "choice"),  # a choice read from the first words
    ([_rec("def f(x):", "length", tokens=96)] * 2, "code"),
    ([_rec("ambiguous_status=AMB", "length", tokens=20)] * 3, "ar"),
    ([{"response": "", "stopped_by": "option", "score": 0.0}] * 4, "lm_eval"),  # log-likelihood requests: no replies
    ([{"response": "", "stopped_by": "option", "score": 0.0}] * 4 + [_rec("", "eos", tokens=0)], "lm_eval"),
    ([_rec("   \n ", "length", tokens=96)] * 5, "numeric"),  # whitespace to the limit: cut, not ended at once
    ([_rec("", "length", tokens=3)] * 3 + [_rec("", "stop", tokens=0)] * 2, "choice"),
    ([{**_rec("", "eos", tokens=0), "answer_source": "logprob"}] * 3, "choice"),  # scored by the option log-probs
    ([_rec("London is the capital and", "length", tokens=32)] * 3, "exact"),  # a short answer read first
    ([_rec("(B) because the", "length", tokens=32)] * 3, "lm_eval"),  # lm-eval's reading is not known here
    # lm-eval generate_until: its filter found no answer in half the replies, cut at the limit and scored 0
    ([{**_rec("Tom has 3 apples and", "length", tokens=8), "extracted": "[invalid]"}] * 2
     + [{**_rec("#### 4", "eos", 1.0), "extracted": "4"}] * 2, "lm_eval"),
    ([{**_rec("Tom has 3 apples and", "length", tokens=8), "extracted": "[invalid]"}]
     + [{**_rec("#### 4", "eos", 1.0), "extracted": "4"}] * 2, "lm_eval"),  # fewer than half
    ([{**_rec("so 3 + 4 is 7 and then", "length", tokens=8), "extracted": "7"}] * 3, "lm_eval"),  # found a wrong one
    ([{**_rec("so the", "length", tokens=8), "extracted": " "}] * 3, "lm_eval"),  # nothing, as whitespace
    ([{**_rec("so the", "length", tokens=8), "extracted": "[invalid]", "score": 1.0}] * 3, "lm_eval"),  # scored 1
    ([{**_rec("so the", "length", tokens=8), "extracted": "[invalid]"}] * 3, "numeric"),  # reporter's own: cut_wrong
]


@pytest.mark.parametrize("records,scorer", CASES)
def test_the_rule_against_a_plain_count(records, scorer):
    got = check_replies(records, scorer)
    assert (got or {}).get("kind") == ref_check(records, scorer)
    if got is not None:
        replies = [r for r in records if r["stopped_by"] in ("eos", "stop", "length")]
        assert got["n"] == len(replies) and sum(got["stopped"].values()) == len(replies)
        assert got["cut"] == sum(r["stopped_by"] == "length" for r in replies)
        assert sum(got["empty_stopped"].values()) == got["empty"] and "length" not in got["empty_stopped"]
        assert ("cut_unread" in got) == (scorer == "lm_eval")
    assert ANSWER_LAST == {"numeric", "math", "code"}


def _mute_gpt2(path):
    """A GPT-2 that ends every reply at once: its final layer norm outputs the (enlarged) EOS embedding whatever the
    input, so the tied unembedding ranks EOS first at every step. Real weights, edited; no mock."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reporter.models.random_archs import random_config

    tok = AutoTokenizer.from_pretrained(str(small_tokenizer_dir()))
    cfg = random_config("gpt2", vocab=len(tok), layers=2, hidden=64, intermediate=96, heads=4)
    cfg.eos_token_id, cfg.bos_token_id, cfg.pad_token_id = tok.eos_token_id, tok.bos_token_id, tok.eos_token_id
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        wte = model.transformer.wte.weight
        wte[tok.eos_token_id] = 5.0 * wte.norm(dim=1).max() / wte.shape[1] ** 0.5  # the longest row: ranked first
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(wte[tok.eos_token_id])
    model.save_pretrained(path)
    tok.save_pretrained(path)


def test_a_model_that_ends_every_reply_at_once_is_told_where_its_score_is_of_an_empty_reply(tmp_path):
    """The positive control of 'empty' on GSM8K; its negative on ARC-Easy, where the same empty replies were scored by
    the option the model's log-probs prefer (``answer_source: logprob``), so that score is not of an empty reply."""
    _mute_gpt2(tmp_path / "mute")
    (tmp_path / "profile.yaml").write_text(
        "lpp: {enabled: false}\nmui: {enabled: false}\nsmoke_texts: 2\n"
        "contamination: {verbatim_items: 0, order_items: 0, split_items: 0, reference_texts: 0}\ntasks:\n"
        "  - {name: gsm8k, limit: 3, max_new_tokens: 6}\n  - {name: arc_easy, limit: 3, max_new_tokens: 4}\n")
    (tmp_path / "models.yaml").write_text("profile: profile.yaml\nseed: 2\nmodels:\n"
                                          "  - {name: Mute, source: ./mute, kind: base}\n")
    r = CliRunner().invoke(main, ["run", str(tmp_path / "models.yaml"), "-o", str(tmp_path / "run"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    rows = {(x["model"], x["task"]): x for x in results["analysis"]["responses"]}
    assert set(rows) == {("Mute", "gsm8k")}
    assert rows[("Mute", "gsm8k")]["kind"] == "empty" and rows[("Mute", "gsm8k")]["empty"] == 3
    assert rows[("Mute", "gsm8k")]["empty_stopped"] == {"eos": 3} and rows[("Mute", "gsm8k")]["cut"] == 0
    arc = [json.loads(line) for line in
           (tmp_path / "run" / "models" / "Mute" / "tasks" / "arc_easy" / "samples.jsonl").read_text().splitlines()]
    assert all(x["response"] == "" and x["stopped_by"] == "eos" and x["answer_source"] == "logprob" for x in arc)
    card = markdown_card(load_card(tmp_path / "run")).replace("\\_", "_")
    assert ("Mute's replies were empty on gsm8k (3 of 3): it stopped at once, at its end-of-text token. Those scores "
            "are of an empty reply, not of what the model knows.") in card
    assert "Replies cut at" not in card and "arc_easy (3 of 3)" not in card
    assert results["analysis"]["definitions"]["responses"].startswith("A trained model's task is flagged 'empty'")
