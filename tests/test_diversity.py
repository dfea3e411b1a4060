"""Dataset diversity per model, against plain Python set references."""
from __future__ import annotations

import time

import numpy as np
import pytest

from reporter.analyse.diversity import (
    greedy_core_set,
    marginal_gains,
    model_diversity,
    overlap,
    saturation_curve,
    task_unions,
)


def random_sets(n, universe, size, seed):
    rng = np.random.default_rng(seed)
    # skewed popularity, like key neurons: a few neurons appear in many samples
    p = rng.power(0.3, universe)
    p /= p.sum()
    return [np.unique(rng.choice(universe, size=rng.integers(1, size), p=p)) for _ in range(n)]


def naive_greedy(sets, fraction):
    sets = [set(s.tolist()) for s in sets]
    universe = set().union(*sets)
    covered, picks = set(), []
    while len(covered) < fraction * len(universe) - 1e-9:
        gains = [len(s - covered) for s in sets]
        best = max(range(len(sets)), key=lambda i: (gains[i], -i))
        if gains[best] == 0:
            break
        picks.append(best)
        covered |= sets[best]
    return picks, len(covered), len(universe)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_matches_naive_reference(seed):
    sets = random_sets(150, 600, 40, seed)
    for frac in (0.5, 0.95, 1.0):
        got = greedy_core_set(sets, fraction=frac)
        picks, cov, total = naive_greedy(sets, frac)
        assert got["indices"] == picks
        assert got["covered"] == cov and got["total"] == total and got["size"] == len(picks)
        assert got["coverage"] >= frac - 1e-12


def test_greedy_edge_cases():
    assert greedy_core_set([])["size"] == 0
    assert greedy_core_set([np.array([], int), np.array([], int)])["size"] == 0
    g = greedy_core_set([np.array([5]), np.array([5]), np.array([], int)], fraction=1.0)
    assert g["indices"] == [0] and g["coverage"] == 1.0


def test_overlap_against_sets():
    by_task = {t: random_sets(20, 300, 30, s) for s, t in enumerate("abc")}
    u = task_unions(by_task)
    ov = overlap(u)
    su = {t: set().union(*[set(x.tolist()) for x in by_task[t]]) for t in by_task}
    for i, x in enumerate(ov["tasks"]):
        assert ov["sizes"][i] == len(su[x])
        for j, y in enumerate(ov["tasks"]):
            assert ov["jaccard"][i][j] == pytest.approx(len(su[x] & su[y]) / len(su[x] | su[y]))
            assert ov["redundancy"][i][j] == pytest.approx(len(su[x] & su[y]) / len(su[x]))
    assert overlap({"e": np.zeros(0, np.int64), "f": np.array([1])})["redundancy"][0] == [0.0, 0.0]


def test_saturation_against_loop():
    sets = random_sets(100, 400, 25, 7)
    c = saturation_curve(sets, seed=3, fraction=0.95, max_points=1000)
    order = np.random.default_rng(3).permutation(100)
    seen, sizes = set(), []
    for i in order:
        seen |= set(sets[i].tolist())
        sizes.append(len(seen))
    assert c["n"] == list(range(1, 101)) and c["union_size"] == sizes
    assert c["total"] == len(seen)
    assert c["n_at_fraction"] == next(k + 1 for k, s in enumerate(sizes) if s >= 0.95 * len(seen))
    small = saturation_curve(sets, seed=3, max_points=10)
    assert small["n"][0] == 1 and small["n"][-1] == 100 and c["n_at_fraction"] in small["n"]
    assert all(small["union_size"][small["n"].index(k)] == sizes[k - 1] for k in small["n"])
    assert saturation_curve([], seed=0)["total"] == 0


def test_marginal_gains_against_sets():
    by_task = {t: random_sets(15, 200, 20, s) for s, t in enumerate("xyz")}
    su = {t: set().union(*[set(x.tolist()) for x in by_task[t]]) for t in by_task}
    everything = set().union(*su.values())
    got = {g["task"]: g for g in marginal_gains(task_unions(by_task))}
    for t in su:
        only = su[t] - set().union(*[su[o] for o in su if o != t])
        assert got[t]["new_neurons"] == len(only)
        assert got[t]["share_of_all"] == pytest.approx(len(only) / len(everything))


def test_model_diversity_facts():
    a = [np.array([1, 2, 3]), np.array([3, 4])]
    b = [np.array([1, 2, 3, 4]), np.array([10, 11, 12])]
    d = model_diversity("M", {"A": a, "B": b}, seed=0)
    assert "recommendations" not in d  # advice is reporter.analyse.advice's job (tests/test_advice.py)
    assert d["overlap"]["redundancy"][0][1] == 1.0  # A's neurons all in B
    assert [(g["task"], g["new_neurons"]) for g in d["marginal_gain"]] == [("B", 3), ("A", 0)]
    assert d["core_sets"]["B"]["size"] == 2 and d["core_sets"]["A"]["item_indices"] == [0, 1]
    assert d["overlap"]["redundancy"][1][0] == pytest.approx(4 / 7)


def test_scale_1000_samples():
    rng = np.random.default_rng(0)
    sets = [np.unique(rng.integers(0, 10_000, 300)) for _ in range(1000)]
    t0 = time.perf_counter()
    g = greedy_core_set(sets)
    c = saturation_curve(sets)
    assert time.perf_counter() - t0 < 10
    assert g["coverage"] >= 0.95 and 0 < g["size"] <= c["n_at_fraction"] <= 1000

