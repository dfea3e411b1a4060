"""The contamination evidence collectors (log-probs, option orders, verbatim, reference text) on real
tiny models; a model trained on a toy task's test items is flagged, the untouched model is not. The
signals' statistics and the rule without a model are in test_contamination_signals.py."""
from __future__ import annotations

import json
import random
import types

import numpy as np
import pytest
import torch

from reporter.analyse.contamination import (
    apply_fdr,
    assess,
    option_order_signal,
    verbatim_signal,
)
from reporter.collect import reference, verbatim
from reporter.collect.collectors.logprobs import TokenLogProbCollector, question_span
from reporter.collect.option_order import (
    collect_option_order,
    option_order_evidence,
    option_stem,
    option_token_starts,
    order_is_convention,
)
from reporter.collect.reference import REFERENCE_MAX_TOKENS, REFERENCE_VERBATIM_TOKENS, collect_reference
from reporter.collect.text_scores import token_logprobs
from reporter.collect.verbatim import collect_verbatim, verbatim_completion
from reporter.config import ContaminationConfig
from reporter.instrument import gather
from reporter.instrument.batch import left_pad
from reporter.instrument.hooked_pass import PassBatch, hooked_pass
from reporter.metrics.min_k import min_k_percent_prob, question_logprobs
from reporter.store.logprobs import load_logprobs, merge_logprobs, save_logprobs
from reporter.tasks.sources import lambada_texts

from .conftest import tiny_lm, tiny_model, train_on

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one intra-op thread is fastest


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
        monkeypatch.setattr(gather, "CHUNK_ELEMENTS", chunk)  # two positions per chunk (vocab 211)
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


# ---------------------------------------------------------------- a model trained on the test set

def toy_items(n=10, seed=0):
    """Multiple-choice word problems (stem, four numeric options in a random order)."""
    from reporter.tasks import Item
    from reporter.tasks.base import mc_question

    rng = random.Random(seed)
    names = ["Tom", "Ana", "Li", "Omar", "Sara", "Ivan", "Mia", "Kofi", "Yuki", "Lena"]
    objs = ["apples", "pencils", "stamps", "marbles", "books", "coins", "shells", "cards"]
    out = []
    for i in range(n):
        who, what, a, b = rng.choice(names), rng.choice(objs), rng.randint(2, 40), rng.randint(2, 40)
        opts = [str(a + b), str(a + b + 1), str(abs(a - b) + 2), str(a * 2 + 3)]
        opts = list(dict.fromkeys(opts)) + [str(a + b + 7)] * (4 - len(set(opts)))
        rng.shuffle(opts)
        stem = f"Question: {who} has {a} {what} and finds {b} more {what} in a box. How many {what} does {who} have now?"
        out.append(Item(f"toy-{i}", mc_question(stem, opts), "ABCD"[opts.index(str(a + b))], opts))
    return out


def evidence(lm, items, ref_texts):
    v = verbatim_completion(lm, [(it.id, it.question) for it in items], n_tokens=32)
    ref = verbatim_completion(lm, [(f"r{j}", t) for j, t in enumerate(ref_texts)], max_items=None, max_text_tokens=48)
    order = option_order_evidence(lm, items, n_perms=8, window=ContaminationConfig.order_window)
    sig = {"option_order": option_order_signal(order), "verbatim": verbatim_signal(v, ref)}
    apply_fdr([sig])
    return {"verbatim": v, "reference": ref, "order": order, "row": assess("tiny", "toy", sig)}


@pytest.fixture(scope="module")
def trained_and_untouched():
    torch.manual_seed(0)
    items = toy_items()
    lm = tiny_lm("llama", vocab="small")
    refs = lambada_texts(16)
    untouched = evidence(lm, items, refs)
    train_on(lm, [f"{it.question}\nAnswer: {it.answer}" for it in items], steps=80)
    return {"untouched": untouched, "trained": evidence(lm, items, refs), "lm": lm, "items": items}


@pytest.mark.slow
def test_trained_on_test_items_is_flagged(trained_and_untouched):
    t = trained_and_untouched["trained"]
    sig = t["row"]["signals"]
    assert sig["verbatim"]["fires"] and sig["option_order"]["fires"]
    assert t["row"]["severity"] == "strong"
    assert t["verbatim"]["rate"] >= 0.5 and sig["option_order"]["top_share"] >= 0.8
    ex = sig["verbatim"]["drivers"][0]  # the evidence a reader sees: the real text next to the continuation
    assert ex["target"] == ex["generated"] and len(ex["target"]) > 5


