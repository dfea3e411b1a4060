"""Option-order evidence for the contamination analysis (``option_order.json`` per task).

A multiple-choice item is published with its options in one order. A model that never saw
the item has no reason to prefer that order over any other, so the canonical order's
log-likelihood is exchangeable with the log-likelihoods of the same text with its options
permuted: its rank among them is uniform. A model trained on the item prefers the order it
saw. This is the exchangeability test of Oren et al. (2023, "Proving test set contamination
in black-box language models"), applied to the order of each item's options instead of the
order of the dataset's items, so it needs neither a reference text nor a contiguous copy of
the test set in the training data. The analyse stage turns the stored log-likelihoods into an
exact p-value (:func:`reporter.analyse.contamination.option_order_signal`).

Each text is the item's question block as the task shows it (stem, then ``A. option`` lines;
:func:`reporter.tasks.base.mc_question`), tokenised plainly with the tokenizer's own special
prefix. Its log-likelihood is the sum of the log-probs of the first ``window`` tokens of each
option line (``contamination.order_window``; the label and the option's first words: where a
model that learnt the published order expects one option to follow another, while the rest of
a long option follows from its own first words in any order), or of the whole option block.
Any fixed function of the text keeps the published order's rank uniform without
contamination, so either is an exact test; the window makes the LM head run on a few positions
per option instead of every token of HellaSwag's long endings. The prefix every order of an
item shares (its stem) is run once, and its KV cache reused for every order
(:func:`~reporter.collect.text_scores.prefix_logprobs`). Tokens before the prefix all
orders of the item share (``scored_from``) are never scored: they have the same log-probs in
every order, so they would add the same constant to every variant and cannot change a rank.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..config import ContaminationConfig
from ..store.layout import OPTION_ORDER
from ..tasks.base import mc_question
from .evidence import EvidenceContext, EvidencePass, evidence_order, measured, register_evidence
from .option_conventions import order_is_convention
from .score_cache import CacheMode, cached_scores
from .text_scores import KV_CACHE, PREFIX_TREE, prefix_path, prefix_scores, token_logprobs

__all__ = ["option_stem", "permutations_for", "order_is_convention", "order_variants", "option_order_evidence",
           "collect_option_order", "option_token_starts", "option_windows", "OptionOrderPass"]

def option_stem(question: str, choices: Sequence[str]) -> str | None:
    """The stem of a question rendered by ``mc_question``, or None when it was rendered otherwise.

    >>> option_stem(mc_question("Sky?", ["blue", "green"]), ["blue", "green"])
    'Sky?'
    >>> option_stem("Sky? (blue or green)", ["blue", "green"]) is None
    True
    """
    block = mc_question("", list(choices))  # "\nA. ...\nB. ..."
    if not question.endswith(block):
        return None
    stem = question[: len(question) - len(block)]
    return stem if mc_question(stem, list(choices)) == question else None


def permutations_for(n_options: int, n_perms: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n_perms`` distinct non-identity orders of ``n_options`` options (all of them when there are fewer).

    >>> len(permutations_for(3, 8, np.random.default_rng(0)))  # 3! - 1
    5
    >>> p = permutations_for(5, 8, np.random.default_rng(0)); len(p), len(set(p)), tuple(range(5)) in p
    (8, 8, False)
    """
    ident = tuple(range(n_options))
    if math.factorial(n_options) - 1 <= n_perms:
        return [p for p in itertools.permutations(range(n_options)) if p != ident]
    seen: set[tuple[int, ...]] = set()
    out: list[tuple[int, ...]] = []
    while len(out) < n_perms:
        p = tuple(int(x) for x in rng.permutation(n_options))
        if p != ident and p not in seen:
            seen.add(p)
            out.append(p)
    return out


