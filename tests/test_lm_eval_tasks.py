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
from tests.conftest import tiny_lm
from tests.test_mui import reference_scores, reference_select


@pytest.fixture(scope="module")
def lm():
    return tiny_lm("llama", init_std=0.5)


@pytest.fixture(scope="module")
def env(tmp_path_factory, lm):
    """A private reporter cache, datasets cache and offline datasets for the whole module; the packaged tasks.

    (After ``lm``: the tiny model's tokenizer comes from the user's cache, where the rest of the suite extracts it.)
    """
    import datasets

    from reporter.tasks import lm_eval_offline as lo
    from reporter.tasks import lm_eval_source as src

    tmp = tmp_path_factory.mktemp("lm_eval_tasks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", tmp / "hf_datasets")
        mp.setattr(lo, "_memo", {})
        mp.setattr(src, "_LOADED", {})
        yield {"tmp": tmp, "packaged": str(lo.packaged_include_dir())}


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
def test_arc_challenge_equals_lm_evals_hf_model_item_for_item(env, lm, shots):
    from lm_eval.models.huggingface import HFLM

    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.tasks.lm_eval_source import resolve, select_docs

    resolved = resolve("arc_challenge", (env["packaged"],))
    ids = select_docs(len(resolved.task("arc_challenge").eval_docs), "arc_challenge", limit=32, seed=1)
    peer = _evaluate(HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=8), resolved,
                     {"arc_challenge": ids}, shots)
    ours = ReporterLM(lm, batch_size=8)
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
    # each context ran once: 32 questions, ~4 options each, in ~32 distinct contexts (the peer ran every pair whole)
    assert ours.misses == sum(len(s["arguments"]) for s in mine["samples"]["arc_challenge"])


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

def _leaf(env, lm, name, limit, tmp, include=None):
    from reporter.collect.collectors import enabled_collectors
    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.collect.lm_eval_run import execute_leaf, finish_leaf, plan_leaf, resolve_entry, score_entry

    profile = Profile(name="t", lm_eval_include=(include or env["packaged"],),
                      tasks=(TaskConfig(name=name, limit=limit, lm_eval=name),))
    config = profile.tasks[0]
    resolved = resolve_entry(profile, config)
    rlm = ReporterLM(lm)
    lp = plan_leaf(rlm, resolved, config, seed=0)
    plugins = [p for p in enabled_collectors(profile) if p.name in ("mui", "logprobs")]
    execute_leaf(lm, rlm, profile, lp, tmp, seed=0, progress=False, plugins=plugins)
    result = score_entry(rlm, resolved, [lp])
    assert rlm.misses == 0  # lm-eval found every answer among those the collect pass gave
    summary = finish_leaf(lm, profile, lp, tmp, result, seed=0, collection="teacher-forced", plugins=plugins)
    return lp, summary, result


def test_multiple_choice_mui_reads_the_models_answer_and_matches_the_float64_reference(env, lm, tmp_path):
    """MUI's response for an lm-eval multiple-choice item is the option the model ranks first (acc's choice)."""
    from reporter.store.logprobs import load_logprobs
    from reporter.store.neurons import load_neuron_sets
    from reporter.store.samples import read_samples

    lp, summary, result = _leaf(env, lm, "arc_challenge", 6, tmp_path)
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
        # ... and MUI's key neurons are the float64 reference's on that sequence
        seq = torch.tensor([ctx + conts[j]])
        resp = torch.tensor([[False] * len(ctx) + [True] * len(conts[j])])
        entries = reference_scores(lm.model, PassBatch(seq, torch.ones_like(seq), resp))[0]
        ad = lm.adapter
        want = reference_select(entries, "score", 0.001, 0.9, ad.n_layers, ad.d_ff)
        np.testing.assert_array_equal(mui_sets[it.id], want, err_msg=it.id)
    assert summary["lm_eval"]["metric"] == "acc,none" and summary["score"] == result["results"]["arc_challenge"]["acc,none"]
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


# --- a group end to end, through `reporter run` -------------------------------------------------------------------

MODELS = """\
profile: profile.yaml
seed: 3
models:
  - {name: Tiny, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}
"""


def _cli(*args):
    from click.testing import CliRunner

    from reporter.cli import main

    return CliRunner().invoke(main, list(args))