@pytest.mark.slow
def test_untouched_model_is_not_flagged(trained_and_untouched):
    u = trained_and_untouched["untouched"]
    assert u["row"]["severity"] == "none"
    assert not u["row"]["signals"]["verbatim"]["fires"] and not u["row"]["signals"]["option_order"]["fires"]
    assert u["verbatim"]["rate"] == 0.0 and u["verbatim"]["n"] == 10 and u["reference"]["n"] == 16


@pytest.mark.slow
def test_option_order_evidence_matches_per_text_reference(trained_and_untouched):
    """Each stored log-likelihood equals a plain float64 sum, one sequence at a time, over the tokens
    after the prefix all orders share; the differences between orders (all the test uses) equal
    those of the whole texts' log-likelihoods."""
    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"][:3]
    from reporter.tasks.base import mc_question

    e = option_order_evidence(lm, items, n_perms=4, seed=3)
    assert e["n"] == 3
    for it, rec in zip(items, e["per_item"]):
        stem = option_stem(it.question, it.choices)
        variants = [list(range(4))] + rec["perms"]
        enc = [lm.tokenizer(mc_question(stem, [it.choices[j] for j in perm]))["input_ids"] for perm in variants]
        shared = next(j for j in range(min(map(len, enc))) if len({tuple(x[:j + 1]) for x in enc}) > 1)
        assert rec["scored_from"] == shared > 5  # the stem's tokens are not scored
        full = []
        for ids, ll in zip(enc, [rec["ll"]] + rec["perm_ll"]):
            with torch.no_grad():
                logits = lm.model(torch.tensor([ids])).logits[0].double()
            lp = [float(torch.log_softmax(logits[t], -1)[ids[t + 1]]) for t in range(len(ids) - 1)]
            assert ll == pytest.approx(sum(lp[shared - 1:]), abs=1e-3)
            full.append(sum(lp))
        for j, ll in enumerate(rec["perm_ll"]):
            assert rec["ll"] - ll == pytest.approx(full[0] - full[j + 1], abs=2e-3)
        assert len(rec["perms"]) == 4 and [0, 1, 2, 3] not in rec["perms"]


@pytest.mark.parametrize("window", [2, 6])
@pytest.mark.slow
def test_option_order_window_matches_per_text_reference(trained_and_untouched, window):
    """With a window, each stored log-likelihood is the float64 sum over the first ``window``
    tokens of each option line (from the variants' shared prefix on), one sequence at a time;
    the line starts agree with counting the tokens of the text before each line."""
    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"][:3]
    from reporter.tasks.base import mc_question

    e = option_order_evidence(lm, items, n_perms=4, seed=3, window=window)
    assert e["n"] == 3 and e["window"] == window
    tok = lm.tokenizer
    for it, rec in zip(items, e["per_item"]):
        stem = option_stem(it.question, it.choices)
        variants = [list(range(4))] + rec["perms"]
        lls = [rec["ll"]] + rec["perm_ll"]
        for k, perm in enumerate(variants):
            opts = [it.choices[j] for j in perm]
            text = mc_question(stem, opts)
            ids = tok(text)["input_ids"]
            got_ids, starts = option_token_starts(tok, stem, opts)
            assert got_ids == ids
            lines = text.split("\n")
            chars = [sum(len(x) + 1 for x in lines[:i + 1]) for i in range(len(opts))]
            assert starts == [len(tok(text[:c])["input_ids"]) for c in chars]  # the label's token
            pos = sorted({j for s in starts for j in range(s, min(s + window, len(ids)))})
            pos = [j for j in pos if j >= rec["scored_from"]]
            assert rec["n_scored"][k] == len(pos) > 0
            with torch.no_grad():
                lp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].double(), -1)
            assert lls[k] == pytest.approx(sum(float(lp[j - 1, ids[j]]) for j in pos), abs=1e-3)


