"""lm-eval tasks through reporter: identical to lm-eval's own ``hf`` model item for item, collectors on the same passes.

The peer is lm-eval's ``HFLM`` around the same transformers model, through ``lm_eval.evaluator.evaluate`` on the
same task objects and documents; reporter answers the same requests (each context run once) and lm-eval scores both.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from reporter.config import Profile, TaskConfig
from reporter.instrument.batch import PassBatch
from tests.test_mui import reference_scores, reference_select


@pytest.fixture(scope="module")
def lm(lmeval_lm):
    return lmeval_lm


@pytest.fixture(scope="module")
def env(lmeval_env):
    return lmeval_env



def _evaluate(model, resolved, leaf_ids, shots, chat=False):
    from lm_eval.evaluator import evaluate

    from reporter.collect.lm_eval_run import configure

    for leaf in leaf_ids:
        configure(resolved.task(leaf), TaskConfig(name=leaf, shots=shots, lm_eval=leaf))
    return evaluate(model, resolved.loaded, samples=dict(leaf_ids), log_samples=True, bootstrap_iters=0,
                    apply_chat_template=chat, fewshot_as_multiturn=chat)


def _by_doc(result, task):
    return {(s["doc_id"], s["filter"]): s for s in result["samples"][task]}


# --- identity with lm-eval's hf model ---------------------------------------------------------------------------

@pytest.mark.parametrize("shots", [0, 5])
def test_arc_challenge_equals_lm_evals_hf_model_item_for_item(env, lm, shots, monkeypatch):
    from lm_eval.models.huggingface import HFLM

    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.instrument import continuations
    from reporter.tasks.lm_eval_source import resolve, select_docs

    resolved = resolve("arc_challenge", (env["packaged"],))
    ids = select_docs(len(resolved.task("arc_challenge").eval_docs), "arc_challenge", limit=30, seed=1)
    peer = _evaluate(HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=8), resolved,
                     {"arc_challenge": ids}, shots)
    ours = ReporterLM(lm, batch_size=8)
    prefixes: list[tuple[int, ...]] = []  # every context (less its last token) reporter's model actually ran
    original = continuations.reduce_after_prefix

    def counted(model, adapter, pre, *args, **kw):
        prefixes.extend(tuple(p) for p in pre)
        return original(model, adapter, pre, *args, **kw)

    monkeypatch.setattr(continuations, "reduce_after_prefix", counted)
    mine = _evaluate(ours, resolved, {"arc_challenge": ids}, shots)
    a, b = _by_doc(peer, "arc_challenge"), _by_doc(mine, "arc_challenge")
    assert sorted(d for d, _ in a) == ids and a.keys() == b.keys()
    worst = 0.0
    for k in a:
        assert a[k]["arguments"] == b[k]["arguments"]  # the same prompts, few-shot examples included
        assert (a[k]["acc"], a[k]["acc_norm"]) == (b[k]["acc"], b[k]["acc_norm"]), k
        for (ll_a, greedy_a), (ll_b, greedy_b) in zip(a[k]["filtered_resps"], b[k]["filtered_resps"]):
            worst = max(worst, abs(ll_a - ll_b))
            assert greedy_a == greedy_b
    assert worst < 1e-4
    assert mine["results"]["arc_challenge"]["acc,none"] == peer["results"]["arc_challenge"]["acc,none"]
    assert mine["n-shot"]["arc_challenge"] == shots
    # every request was answered by reporter's own pass, and each question's context ran once for all its
    # options (the peer ran every (context, option) pair whole)
    n_requests = sum(len(s["arguments"]) for s in mine["samples"]["arc_challenge"])
    assert ours.misses == n_requests and n_requests > 3 * len(ids)
    assert len(prefixes) == len(set(prefixes)) == len(ids)


GSM_YAML = """\
include: {lm_eval}/tasks/gsm8k/gsm8k.yaml
task: gsm8k_local
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: {dir}/test.jsonl
    train: {dir}/train.jsonl