def order_variants(tokenizer: Any, items: Sequence[Any], *, n_perms: int = 8, max_items: int | None = 32,
                   seed: int = 0, sample: str = "first"
                   ) -> tuple[list[dict[str, Any]], list[list[int]], list[int], dict[str, int]]:
    """The token sequences :func:`option_order_evidence` scores, and what it left out.

    Returns ``(plan, texts, starts, skipped)``: per usable item ``{"id", "perms", "first",
    "option_starts"}`` (its canonical text is ``texts[first]``, its permuted ones follow in the
    order of ``perms``; ``option_starts``, per variant, the token index of each option line:
    :func:`option_token_starts`); the tokenised question blocks; per text the index of its first scored token
    (the variants' shared prefix); the reasons items were skipped, counted (see
    :func:`option_order_evidence`). ``sample``: which ``max_items`` of the usable items, ``"first"`` (in the order
    given: a run gives them in :func:`~reporter.collect.evidence.evidence_order`, a seeded random order that the
    other split's test takes too) or ``"seeded"`` (a sample drawn with ``seed``, the choice before 2026-12-05,
    which the option-order null study keeps).

    >>> from reporter.tasks import Item
    >>> it = Item("q1", mc_question("Sky?", ["blue", "green", "red"]), "A", ["blue", "green", "red"])
    >>> plan, texts, starts, skipped = order_variants(lm.tokenizer, [it]); len(texts), plan[0]["first"], skipped
    (6, 0, {})
    """
    rng = np.random.default_rng(seed)
    usable: list[tuple[str, str, list[str]]] = []
    skipped: dict[str, int] = {}
    lists = {tuple(c.strip() for c in it.choices) for it in items if it.choices}
    fixed = len(items) > 1 and len(lists) == 1
    for it in items:
        ch = list(it.choices or [])
        if len(ch) < 2:
            why: str | None = "no options"
        elif fixed:
            why = "every item has the same option list (a fixed label set)"
        elif len({c.strip() for c in ch}) < len(ch):
            why = "identical options"
        else:
            why = order_is_convention(ch)
        stem = option_stem(it.question, ch) if why is None else None
        if why is None and stem is None:
            why = "the question is not a stem followed by option lines"
        if why is not None or stem is None:
            skipped[why or "?"] = skipped.get(why or "?", 0) + 1
        else:
            usable.append((str(it.id), stem, ch))
    if sample not in ("first", "seeded"):
        raise ValueError(f"order_variants: sample must be 'first' or 'seeded', not {sample!r}")
    if max_items is not None and len(usable) > max_items:
        if sample == "seeded":
            pick = np.sort(rng.choice(len(usable), size=max_items, replace=False))
            usable = [usable[i] for i in pick]
        else:
            usable = usable[:max_items]
    texts: list[list[int]] = []
    starts: list[int] = []
    plan: list[dict[str, Any]] = []
    for iid, stem, ch in usable:
        perms = permutations_for(len(ch), n_perms, rng)
        variants = [tuple(range(len(ch)))] + perms
        toks = [option_token_starts(tokenizer, stem, [ch[j] for j in p]) for p in variants]
        enc = [ids for ids, _ in toks]
        plan.append({"id": iid, "perms": perms, "first": len(texts), "option_starts": [st for _, st in toks]})
        shared = _common_prefix(enc)
        texts += enc
        starts += [max(1, shared)] * len(enc)
    return plan, texts, starts, skipped