class _NoOffsets:
    """The packaged tokenizer as a slow tokenizer sees it: no character offsets; optionally one that
    also appends an end token whenever it adds special tokens (as some tokenizers do)."""

    def __init__(self, tok, append_end: bool, start_differs: bool = False):
        self.tok, self.append_end, self.start_differs = tok, append_end, start_differs
        self.all_special_ids = tok.all_special_ids

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        if return_offsets_mapping:
            raise NotImplementedError("return_offsets_mapping is not available with a slow tokenizer")
        ids = list(self.tok(text, add_special_tokens=add_special_tokens)["input_ids"])
        if add_special_tokens and self.start_differs:
            # a begin token, and a first piece that differs from the text encoded alone (as SentencePiece
            # tokenizers can do with the leading space): the plain tokens are not found inside the full ones
            plain = list(self.tok(text, add_special_tokens=False)["input_ids"])
            ids = [self.tok.eos_token_id, (plain[0] + 1) % len(self.tok)] + plain[1:]
        return {"input_ids": ids + ([self.tok.eos_token_id] if add_special_tokens and self.append_end else [])}


@pytest.mark.parametrize("append_end", [False, True])
def test_option_line_starts_without_offsets_match_the_offsets(append_end):
    """The fallback for tokenizers without character offsets finds the same option-line starts, also for a
    tokenizer that puts an end token after every text it encodes."""
    tok = tiny_lm("llama").tokenizer
    slow = _NoOffsets(tok, append_end)
    for stem, opts in [("Which gas do plants take in?", ["oxygen", "carbon dioxide", "nitrogen", "helium"]),
                       ("A man is seen (outside) a house.", ["he waves.", "then he sings loudly", "it rains"])]:
        ids, starts = option_token_starts(tok, stem, opts)
        slow_ids, slow_starts = option_token_starts(slow, stem, opts)
        assert slow_ids == ids + ([tok.eos_token_id] if append_end else [])
        assert slow_starts == starts and len(set(starts)) == len(opts)


def test_option_line_starts_without_offsets_count_the_begin_token_when_the_text_is_not_found():
    from reporter.tasks.base import mc_question

    tok = tiny_lm("llama").tokenizer
    stem, opts = "Which gas do plants take in?", ["oxygen", "carbon dioxide", "nitrogen", "helium"]
    ids, starts = option_token_starts(tok, stem, opts)
    lead = len(ids) - len(tok(mc_question(stem, opts), add_special_tokens=False)["input_ids"])
    slow_ids, slow_starts = option_token_starts(_NoOffsets(tok, False, start_differs=True), stem, opts)
    assert slow_ids[0] == tok.eos_token_id and slow_starts == [s - lead + 1 for s in starts]


def test_token_logprobs_at_positions_equal_the_whole_sequence():
    """``positions`` gives the same numbers as scoring everything and picking (rows of different lengths
    in one left-padded batch; GPT-2 and Gemma-3, whose heads are reached through the hook)."""
    from reporter.models.adapters import get_adapter

    for fam in ("gpt2", "gemma3", "llama"):
        model = tiny_model(fam)
        lm = types.SimpleNamespace(model=model, tokenizer=types.SimpleNamespace(pad_token_id=0),
                                   adapter=get_adapter(model), device=torch.device("cpu"))
        g = torch.Generator().manual_seed(2)
        seqs = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (9, 4, 12)]
        pos = [[1, 5, 8], [3], [2, 3, 11]]
        full = token_logprobs(lm, seqs, batch_size=3)
        got = token_logprobs(lm, seqs, batch_size=3, positions=pos)
        for f, gt, p in zip(full, got, pos):
            assert gt == pytest.approx(f[[j - 1 for j in p]], abs=1e-5), fam
        with pytest.raises(ValueError, match="must lie in"):
            token_logprobs(lm, seqs[:1], positions=[[0]])


