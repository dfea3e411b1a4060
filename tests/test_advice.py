"""Diversity advice: each kind fires where it must and is withheld, with its reason, where it cannot.

Key-neuron sets are built directly here (the end-to-end controls on tiny models are in
tests/test_coreset.py): a task whose items reuse a small pool of neurons saturates; a task whose
every item brings fresh neurons never does.
"""
from __future__ import annotations

import numpy as np

from reporter.analyse.advice import MAX_ADVICE, MIN_ADVICE_ITEMS, advise


def pool_task(rng, pool, n_items, per_item=6):
    """Items drawing from a small neuron pool: the union saturates after a few items."""
    pool = np.asarray(pool)
    return [np.sort(rng.choice(pool, per_item, replace=False)) for _ in range(n_items)]


def fresh_task(start, n_items, per_item=6):
    """Every item activates neurons no earlier item did: the union never saturates."""
    return [np.arange(start + i * per_item, start + (i + 1) * per_item) for i in range(n_items)]


def test_independent_saturated_tasks_get_keep_not_drop():
    rng = np.random.default_rng(0)
    sets = {"a": pool_task(rng, range(0, 20), 30), "b": pool_task(rng, range(100, 120), 30)}
    d = advise("m", sets, seed=0)
    actions = {(x["action"], x["task"]) for x in d["advice"]}
    assert actions == {("keep", "a"), ("keep", "b")}  # each covers neurons no other task does
    assert all("100%" in x["text"] for x in d["advice"])


def test_a_subset_task_is_dropped_in_favour_of_the_superset():
    rng = np.random.default_rng(1)
    sets = {"small": pool_task(rng, range(0, 20), 30), "big": pool_task(rng, range(0, 20), 30)
            + pool_task(rng, range(20, 40), 30)}
    d = advise("m", sets, seed=0)
    drops = [x for x in d["advice"] if x["action"] == "drop"]
    assert [(x["task"], x["keep"]) for x in drops] == [("small", "big")]
    assert "saves 30 of 90 items" in drops[0]["text"]
    assert not any(x["action"] == "keep" and x["task"] == "small" for x in d["advice"])


def test_partial_overlap_below_the_threshold_is_not_called_redundant():
    rng = np.random.default_rng(2)
    sets = {"x": pool_task(rng, range(0, 20), 30), "y": pool_task(rng, range(6, 26), 30)}  # 70% shared
    d = advise("m", sets, seed=0)
    assert not any(x["action"] == "drop" for x in d["advice"])


def test_three_quarters_shared_with_a_tight_interval_is_below_the_drop_threshold():
    """75 % of x's key neurons are y's, and with 60 items from 20 neurons every resample says so too; z holds x's
    other quarter, so x has nothing of its own to keep it. The interval alone would allow a drop: only the 80 %
    threshold (REDUNDANT_AT) keeps x in the suite, and nothing calls it redundant."""
    rng = np.random.default_rng(2)
    sets = {"x": pool_task(rng, range(0, 20), 60), "y": pool_task(rng, range(5, 25), 60),
            "z": pool_task(rng, list(range(0, 5)) + list(range(100, 115)), 60)}
    d = advise("m", sets, seed=0)
    assert {(x["action"], x["task"]) for x in d["advice"]} == {("keep", "y"), ("keep", "z")}
    assert not any("redundant" in w for w in d["withheld"])


def _rare_in_y(rare: int, seed: int = 1):
    """x's 40 key neurons: 32 are also y's, but ``rare`` of those 32 appear in a single item of y each (a bootstrap
    resample of y keeps each with probability 1 - 1/e), so red(x, y) is 80 % while its resampled values spread
    downwards; z holds x's other 8, so nothing keeps x for neurons of its own. Every union is saturated."""
    rng = np.random.default_rng(seed)
    x = pool_task(rng, range(0, 40), 100, per_item=8)
    y = pool_task(rng, list(range(0, 32 - rare)) + list(range(100, 160)), 100, per_item=8)
    for k, neuron in enumerate(range(32 - rare, 32)):
        y[k] = np.unique(np.append(y[k], neuron))
    z = pool_task(rng, list(range(32, 40)) + list(range(200, 220)), 100, per_item=8)
    return advise("m", {"x": x, "y": y, "z": z}, seed=0)