num_fewshot: 1
generation_kwargs:
  until: ["Question:", "</s>", "<|im_end|>"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: 12
"""


@pytest.fixture(scope="module")
def gsm_dir(env):
    """A GSM8K-style task: lm-eval's own gsm8k YAML (regex filters strict-match and flexible-extract), local data."""
    import importlib.util

    from reporter.tasks.math_problems import _gsm8k_records

    d = env["tmp"] / "gsm"
    d.mkdir()
    recs = _gsm8k_records()
    rows = [{"question": r["doc"]["question"], "answer": r["doc"]["answer"]} for r in recs[:12]]
    (d / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:8]))
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[8:]))
    lm_eval_dir = importlib.util.find_spec("lm_eval").submodule_search_locations[0]
    (d / "gsm8k_local.yaml").write_text(GSM_YAML.format(lm_eval=lm_eval_dir, dir=d))
    return d


def _constant_response_shares(task, metric, docs):
    """Brute force: every distinct gold text of ``docs`` as the response to every document, through lm-eval's own
    ``FilterEnsemble.apply`` on ``Instance`` objects and ``process_results``: {filtered answer: share}."""
    from lm_eval.api.instance import Instance

    name, _, filter_name = metric.partition(",")
    ensemble = next(f for f in task._filters if f.name == filter_name)
    shares = {}
    for text in dict.fromkeys(task.doc_to_target(d) for d in docs):
        instances = [Instance(request_type="generate_until", doc=d, arguments=("", {}), idx=0) for d in docs]
        for inst in instances:
            inst.resps = [text]
        ensemble.apply(instances)
        total = sum(task.process_results(d, [i.filtered_resps[filter_name]])[name] for d, i in zip(docs, instances))
        answer = instances[0].filtered_resps[filter_name]
        shares[answer] = max(shares.get(answer, 0.0), total / len(docs))
    return shares


def test_the_best_constant_response_of_a_generated_task_is_what_lm_eval_scores_it(env, tmp_path):
    """GSM8K through lm-eval's own YAML (its regex filters, ``exact_match`` ignoring commas): the best constant
    response among the task's gold texts, scored by lm-eval, against a brute force over every gold text. "1,000" is
    a different filtered answer from "1000" yet lm-eval scores both right on either gold, so the counts alone would
    pick "5". A gold with no "#### N" is no answer under strict-match; flexible-extract reads "7" from it, but lm-eval's
    gold stays the whole text there, so "7" is right nowhere (four golds, share 0)."""
    import importlib.util

    from reporter.collect.lm_eval_majority import majority_generated
    from reporter.tasks.lm_eval_source import resolve

    golds = ["So 5 #### 5"] * 3 + ["So 1,000 #### 1,000"] * 2 + ["So 1000 #### 1000"] * 2 + ["It is 7"] * 4 + \
            ["So 9 #### 9"]
    rows = [{"question": f"Q{i}?", "answer": a} for i, a in enumerate(golds)]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "train.jsonl").write_text(json.dumps(rows[0]) + "\n")
    lm_eval_dir = importlib.util.find_spec("lm_eval").submodule_search_locations[0]
    (tmp_path / "gsm8k_local.yaml").write_text(GSM_YAML.format(lm_eval=lm_eval_dir, dir=tmp_path))
    task = resolve("gsm8k_local", (str(tmp_path),)).task("gsm8k_local")
    docs = list(task.eval_docs)
    for metric, want in (("exact_match,strict-match", ("1,000", 4 / 12)),
                         ("exact_match,flexible-extract", ("1,000", 4 / 12))):
        brute = _constant_response_shares(task, metric, docs)
        assert max(brute.values()) == pytest.approx(want[1])
        best = majority_generated(task, metric)
        assert best == {"answer": want[0], "share": pytest.approx(want[1]), "over": 12}
        assert brute[best["answer"]] == pytest.approx(best["share"])
        if metric.endswith("flexible-extract"):
            assert brute["7"] == 0
    chosen = [docs[i] for i in (0, 1, 2, 7)]  # documents chosen by id: counted over those only
    assert majority_generated(task, "exact_match,strict-match", docs=chosen) == {
        "answer": "5", "share": pytest.approx(max(_constant_response_shares(task, "exact_match,strict-match",
                                                                              chosen).values())), "over": 4}
    assert majority_generated(task, "exact_match,no-such-filter") is None
    # the two most frequent filtered golds only: "[invalid]" (the regex's no-match, right nowhere) and "5" (3/12)
    assert majority_generated(task, "exact_match,strict-match", candidates=2) == {
        "answer": "5", "share": pytest.approx(3 / 12), "over": 12}
    assert majority_generated(task, "exact_match,strict-match", docs=docs[7:11]) is None  # no "#### N": nothing right
    # the split's best constant response on the evaluated documents (summary.json's majority.evaluated): the first
    # gold text of the split with that answer, scored by lm-eval's filters and process_results on those documents
    from lm_eval.api.instance import Instance

    from reporter.collect.lm_eval_majority import generated_share

    chosen = [docs[i] for i in (0, 3, 5, 7)]  # golds 5, 1,000, 1000 and "It is 7"
    for metric in ("exact_match,strict-match", "exact_match,flexible-extract"):
        name, _, filter_name = metric.partition(",")
        ensemble = next(f for f in task._filters if f.name == filter_name)
        instances = [Instance(request_type="generate_until", doc=d, arguments=("", {}), idx=0) for d in chosen]
        for inst in instances:
            inst.resps = ["So 1,000 #### 1,000"]  # the first gold text whose answer is "1,000"
        ensemble.apply(instances)
        plain = sum(task.process_results(d, [i.filtered_resps[filter_name]])[name]
                    for d, i in zip(chosen, instances)) / len(chosen)
        assert generated_share(task, metric, "1,000", chosen) == pytest.approx(plain) == pytest.approx(2 / 4)
    assert generated_share(task, "exact_match,strict-match", "not a gold", chosen) is None


