"""LPP synthetic probes: SPC rules and char-F1, AR items, parsing and metrics, task plumbing."""
import collections
import re

import pytest

from reporter.scoring import get_scorer
from reporter.tasks import TASKS, get_task, select_items
from reporter.tasks.probes import (
    AR_TEMPLATES,
    SPC_RULES,
    ar_items,
    ar_metrics,
    char_f1,
    extract_continuation,
    parse_ar,
    spc_items,
)
from reporter.tasks.prompts import plain_prompt

from .conftest import tiny_lm

CLOSE = {"(": ")", "[": "]", "{": "}", "<": ">"}


# ------------------------------------------------------------------ reference rule checkers
def ref_continue(rule: str, seq: str, n: int) -> str:
    """The continuation a rule implies, derived from the shown sequence alone."""
    if rule in ("periodic", "alternating"):
        p = next(p for p in range(1, len(seq)) if all(seq[i] == seq[i - p] for i in range(p, len(seq))))
        assert len(seq) >= 2 * p  # at least two full periods are shown
        if rule == "alternating":
            assert p == 2 and seq[0] != seq[1]
        else:
            assert 3 <= p <= 5 and len(set(seq[:p])) == p
        out = seq
        while len(out) < len(seq) + n:
            out += out[-p]
        return out[len(seq):]
    if rule == "mirror":
        assert seq.endswith("|") and "|" not in seq[:-1]
        return seq[:-1][::-1]
    if rule == "brackets":
        stack = []
        for ch in seq:
            if ch in CLOSE:
                stack.append(ch)
            else:
                assert stack and CLOSE[stack.pop()] == ch  # the shown part is well nested
        assert 2 <= len(stack) <= 5
        return "".join(CLOSE[c] for c in reversed(stack))
    if rule == "increment":
        assert all(int(b) == (int(a) + 1) % 10 for a, b in zip(seq, seq[1:]))
        return "".join(str((int(seq[-1]) + i) % 10) for i in range(1, n + 1))
    raise AssertionError(rule)


def ref_char_f1(pred: str, gold: str) -> float:
    if not pred and not gold:
        return 1.0
    rest, common = list(gold), 0
    for ch in pred:  # multiset intersection by removal
        if ch in rest:
            rest.remove(ch)
            common += 1
    if common == 0:
        return 0.0
    p, r = common / len(pred), common / len(gold)
    return 2 * p * r / (p + r)


# ------------------------------------------------------------------ SPC
def test_spc_items_deterministic_balanced_and_correct():
    items = get_task("spc").items()
    assert len(items) == 100 and len({i.id for i in items}) == 100
    assert collections.Counter(i.meta["rule"] for i in items) == {r: 20 for r in SPC_RULES}
    again = spc_items()
    assert [(i.question, i.answer) for i in again] == [(i.question, i.answer) for i in items]
    for it in items:
        lines = it.question.splitlines()
        examples, query = lines[1:-1], lines[-1]
        assert len(examples) == 10  # k-shot in the prompt
        assert query == f"{it.meta['sequence']} →"
        rule = it.meta["rule"]
        assert ref_continue(rule, it.meta["sequence"], len(it.answer)) == it.answer
        for ex in examples:  # every in-context example follows the same rule
            seq, cont = ex.split(" → ")
            assert ref_continue(rule, seq, len(cont)) == cont
    assert len({i.question for i in items}) == 100
    assert len(spc_items(2, k_shot=3)[0].question.splitlines()) == 1 + 3 + 1


def test_char_f1_and_scorer_against_reference():
    cases = [("abc", "abc"), ("abcd", "abce"), ("aab", "ab"), ("", "abc"), ("xyz", "abc"), ("))]", ")]]"),
             ("0123456789", "345"), ("", "")]
    for pred, gold in cases:
        assert char_f1(pred, gold) == pytest.approx(ref_char_f1(pred, gold))
    score = get_scorer("char_f1")
    assert score(" cab cab\nxyz →", {"answer": "cabcab"}) == ("cabcab", 1.0)
    assert score("The continuation is: )]>", {"answer": ")]>"}) == (")]>", 1.0)
    assert score("xyz → 456", {"answer": "4567"})[1] == pytest.approx(ref_char_f1("456", "4567"))
    assert score("", {"answer": "abc"}) == ("", 0.0)
    assert extract_continuation("```\nabab\n```") == "abab"


def test_spc_prompt_ends_with_the_query_line_for_base_models():
    task = get_task("spc")
    items, pool = select_items(task, 3, seed=0, shots=1)
    assert pool and not ({p.id for p in pool} & {i.id for i in task.items()})  # demos are extra items
    prompt = plain_prompt(task, items[0], pool[:1])
    assert prompt.endswith(items[0].question) and prompt.rstrip().endswith("→")
    assert f"→ {pool[0].answer}\n\n" in prompt  # the demo shows its own continuation


