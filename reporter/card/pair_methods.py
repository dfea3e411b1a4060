"""What the card says about its paired differences: which test and which interval each kind of score got.

A run's comparisons are right/wrong scores (McNemar's exact test) or partial credit; runs made by older code
recorded other methods (a BCa bootstrap interval, the Wilcoxon test), and a card re-rendered from them must say
what its numbers used. :func:`pair_methods` reads that from the rows themselves (``method`` in results.json,
``ci_method`` in a comparison of runs) and gives the phrases every template uses, so no template describes a
method the card has no number from.

>>> m = pair_methods([{"test": "mcnemar-exact", "method": "mcnemar-compatible-exact"}])
>>> m["kinds"], m["agree"]
({'binary': 'exact', 'partial': None}, True)
>>> m["test"]
"McNemar's exact test"
>>> pair_methods([{"test": "wilcoxon", "ci_method": "bootstrap-bca"}])["agree"]
False
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["pair_methods"]

#: the test of partial-credit differences and its interval (reporter.metrics.sign_flip)
SIGN_FLIP = "sign-flip"
_EXACT_BINARY = "mcnemar-compatible-exact"  # reporter.metrics.stats.EXACT_PAIRED_CI (the card imports no SciPy)

#: the tests and intervals by kind: short (inside a sentence's parentheses) and long (the methods)
_TEST = {
    "exact": "McNemar's exact test", "bootstrap": "McNemar's exact test",
    SIGN_FLIP: "the paired sign-flip test of the mean difference",
    "wilcoxon": "the Wilcoxon signed-rank test",
}
_TEST_LONG = {
    **_TEST,
    SIGN_FLIP: "the paired sign-flip test of the mean difference, a randomisation test: with interchangeable models "
               "each item's difference was as likely to come out with the other sign, so the observed mean is "
               "compared with the means of every sign arrangement (exact up to 18 items that differ; 19,999 random arrangements above)",
}
_CI = {
    "exact": "the exact interval that agrees with McNemar's test, Fay & Lumbard 2021",
    "bootstrap": "a paired BCa bootstrap over items",
    SIGN_FLIP: "the interval that agrees with the sign-flip test, melded as Fay & Lumbard's",
}
_CI_LONG = {
    **_CI,
    "exact": "the exact interval that agrees with McNemar's test (Fay & Lumbard 2021: the confidence distributions "
             "of the share of items the two models disagree on and of the share of those the first wins, melded; "
             "with no disagreement it is not the point 0 but what n items allow)",
    SIGN_FLIP: "the interval that agrees with the sign-flip test (the confidence distributions of the share of "
               "items the two models score differently, Clopper-Pearson, and of the mean of those differences, the "
               "sign-flip test's subset means after Hartigan 1969, melded as Fay & Lumbard 2021 do for right/wrong "
               "scores; with no item scored differently it is what n items allow, not the point 0; with k ≤ 5 items scored "
               "differently the test cannot reach p < 0.05, its smallest p being 2/2^k, so the interval always "
               "contains 0, and where every item differs it is the whole range, −100 to +100 points)",
}


def _kind(row: Mapping[str, Any]) -> tuple[str, str]:
    """``("binary" | "partial", interval kind)`` of one comparison row."""
    method = str(row.get("method") or row.get("ci_method") or "")
    binary = row.get("test") == "mcnemar-exact" or (row.get("test") is None and row.get("mcnemar_p") is not None)
    if binary:
        return "binary", "exact" if method == _EXACT_BINARY else "bootstrap"
    return "partial", SIGN_FLIP if method.startswith(SIGN_FLIP) else "bootstrap"


def pair_methods(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The paired methods of ``rows`` (a card's comparisons or a comparison's rows), as phrases.

    Keys: ``kinds`` (``binary``: ``exact``/``bootstrap``/None; ``partial``: ``sign-flip``/``bootstrap``/None);
    ``test`` and ``ci`` (what the test and the 95 % interval are, per kind present, joined with "; "; short enough
    for a sentence's parentheses); ``explained`` (a sentence per kind present: its test and interval, explained, for
    the methods); ``pairs`` (per kind present, its test with its interval, for a sentence of its own); ``agree``
    (every interval excludes 0 exactly where its unadjusted test rejects); ``caveat`` (where one does not: a
    sentence, else empty). No rows: the methods this code uses.

    >>> m = pair_methods([{"test": "sign-flip", "method": "sign-flip-exact"},
    ...                   {"test": "mcnemar-exact", "method": "mcnemar-compatible-exact"}])
    >>> m["agree"], m["ci"].startswith("right/wrong scores: the exact interval")
    (True, True)
    >>> m["pairs"].startswith("right/wrong scores: McNemar's exact test, with the 95% interval the exact interval")
    True
    """
    kinds: dict[str, str | None] = {"binary": None, "partial": None}
    rows = list(rows)
    if not rows:  # nothing recorded (no step compared yet): what this code computes
        kinds = {"binary": "exact", "partial": SIGN_FLIP}
    for r in rows:
        scores, kind = _kind(r)
        if kinds[scores] in (None, kind):
            kinds[scores] = kind
        else:  # mixed (rows merged from runs of different code): the weaker description
            kinds[scores] = "bootstrap"
    present = [(s, k) for s, k in kinds.items() if k is not None]
    label = {"binary": "right/wrong scores", "partial": "partial credit"}
    both = len(present) > 1

    def joined(table: Mapping[str, str], test: bool) -> str:
        parts = []
        for s, k in present:
            key = "wilcoxon" if test and s == "partial" and k == "bootstrap" else k
            parts.append(f"{label[s]}: {table[key]}" if both else table[key])
        return "; ".join(parts)

    agree = all(k in ("exact", SIGN_FLIP) for _, k in present)
    loose = [label[s] for s, k in present if k == "bootstrap"]
    caveat = "" if agree else (
        f"For {' and '.join(loose)} the bootstrap interval is too narrow on few items and can exclude 0 where the "
        "test is far from significant: significance follows the test.")
    explained = " ".join(
        f"{f'For {label[s]} the' if both else 'The'} test is {_TEST_LONG['wilcoxon' if k == 'bootstrap' and s == 'partial' else k]}, "
        f"and the 95% interval {_CI_LONG[k]}." for s, k in present)
    def test_key(s: str, k: str) -> str:
        return "wilcoxon" if s == "partial" and k == "bootstrap" else k

    pairs = "; ".join(f"{label[s] + ': ' if both else ''}{_TEST[test_key(s, k)]}, with the 95% interval {_CI[k]}"
                      for s, k in present)
    return {"kinds": kinds, "test": joined(_TEST, True), "ci": joined(_CI, False), "explained": explained,
            "agree": agree, "caveat": caveat, "pairs": pairs}