def test_generate_until_equals_lm_evals_hf_model_with_its_regex_filters(env, lm, gsm_dir):
    from lm_eval.models.huggingface import HFLM

    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.tasks.lm_eval_source import resolve

    resolved = resolve("gsm8k_local", (str(gsm_dir),))
    ids = list(range(8))
    peer = _evaluate(HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=4), resolved,
                     {"gsm8k_local": ids}, None)
    mine = _evaluate(ReporterLM(lm, batch_size=4), resolved, {"gsm8k_local": ids}, None)
    a, b = _by_doc(peer, "gsm8k_local"), _by_doc(mine, "gsm8k_local")
    assert {f for _, f in a} == {"strict-match", "flexible-extract"}
    for k in a:
        assert a[k]["resps"] == b[k]["resps"], k  # the generated text itself
        assert a[k]["filtered_resps"] == b[k]["filtered_resps"] and a[k]["exact_match"] == b[k]["exact_match"]
    assert mine["results"]["gsm8k_local"] == peer["results"]["gsm8k_local"]


WIKI_YAML = """\
task: wiki_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {dir}/wiki.jsonl
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
metadata:
  version: 1.0
"""


def test_loglikelihood_rolling_uses_lm_evals_windows_and_equals_its_hf_model(env, lm):
    """Perplexity tasks: lm-eval's own rolling windows (max_length shrunk so that texts span several)."""
    from lm_eval.models.huggingface import HFLM

    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.tasks.lm_eval_source import resolve
    from reporter.tasks.sources import lambada_texts

    d = env["tmp"] / "wiki"
    d.mkdir()
    (d / "wiki.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lambada_texts(5)))
    (d / "wiki_local.yaml").write_text(WIKI_YAML.format(dir=d))
    resolved = resolve("wiki_local", (str(d),))
    peer_lm = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=4, max_length=48)
    ours = ReporterLM(lm, batch_size=4)
    ours._max_length = 48
    peer = _evaluate(peer_lm, resolved, {"wiki_local": list(range(5))}, None)
    mine = _evaluate(ours, resolved, {"wiki_local": list(range(5))}, None)
    for x, y in zip(peer["samples"]["wiki_local"], mine["samples"]["wiki_local"]):
        assert abs(x["resps"][0][0] - y["resps"][0][0]) < 1e-3 * max(1.0, abs(x["resps"][0][0]))
    for m in ("word_perplexity,none", "bits_per_byte,none"):
        assert math.isclose(peer["results"]["wiki_local"][m], mine["results"]["wiki_local"][m], rel_tol=1e-4)
    assert ours.misses > 5  # several windows per text
    # a float64 plain loop over lm-eval's windows gives the same total log-likelihood
    from lm_eval import utils

    m64 = _float64(lm.model)
    text = lambada_texts(5)[0]
    total = 0.0
    for ctx, cont in map(utils.make_disjoint_window, utils.get_rolling_token_windows(
            token_list=ours.tok_encode(text), prefix_token=ours.prefix_token_id, max_seq_len=48, context_len=1)):
        total += _ll64(m64, list(ctx), list(cont))
    assert abs(total - mine["samples"]["wiki_local"][0]["resps"][0][0]) < 1e-3 * abs(total)


