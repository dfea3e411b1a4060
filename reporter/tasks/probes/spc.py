"""SPC, Symbolic Pattern Completion: an LPP synthetic probe (arXiv 2605.30018), run as a task.

A sequence follows one of five rules (periodic, alternating, mirror, balanced brackets,
increment mod 10); the model writes the continuation, scored by character-level F1 (scorer
``char_f1``). k in-context examples of the same rule (default 10, the paper's setting) are part
of each item's question. Items are generated deterministically from a seed (Python's
``random.Random`` with a string seed): the same items on every run and machine.

>>> len(spc().items())
100
>>> score_char_f1(" cabca", {"answer": "cabcab"})
('cabca', 0.9090909090909091)
"""
from __future__ import annotations

import collections
import random
import re
from typing import Any, Sequence

from ...scoring import register_scorer
from ..base import Item, Task, register_task

SPC_SEED = "lpp-spc-v1"
SPC_RULES = ("periodic", "alternating", "mirror", "brackets", "increment")
SPC_SHOTS = 10
ARROW = "→"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_BRACKETS = {"(": ")", "[": "]", "{": "}", "<": ">"}


def spc_example(rule: str, rng: random.Random) -> tuple[str, str]:
    """One (shown sequence, true continuation) of ``rule``, drawn from ``rng``.

    * periodic: a unit of 3-5 distinct letters repeated (>= 2 full repeats shown); 6 more symbols.
    * alternating: two distinct symbols (a letter and a digit) alternating; 6 more symbols.
    * mirror: a string of 4-7 letters, then "|"; the continuation is the string reversed.
    * brackets: an unfinished well-nested string over ()[]{}<> with 2-5 brackets open; the
      continuation closes them, innermost first (the unique shortest completion).
    * increment: digits each one more than the last, mod 10 (9 is followed by 0); 6 more digits.

    >>> spc_example("increment", random.Random(0))
    ('67890123', '456789')
    """
    if rule == "periodic":
        unit = "".join(rng.sample(_LOWER, rng.randint(3, 5)))
        n = rng.randint(2 * len(unit), 3 * len(unit))
        full = unit * 8
        return full[:n], full[n:n + 6]
    if rule == "alternating":
        a, b = rng.choice(_LOWER), rng.choice("0123456789")
        pair = a + b if rng.random() < 0.5 else b + a
        n = rng.randint(6, 10)
        full = pair * 10
        return full[:n], full[n:n + 6]
    if rule == "mirror":
        s = "".join(rng.choice(_LOWER) for _ in range(rng.randint(4, 7)))
        return s + "|", s[::-1]
    if rule == "brackets":
        while True:
            stack, out = [], []
            for _ in range(rng.randint(6, 12)):
                if stack and (len(stack) >= 5 or rng.random() < 0.4):
                    out.append(_BRACKETS[stack.pop()])
                else:
                    o = rng.choice("([{<")
                    stack.append(o)
                    out.append(o)
            if 2 <= len(stack) <= 5:
                return "".join(out), "".join(_BRACKETS[o] for o in reversed(stack))
    if rule == "increment":
        start, n = rng.randint(0, 9), rng.randint(5, 9)
        digits = "".join(str((start + i) % 10) for i in range(n + 6))
        return digits[:n], digits[n:]
    raise ValueError(f"unknown SPC rule {rule!r}; rules: {', '.join(SPC_RULES)}")


SPC_HEADER = f"Continue the pattern. Each line is a sequence, then \"{ARROW}\", then how the sequence continues."


def spc_items(n_per_rule: int = 20, k_shot: int = SPC_SHOTS, seed: str = SPC_SEED, prefix: str = "spc") -> list[Item]:
    """``n_per_rule`` items per rule (default 100 in all), each with ``k_shot`` examples of its rule.

    Item.question = header, the k example lines "sequence → continuation", and the query
    line "sequence →" (the prompt ends there, so a base model just continues the line);
    Item.answer = the true continuation; meta: rule, sequence.

    >>> it = spc_items(1, k_shot=2)[0]
    >>> print(it.question)
    Continue the pattern. Each line is a sequence, then "→", then how the sequence continues.
    yrbfvyrbfvyrb → fvyrbf
    edvgfedvgfed → vgfedv
    qmvunqmvunqmvun →
    >>> it.answer, it.meta["rule"]
    ('qmvunq', 'periodic')
    """
    out = []
    for rule in SPC_RULES:
        rng = random.Random(f"{seed}:{rule}")
        for i in range(n_per_rule):
            shots = [spc_example(rule, rng) for _ in range(k_shot)]
            seq, cont = spc_example(rule, rng)
            lines = [SPC_HEADER] + [f"{s} {ARROW} {c}" for s, c in shots] + [f"{seq} {ARROW}"]
            out.append(Item(id=f"{prefix}-{rule}-{i:03d}", question="\n".join(lines), answer=cont,
                            meta={"rule": rule, "sequence": seq, "k_shot": k_shot}, demo_answer=f" {cont}"))
    return out