def option_order_evidence(lm: Any, items: Sequence[Any], *, n_perms: int = 8, max_items: int | None = 32,
                          seed: int = 0, batch_size: int = 8, window: int | None = None,
                          greedy_for: Mapping[str, tuple[Sequence[int], int]] | None = None,
                          logprobs_for: Mapping[str, Sequence[int]] | None = None,
                          cache: CacheMode = "off", path: str = "auto", sample: str = "first") -> dict[str, Any]:
    """Log-likelihood of each multiple-choice item in its canonical and in ``n_perms`` permuted option orders.

    ``items``: task Items (``id``, ``question``, ``choices``). Skipped, with the reasons counted
    in ``skipped``: items without options, with identical options, whose question is not a
    stem plus option lines, or whose order is a convention (:func:`order_is_convention`); and
    every item of a task whose items all share one option list (a fixed label set such as
    yes/no: its order is a convention too). At most ``max_items`` are scored: the first usable ones in the
    order given (``sample``: :func:`order_variants`).
    Per item: ``ll`` (canonical), ``perm_ll`` (one per permutation, in the order of ``perms``),
    both summed from token ``scored_from`` (the variants' shared prefix) on, and the token count.
    ``window``: sum only the first ``window`` tokens of each option line
    (:func:`option_windows`; ``n_scored``, per variant, how many), the LM head run on those
    alone; ``None`` sums the whole option block.

    ``greedy_for``: item id -> ``(tokens, k)``, the verbatim check's prompt + target of that item
    (:mod:`reporter.collect.verbatim`; the prompt is its first ``k`` tokens). Where the item's
    published-order text starts with those tokens, the same pass also gives the model's most
    probable token at each target position (``greedy``: item id -> tokens; the item's shared
    prefix is then cut to at most ``k`` tokens, so that the target lies after it): the verbatim
    check of that item needs no pass of its own.

    ``logprobs_for``: item id -> tokens, the other split's text of that item
    (:mod:`reporter.collect.split_reference`: its question, cut). Where the item's published-order text starts
    with those tokens, the same pass also gives the log-prob of each of them after the first (``logprobs``:
    item id -> float32 array, what :func:`~reporter.collect.reference.logprobs_and_greedy` gives for them): on the
    prefix tree they are positions of tokens the pass runs anyway; on the KV-cache path, whose stem runs apart,
    those texts run once more, plainly.

    ``path`` (argument): ``"auto"`` (the tree where the model's probe takes it), ``"tree"`` or ``"cache"``, as in
    :func:`~reporter.collect.text_scores.prefix_scores`. ``path`` (result): how the variants' scores
    were computed, ``"prefix tree"`` or ``"KV cache"``
    (:func:`~reporter.collect.text_scores.prefix_path`; ``"plain"`` when no two share a stem), kept
    with the scores in the cache, so that a record read back is the one computed; ``None`` for no item.

    ``cache``: whether the scores of the exact token sequences are kept across runs and read back
    (:func:`~reporter.collect.score_cache.cached_scores`: ``reporter run`` uses it, ``--force`` refreshes it, a
    direct call leaves it ``off``); ``scores`` says whether they were ``cached`` or ``computed``.

    >>> from reporter.tasks import Item
    >>> it = Item("q1", mc_question("Sky?", ["blue", "green", "red"]), "A", ["blue", "green", "red"])
    >>> e = option_order_evidence(lm, [it]); e["n"], len(e["per_item"][0]["perm_ll"])
    (1, 5)
    """
    plan, texts, starts, skipped = order_variants(lm.tokenizer, items, n_perms=n_perms, max_items=max_items,
                                                  seed=seed, sample=sample)
    where = _scored_positions(plan, texts, starts, window)
    wants, shared = _verbatim_positions(plan, texts, starts, greedy_for)
    extra = _split_positions(plan, texts, logprobs_for)
    # a causal model's log-probs at the scored tokens do not depend on the tokens after the last one
    cut = [t[:max(w + g + e, default=s) + 1] for t, w, g, e, s in zip(texts, where, wants, extra, starts)]
    payload = {"texts": cut, "shared": shared, "where": where, "wants": wants, "extra": extra,
               "batch_size": batch_size}

    def compute() -> tuple[Any, ...]:
        how = prefix_path(lm, path) if any(2 <= s < len(t) for t, s in zip(cut, shared)) else "plain"
        lps, best, more = _score_variants(lm, cut, shared, where, wants, batch_size, path, extra)
        # the way the scores ran is kept with them, so that a record read back from the cache is the same
        return (*_as_arrays(lps, best), [np.array([_PATHS.index(how)], np.int64)],
                [np.asarray(a, np.float32) for a in more])

    # nothing to score (a task without options): no cache entry, and no "cached" in the manifest for work never done
    got, status = cached_scores(lm, "option_order", payload, compute, mode=cache if plan else "off")
    lps = [np.asarray(a, np.float32) for a in got[0]]
    best = [None if b is None else [int(v) for v in b] for b in got[1]]
    how = got[2][0]  # one index into _PATHS
    more = [np.asarray(a, np.float32) for a in got[3]]
    out = {"n": len(plan), "n_skipped": sum(skipped.values()), "skipped": skipped, "n_perms": n_perms,
           "max_items": max_items, "seed": seed, "window": window,
           "per_item": _item_records(plan, texts, starts, lps, window),
           "path": _PATHS[int(how[0])] if how is not None and plan else None}
    if greedy_for is not None:
        out["greedy"] = {p["id"]: best[p["first"]] for p in plan if wants[p["first"]] and best[p["first"]] is not None}
    if logprobs_for is not None:
        out["logprobs"] = {p["id"]: more[p["first"]] for p in plan if extra[p["first"]]}
    if cache != "off" and plan:
        out["scores"] = status
    return out