def _float64(model):
    import copy

    return copy.deepcopy(model).to(torch.float64).eval()


def _ll64(m64, ctx, cont):
    """log P(cont | ctx) in float64, one whole sequence, plain loop over the continuation's tokens."""
    seq = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = torch.log_softmax(m64(seq).logits[0], -1)
    return float(sum(logp[len(ctx) - 1 + j, t] for j, t in enumerate(cont)))


# --- the collect stage: collectors on the same passes, checked against float64 references -----------------------

def _leaf(env, lm, name, limit, tmp, include=None, collection="fused", mui=None, only=("mui", "logprobs"),
          batch_size=None, max_new_tokens=None):
    """One leaf through the collect stage (plan, execute, lm-eval's scoring, finish) with the collectors ``only``
    names (None: every enabled one)."""
    from reporter.collect.collectors import enabled_collectors
    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.collect.lm_eval_run import execute_leaf, leaf_collection, plan_leaf, resolve_entry
    from reporter.collect.lm_eval_score import finish_leaf, score_entry
    from reporter.config import MUIConfig

    profile = Profile(name="t", lm_eval_include=(include or env["packaged"],), collection=collection,
                      mui=MUIConfig(**(mui or {})), tasks=(TaskConfig(name=name, limit=limit, lm_eval=name,
                                                                     max_new_tokens=max_new_tokens),))
    config = profile.tasks[0]
    resolved = resolve_entry(profile, config)
    rlm = ReporterLM(lm, batch_size=batch_size)
    lp = plan_leaf(rlm, resolved, config, seed=0)
    plugins = [p for p in enabled_collectors(profile) if only is None or p.name in only]
    execute_leaf(lm, rlm, profile, lp, tmp, seed=0, progress=False, plugins=plugins)
    result = score_entry(rlm, resolved, [lp])
    assert rlm.misses == 0  # lm-eval found every answer among those the collect pass gave
    path, fallback = leaf_collection(lm, profile, lp, plugins)
    summary = finish_leaf(lm, profile, lp, tmp, result, seed=0, collection=path, plugins=plugins, fallback=fallback)
    return lp, summary, result