@pytest.mark.slow
def test_verbatim_probe_scores_the_rest_only_where_the_first_tokens_match(trained_and_untouched):
    """The early exit loses nothing :func:`verbatim_result` reads: per item the probed output is the full
    one up to and including its first divergence, or all of it; records are equal (both kinds present)."""
    lm = trained_and_untouched["lm"]
    texts = [(it.id, it.question) for it in trained_and_untouched["items"][:6]]
    texts += [(f"ref{j}", t) for j, t in enumerate(lambada_texts(6))]
    ids, prompts, targets, skipped = verbatim.verbatim_plan(lm.tokenizer, texts, 12, None, min_target_tokens=6)
    full = verbatim.greedy_under_teacher_forcing(lm, prompts, targets, 4, probe=0)
    probed = verbatim.greedy_under_teacher_forcing(lm, prompts, targets, 4, probe=4)
    cut = 0
    for f, p, t in zip(full, probed, targets):
        j = next((k for k, (x, y) in enumerate(zip(f, t)) if x != y), len(t))
        assert p == (f if j >= 4 else f[:j + 1])
        cut += len(p) < len(f)
    assert 0 < cut < len(full)
    kw = dict(skipped=skipped, n_tokens=12, min_target_tokens=6, seed=0, max_items=None)
    assert verbatim.verbatim_result(lm.tokenizer, ids, targets, probed, **kw) == \
        verbatim.verbatim_result(lm.tokenizer, ids, targets, full, **kw)


@pytest.mark.slow
def test_verbatim_answers_from_the_option_order_pass_equal_its_own_pass(trained_and_untouched, tmp_path):
    """The option-order pass over each item's published-order text gives the verbatim check's answers on
    the way: the same records as the check's own pass, the same option-order likelihoods as without it,
    and each answer the float64 argmax of the model run on the check's tokens alone."""
    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"]
    cfg = ContaminationConfig(verbatim_items=10, verbatim_tokens=32, order_items=10, order_permutations=3)
    want = verbatim.verbatim_tokens(lm, items, cfg)
    order = collect_option_order(lm, items, tmp_path / "shared", cfg, greedy_for=want)
    plain = collect_option_order(lm, items, tmp_path / "plain", cfg)
    covered = {r["id"] for r in order["per_item"]} & set(want)
    assert len(covered) >= 8 and set(order["greedy"]) == covered
    assert "greedy" not in json.loads((tmp_path / "shared" / "option_order.json").read_text())
    for a, b in zip(order["per_item"], plain["per_item"]):
        assert a["id"] == b["id"] and a["n_scored"] == b["n_scored"]
        assert [a["ll"], *a["perm_ll"]] == pytest.approx([b["ll"], *b["perm_ll"]], abs=1e-4)
    for iid in covered:
        seq, k = want[iid]
        with torch.no_grad():
            logits = lm.model(torch.tensor([seq])).logits[0].double()
        assert order["greedy"][iid] == logits[k - 1:len(seq) - 1].argmax(-1).tolist()
    shared = collect_verbatim(lm, items, tmp_path / "shared", cfg, known=order["greedy"])
    alone = collect_verbatim(lm, items, tmp_path / "alone", cfg)
    assert shared["n_shared_pass"] == len(covered) and alone["n_shared_pass"] == 0
    drop = ("seconds", "n_shared_pass")
    assert {k: v for k, v in shared.items() if k not in drop} == {k: v for k, v in alone.items() if k not in drop}
    assert sum(p["exact"] for p in shared["per_item"]) > 0  # the trained model recites: answers that matter


@pytest.mark.slow
def test_the_verbatim_check_takes_the_first_items_the_option_order_test_takes(trained_and_untouched, tmp_path):
    """The task-level verbatim check takes the first usable items of the seeded evidence order, as the option-order
    test does, so the option-order pass answers it for every item both test; listing the items in another order
    changes nothing, and ``sample="seeded"`` still draws the old sample."""
    from reporter.collect.evidence import evidence_order

    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"]
    cfg = ContaminationConfig(verbatim_items=4, verbatim_tokens=32, order_items=6, order_permutations=3)
    expect = []  # a plain loop: the first four items in the evidence order whose plan keeps them
    for it in evidence_order(items, 0):
        ids, _, _, _ = verbatim.verbatim_plan(lm.tokenizer, [(it.id, it.question)], 32, None)
        expect += ids
        if len(expect) == 4:
            break
    want = verbatim.verbatim_tokens(lm, items, cfg)
    assert list(want) == expect
    order = collect_option_order(lm, items, tmp_path / "a", cfg, greedy_for=want)
    got = collect_verbatim(lm, items, tmp_path / "a", cfg, known=order["greedy"])
    both = set(expect) & {r["id"] for r in order["per_item"]}
    assert [p["id"] for p in got["per_item"]] == expect and len(both) >= 3 and got["n_shared_pass"] == len(both)
    shuffled = collect_verbatim(lm, list(reversed(items)), tmp_path / "b", cfg)
    assert [p["id"] for p in shuffled["per_item"]] == expect and shuffled["n_shared_pass"] == 0
    drop = ("seconds", "n_shared_pass")
    assert {k: v for k, v in got.items() if k not in drop} == {k: v for k, v in shuffled.items() if k not in drop}
    old = verbatim_completion(lm, [(it.id, it.question) for it in items], max_items=4, seed=0, sample="seeded")
    pick = np.sort(np.random.default_rng(0).choice(len(items), size=4, replace=False))
    assert [p["id"] for p in old["per_item"]] == [items[i].id for i in pick]
    with pytest.raises(ValueError, match="sample"):
        verbatim.verbatim_plan(lm.tokenizer, ["a b c"], sample="random")