#: how :func:`option_order_evidence` ran its variants, by the index the score cache keeps
_PATHS = (PREFIX_TREE, KV_CACHE, "plain")


def _as_arrays(lps: Sequence[np.ndarray], best: Sequence[Sequence[int] | None]
               ) -> tuple[list[np.ndarray | None], list[np.ndarray | None]]:
    """The pass's result as the score cache stores it (ragged 1-D arrays; None where there is no argmax)."""
    return ([np.asarray(a, np.float32) for a in lps],
            [None if b is None else np.asarray(b, np.int64) for b in best])


def _scored_positions(plan: Sequence[dict[str, Any]], texts: Sequence[Sequence[int]], starts: Sequence[int],
                      window: int | None) -> list[list[int]]:
    """Per variant text, the token indices its log-likelihood sums: each option line's window, from the
    variants' shared prefix on (:func:`option_windows`).
    """
    where: list[list[int]] = [[] for _ in texts]
    for p in plan:
        for k, opt in enumerate(p["option_starts"]):
            i = p["first"] + k
            where[i] = [j for j in option_windows(opt, len(texts[i]), window, first=starts[i]) if j >= starts[i]]
    return where


def _verbatim_positions(plan: Sequence[dict[str, Any]], texts: Sequence[Sequence[int]], starts: Sequence[int],
                        greedy_for: Mapping[str, tuple[Sequence[int], int]] | None
                        ) -> tuple[list[list[int]], list[int]]:
    """Per variant text, the target positions of the verbatim check whose argmax this pass can give (only the
    published order, where its text starts with the check's tokens), and the shared prefix of each variant,
    cut to the check's prompt so that its target lies after it.
    """
    shared = list(starts)
    wants: list[list[int]] = [[] for _ in texts]
    for p in plan:
        seq, k = (greedy_for or {}).get(p["id"], ((), 0))
        i = p["first"]
        if 2 <= k < len(seq) and list(texts[i][:len(seq)]) == list(seq):
            wants[i] = list(range(k, len(seq)))
            for v in range(i, i + len(p["option_starts"])):
                shared[v] = min(shared[v], k)
    return wants, shared


def _split_positions(plan: Sequence[dict[str, Any]], texts: Sequence[Sequence[int]],
                     logprobs_for: Mapping[str, Sequence[int]] | None) -> list[list[int]]:
    """Per variant text, the token indices (from 1) whose log-probs the other split's test asks of this pass: every
    token of the item's other-split text, on its published order only, where that text starts with those tokens.
    """
    extra: list[list[int]] = [[] for _ in texts]
    for p in plan:
        seq = list((logprobs_for or {}).get(p["id"], ()))
        i = p["first"]
        if len(seq) >= 2 and list(texts[i][:len(seq)]) == seq:
            extra[i] = list(range(1, len(seq)))
    return extra