def extract_continuation(response: str) -> str:
    """The continuation in a response: its first non-empty line, after the last arrow or colon
    (so "Continuation: abc" and "xyz → abc" work), without whitespace, quotes, backticks or "*".

    >>> extract_continuation(" c a b\\nmore text"), extract_continuation("**Answer:** `)]`")
    ('cab', ')]')
    """
    text = re.sub(r"```[a-z]*", "\n", str(response or ""))
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = re.split(r"→|->|=>", line)[-1]
    if ":" in line:
        line = line.rsplit(":", 1)[1]
    return re.sub(r"[\s\"'`*]", "", line)


def char_f1(pred: str, gold: str) -> float:
    """Character-level F1: the multiset overlap of characters (SQuAD token F1, per character).

    precision = |pred ∩ gold| / |pred|, recall = |pred ∩ gold| / |gold| (multiset
    intersection, order ignored); F1 = 2PR/(P+R). Both empty: 1; one empty: 0.

    >>> char_f1("abcd", "abce"), char_f1("aab", "ab"), char_f1("", "")
    (0.75, 0.8, 1.0)
    """
    if not pred or not gold:
        return float(pred == gold)
    common = sum((collections.Counter(pred) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred), common / len(gold)
    return 2 * p * r / (p + r)


@register_scorer("char_f1")
def score_char_f1(response: str, item: dict[str, Any]) -> tuple[str | None, float]:
    """SPC: character-level F1 of the continuation the reply writes (after any echo of the sequence) against the
    gold continuation (:func:`char_f1` of :func:`extract_continuation`).

    >>> score_char_f1("->)]>", {"answer": ")]>"})
    (')]>', 1.0)
    """
    got = extract_continuation(response)
    return got, char_f1(got, str(item.get("answer", "")))


def spc_metrics(responses: Sequence[str], items: Sequence[Any]) -> dict[str, Any]:
    """SPC summary over responses and their items (:class:`Item` or scorer dicts): beside the paper's character-level
    F1, which ignores the order of characters, the exact match its authors' code reports with it.

    exact_match: share of items whose continuation (:func:`extract_continuation`) is the true one exactly;
    reordered: share whose continuation has exactly the true one's characters in another order, which char-F1
    credits in full (a mirror item answered by copying its sequence, for one).

    >>> its = [{"answer": "dcba"}, {"answer": "abcd"}, {"answer": "xyz"}]
    >>> spc_metrics(["dcba", "dcba", "xy"], its)
    {'n': 3, 'exact_match': 0.3333333333333333, 'reordered': 0.3333333333333333}
    """
    if len(responses) != len(items):
        raise ValueError("responses and items must have the same length")
    n = len(responses)
    if n == 0:
        return {"n": 0, "exact_match": float("nan"), "reordered": float("nan")}
    exact = reordered = 0
    for r, it in zip(responses, items):
        got = extract_continuation(r)
        gold = str(it.answer if isinstance(it, Item) else it.get("answer", ""))
        exact += got == gold
        reordered += got != gold and sorted(got) == sorted(gold)
    return {"n": n, "exact_match": exact / n, "reordered": reordered / n}


@register_task("spc")
def spc(n_per_rule: int = 20, k_shot: int = SPC_SHOTS, seed: str = SPC_SEED) -> Task:
    """Symbolic Pattern Completion (``n_per_rule`` x 5 items, ``k_shot`` in-context examples each)."""
    return Task(name="spc", scorer="char_f1", load=lambda: spc_items(n_per_rule, k_shot, seed),
                fewshot_pool=lambda: spc_items(1, k_shot, f"{seed}:pool", prefix="spc-demo"),
                instruction="Continue the symbol sequence on the last line, following the same rule as the "
                            "examples. Reply with the continuation only: no spaces, no explanation.",
                answer_prefix="", max_new_tokens=24, stop=("\n",), base_stop=("\n",), probe=True,
                summarize=lambda responses, items: {"spc": spc_metrics(responses, items)},
                description=f"LPP Symbolic Pattern Completion: 5 rules x {n_per_rule}, {k_shot}-shot in the "
                            "prompt, character-level F1 (exact match too)",
                source=f"generated (reporter.probes, seed {seed!r})")