def test_answers_known_from_another_pass_are_not_used_for_an_id_that_occurs_twice():
    """Answers are keyed by item id: two texts with one id get their own pass, whatever ``known`` says."""
    lm = tiny_lm("llama")
    texts = [("d", "The river runs past the old mill and turns toward the quiet hills in the north."),
             ("d", "A small boat waits by the pier while the fishermen mend their nets in the sun."),
             ("u", "Seven bright lamps hang over the market square where the traders sell bread.")]
    _, _, targets, _ = verbatim.verbatim_plan(lm.tokenizer, texts, 16, None, min_target_tokens=4)
    wrong = {"d": [0] * len(targets[0]), "u": [0] * len(targets[2])}
    alone = verbatim_completion(lm, texts, 16, None, min_target_tokens=4)
    got = verbatim_completion(lm, texts, 16, None, min_target_tokens=4, known=wrong)
    assert got["n_shared_pass"] == 1 and got["per_item"][:2] == alone["per_item"][:2]
    assert got["per_item"][2] != alone["per_item"][2]  # the unique id did take the (wrong) answers given
    assert "d" not in verbatim.verbatim_tokens(lm, [types.SimpleNamespace(id=i, question=t) for i, t in texts],
                                               ContaminationConfig(verbatim_min_target=4))