@pytest.mark.parametrize("collection", ["fused", "teacher-forced"])
def test_multiple_choice_mui_reads_the_models_answer_and_matches_the_float64_reference(env, lm, tmp_path, collection):
    """MUI's response for an lm-eval multiple-choice item is the option the model ranks first (acc's choice).

    ``fused`` (the default): MUI and the token log-probs ride the passes that score the options; ``teacher-forced``:
    one more pass over context + answer. Both must give the float64 reference's numbers.
    """
    from reporter.collect.collectors.logprobs import question_span
    from reporter.store.logprobs import load_logprobs
    from reporter.store.neurons import load_neuron_sets
    from reporter.store.samples import read_samples

    lp, summary, result = _leaf(env, lm, "arc_challenge", 6, tmp_path, collection=collection)
    assert summary["collection"] == collection and "collection_fallback" not in summary
    recs = read_samples(tmp_path / "samples.jsonl")
    ids, sets, _ = load_neuron_sets(tmp_path / "neurons.npz")
    mui_sets = dict(zip(ids, sets))
    logprobs, _ = load_logprobs(tmp_path / "logprobs.npz")
    m64 = _float64(lm.model)
    doc_ids = lp.ids
    task = lp.task
    lm_eval_items = {str(s["doc_id"]): s for s in result["samples"]["arc_challenge"]}
    for k, it in enumerate(lp.plan.items):
        ctx = lp.plan.prompt_ids[k]
        conts = [_cont_ids(lm, inst.args) for inst in lp.requests[k]]
        lls = [_ll64(m64, ctx, c) for c in conts]
        j = int(np.argmax(lls))
        rec = recs[it.id]
        assert rec["answer_index"] == j and rec["response"] == lp.requests[k][j].args[1]
        np.testing.assert_allclose(rec["loglikelihoods"], lls, atol=1e-3)
        # acc and acc_norm as lm-eval defines them, from the float64 log-likelihoods
        doc = task.eval_docs[doc_ids[k]]
        gold = task.doc_to_target(doc)
        lens = [len(c) for c in task.doc_to_choice(doc)]
        assert lm_eval_items[it.id]["acc"] == float(j == gold)
        assert lm_eval_items[it.id]["acc_norm"] == float(int(np.argmax(np.array(lls) / lens)) == gold)
        assert rec["score"] == lm_eval_items[it.id]["acc"]
        # the collectors saw context + the chosen option: its token log-probs sum to its log-likelihood ...
        assert abs(float(np.sum(logprobs[it.id]["response"])) - lls[j]) < 1e-3
        # ... the prompt's are the float64 log-softmax's from the question on (NaN before it) ...
        seq64 = torch.tensor([ctx + conts[j]])
        with torch.no_grad():
            logp = torch.log_softmax(m64(seq64).logits[0], -1)
        start = max(1, question_span(lm.tokenizer, lp.plan.prompts[k], it.question, ctx)[0])
        want = [math.nan] * (start - 1) + [float(logp[t - 1, ctx[t]]) for t in range(start, len(ctx))]
        np.testing.assert_allclose(logprobs[it.id]["prompt"], want, atol=1e-3, equal_nan=True)
        # ... and MUI's key neurons are the float64 reference's on that sequence
        seq = torch.tensor([ctx + conts[j]])
        resp = torch.tensor([[False] * len(ctx) + [True] * len(conts[j])])
        entries = reference_scores(lm.model, PassBatch(seq, torch.ones_like(seq), resp))[0]
        ad = lm.adapter
        want = reference_select(entries, "score", 0.001, 0.9, ad.n_layers, ad.d_ff)
        np.testing.assert_array_equal(mui_sets[it.id], want, err_msg=it.id)
    assert summary["lm_eval"]["metric"] == "acc,none" and summary["score"] == result["results"]["arc_challenge"]["acc,none"]
    assert lp.plan.task.other_split is None  # the packaged ARC has only the evaluated validation split
    assert summary["chance"] == pytest.approx(np.mean([1 / len(it.choices) for it in lp.plan.items]))


def _cont_ids(lm, args):
    from reporter.collect.lm_eval_lm import ReporterLM

    rlm = _cont_ids.rlm = getattr(_cont_ids, "rlm", None) or ReporterLM(lm)
    return list(rlm._encode_pair(*args)[1])


def test_generate_until_collectors_ride_the_generation(env, lm, gsm_dir, tmp_path):
    from reporter.store.logprobs import load_logprobs
    from reporter.store.samples import read_samples

    lp, summary, result = _leaf(env, lm, "gsm8k_local", 4, tmp_path, include=str(gsm_dir))
    recs = read_samples(tmp_path / "samples.jsonl")
    logprobs, _ = load_logprobs(tmp_path / "logprobs.npz")
    m64 = _float64(lm.model)
    for k, it in enumerate(lp.plan.items):
        rec = recs[it.id]
        ctx = lp.plan.prompt_ids[k]
        resp = lm.tokenizer(rec["response"], add_special_tokens=False)["input_ids"] if rec["response"] else []
        got = logprobs[it.id]["response"]
        assert len(got) == rec["response_tokens"]
        if resp and len(resp) == len(got):  # the response re-tokenises to the generated tokens: check them in float64
            assert abs(float(np.sum(got)) - _ll64(m64, ctx, resp)) < 1e-3
        assert set(rec["lm_eval_metrics"]) == {"exact_match,strict-match", "exact_match,flexible-extract"}
    assert summary["lm_eval"]["metric"] == "exact_match,strict-match" and "mui" in summary
    docs = list(lp.task.eval_docs)  # the most common answer: over the whole split, scored by lm-eval
    brute = _constant_response_shares(lp.task, "exact_match,strict-match", docs)
    assert summary["majority"]["over"] == len(docs) == 8
    assert summary["majority"]["share"] == pytest.approx(max(brute.values())) == pytest.approx(1 / 8)
    from reporter.collect.lm_eval_majority import generated_share

    assert summary["majority"]["evaluated"] == pytest.approx(generated_share(
        lp.task, "exact_match,strict-match", summary["majority"]["answer"], [docs[i] for i in lp.ids]))
    # the Min-K% reference is the split the task's config names as its training split (gsm8k: train)
    other = lp.plan.task.other_split()
    train = list(lp.task.training_docs())
    assert [it.id for it in other] == [f"train:{i}" for i in range(len(train))]
    assert other[0].question == lp.task.doc_to_text(train[0]).rstrip().removesuffix("\nAnswer:").rstrip()
    assert "train split" in lp.plan.task.other_split_source