def test_a_group_runs_end_to_end_with_lm_evals_aggregation(lm_eval_run, tmp_path):
    """Three MMLU subjects as one lm-eval group (the suite's shared lm-eval run): each a reporter task, the group
    aggregated as lm-eval's own hf model reports it on the same documents; a rerun changes nothing."""
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM

    from reporter.collect.lm_eval_run import configure
    from reporter.config import ModelSpec
    from reporter.models.loading import load_model
    from reporter.tasks.lm_eval_source import resolve
    from tests.conftest import copy_run, lm_eval_env

    run, root = lm_eval_run["run"], lm_eval_run["root"]
    results = json.loads((run / "results.json").read_text())
    model = results["models"]["Llama chat"]
    leaves = ["mmlu_anatomy", "mmlu_astronomy", "mmlu_virology"]
    assert set(leaves) <= set(model["tasks"])
    for leaf in leaves:
        entry = model["tasks"][leaf]
        assert entry["n"] == 2 and entry["lm_eval"]["group"] == "mmlu_mini" and entry["lm_eval"]["n_shot"] == 0
        assert entry["chance"] == 0.25 and "mui" in entry
    groups = json.loads((run / "models" / "Llama-chat" / "lm_eval_groups.json").read_text())
    spec = ModelSpec(name="Llama chat", source="random:llama",
                     random={"layers": 2, "hidden": 64, "intermediate": 96, "heads": 4})
    with lm_eval_env(root):
        lm = load_model(spec, run_seed=3)
        resolved = resolve("mmlu_mini", (lm_eval_run["packaged"], str(root / "groups")))
        for leaf in leaves:
            configure(resolved.task(leaf), TaskConfig(name=leaf, lm_eval=leaf))
        peer = evaluate(HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=8), resolved.loaded,
                        samples={leaf: model["tasks"][leaf]["lm_eval"]["doc_ids"] for leaf in leaves},
                        log_samples=True)
        assert groups["mmlu_mini"]["metrics"]["acc,none"] == pytest.approx(peer["groups"]["mmlu_mini"]["acc,none"],
                                                                           abs=1e-12)
        assert groups["mmlu_mini"]["subtasks"] == peer["group_subtasks"]["mmlu_mini"]
        for leaf in leaves:
            assert model["tasks"][leaf]["score"] == pytest.approx(peer["results"][leaf]["acc,none"], abs=1e-12)
        # a rerun of the same command finds everything done and changes nothing
        copy = copy_run(run, tmp_path / "run")
        before = (copy / "models" / "Llama-chat" / "tasks" / "mmlu_anatomy" / "samples.jsonl").read_text()
        r = _cli("run", str(root / "models.yaml"), "-o", str(copy), "--no-progress", "--no-render")
    assert r.exit_code == 0, r.output
    assert (copy / "models" / "Llama-chat" / "tasks" / "mmlu_anatomy" / "samples.jsonl").read_text() == before


# --- bad input: one line, exit 2, nothing written ---------------------------------------------------------------

def _bad(tmp_path, profile: str, models: str = MODELS):
    (tmp_path / "profile.yaml").write_text(profile)
    (tmp_path / "models.yaml").write_text(models)
    r = _cli("run", str(tmp_path / "models.yaml"), "-o", str(tmp_path / "run"), "--no-progress")
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "run").exists()
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    return lines[0]


def test_unknown_task_name_gets_a_suggestion(env, tmp_path):
    line = _bad(tmp_path, "lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_chalenge}\n")
    assert "tasks[0].lm_eval" in line and "arc_chalenge" in line and "did you mean 'arc_challenge'" in line


def test_hub_only_dataset_offline_says_how_to_give_a_local_copy(env, tmp_path):
    line = _bad(tmp_path, "tasks:\n  - {lm_eval: winogrande}\n")  # lm-eval's own YAML: its data is on the hub
    assert "tasks[0].lm_eval" in line and "winogrande" in line and "dataset_path: json" in line
    assert "lm_eval_include: [packaged]" in line


def test_a_task_yaml_with_a_syntax_error_names_its_file(env, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "broken.yaml").write_text("task: broken\ndataset_path: [json\n")
    line = _bad(tmp_path, "lm_eval_include: [mine]\ntasks:\n  - {lm_eval: broken}\n")
    assert "broken.yaml" in line and "line" in line


def test_missing_extra_says_what_to_install(env, tmp_path, monkeypatch):
    from reporter.tasks import lm_eval_source

    monkeypatch.setattr(lm_eval_source, "available", lambda: False)
    line = _bad(tmp_path, "tasks:\n  - {lm_eval: arc_challenge}\n")
    assert "pip install 'reporter[lm-eval]'" in line and "tasks[0].lm_eval" in line


def test_bad_keys_and_values_are_one_line_each(env, tmp_path):
    line = _bad(tmp_path, "lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_challenge, metrc: acc}\n")
    assert "tasks[0].metrc" in line and "did you mean 'metric'" in line
    line = _bad(tmp_path, "lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_challenge, "
                          "lm_eval_config: {doc_to_text: x}}\n")
    assert "tasks[0].lm_eval_config.doc_to_text" in line and "fewshot_split" in line
    line = _bad(tmp_path, "lm_eval_include: [nowhere]\ntasks:\n  - {lm_eval: arc_challenge}\n")
    assert "lm_eval_include[0]" in line and "not a directory" in line


# --- the other direction: an lm-eval command line with --model reporter ---------------------------------------