def test_a_drop_needs_the_redundancys_lower_bound_at_70_percent():
    """The drop rule's second condition (REDUNDANT_LOW) in isolation: both cases are 80 % redundant, at the threshold
    REDUNDANT_AT. With 4 of the shared neurons rare in y the 95 % interval's lower end is 72.5 % and x is dropped for
    y; with 6 it is 67.5 %, and the drop is withheld, saying why. A threshold anywhere outside (67.5 %, 72.5 %] fails
    one of the two."""
    fires, withheld = _rare_in_y(4), _rare_in_y(6)
    drop = [x for x in fires["advice"] if x["action"] == "drop"]
    assert [(x["task"], x["keep"]) for x in drop] == [("x", "y")]
    assert drop[0]["uncertainty"] == "95% CI of the redundancy 72%–80%" and "red(x, y) = 80%" in drop[0]["evidence"]
    assert not any(w.startswith("x looks redundant") for w in fires["withheld"])
    assert not any(x["action"] == "drop" for x in withheld["advice"])
    assert [w for w in withheld["withheld"] if "redundant" in w] == [
        "x looks redundant with y (80%), but its 95% CI reaches down to 68%: not enough to drop it"]


def test_a_growing_union_gets_add_items_and_no_drop_or_core_set():
    rng = np.random.default_rng(3)
    grow = fresh_task(0, 25)
    sets = {"grow": grow, "copy": [s.copy() for s in grow], "other": pool_task(rng, range(500, 520), 30)}
    core = {"grow": {"size": 3, "n": 25, "coverage": 1.0}}
    repro = {"grow": {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}}
    d = advise("m", sets, seed=0, core=core, reproduction=repro)
    actions = {(x["action"], x["task"]) for x in d["advice"]}
    assert ("add", "grow") in actions and ("add", "copy") in actions
    assert not any(a in ("drop", "core set") for a, t in actions if t in ("grow", "copy"))
    assert any("still growing" in w and "grow" in w for w in d["withheld"])
    add = next(x for x in d["advice"] if x["task"] == "grow")
    assert "20%" in add["text"] and "percentile" in add["uncertainty"]


def test_few_items_and_empty_responses_are_withheld_with_their_reason():
    rng = np.random.default_rng(4)
    sets = {"tiny": pool_task(rng, range(0, 20), MIN_ADVICE_ITEMS - 1),
            "empty": [np.zeros(0, np.int64)] * 30,
            "ok": pool_task(rng, range(100, 120), 30)}
    d = advise("m", sets, seed=0)
    assert {x["task"] for x in d["advice"]} <= {"ok"}
    assert any(w.startswith(f"fewer than {MIN_ADVICE_ITEMS} items") and f"tiny ({MIN_ADVICE_ITEMS - 1})" in w
               for w in d["withheld"])
    assert any("no key neurons at all" in w and "empty" in w for w in d["withheld"])


def test_core_set_advice_needs_a_reproduced_score():
    rng = np.random.default_rng(5)
    sets = {"t": pool_task(rng, range(0, 20), 40), "u": pool_task(rng, range(50, 70), 40)}
    core = {"t": {"size": 6, "n": 40, "coverage": 0.96}, "u": {"size": 6, "n": 40, "coverage": 0.96}}
    repro = {"t": {"diff": 0.01, "ci_low": -0.02, "ci_high": 0.04},  # within ±5 points: fires
             "u": {"diff": 0.05, "ci_low": -0.01, "ci_high": 0.12}}  # could be 12 points off: withheld
    d = advise("m", sets, seed=0, core=core, reproduction=repro)
    assert ("core set", "t") in {(x["action"], x["task"]) for x in d["advice"]}
    assert not any(x["action"] == "core set" and x["task"] == "u" for x in d["advice"])
    assert any(w.startswith("core set of u") and "+12 points" in w for w in d["withheld"])


def test_at_most_five_decisions_by_impact():
    rng = np.random.default_rng(6)
    sets = {f"t{i}": pool_task(rng, range(100 * i, 100 * i + 20), 30 + i) for i in range(8)}
    d = advise("m", sets, seed=0)
    assert len(d["advice"]) == MAX_ADVICE
    assert [x["impact"] for x in d["advice"]] == sorted((x["impact"] for x in d["advice"]), reverse=True)
    assert any("3 further decision(s) of lower impact left out" in w for w in d["withheld"])