def _score_variants(lm: Any, cut: Sequence[Sequence[int]], shared: Sequence[int], where: Sequence[Sequence[int]],
                    wants: Sequence[Sequence[int]], batch_size: int, path: str = "auto",
                    extra: Sequence[Sequence[int]] | None = None
                    ) -> tuple[list[np.ndarray], list[list[int] | None], list[np.ndarray]]:
    """The log-probs at ``where`` of every variant, and the argmaxes at ``wants`` where the pass gives them:
    texts with a shared stem of at least 2 tokens run the stem once and reuse its cache
    (:func:`prefix_scores`, which gives the argmaxes too), the rest plainly (no argmaxes: None). The log-probs
    at ``extra`` come third: in the same pass on the tree or a plain pass, and in one more plain pass over those
    texts on the KV-cache path (whose stem runs apart).
    """
    extra = extra if extra is not None else [[] for _ in cut]
    stem = [i for i, (t, s) in enumerate(zip(cut, shared)) if 2 <= s < len(t)]
    rest = sorted(set(range(len(cut))) - set(stem))
    lps: list[np.ndarray] = [np.zeros(0, np.float32)] * len(cut)
    more: list[np.ndarray] = [np.zeros(0, np.float32)] * len(cut)
    best: list[list[int] | None] = [None] * len(cut)
    alone = []  # texts whose extra positions need a pass of their own
    if stem:
        tree = prefix_path(lm, path) == PREFIX_TREE
        alone = [] if tree else [i for i in stem if extra[i]]
        got, argmax = prefix_scores(lm, [cut[i] for i in stem], [shared[i] for i in stem],
                                    [[*where[i], *(extra[i] if tree else ())] for i in stem],
                                    [wants[i] for i in stem], batch_size=batch_size, path=path)
        for i, a, b in zip(stem, got, argmax):
            lps[i], best[i] = a[:len(where[i])], b
            if tree:
                more[i] = a[len(where[i]):]
    if rest:
        got = token_logprobs(lm, [cut[i] for i in rest], batch_size=batch_size,
                             positions=[[*where[i], *extra[i]] for i in rest])
        for i, a in zip(rest, got):
            lps[i], more[i] = a[:len(where[i])], a[len(where[i]):]
    if alone:  # the other split's texts alone, up to their last token
        got = token_logprobs(lm, [cut[i][:max(extra[i]) + 1] for i in alone], batch_size=batch_size,
                             positions=[extra[i] for i in alone])
        for i, a in zip(alone, got):
            more[i] = a
    return lps, best, more


def _item_records(plan: Sequence[dict[str, Any]], texts: Sequence[Sequence[int]], starts: Sequence[int],
                  lps: Sequence[np.ndarray], window: int | None) -> list[dict[str, Any]]:
    """Per item: the published order's log-likelihood, its permutations', and how many tokens each summed."""
    lls = [float(np.sum(np.asarray(a, np.float64))) for a in lps]
    per_item = []
    for p in plan:
        start, perms = p["first"], p["perms"]
        rec = {"id": p["id"], "ll": lls[start], "perm_ll": lls[start + 1: start + 1 + len(perms)],
               "perms": [list(q) for q in perms], "n_tokens": len(texts[start]), "scored_from": starts[start]}
        if window is not None:
            rec["n_scored"] = [len(lps[start + k]) for k in range(1 + len(perms))]
        per_item.append(rec)
    return per_item


def option_token_starts(tokenizer: Any, stem: str, options: Sequence[str]) -> tuple[list[int], list[int]]:
    """The tokens of ``mc_question(stem, options)`` and the index of the token that starts each option line.

    A line starts at its label letter (``B`` of ``"\\nB. ..."``); its token is the first one whose
    character span ends after that letter's position (a tokenizer may merge the line break and
    the letter). Needs a fast tokenizer (character offsets); otherwise each start is the number
    of special tokens the tokenizer puts in front plus the token count of the text before the
    line, which is the same index unless the tokenizer merges across the line break.

    >>> ids, starts = option_token_starts(lm.tokenizer, "Sky?", ["blue", "green"])
    >>> len(starts), 0 < starts[0] < starts[1] < len(ids)
    (2, True)
    """
    text = mc_question(stem, list(options))
    lines = text.split("\n")
    chars, pos = [], len(lines[0]) + 1
    for line in lines[1:]:
        chars.append(pos)
        pos += len(line) + 1
    try:
        enc = tokenizer(text, return_offsets_mapping=True)
        offs = [tuple(o) for o in enc["offset_mapping"]]
    except (NotImplementedError, ValueError, KeyError):  # what Python and mistral-common tokenizers raise
        offs = []
    found = [next((j for j, (a, b) in enumerate(offs) if b > c and b > a), None) for c in chars]
    if offs and None not in found:
        ids, starts = list(enc["input_ids"]), [int(j) for j in found if j is not None]
    else:  # no character offsets (or none reaching a line): count tokens
        ids = list(tokenizer(text)["input_ids"])
        plain = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        special = set(getattr(tokenizer, "all_special_ids", None) or [])
        lead = next((k for k in range(len(ids) - len(plain) + 1) if ids[k:k + len(plain)] == plain),
                    next((k for k, t in enumerate(ids) if t not in special), 0))  # else: the special tokens in front
        # the special tokens in front, then the text before the line (not any special token added after it)
        starts = [lead + len(tokenizer(text[:c], add_special_tokens=False)["input_ids"]) for c in chars]
    return ids, starts