@pytest.mark.slow
def test_verbatim_without_generation_equals_greedy_decoding(trained_and_untouched):
    """The teacher-forced check gives what greedy generation gives: the same exact matches, and its
    'generated' text is greedy decoding's own output up to its first wrong token (slow reference:
    one sequence at a time through ``generate``)."""
    from reporter.models.generation import hf_generate_batch

    lm = trained_and_untouched["lm"]
    texts = [(it.id, it.question) for it in trained_and_untouched["items"][:5]]  # trained on: recited
    texts += [(f"ref{j}", t) for j, t in enumerate(lambada_texts(5))]  # never seen: not recited
    v = verbatim_completion(lm, texts, n_tokens=12, max_items=None)
    tok = lm.tokenizer
    by_id = dict(texts)
    assert 0 < sum(p["exact"] for p in v["per_item"]) < len(v["per_item"])  # both kinds present
    for p in v["per_item"]:
        q = tok(by_id[p["id"]], add_special_tokens=False)["input_ids"]
        full = tok(by_id[p["id"]])["input_ids"]
        prompt = full[:len(full) - len(q)] + q[:len(q) // 2]
        real = hf_generate_batch(lm, [prompt], p["n_target"], ())[0].response_ids
        target = q[len(q) // 2:len(q) // 2 + p["n_target"]]
        assert p["exact"] == (real[:len(target)] == target)
        j = next((i for i, (a, b) in enumerate(zip(real, target)) if a != b), min(len(real), len(target)))
        assert p["token_match"] == pytest.approx(j / len(target))
        assert p["generated"] == tok.decode(real[:min(j + 1, len(target))])


@pytest.mark.slow
def test_verbatim_per_item_and_sampling(trained_and_untouched):
    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"]
    v = verbatim_completion(lm, list(items) + [("short", "Too short.")], n_tokens=32, max_items=None)
    assert v["n"] == 10 and v["n_skipped"] == 1
    for p in v["per_item"]:
        assert 8 <= p["n_target"] <= 32 and (p["token_match"] == 1.0) == p["exact"]
    assert v["rate"] == pytest.approx(np.mean([p["exact"] for p in v["per_item"]]))
    sub = verbatim_completion(lm, items, max_items=3, seed=1)
    assert sub["n"] == 3 and len({p["id"] for p in sub["per_item"]}) == 3


@pytest.mark.slow
def test_collect_stage_artifacts(trained_and_untouched, tmp_path, monkeypatch):
    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"]
    from reporter.tasks import Item

    its = [Item(it.id, it.question, "") for it in items[:4]]
    res = collect_verbatim(lm, its, tmp_path / "task", ContaminationConfig(verbatim_items=10))
    stored = json.loads((tmp_path / "task" / "verbatim.json").read_text())
    assert stored["n"] == 4 and stored["per_item"][0]["id"] == "toy-0" and stored == json.loads(json.dumps(res))
    monkeypatch.setattr(verbatim, "verbatim_completion", lambda *a, **k: pytest.fail("recomputed"))
    assert collect_verbatim(lm, its, tmp_path / "task", ContaminationConfig())["n"] == 4  # resume: read back
    monkeypatch.undo()
    cfg = ContaminationConfig(order_items=2, order_permutations=3, reference_texts=3)
    order = collect_option_order(lm, items, tmp_path / "task", cfg)
    assert order["n"] == 2 and json.loads((tmp_path / "task" / "option_order.json").read_text()) == order
    assert collect_option_order(lm, [Item("g", "What is 2 + 2?", "4")], tmp_path / "gen", cfg)["n"] == 0
    assert collect_option_order(lm, items, tmp_path / "off", ContaminationConfig(order_items=0))["disabled"]
    assert order["window"] == cfg.order_window and all(len(r["n_scored"]) == 4 for r in order["per_item"])


@pytest.mark.slow
def test_reference_pass_gives_both_reference_files(trained_and_untouched, tmp_path, monkeypatch):
    """One pass over held-out text writes the Min-K% reference log-probs and the verbatim chance rate;
    each equals what its own computation gives (plain log-probs; the verbatim check on the passages
    cut to 48 tokens), for a model that recites some of the texts and not others."""
    lm, items = trained_and_untouched["lm"], trained_and_untouched["items"]
    texts = [it.question for it in items[:3]] + lambada_texts(3)  # trained on (recited), and never seen
    cfg = ContaminationConfig(verbatim_tokens=12, verbatim_min_target=4)
    rv = collect_reference(lm, tmp_path / "m", cfg, texts=texts, batch_size=4)
    d, meta = load_logprobs(tmp_path / "m" / "reference_logprobs.npz")
    assert meta["kind"] == "reference" and meta["max_tokens"] == REFERENCE_MAX_TOKENS and len(d) == 6
    expect = token_logprobs(lm, [lm.tokenizer(t)["input_ids"][:REFERENCE_MAX_TOKENS] for t in texts])
    for k, e in zip(sorted(d), expect):
        assert d[k]["prompt"] == pytest.approx(e, abs=1e-4)
    own = verbatim_completion(lm, [(f"ref-{j:04d}", t) for j, t in enumerate(texts)], n_tokens=12, max_items=None,
                              min_target_tokens=4, max_text_tokens=REFERENCE_VERBATIM_TOKENS)
    assert rv["corpus"] == "lambada" and rv["n"] == own["n"] == 6
    assert [(p["id"], p["exact"], p["token_match"], p["generated"]) for p in rv["per_item"]] == \
        [(p["id"], p["exact"], p["token_match"], p["generated"]) for p in own["per_item"]]
    assert 0 < sum(p["exact"] for p in rv["per_item"]) < 6  # both kinds present
    assert json.loads((tmp_path / "m" / "reference_verbatim.json").read_text()) == json.loads(json.dumps(rv))
    monkeypatch.setattr(reference, "logprobs_and_greedy", lambda *a, **k: pytest.fail("recomputed"))
    assert collect_reference(lm, tmp_path / "m", cfg, texts=texts) == json.loads(json.dumps(rv))  # resume
    monkeypatch.undo()
    (tmp_path / "m" / "reference_verbatim.json").unlink()  # one file lost: the pass runs again, same record
    assert collect_reference(lm, tmp_path / "m", cfg, texts=texts)["per_item"] == rv["per_item"]
    assert collect_reference(lm, tmp_path / "n", cfg, texts=texts, verbatim=False) == {}
    assert sorted(p.name for p in (tmp_path / "n").iterdir()) == ["reference_logprobs.npz"]



@pytest.mark.parametrize("choices, why", [
    # MMLU items that drove a clean SmolLM2's option-order test (the control with seed 2027)
    (["the strength of his affection of compassion.", "the strength of his other affections besides compassion.",
      "both a and b.", "neither a nor b."], "an option refers to other options"),
    (["Ninth", "Tenth", "Eleventh", "Twelfth"], "numbers in sorted order"),
    (["True, True", "False, False", "True, False", "False, True"], "a fixed grid of combinations"),
    (["Wrong, Wrong", "Wrong, Not wrong", "Not wrong, Wrong", "Not wrong, Not wrong"], "a fixed grid of combinations"),
    (["0.5 centimeter", "4.5 centimeters", "75 centimeters", "225 centimeters"], "numbers in sorted order"),
    (["0.25mc^2", "0.60mc^2", "0.67mc^2", "1.25mc^2"], "numbers in sorted order"),
    (["28.000 pounds", "5.290 pounds", "4.085 pounds", "2.021 pounds"], "numbers in sorted order"),
    (["I only", "II only", "I and II", "I, II, and III"], "an option refers to other options"),
    (["Programmed theories are best", "Many theories will go", "All of these theories are mere"],
     "an option refers to other options"),
    # orders that carry no convention are tested
    (["32-8i", "5+3i", "4-i", "4-4i"], None),
    (["3 apples", "10 apples", "2 apples", "7 apples"], None),
    (["Paris", "Rome, Italy", "Oslo", "Madrid"], None),
    (["True", "False"], None),  # a fixed label set is left out per task, not per item
    (["vitamin A and iron", "calcium", "zinc", "iodine"], None),
])
def test_order_conventions_are_recognised(choices, why):
    assert order_is_convention(choices) == why


@pytest.mark.slow
def test_option_orders_that_are_conventions_are_not_tested(trained_and_untouched):
    """Orders a clean model may prefer without having seen the item are left out (they would be false alarms)."""
    from reporter.tasks import Item
    from reporter.tasks.base import mc_question

    lm = trained_and_untouched["lm"]

    def item(i, opts):
        return Item(f"c{i}", mc_question(f"Question {i}?", opts), "A", opts)

    mixed = [item(0, ["red", "blue", "All of the above"]), item(1, ["1", "2", "5", "10"]),
             item(2, ["cat", "dog", "Both A and B"]), item(3, ["7", "2", "5"]), item(4, ["sun", "moon"])]
    e = option_order_evidence(lm, mixed)
    assert [r["id"] for r in e["per_item"]] == ["c3", "c4"]
    assert e["skipped"] == {"an option refers to other options": 2, "numbers in sorted order": 1}
    yes_no = [item(i, ["yes", "no"]) for i in range(6)]  # BoolQ-style fixed label set
    e = option_order_evidence(lm, yes_no)
    assert e["n"] == 0 and e["skipped"] == {"every item has the same option list (a fixed label set)": 6}
    assert "fixed label set" in option_order_signal(e)["reason"]


def test_the_option_order_sample_is_the_first_usable_items_in_the_order_given():
    """A run gives the items in ``evidence_order`` (a seeded random order), and the other split's test takes the same
    first items: their published-order texts run once for both tests. ``seeded`` keeps the draw the option-order
    null study recorded."""
    from reporter.collect.option_order import order_variants
    from reporter.tasks import get_task, select_items

    tok = tiny_lm("llama").tokenizer
    items, _ = select_items(get_task("arc_challenge"), 30, seed=0, shots=0)
    everything, _, _, skipped = order_variants(tok, items, n_perms=2, max_items=None)
    usable = [p["id"] for p in everything]
    assert len(usable) + sum(skipped.values()) == 30
    first, _, _, _ = order_variants(tok, items, n_perms=2, max_items=12)
    assert [p["id"] for p in first] == usable[:12]
    seeded, _, _, _ = order_variants(tok, items, n_perms=2, max_items=12, seed=4, sample="seeded")
    pick = np.sort(np.random.default_rng(4).choice(len(usable), size=12, replace=False))
    assert [p["id"] for p in seeded] == [usable[i] for i in pick]
    with pytest.raises(ValueError, match="sample must be"):
        order_variants(tok, items, max_items=12, sample="random")
