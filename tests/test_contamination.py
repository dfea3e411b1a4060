"""Contamination signals, the log-prob collector and Min-K% Prob; a model trained on a toy task's
test items is flagged, the untouched model is not."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from scipy import stats

from reporter.analyse.contamination import (
    CONTAMINATION_RULE,
    assess,
    combine,
    law_residual_signal,
    min_k_signal,
    verbatim_signal,
)
from reporter.collect import verbatim
from reporter.collect.collectors import logprobs
from reporter.collect.collectors.logprobs import (
    TokenLogProbCollector,
    collect_reference_logprobs,
    question_span,
    token_logprobs,
)
from reporter.collect.verbatim import collect_verbatim, verbatim_completion
from reporter.config import ContaminationConfig
from reporter.instrument.batch import left_pad
from reporter.instrument.hooked_pass import PassBatch, hooked_pass
from reporter.metrics.min_k import min_k_percent_prob, question_logprobs
from reporter.store.logprobs import load_logprobs, merge_logprobs, save_logprobs
from reporter.tasks.sources import lambada_texts

from .conftest import tiny_lm, tiny_model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from threads; on a shared 2-core machine one thread is far faster."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------------------------------------------------------------- Min-K% and the collector

def test_min_k_reference():
    rng = np.random.default_rng(0)
    for n in (1, 3, 10, 37):
        x = rng.normal(-3, 2, n)
        m = max(1, int(0.2 * n))
        assert min_k_percent_prob(x, 0.2) == pytest.approx(sum(sorted(x.tolist())[:m]) / m)
    assert min_k_percent_prob([-1.0, -2.0], k=1.0) == pytest.approx(-1.5)


def reference_logprobs(model, seq):
    with torch.no_grad():
        lp = model(torch.tensor([seq])).logits[0].double().log_softmax(-1)
    return [float(lp[t, seq[t + 1]]) for t in range(len(seq) - 1)]


@pytest.mark.parametrize("chunk", [None, 300])
def test_collector_matches_per_sequence_reference(monkeypatch, chunk):
    if chunk:
        monkeypatch.setattr(logprobs, "_CHUNK_ELEMENTS", chunk)  # two positions per chunk (vocab 211)
    from reporter.models.adapters import get_adapter

    model = tiny_model("llama")
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (5, 2, 7)]
    resps = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (3, 4, 0)]
    seqs = [p + r for p, r in zip(prompts, resps)]
    ids, mask = left_pad(seqs, 0, "cpu")
    resp = torch.zeros_like(mask, dtype=torch.bool)
    for i, r in enumerate(resps):
        if r:
            resp[i, ids.shape[1] - len(r):] = True
    col = TokenLogProbCollector()
    hooked_pass(model, get_adapter(model), PassBatch(ids, mask, resp), [col])
    for i, (p, r) in enumerate(zip(prompts, resps)):
        ref = reference_logprobs(model, p + r)
        got_p, got_r = col.prompt_results()[i], col.response_results()[i]
        assert got_p.dtype == np.float32 and len(got_p) == len(p) - 1 and len(got_r) == len(r)
        assert got_p == pytest.approx(ref[:len(p) - 1], abs=2e-4)
        assert got_r == pytest.approx(ref[len(p) - 1:], abs=2e-4)


def test_question_span_in_plain_and_chat_prompts():
    from reporter.tasks import Item, Task
    from reporter.tasks.prompts import build_prompt, encode_prompt

    task = Task("t", "choice", "Pick one.", "Answer:", load=list)
    item = Item("1", "Which gas do plants absorb?\nA. oxygen\nB. carbon dioxide", "B")
    demo = Item("0", "Which planet is red?\nA. Mars\nB. Venus", "A")
    for kind in ("base", "instruct"):
        lm = tiny_lm(kind=kind)
        text = build_prompt(lm, task, item, [demo])
        ids = encode_prompt(lm, text)
        s, e = question_span(lm.tokenizer, text, item.question, ids)
        assert lm.tokenizer.decode(ids[s:e]).strip() == item.question
        assert 0 < s < e <= len(ids)
    assert question_span(lm.tokenizer, "abc", "zzz", [1, 2]) is None
    lp = np.arange(1.0, 10.0)  # prompt token j has log-prob lp[j - 1]
    assert question_logprobs(lp, (3, 6)).tolist() == [3.0, 4.0, 5.0]
    assert question_logprobs(lp, (0, 2)).tolist() == [1.0]


def test_save_load_and_merge_parts(tmp_path):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    save_logprobs(a, ["x", "y"], [np.array([-1.0, -2.0]), np.array([])], [np.array([-0.5]), np.array([-3.0])],
                  [(1, 3), None], {"model": "m"})
    save_logprobs(b, ["y", "z"], [np.array([]), np.array([-4.0])], [np.array([-3.0]), np.array([])])
    d, meta = load_logprobs(a)
    assert list(d) == ["x", "y"] and meta["model"] == "m"
    assert d["x"]["prompt"].tolist() == [-1.0, -2.0] and d["x"]["question_span"] == (1, 3)
    assert d["y"]["prompt"].tolist() == [] and d["y"]["response"].tolist() == [-3.0]
    assert merge_logprobs(tmp_path / "all.npz", [a, b]) == 3  # y is stored identically twice: kept once
    d, _ = load_logprobs(tmp_path / "all.npz")
    assert list(d) == ["x", "y", "z"] and d["z"]["question_span"] is None and d["z"]["prompt"].tolist() == [-4.0]
    save_logprobs(b, ["y"], [np.array([-9.0])])
    with pytest.raises(RuntimeError, match="'y' is already stored with different values"):
        merge_logprobs(tmp_path / "all.npz", [a, b])
    with pytest.raises(ValueError):
        save_logprobs(a, ["q"], [np.array([1.0]), np.array([2.0])])


# ---------------------------------------------------------------- signals and the rule

def test_min_k_signal_statistics():
    rng = np.random.default_rng(3)
    bench = [rng.normal(-1.0, 0.5, 20) for _ in range(12)]
    ref = [rng.normal(-1.6, 0.5, 60) for _ in range(15)]
    s = min_k_signal(bench, ref)
    b = [min_k_percent_prob(x, 0.2) for x in bench]
    r = [min_k_percent_prob(x[:20], 0.2) for x in ref]  # cut to the median benchmark length
    pairs = sum((x > y) + 0.5 * (x == y) for x in b for y in r)
    assert s["auc"] == pytest.approx(pairs / (len(b) * len(r)))
    assert s["p_value"] == pytest.approx(stats.mannwhitneyu(b, r, alternative="greater").pvalue)
    assert s["reference_length"] == 20 and s["n_benchmark"] == 12 and s["n_reference"] == 15
    assert s["fires"] == (s["p_value"] < 0.01 and s["auc"] >= 0.75)
    same = min_k_signal(bench, [rng.normal(-1.0, 0.5, 20) for _ in range(15)])
    assert not same["fires"]
    few = min_k_signal(bench[:4], ref)
    assert not few["measured"] and "at least 5" in few["reason"]
    short = min_k_signal([np.array([-1.0, -2.0])] * 10, ref)  # < 4 tokens: left out
    assert not short["measured"]


def test_rule_never_strong_on_one_signal():
    on, off = {"measured": True, "fires": True, "evidence": "x"}, {"measured": True, "fires": False}
    nm = {"measured": False, "fires": False}
    for k in ("law_residual", "min_k", "verbatim"):
        sig = {"law_residual": off, "min_k": off, "verbatim": off, k: on}
        assert combine(sig)[0] == "weak"
        sig = {"law_residual": nm, "min_k": nm, "verbatim": nm, k: on}
        assert combine(sig)[0] == "weak"
    assert combine({"law_residual": on, "min_k": on, "verbatim": nm})[0] == "strong"
    assert combine({"law_residual": off, "min_k": on, "verbatim": on})[0] == "strong"
    assert combine({"law_residual": off, "min_k": off, "verbatim": nm})[0] == "none"
    sev, text = combine({"law_residual": nm, "min_k": nm, "verbatim": nm})
    assert sev == "none" and "No contamination signal" in text
    assert assess("m", "t")["measured"] is False and assess("m", "t", min_k=off)["measured"] is True
    row = assess("m", "t", min_k=on)
    assert row["severity"] == "weak" and "Not measured: law residual, verbatim completion" in row["evidence"]
    assert "never" in CONTAMINATION_RULE and "strong = at least two signals" in CONTAMINATION_RULE


def test_law_and_verbatim_signals():
    s = law_residual_signal(2.5, 90.0, 60.0, n_points=5)
    assert s["measured"] and s["fires"] and "z = +2.50" in s["evidence"]
    assert not law_residual_signal(1.9, 90.0, 60.0, n_points=5)["fires"]
    assert not law_residual_signal(2.5, 60.0, 60.0, n_points=5)["fires"]  # not above the median
    assert law_residual_signal(float("inf"), 90.0, 60.0, n_points=5)["fires"]
    assert not law_residual_signal(5.0, 90.0, 60.0, n_points=3)["measured"]
    assert verbatim_signal({"n": 20, "rate": 0.1, "token_match": 0.2})["fires"]  # 2 of 20 exact
    assert not verbatim_signal({"n": 5, "rate": 0.2, "token_match": 0.2})["fires"]  # only 1 exact
    assert verbatim_signal({"n": 5, "rate": 0.0, "token_match": 0.65})["fires"]
    assert not verbatim_signal({"n": 0, "rate": None, "token_match": None})["measured"]


# ---------------------------------------------------------------- a model trained on the test set

def toy_items(n=8, seed=0):
    rng = random.Random(seed)
    names = ["Tom", "Ana", "Li", "Omar", "Sara", "Ivan", "Mia", "Kofi", "Yuki", "Lena"]
    objs = ["apples", "pencils", "stamps", "marbles", "books", "coins", "shells", "cards"]
    out = []
    for i in range(n):
        who, what, a, b = rng.choice(names), rng.choice(objs), rng.randint(2, 40), rng.randint(2, 40)
        out.append((f"toy-{i}", f"Question: {who} has {a} {what} and finds {b} more {what} in a box. "
                                f"How many {what} does {who} have now? Answer: {a + b}"))
    return out


def evidence(lm, items, ref_ids):
    texts = [t for _, t in items]
    v = verbatim_completion(lm, items, n_tokens=32)
    bench = token_logprobs(lm, [lm.tokenizer(t)["input_ids"] for t in texts])
    ref = token_logprobs(lm, ref_ids)
    return {"verbatim": v, "row": assess("tiny", "toy", min_k=min_k_signal(bench, ref), verbatim=verbatim_signal(v))}


@pytest.fixture(scope="module")
def trained_and_untouched():
    torch.manual_seed(0)
    items = toy_items()
    lm = tiny_lm("llama")
    tok = lm.tokenizer
    ref_ids = [tok(t)["input_ids"][:48] for t in lambada_texts(16)]
    untouched = evidence(lm, items, ref_ids)
    enc = tok([t for _, t in items], return_tensors="pt", padding=True)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    lm.model.train()
    opt = torch.optim.AdamW(lm.model.parameters(), lr=1e-2)
    for _ in range(25):
        loss = lm.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    lm.model.eval()
    return {"untouched": untouched, "trained": evidence(lm, items, ref_ids), "lm": lm, "items": items}


def test_trained_on_test_items_is_flagged(trained_and_untouched):
    t = trained_and_untouched["trained"]
    sig = t["row"]["signals"]
    assert sig["verbatim"]["fires"] and sig["min_k"]["fires"]
    assert t["row"]["severity"] == "strong"
    assert t["verbatim"]["rate"] >= 0.5 and sig["min_k"]["auc"] > 0.9


def test_untouched_model_is_not_flagged(trained_and_untouched):
    u = trained_and_untouched["untouched"]
    assert u["row"]["severity"] == "none"
    assert not u["row"]["signals"]["verbatim"]["fires"] and not u["row"]["signals"]["min_k"]["fires"]
    assert u["verbatim"]["rate"] == 0.0 and u["verbatim"]["n"] == 8


def test_verbatim_per_item_and_sampling(trained_and_untouched):
    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"]
    v = verbatim_completion(lm, items + [("short", "Too short.")], n_tokens=32, max_items=None)
    assert v["n"] == 8 and v["n_skipped"] == 1
    for p in v["per_item"]:
        assert 8 <= p["n_target"] <= 32 and (p["token_match"] == 1.0) == p["exact"]
    assert v["rate"] == pytest.approx(np.mean([p["exact"] for p in v["per_item"]]))
    sub = verbatim_completion(lm, items, max_items=3, seed=1)
    assert sub["n"] == 3 and len({p["id"] for p in sub["per_item"]}) == 3


def test_collect_stage_artifacts(trained_and_untouched, tmp_path, monkeypatch):
    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"]
    from reporter.tasks import Item

    its = [Item(i, q, "") for i, q in items[:4]]
    res = collect_verbatim(lm, its, tmp_path / "task", ContaminationConfig(verbatim_items=10))
    stored = json.loads((tmp_path / "task" / "verbatim.json").read_text())
    assert stored["n"] == 4 and stored["per_item"][0]["id"] == "toy-0" and stored == json.loads(json.dumps(res))
    monkeypatch.setattr(verbatim, "verbatim_completion", lambda *a, **k: pytest.fail("recomputed"))
    assert collect_verbatim(lm, its, tmp_path / "task", ContaminationConfig())["n"] == 4  # resume: read back
    ref = tmp_path / "m" / "reference_logprobs.npz"
    texts = ["The cat sat on the mat and looked at the door.", "Rain fell all night over the quiet town."]
    assert collect_reference_logprobs(lm, ref, texts, max_tokens=6) == 2
    d, meta = load_logprobs(ref)
    assert meta["kind"] == "reference" and list(d) == ["ref-0000", "ref-0001"]
    expect = token_logprobs(lm, [lm.tokenizer(t)["input_ids"][:6] for t in texts])
    assert all(np.allclose(d[k]["prompt"], e, atol=1e-5) for k, e in zip(d, expect))