def test_replies_cut_before_lm_evals_filter_found_an_answer_are_told(env, lm, gsm_dir, tmp_path):
    """lm-eval's own gsm8k YAML (its filters read "#### N", or the last number) with 6 new tokens: every reply stops
    at the limit before an answer, lm-eval's strict-match filter finds none ("[invalid]") and scores 0, and the
    replies check says 'cut' (it was silent for lm-eval tasks). The same replies where the filter had found an
    answer, or that ended before the limit, are not told."""
    from reporter.analyse.responses import check_replies
    from reporter.store.samples import read_samples

    lp, summary, _ = _leaf(env, lm, "gsm8k_local", 4, tmp_path, include=str(gsm_dir), only=(), max_new_tokens=6)
    recs = list(read_samples(tmp_path / "samples.jsonl").values())
    assert [r["stopped_by"] for r in recs] == ["length"] * 4 and {r["response_tokens"] for r in recs} == {6}
    assert [r["extracted"] for r in recs] == ["[invalid]"] * 4 and [r["score"] for r in recs] == [0.0] * 4
    got = check_replies(recs, summary["scorer"], summary.get("answer_last") is True)
    assert summary["scorer"] == "lm_eval" and got is not None
    assert (got["kind"], got["n"], got["cut"], got["cut_wrong"], got["cut_unread"], got["limit"]) == ("cut", 4, 4, 4, 4, 6)
    assert [r["unread"] for r in recs] == [True] * 4
    assert check_replies([{**r, "unread": False} for r in recs], "lm_eval") is None  # the filter read an answer
    assert check_replies([{**r, "stopped_by": "eos"} for r in recs], "lm_eval") is None  # ended before the limit
    old = [{k: v for k, v in r.items() if k != "unread"} for r in recs]  # a run made before records said so
    assert check_replies(old, "lm_eval")["cut_unread"] == 4
    assert check_replies([{**r, "extracted": "18"} for r in old], "lm_eval") is None


def test_a_filter_with_its_own_fallback_is_read_for_cut_replies(env, lm, gsm_dir, tmp_path):
    """A task whose regex filter sets its own fallback (``NO ANSWER``) gave that for a reply it found no answer in,
    which the replies check did not know (it read lm-eval's default ``[invalid]`` only): silent on every cut reply.
    The collect stage now reads the fallback from the task's own filter, and the check tells."""
    from reporter.analyse.responses import check_replies
    from reporter.store.samples import read_samples

    own = gsm_dir / "own_fallback"
    own.mkdir(exist_ok=True)
    (own / "gsm8k_fallback.yaml").write_text(
        f"include: {gsm_dir}/gsm8k_local.yaml\ntask: gsm8k_fallback\nfilter_list:\n  - name: strict-match\n"
        "    filter:\n      - function: regex\n        regex_pattern: \"#### (\\\\-?[0-9\\\\.\\\\,]+)\"\n"
        "        fallback: NO ANSWER\n      - function: take_first\n")
    _, summary, _ = _leaf(env, lm, "gsm8k_fallback", 4, tmp_path, include=str(own), only=(), max_new_tokens=6)
    recs = list(read_samples(tmp_path / "samples.jsonl").values())
    assert [r["extracted"] for r in recs] == ["NO ANSWER"] * 4 and [r["score"] for r in recs] == [0.0] * 4
    assert [r["unread"] for r in recs] == [True] * 4
    got = check_replies(recs, summary["scorer"], summary.get("answer_last") is True)
    assert got is not None and (got["kind"], got["cut_unread"]) == ("cut", 4)
    old = [{k: v for k, v in r.items() if k != "unread"} for r in recs]
    assert check_replies(old, "lm_eval") is None  # what the check read before: not the task's fallback