def option_windows(starts: Sequence[int], n_tokens: int, window: int | None, first: int = 1) -> list[int]:
    """Token indices scored by the option-order test: the first ``window`` tokens of each option line.

    ``None`` scores every token from ``first`` on (the whole option block when ``first`` is the
    variants' shared prefix). A window never runs past the text; windows of adjacent short
    options may overlap, and each index is listed once.

    >>> option_windows([3, 6], 9, 2)
    [3, 4, 6, 7]
    >>> option_windows([3, 6], 9, None, first=2)
    [2, 3, 4, 5, 6, 7, 8]
    """
    if window is None:
        return list(range(max(1, first), n_tokens))
    keep = {j for s in starts for j in range(s, min(s + window, n_tokens))}
    return sorted(j for j in keep if j >= 1)


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix every sequence shares.

    >>> _common_prefix([[1, 2, 3], [1, 2, 4], [1, 5]])
    1
    """
    n = min(len(s) for s in seqs)
    for j in range(n):
        if any(s[j] != seqs[0][j] for s in seqs[1:]):
            return j
    return n


def collect_option_order(lm: Any, items: Sequence[Any], task_dir: Path, settings: ContaminationConfig, *,
                         seed: int = 0, batch_size: int | None = None,
                         greedy_for: Mapping[str, tuple[Sequence[int], int]] | None = None,
                         logprobs_for: Mapping[str, Sequence[int]] | None = None,
                         cache: CacheMode = "off") -> dict[str, Any]:
    """Run :func:`option_order_evidence` on a task's items, in :func:`~reporter.collect.evidence.evidence_order`, and
    write ``task_dir/option_order.json``.

    Skips the work when the file exists (resume). Returns the stored dict (``n`` = 0 for a task
    without options or with ``contamination.order_items: 0``), plus, when the pass ran with
    ``greedy_for``, its ``greedy`` tokens for the verbatim check, and with ``logprobs_for`` its
    ``logprobs`` for the other split's test (not stored: ``verbatim.json`` and ``split_reference.json``
    are their records; ``seconds`` here includes their LM head).
    """
    def compute(bs: int) -> dict[str, Any]:
        if settings.order_items <= 0:
            return {"n": 0, "n_skipped": len(items), "n_perms": settings.order_permutations, "max_items": 0,
                    "seed": seed, "per_item": [], "disabled": True}
        return option_order_evidence(lm, evidence_order(items, seed), n_perms=settings.order_permutations,
                                     max_items=settings.order_items,
                                     seed=seed, batch_size=bs, window=settings.order_window or None,
                                     greedy_for=greedy_for, logprobs_for=logprobs_for, cache=cache)

    return measured(Path(task_dir) / OPTION_ORDER, compute, lm, batch_size=batch_size,
                    transient=("greedy", "logprobs", "scores"))


@register_evidence
class OptionOrderPass(EvidencePass):
    """Contamination: a task's multiple-choice items scored in their published option order and in others
    (``option_order.json``).

    The first contamination pass of a task; it also answers the verbatim check's
    tokens where they are a prefix of an item's published-order text (``shared["verbatim_answers"]``), and the
    other split's test's log-probs of those texts (``shared["split_logprobs"]``).
    """

    name = "option_order"

    switch = "with contamination.order_items above 0, on trained models (random ones too with contamination.untrained)"
    order = 20
    artifact = OPTION_ORDER
    label = "option order"

    def run(self, ctx: EvidenceContext) -> None:
        """Score the task's items in their published and permuted option orders."""
        rec = collect_option_order(ctx.lm, ctx.items, ctx.directory, ctx.profile.contamination, seed=ctx.seed,
                                     greedy_for=ctx.shared.get("verbatim_tokens"),
                                     logprobs_for=ctx.shared.get("split_tokens"), cache=ctx.score_cache)
        if "scores" in rec:
            ctx.scores[self.name] = rec["scores"]
        if "greedy" in rec:
            ctx.shared["verbatim_answers"] = rec["greedy"]
        if "logprobs" in rec:
            ctx.shared["split_logprobs"] = rec["logprobs"]
