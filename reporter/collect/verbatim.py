"""Verbatim-completion evidence for the contamination analysis (``verbatim.json`` per task).

Given the first half of a question's tokens, does greedy decoding reproduce the next tokens
exactly? A model that has seen the test set often does. The analyse stage turns the stored
rates into a signal (:func:`reporter.analyse.contamination.verbatim_signal`).

No generation is needed to answer it: greedy decoding reproduces the target exactly if and only
if, teacher-forced on the target, the model's most probable next token equals the target token
at every position (induction on the position). So one forward pass over prefix + target, with
the LM head on the target's positions alone, gives the exact answer, and also how far greedy
decoding follows the target before it first diverges and the token it writes there.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..config import ContaminationConfig
from ..instrument.batch import padded_batches
from ..instrument.hooked_pass import hooked_pass
from ..store.layout import VERBATIM
from .evidence import EvidenceContext, EvidencePass, evidence_key, measured, register_evidence

VERBATIM_N_TOKENS = ContaminationConfig.verbatim_tokens
VERBATIM_MIN_TARGET = ContaminationConfig.verbatim_min_target
#: target tokens scored for every item before the rest is scored for the items that match them all
VERBATIM_PROBE = 4


def _item_text(it: Any) -> tuple[str, str]:
    if isinstance(it, dict):
        return str(it["id"]), str(it.get("question", it.get("text", "")))
    if isinstance(it, (tuple, list)):
        return str(it[0]), str(it[1])
    return str(it.id), str(it.question)


def verbatim_completion(lm: Any, texts: Sequence[Any], n_tokens: int = VERBATIM_N_TOKENS, max_items: int | None = 50,
                        *, seed: int = 0, min_target_tokens: int = VERBATIM_MIN_TARGET,
                        batch_size: int = 8, max_text_tokens: int | None = None,
                        known: Mapping[str, Sequence[int]] | None = None, sample: str = "first") -> dict[str, Any]:
    """Exact-match rate of greedy continuations of the first half of each question.

    ``texts``: strings, ``(id, text)`` pairs, dicts with "id"/"question", or task Items. Each
    text is tokenised plainly (no chat template; the tokenizer's own special prefix kept);
    the prompt is the first half of its tokens, the target the next ``min(n_tokens, rest)``
    tokens; texts with fewer than ``min_target_tokens`` target tokens are skipped. At most
    ``max_items`` texts are tried: the first usable ones in the order given, or with ``sample="seeded"`` a
    sample drawn with ``seed`` (:func:`verbatim_plan`). ``exact``: greedy decoding reproduces the
    whole target; ``token_match`` = the share of the target greedy decoding reproduces before it
    first diverges (1.0 when exact). ``max_text_tokens`` cuts each text first (held-out reference
    text is cut to question length). Each per-item record keeps the real ``target`` text next to
    the ``generated`` one: greedy decoding's continuation up to and including its first token
    that differs from the target (what follows it is not computed). ``known``: item id -> the
    model's most probable token at each target position, already computed by another pass over
    the same tokens (:func:`reporter.collect.option_order.option_order_evidence`'s ``greedy``);
    those items need no pass here (``n_shared_pass`` counts them).

    >>> v = verbatim_completion(lm, ["The capital of France is Paris, a city on the Seine with many museums."])
    >>> v["n"], v["rate"] in (0.0, 1.0)
    (1, True)
    """
    tok = lm.tokenizer
    kept, prompts, targets, skipped = verbatim_plan(tok, texts, n_tokens, max_items, seed=seed,
                                                    min_target_tokens=min_target_tokens,
                                                    max_text_tokens=max_text_tokens, sample=sample)
    once = {i for i, c in Counter(kept).items() if c == 1}  # answers are keyed by id: an id used twice runs here
    have = {i: list(known[i]) for i, t in zip(kept, targets)
            if known and i in once and len(known.get(i, ())) == len(t)}
    todo = [j for j, i in enumerate(kept) if i not in have]
    best: list[list[int]] = [have.get(i, []) for i in kept]
    ran = greedy_under_teacher_forcing(lm, [prompts[j] for j in todo], [targets[j] for j in todo], batch_size,
                                       probe=VERBATIM_PROBE) if todo else []
    for j, b in zip(todo, ran):
        best[j] = b
    res = verbatim_result(tok, kept, targets, best, skipped=skipped, n_tokens=n_tokens,
                          min_target_tokens=min_target_tokens, seed=seed, max_items=max_items)
    res["n_shared_pass"] = len(have)
    return res


def verbatim_plan(tok: Any, texts: Sequence[Any], n_tokens: int = VERBATIM_N_TOKENS, max_items: int | None = 50, *,
                  seed: int = 0, min_target_tokens: int = VERBATIM_MIN_TARGET,
                  max_text_tokens: int | None = None,
                  sample: str = "first") -> tuple[list[str], list[list[int]], list[list[int]], int]:
    """What :func:`verbatim_completion` tries: ``(ids, prompts, targets, n_skipped)`` (token lists).

    ``sample``: which ``max_items`` texts, ``"first"`` (the first usable ones in the order given; the task-level
    check gives them in :func:`~reporter.collect.evidence.evidence_order`, as the other per-item tests take theirs)
    or ``"seeded"`` (``max_items`` drawn with ``seed``, then the unusable ones skipped: the choice before
    2026-12-05). ``n_skipped`` counts the texts looked at and passed over.

    >>> ids, prompts, targets, skipped = verbatim_plan(lm.tokenizer, ["one two three four five six seven eight"],
    ...                                                min_target_tokens=2)
    >>> ids, len(targets[0]) >= 2, skipped
    (['0'], True, 0)
    """
    if sample not in ("first", "seeded"):
        raise ValueError(f"verbatim_plan: sample must be 'first' or 'seeded', not {sample!r}")
    items = [(str(j), t) if isinstance(t, str) else _item_text(t) for j, t in enumerate(texts)]
    if sample == "seeded" and max_items is not None and len(items) > max_items:
        pick = np.sort(np.random.default_rng(seed).choice(len(items), size=max_items, replace=False))
        items = [items[i] for i in pick]
    prompts, targets, kept, skipped = [], [], [], 0
    for iid, text in items:
        if sample == "first" and max_items is not None and len(kept) >= max_items:
            break
        q = list(tok(text, add_special_tokens=False)["input_ids"])
        full = list(tok(text)["input_ids"])
        prefix = full[:len(full) - len(q)] if len(full) >= len(q) and full[len(full) - len(q):] == q else []
        if max_text_tokens is not None:
            q = q[:max_text_tokens]
        half = len(q) // 2
        target = q[half:half + n_tokens]
        if half < 1 or len(target) < min_target_tokens:
            skipped += 1
            continue
        prompts.append(prefix + q[:half])
        targets.append(target)
        kept.append(iid)
    return kept, prompts, targets, skipped


def verbatim_result(tok: Any, ids: Sequence[str], targets: Sequence[Sequence[int]], best: Sequence[Sequence[int]], *,
                    skipped: int, n_tokens: int, min_target_tokens: int, seed: int,
                    max_items: int | None) -> dict[str, Any]:
    """The stored verbatim record from each target and the model's most probable token at each of its positions.

    >>> r = verbatim_result(lm.tokenizer, ["a", "b"], [[5, 6], [5, 6]], [[5, 6], [5, 7]], skipped=0, n_tokens=2,
    ...                     min_target_tokens=2, seed=0, max_items=None)
    >>> r["rate"], r["token_match"], [p["exact"] for p in r["per_item"]]
    (0.5, 0.75, [True, False])
    """
    per_item = []
    for iid, tgt, b in zip(ids, targets, best):
        tgt, b = list(tgt), list(b)
        j = _first_divergence(b, tgt)
        out = tgt[:j] + b[j:j + 1]  # what greedy decoding writes, up to its first wrong token
        per_item.append({"id": iid, "exact": j == len(tgt), "token_match": j / len(tgt), "n_target": len(tgt),
                         "target": tok.decode(tgt), "generated": tok.decode(out)})
    n = len(per_item)
    return {"n": n, "n_skipped": skipped, "n_tokens": n_tokens, "min_target_tokens": min_target_tokens,
            "seed": seed, "max_items": max_items,
            "rate": sum(p["exact"] for p in per_item) / n if n else None,
            "token_match": float(np.mean([p["token_match"] for p in per_item])) if n else None,
            "per_item": per_item}


def greedy_under_teacher_forcing(lm: Any, prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                                 batch_size: int = 8, *, probe: int = 0) -> list[list[int]]:
    """Per item, the model's most probable token at each target position, teacher-forced on ``prompt + target``.

    One hooked pass per batch (longest first), the LM head on the target positions alone.
    ``probe`` > 0 scores the first ``probe`` target positions of every item first, and the
    whole target only of items whose most probable tokens match all of them. An item that
    diverged earlier gets its tokens up to and including its first divergence, all that
    :func:`verbatim_result` reads (greedy decoding stops following the target there). Most
    items of a model that never saw them diverge within a few tokens.

    >>> out = greedy_under_teacher_forcing(lm, [[5, 6, 7]], [[8, 9]])
    >>> len(out[0])
    2
    """
    if probe <= 0 or all(len(t) <= probe for t in targets):
        return _greedy(lm, prompts, targets, batch_size)
    heads = [list(t[:probe]) for t in targets]
    first = _greedy(lm, prompts, heads, batch_size)
    out = [b[:_first_divergence(b, h) + 1] for b, h in zip(first, heads)]
    go = [i for i, (b, h) in enumerate(zip(first, heads)) if b == h and len(targets[i]) > probe]
    for i, b in zip(go, _greedy(lm, [prompts[i] for i in go], [targets[i] for i in go], batch_size)):
        out[i] = b
    return out


def _first_divergence(best: Sequence[int], target: Sequence[int]) -> int:
    """Index of the first position where ``best`` differs from ``target`` (their length when none)."""
    return next((j for j, (x, y) in enumerate(zip(best, target)) if x != y), len(target))


def _greedy(lm: Any, prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
            batch_size: int) -> list[list[int]]:
    """:func:`greedy_under_teacher_forcing` over every target position."""
    out: list[list[int]] = [[] for _ in prompts]
    seqs = [list(p) + list(t) for p, t in zip(prompts, targets)]
    for pb in padded_batches(seqs, batch_size, lm.tokenizer.pad_token_id, lm.device):
        keep = max(len(targets[i]) for i in pb.idx) + 1
        logits = hooked_pass(lm.model, lm.adapter, pb.batch, [], logits_to_keep=keep)
        best = logits[:, :-1].argmax(-1).cpu().tolist()  # position keep-1-n .. keep-2 predict the n target tokens
        for r, i in enumerate(pb.idx):
            out[i] = best[r][keep - 1 - len(targets[i]):]
    return out


def verbatim_tokens(lm: Any, items: Sequence[Any], settings: ContaminationConfig, *,
                    seed: int = 0) -> dict[str, tuple[list[int], int]]:
    """What :func:`collect_verbatim` will check, per item id: ``(prompt + target tokens, prompt length)``.

    For a pass over the same tokens that can give the check's answers on the way
    (:func:`reporter.collect.option_order.collect_option_order`'s ``greedy_for``).

    >>> from reporter.tasks import Item
    >>> t = verbatim_tokens(lm, [Item("q", "one two three four five six seven eight nine ten", "A")],
    ...                     ContaminationConfig(verbatim_min_target=2))
    >>> list(t), t["q"][1] < len(t["q"][0])
    (['q'], True)
    """
    ids, prompts, targets, _ = verbatim_plan(lm.tokenizer, _in_evidence_order(items, seed), settings.verbatim_tokens,
                                             settings.verbatim_items, seed=seed,
                                             min_target_tokens=settings.verbatim_min_target)
    once = {i for i, c in Counter(ids).items() if c == 1}  # answers go back by id: not for an id used twice
    return {i: (list(p) + list(t), len(p)) for i, p, t in zip(ids, prompts, targets) if i in once}


def _in_evidence_order(items: Sequence[Any], seed: int) -> list[tuple[str, str]]:
    """A task's ``(id, question)`` texts in :func:`~reporter.collect.evidence.evidence_order`: the check takes the first
    usable ones, so its items are among the first the option-order test takes, whose pass then gives its answers.
    """
    return sorted((_item_text(it) for it in items), key=lambda t: evidence_key(seed, t[0]))


def collect_verbatim(lm: Any, items: Sequence[Any], task_dir: Path, settings: ContaminationConfig, *, seed: int = 0,
                     batch_size: int | None = None, known: Mapping[str, Sequence[int]] | None = None) -> dict[str, Any]:
    """Run :func:`verbatim_completion` on a task's items and write ``task_dir/verbatim.json``.

    ``items``: task Items (``.id``, ``.question``), ``(id, question)`` pairs or dicts. Skips the
    work when the file exists (resume). ``known``: answers another pass already gave (see
    :func:`verbatim_completion`). Returns the stored dict.
    """
    def compute(bs: int) -> dict[str, Any]:
        return verbatim_completion(lm, _in_evidence_order(items, seed), n_tokens=settings.verbatim_tokens,
                                   max_items=settings.verbatim_items, seed=seed,
                                   min_target_tokens=settings.verbatim_min_target, batch_size=bs, known=known)

    return measured(Path(task_dir) / VERBATIM, compute, lm, batch_size=batch_size)


@register_evidence
class VerbatimPass(EvidencePass):
    """Contamination: greedy completion of each question's second half from its first (``verbatim.json``)."""

    name = "verbatim"

    switch = "with contamination.verbatim_items above 0, on trained models (random ones too with contamination.untrained)"
    order = 30
    artifact = VERBATIM
    label = "verbatim completion"

    def prepare(self, ctx: EvidenceContext) -> None:
        """Say which tokens the check needs (``shared["verbatim_tokens"]``), for a pass over the same text.

        Asked for even when ``verbatim.json`` exists: where the option-order pass splits each
        text depends on them, so its numbers are the same in a fresh and in a resumed run.
        """
        ctx.shared["verbatim_tokens"] = verbatim_tokens(ctx.lm, ctx.items, ctx.profile.contamination, seed=ctx.seed)

    def run(self, ctx: EvidenceContext) -> None:
        """Check the items, reusing the answers an earlier pass left (``shared["verbatim_answers"]``)."""
        collect_verbatim(ctx.lm, ctx.items, ctx.directory, ctx.profile.contamination, seed=ctx.seed,
                         known=ctx.shared.get("verbatim_answers"))