def test_loglikelihood_rolling_collectors_read_the_first_window_against_float64_references(env, lm, tmp_path):
    """A perplexity task's collect pass: lm-eval's rolling windows scored; MUI and the token log-probs read one
    teacher-forced pass over each document's first window, as the float64 references say."""
    from lm_eval import utils

    from reporter.collect.collectors import TaskContext, enabled_collectors
    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.collect.lm_eval_run import execute_leaf, plan_leaf, resolve_entry
    from reporter.store.logprobs import load_logprobs
    from reporter.store.neurons import load_neuron_sets
    from reporter.tasks.sources import lambada_texts

    d = tmp_path / "wiki"
    d.mkdir()
    texts = lambada_texts(3)
    (d / "wiki.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (d / "wiki_local.yaml").write_text(WIKI_YAML.format(dir=d))
    profile = Profile(name="t", lm_eval_include=(str(d),), tasks=(TaskConfig(name="wiki_local", lm_eval="wiki_local"),))
    config = profile.tasks[0]
    rlm = ReporterLM(lm, batch_size=4)
    rlm._max_length = 48
    lp = plan_leaf(rlm, resolve_entry(profile, config), config, seed=0)
    plugins = [p for p in enabled_collectors(profile) if p.name in ("mui", "logprobs")]
    out = tmp_path / "task"
    execute_leaf(lm, rlm, profile, lp, out, seed=0, progress=False, plugins=plugins)
    ctx = TaskContext(lm=lm, profile=profile, config=config, plan=lp.plan, task_dir=out, seed=0)
    for p in plugins:
        p.finish_task(ctx, {})
    ids, sets, _ = load_neuron_sets(out / "neurons.npz")
    logprobs, _ = load_logprobs(out / "logprobs.npz")
    m64 = _float64(lm.model)
    ad = lm.adapter
    for k, it in enumerate(lp.plan.items):
        windows = list(map(utils.make_disjoint_window, utils.get_rolling_token_windows(
            token_list=rlm.tok_encode(texts[k]), prefix_token=rlm.prefix_token_id, max_seq_len=48, context_len=1)))
        assert len(windows) > 1  # the text spans several windows: only the first feeds the collectors
        first_ctx, first_cont = (list(x) for x in windows[0])
        assert abs(float(np.sum(logprobs[it.id]["response"])) - _ll64(m64, first_ctx, first_cont)) < 1e-3
        seq = torch.tensor([first_ctx + first_cont])
        resp = torch.tensor([[False] * len(first_ctx) + [True] * len(first_cont)])
        want = reference_select(reference_scores(lm.model, PassBatch(seq, torch.ones_like(seq), resp))[0], "score",
                                0.001, 0.9, ad.n_layers, ad.d_ff)
        np.testing.assert_array_equal(dict(zip(ids, sets))[it.id], want, err_msg=it.id)
        # and the document's log-likelihood is lm-eval's: the sum over every window, in float64
        total = sum(_ll64(m64, list(c), list(x)) for c, x in windows)
        stored = {r["id"]: r for p in sorted((out / "parts").glob("lm_eval-*.json"))
                  for r in json.loads(p.read_text())["records"]}
        assert abs(stored[it.id]["loglikelihood"] - total) < 1e-3 * abs(total)


# --- the option passes against the teacher-forced pass, for every collector that rides them ---------------------

def _artifacts(task_dir):
    """Every array of every .npz, every sample record and the summary (without the keys that name the path)."""
    from reporter.store.samples import read_samples

    arrays = {f"{p.name}:{k}": v for p in sorted(task_dir.glob("*.npz")) for k, v in np.load(p).items()}
    summary = {k: v for k, v in json.loads((task_dir / "summary.json").read_text()).items()
               if k not in ("collection", "collection_fallback")}
    return arrays, read_samples(task_dir / "samples.jsonl"), summary


@pytest.mark.parametrize("mui", [{}, {"mode": "topscore", "rho": 0.8}, {"definition": "mui-eval", "top_ratio": 0.05},
                                 {"mode": "global_topk", "definition": "contribution"}])
def test_every_collector_riding_the_option_passes_writes_what_the_teacher_forced_pass_writes(env, lm, tmp_path, mui):
    """Generic over the registered collectors: each one that rides the option passes (and has a task-scope
    collector) writes the same artifacts, value by value, as with one teacher-forced pass over context + answer."""
    _same_artifacts_on_both_paths(env, lm, tmp_path, mui, {"mui", "logprobs"})


def test_key_sae_features_ride_the_option_passes_too(env, lm, tmp_path):
    """SAE features (a key-set collector like MUI's neurons, on the residual stream) from the option passes equal
    those of the teacher-forced pass: ``mui: {unit: both}`` with a trained SAE of the model's layer 1."""
    from reporter.config.sae import SAEConfig
    from tests.test_sae import _save_saelens, _train_sae

    sae = _save_saelens(tmp_path / "sae", _train_sae(lm.model, 1, steps=60), 1)
    mui = {"unit": "both", "sae": SAEConfig(path=str(sae))}
    arrays = _same_artifacts_on_both_paths(env, lm, tmp_path, mui, {"mui", "logprobs", "sae"})
    assert any(k.startswith("features.npz") for k in arrays)


def _same_artifacts_on_both_paths(env, lm, tmp_path, mui, want):
    from reporter.collect.collectors import CollectorPlugin, TaskContext, enabled_collectors
    from reporter.config import MUIConfig

    out = {}
    for collection in ("fused", "teacher-forced"):
        d = tmp_path / collection
        # batches of 2 documents: the options of one item land in different tail batches
        lp, summary, _ = _leaf(env, lm, "arc_challenge", 5, d, collection=collection, mui=mui, only=None,
                               batch_size=2)
        assert summary["collection"] == collection and "collection_fallback" not in summary
        profile = Profile(name="t", mui=MUIConfig(**mui))
        ctx = TaskContext(lm=lm, profile=profile, config=lp.config, plan=lp.plan, task_dir=d, seed=0)
        riding = [p.name for p in enabled_collectors(profile)
                  if p.rides_options(ctx) and type(p).for_batch is not CollectorPlugin.for_batch]
        assert want <= set(riding)  # what this test compares: the collectors with a pass of their own
        out[collection] = _artifacts(d)
    (fa, fs, fsum), (ta, ts, tsum) = out["fused"], out["teacher-forced"]
    assert set(fa) == set(ta) and fa
    for k in fa:
        if np.issubdtype(fa[k].dtype, np.floating):
            np.testing.assert_allclose(fa[k], ta[k], atol=1e-4, equal_nan=True, err_msg=k)
        else:
            np.testing.assert_array_equal(fa[k], ta[k], err_msg=k)
    assert fs.keys() == ts.keys()
    for k in fs:  # every field alike; the log-likelihoods (rounded to 6 decimals) to float32 summation order
        assert {f: v for f, v in fs[k].items() if f != "loglikelihoods"} == \
            {f: v for f, v in ts[k].items() if f != "loglikelihoods"}, k
        np.testing.assert_allclose(fs[k]["loglikelihoods"], ts[k]["loglikelihoods"], atol=1e-4)
    assert fsum == tsum
    return fa


def test_a_collector_that_cannot_ride_the_option_passes_makes_the_task_fall_back_and_say_why(env, lm, tmp_path):
    from reporter.collect.collectors import CollectorPlugin, enabled_collectors
    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.collect.lm_eval_run import execute_leaf, leaf_collection, plan_leaf, resolve_entry

    class TeacherForcedOnly(CollectorPlugin):
        name = "tf_only"

        def for_batch(self, batch):
            return None

    profile = Profile(name="t", lm_eval_include=(env["packaged"],),
                      tasks=(TaskConfig(name="arc_challenge", limit=3, lm_eval="arc_challenge"),))
    config = profile.tasks[0]
    rlm = ReporterLM(lm)
    lp = plan_leaf(rlm, resolve_entry(profile, config), config, seed=0)
    plugins = [*enabled_collectors(profile), TeacherForcedOnly()]
    assert leaf_collection(lm, profile, lp, plugins) == ("teacher-forced",
                                                         "collector 'tf_only' cannot ride the option passes")
    execute_leaf(lm, rlm, profile, lp, tmp_path, seed=0, progress=False, plugins=plugins)
    assert (tmp_path / "parts").is_dir() and sorted(p.name.split("-")[0] for p in (tmp_path / "parts").iterdir()) \
        == ["lm_eval", "logprobs", "mui"]