# ------------------------------------------------------------------ AR
def test_ar_items():
    items = get_task("ar").items()
    assert len(items) >= 100 and len({i.id for i in items}) == len(items)
    assert len({i.question for i in items}) == len(items)
    templates = collections.Counter(i.meta["template"] for i in items)
    assert len(templates) >= 5 and set(templates) == set(AR_TEMPLATES)
    assert all(i.meta["gold_flag"] == "AMBIGUOUS" for i in items)
    golds = collections.Counter(i.meta["gold_answer"] for i in items)
    assert set(golds) == {"A", "B"} and min(golds.values()) > 30
    assert [i.question for i in ar_items()] == [i.question for i in items]
    for it in items:
        assert re.search(r"\nA\. .+\nB\. .+\n", it.question)
        assert "ambiguous_status=<AMBIGUOUS or NOT_AMBIGUOUS>; answer=<A or B>" in it.question
        assert it.answer == f"ambiguous_status=AMBIGUOUS; answer={it.meta['gold_answer']}"
        assert it.meta["gold_rule"] == AR_TEMPLATES[it.meta["template"]]
    # the preferred reading really is the gold letter: e.g. pronoun items -> the subject
    pron = next(i for i in items if i.meta["template"] == "pronoun")
    subject = pron.question.split()[0]
    assert f"\n{pron.meta['gold_answer']}. {subject}\n" in pron.question


@pytest.mark.parametrize("text,flag,answer,valid", [
    ("ambiguous_status=AMBIGUOUS; answer=A", "AMBIGUOUS", "A", True),
    ("  ambiguous_status = NOT_AMBIGUOUS ; answer = B  ", "NOT_AMBIGUOUS", "B", True),
    ("ambiguous_status=AMBIGUOUS; answer=A.", "AMBIGUOUS", "A", False),  # trailing text: not exact
    ("Ambiguous status: not ambiguous\nAnswer: (b)", "NOT_AMBIGUOUS", "B", False),
    ("ambiguous_status=unambiguous; answer=a", "NOT_AMBIGUOUS", "A", False),
    ("**ambiguous_status**: **AMBIGUOUS**; **answer**: **B**", "AMBIGUOUS", "B", False),
    ("NOT AMBIGUOUS, the answer: A", "NOT_AMBIGUOUS", "A", False),  # bare upper-case flag
    ("ambiguous_status=AMBIGUOUS|NOT_AMBIGUOUS; answer=A|B", None, None, False),  # echo of the format
    ("ambiguous_status=<AMBIGUOUS or NOT_AMBIGUOUS>; answer=<A or B>", None, None, False),
    ("This sentence is ambiguous, I think B.", None, None, False),  # prose is not parsed
    ("ambiguous_status=NOT_AMBIGUOUS; answer=A\nWait.\nambiguous_status=AMBIGUOUS; answer=B", "AMBIGUOUS", "B", True),
    ("answer=C", None, None, False),
    ("", None, None, False),
])
def test_parse_ar_edge_cases(text, flag, answer, valid):
    assert parse_ar(text) == {"flag": flag, "answer": answer, "valid": valid}


def test_ar_scorer_and_metrics_on_constructed_responses():
    items = get_task("ar").items()[:8]
    golds = [i.meta["gold_answer"] for i in items]
    other = {"A": "B", "B": "A"}
    responses = [
        f"ambiguous_status=AMBIGUOUS; answer={golds[0]}",        # all right
        f"ambiguous_status=AMBIGUOUS; answer={other[golds[1]]}",  # flag right, answer wrong
        f"ambiguous_status=NOT_AMBIGUOUS; answer={golds[2]}",    # overconfident, answer right
        f"ambiguous_status=NOT_AMBIGUOUS; answer={other[golds[3]]}",
        f"Ambiguous status: ambiguous. Answer: {golds[4]}",       # right but not in the format
        "I cannot tell.",                                         # unparsed
        f"ambiguous_status=AMBIGUOUS; answer={golds[6]}",
        f"ambiguous_status = NOT_AMBIGUOUS; answer = {golds[7]}",
    ]
    m = ar_metrics(responses, items)
    assert m == {"n": 8, "flag_accuracy": 4 / 8, "answer_accuracy": 5 / 8, "format_validity": 6 / 8,
                 "overconfidence": 3 / 8, "unparsed_flag": 1 / 8}
    assert ar_metrics(responses, [i.scorer_item() for i in items]) == m  # dict items work too
    score = get_scorer("ar")
    scores = [score(r, i.scorer_item()) for r, i in zip(responses, items)]
    assert [s for _, s in scores] == [1, 1, 0, 0, 1, 0, 1, 0]
    assert scores[0][0] == f"ambiguous_status=AMBIGUOUS; answer={golds[0]}" and scores[5][0] is None
    assert sum(s for _, s in scores) / 8 == m["flag_accuracy"]