def test_lm_eval_command_line_with_model_reporter_writes_reporters_run(env, lm, tmp_path):
    """`reporter lm-eval` is lm-eval's own command line; --model reporter with output= also writes reporter's run,
    on exactly the documents the command chose, and lm-eval scores from the answers reporter collected."""
    import glob

    model_dir = tmp_path / "tiny"
    lm.model.save_pretrained(model_dir)
    lm.tokenizer.save_pretrained(model_dir)
    (tmp_path / "collectors.yaml").write_text(
        "lpp: {enabled: false}\nsmoke_texts: 2\ncontamination: {verbatim_items: 2, reference_texts: 4, order_items: 2,"
        " split_items: 0}\ntasks: [arc_easy]\n")
    out = tmp_path / "run"
    r = _cli("lm-eval", "--model", "reporter", "--model_args",
             f"pretrained={model_dir},name=tiny,output={out},profile={tmp_path / 'collectors.yaml'}",
             "--tasks", "arc_challenge", "--include_path", env["packaged"], "--limit", "5", "--num_fewshot", "1",
             "--output_path", str(tmp_path / "lmeval"), "--log_samples", "--device", "cpu")
    assert r.exit_code == 0, r.output
    results = json.loads((out / "results.json").read_text())
    entry = results["models"]["tiny"]["tasks"]["arc_challenge"]
    assert entry["lm_eval"]["doc_ids"] == [0, 1, 2, 3, 4] and entry["lm_eval"]["n_shot"] == 1 and "mui" in entry
    ours = {json.loads(x)["id"]: json.loads(x) for x in (out / "models" / "tiny" / "tasks" / "arc_challenge" /
                                                           "samples.jsonl").read_text().splitlines()}
    theirs = [json.loads(x) for x in open(glob.glob(str(tmp_path / "lmeval" / "*" / "samples_arc_challenge_*"))[0])]
    assert sorted(s["doc_id"] for s in theirs) == [0, 1, 2, 3, 4]
    for s in theirs:
        mine = ours[str(s["doc_id"])]
        assert float(s["acc"]) == mine["score"] and float(s["acc_norm"]) == mine["lm_eval_metrics"]["acc_norm,none"]
        np.testing.assert_allclose([float(x[0]) for x in s["filtered_resps"]], mine["loglikelihoods"], atol=1e-5)
    # what reporter cannot reproduce is one line, exit 2
    r = _cli("lm-eval", "--model", "reporter", "--model_args", f"pretrained={model_dir},output={out},colour=red",
             "--tasks", "arc_challenge", "--include_path", env["packaged"], "--limit", "5")
    assert r.exit_code == 2 and "colour" in r.output and "valid keys" in r.output, r.output


def test_lm_evals_own_index_is_stored_once_and_read_back_the_same(env, monkeypatch):
    """lm-eval's index of its ~14,000 task YAMLs is built once and then read from reporter's cache, unchanged."""
    from reporter.tasks import lm_eval_source as src

    built = src.task_manager((env["packaged"],), True)  # built (or already built) by the tests above
    stored = list((env["tmp"] / "cache" / "reporter" / "lm-eval-index").glob("*.json"))
    assert len(stored) == 1
    monkeypatch.setattr(src, "_ROOTS", {})
    monkeypatch.setattr(src, "_MANAGERS", {})
    again = src.task_manager((env["packaged"],), True)
    assert again is not built and again.all_tasks == built.all_tasks and again.all_groups == built.all_groups
    for name in ("arc_challenge", "mmlu_stem", "gsm8k", "ai2_arc"):
        a, b = built.task_index[name], again.task_index[name]
        assert (a.kind, a.yaml_path, a.cfg, a.tags) == (b.kind, b.yaml_path, b.cfg, b.tags)
    assert again.load(["arc_challenge"])["tasks"]["arc_challenge"].get_config("output_type") == "multiple_choice"


def test_task_digest_counts_documents_by_content_not_by_where_they_lie(env, tmp_path):
    """The same task and data in two places: one digest; one changed document: another."""
    from reporter.tasks import lm_eval_source as src

    rows = [{"question": f"Q{i}?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"}
            for i in range(5)]
    digests = []
    for place, edit in (("one", False), ("two", False), ("three", True)):
        d = tmp_path / place
        d.mkdir()
        data = [dict(r) for r in rows]
        if edit:
            data[3] = {**data[3], "question": "Q3, edited?"}
        (d / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
        (d / "arc_mini.yaml").write_text(
            f"include: {src.lm_eval_version() and ''}{_arc_yaml()}\ntask: arc_mini\ndataset_path: json\n"
            f"dataset_name: null\ndataset_kwargs:\n  data_files:\n    validation: {d / 'val.jsonl'}\n"
            "training_split: null\ntest_split: null\nvalidation_split: validation\n")
        digests.append(src.resolve("arc_mini", (str(d),)).digests["arc_mini"])
    assert digests[0] == digests[1] != digests[2]


def _arc_yaml() -> str:
    import importlib.util

    return str(importlib.util.find_spec("lm_eval").submodule_search_locations[0]) + "/tasks/arc/arc_easy.yaml"