def test_probe_tasks_registered_and_promptable():
    assert {"spc", "ar"} <= set(TASKS)
    lm = tiny_lm("llama", kind="instruct")
    from reporter.collect.plan import plan_task
    from reporter.config import TaskConfig

    for name in ("spc", "ar"):
        p = plan_task(lm, TaskConfig(name=name, limit=2), seed=0)
        assert len(p.items) == 2 and p.shots == 0 and all(len(x) > 20 for x in p.prompt_ids)
        assert p.task.instruction in p.prompts[0] and p.items[0].question in p.prompts[0]
        assert p.task.probe
    ar_task = get_task("ar")
    _, pool = select_items(ar_task, None, 0, 2)
    assert {p.meta["gold_flag"] for p in pool} == {"AMBIGUOUS", "NOT_AMBIGUOUS"}  # demos fix no flag
    assert len(get_task("ar", n_per_template=15).items()) == 105
    assert len(get_task("spc", n_per_rule=2, k_shot=4).items()) == 10


def test_ar_every_template_leaves_both_options_open():
    """No answer is derivable from the text: the letter carries no signal, both options are
    anchored in the sentence, and for pronouns both candidates agree with the pronoun."""
    from reporter.tasks.probes import ar as probes

    items = get_task("ar").items()
    by_t = collections.defaultdict(list)
    for it in items:
        by_t[it.meta["template"]].append(it)
    for template, its in by_t.items():
        golds = collections.Counter(i.meta["gold_answer"] for i in its)
        assert set(golds) == {"A", "B"}, template  # the gold reading is shown as A and as B
        for it in its:
            sentence = it.question.split("\nQuestion:")[0]
            opt_a = re.search(r"\nA\. (.+)\n", it.question).group(1)
            opt_b = re.search(r"\nB\. (.+)\n", it.question).group(1)
            assert opt_a != opt_b
            if template in ("pronoun", "pp_attachment", "relative_clause"):
                # both candidate referents are named in the sentence itself
                for opt in (opt_a, opt_b):
                    assert opt.lower().removeprefix("the ") in sentence.lower(), (template, it.question)
            if template == "pronoun":
                pool = probes._MEN if " he " in f" {sentence} " else probes._WOMEN
                assert opt_a in pool and opt_b in pool  # the pronoun fits either candidate
    # a letter-only 'solver' is at chance on the gold answers
    share_a = sum(i.meta["gold_answer"] == "A" for i in items) / len(items)
    assert 0.35 <= share_a <= 0.65


def test_a_deterministic_solver_scores_f1_one_on_every_spc_item():
    score = get_scorer("char_f1")
    for it in get_task("spc").items():
        solved = ref_continue(it.meta["rule"], it.meta["sequence"], len(it.answer))
        assert score(solved, it.scorer_item()) == (solved, 1.0)


def test_spc_exact_match_tells_a_copied_mirror_from_its_answer():
    """Char-F1 (the paper's, as its authors' code computes it) ignores order: a mirror item answered by copying the
    shown string scores 1.0, as the card review found on Gemma-3-270M. Exact match, which that code reports beside
    it, does not; ``reordered`` counts what char-F1 credited for a reordering. Against a plain count."""
    from reporter.tasks.probes.spc import spc_metrics

    mirrors = [it for it in get_task("spc").items() if it.meta["rule"] == "mirror"][:6]
    score = get_scorer("char_f1")
    replies = [it.meta["sequence"][:-1] if i % 2 == 0 else it.answer for i, it in enumerate(mirrors)]  # copy, answer
    for reply, it in zip(replies, mirrors):
        assert score(reply, it.scorer_item())[1] == 1.0  # every one a full char-F1 score
    got = spc_metrics(replies, mirrors)
    palindromes = sum(it.answer == it.answer[::-1] for it in mirrors[::2])  # a copied palindrome is its answer
    exact = sum(r == it.answer for r, it in zip(replies, mirrors))
    assert got == {"n": 6, "exact_match": exact / 6, "reordered": (6 - exact) / 6}
    assert exact == 3 + palindromes and exact < 6
    assert spc_metrics(replies, [it.scorer_item() for it in mirrors]) == got  # scorer dicts as well as items
