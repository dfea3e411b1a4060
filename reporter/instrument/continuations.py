"""Log-likelihoods of continuations with each distinct context run once: :func:`continuation_loglikelihoods`.

lm-eval's ``loglikelihood`` requests are ``(context, continuation)`` pairs; a multiple-choice
question asks for one pair per option, all with the same context. lm-eval's ``hf`` model runs
every pair whole, so a four-option question pays for its context four times. Here each distinct
context runs once (its last token held back), its KV cache is selected for each of its
continuations, and only ``[last context token] + continuation[:-1]`` runs on top of it
(:func:`reporter.instrument.prefix.reduce_after_prefix`), the LM head on those positions only, and
one batch of those positions' logits kept at a time.

The numbers are lm-eval's: the sum of the continuation tokens' log-probabilities (log-softmax
over the vocabulary, in float32 at least) and whether every continuation token is the greedy
one; a request longer than ``max_length + 1`` tokens loses its oldest context tokens, as in
lm-eval's ``HFLM._loglikelihood_tokens``.

>>> import torch
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> torch.manual_seed(0) and None
>>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50)).eval()
>>> ctx, conts = [3, 4, 5], [[6, 7], [8]]
>>> got = continuation_loglikelihoods(m, None, [ctx, ctx], conts, pad_id=0, batch_size=4)
>>> with torch.no_grad():
...     lp = torch.log_softmax(m(torch.tensor([ctx + [6]])).logits[0].double(), -1)
>>> abs(got[0][0] - float(lp[2, 6] + lp[3, 7])) < 1e-4
True
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .batch import left_pad, position_ids_from_mask
from .hooked_pass import eval_mode, input_device
from .prefix import reduce_after_prefix

__all__ = ["continuation_loglikelihoods"]


def continuation_loglikelihoods(model: torch.nn.Module, adapter: Any, contexts: Sequence[Sequence[int]],
                                continuations: Sequence[Sequence[int]], *, pad_id: int, batch_size: int,
                                max_length: int | None = None) -> list[tuple[float, bool]]:
    """``(log P(continuation | context), is_greedy)`` for each request, in input order.

    Contexts are grouped by their tokens; ``batch_size`` distinct contexts run at a time, each
    with all of its continuations. A context of one token (lm-eval's prefix token before an empty
    context) has nothing to cache: those requests run whole, ``batch_size`` at a time.
    """
    if len(contexts) != len(continuations):
        raise ValueError("continuation_loglikelihoods needs one continuation per context")
    if any(len(c) == 0 for c in continuations) or any(len(c) == 0 for c in contexts):
        raise ValueError("continuation_loglikelihoods needs non-empty contexts and continuations")
    reqs = [_truncate(list(c), list(x), max_length) for c, x in zip(contexts, continuations)]
    out: list[tuple[float, bool] | None] = [None] * len(reqs)
    groups: dict[tuple[int, ...], list[int]] = {}
    whole: list[int] = []
    for i, (ctx, _) in enumerate(reqs):
        if len(ctx) < 2:
            whole.append(i)
        else:
            groups.setdefault(tuple(ctx), []).append(i)
    # longest contexts first, so that a batch's contexts pad little (ties: first seen)
    keys = sorted(groups, key=lambda k: -len(k))
    bs = max(1, batch_size)
    for k0 in range(0, len(keys), bs):
        chunk = keys[k0:k0 + bs]
        prefixes = [list(k[:-1]) for k in chunk]
        members = [(p, i) for p, k in enumerate(chunk) for i in groups[k]]
        tails = [[reqs[i][0][-1]] + reqs[i][1][:-1] for _, i in members]
        owners = [p for p, _ in members]
        rows = torch.tensor([r for r, (_, i) in enumerate(members) for _ in reqs[i][1]])
        cols = torch.tensor([c for _, i in members for c in range(len(reqs[i][1]))])
        _score_on_prefixes(model, adapter, prefixes, tails, owners, rows, cols, [i for _, i in members], reqs, out,
                           pad_id, bs)
    for w0 in range(0, len(whole), bs):
        idx = whole[w0:w0 + bs]
        _score(_whole_pass(model, [reqs[i] for i in idx], pad_id), idx, reqs, out)
    return out  # type: ignore[return-value]


def _truncate(ctx: list[int], cont: list[int], max_length: int | None) -> tuple[list[int], list[int]]:
    """lm-eval's window: the last ``max_length + 1`` tokens of context + continuation (the context loses its oldest)."""
    if max_length is None or len(ctx) + len(cont) <= max_length + 1:
        return ctx, cont
    keep = max(1, max_length + 1 - len(cont))
    return ctx[-keep:], cont


def _score_on_prefixes(model: torch.nn.Module, adapter: Any, prefixes: list[list[int]], tails: list[list[int]],
                       owners: list[int], rows: torch.Tensor, cols: torch.Tensor, order: list[int],
                       reqs: list[tuple[list[int], list[int]]], out: list[tuple[float, bool] | None], pad_id: int,
                       bs: int) -> None:
    """Fill ``out`` for requests ``order`` (whose continuation positions are ``rows``/``cols`` of ``tails``) from
    one shared-prefix pass, reducing one tail batch's logits at a time.
    """
    targets = torch.tensor([t for i in order for t in reqs[i][1]])
    got: dict[str, torch.Tensor] = {}

    def reduce(sel: torch.Tensor, x: torch.Tensor) -> None:
        a, b = _token_scores(x, targets[sel])
        if not got:  # the log-probs keep the log-softmax's dtype, as lm-eval sums them
            got["tok"], got["greedy"] = a.new_zeros(len(targets), device="cpu"), b.new_zeros(len(targets), device="cpu")
        got["tok"][sel], got["greedy"][sel] = a.cpu(), b.cpu()

    reduce_after_prefix(model, adapter, prefixes, tails, owners, rows, cols, reduce, pad_id=pad_id, batch_size=bs)
    _sum_requests(got["tok"], got["greedy"], order, reqs, out)


def _token_scores(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of logits [N, V]: the target's log-probability (log-softmax in float32 at least) and whether it is
    the argmax of the log-softmax, as lm-eval's ``HFLM`` decides ``is_greedy``.
    """
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logp = torch.log_softmax(logits.to(dtype), dim=-1)
    targets = targets.to(logp.device)
    return logp.gather(1, targets[:, None])[:, 0], logp.argmax(-1) == targets


def _sum_requests(tok: torch.Tensor, greedy: torch.Tensor, order: list[int],
                  reqs: list[tuple[list[int], list[int]]], out: list[tuple[float, bool] | None]) -> None:
    """Fill ``out`` for requests ``order`` from their continuation tokens' scores (in that order)."""
    s = 0
    for i in order:
        n = len(reqs[i][1])
        out[i] = (float(tok[s:s + n].sum()), bool(greedy[s:s + n].all()))
        s += n


def _score(logits: torch.Tensor, order: list[int], reqs: list[tuple[list[int], list[int]]],
           out: list[tuple[float, bool] | None]) -> None:
    """Fill ``out`` for requests ``order`` from their continuation positions' logits [N, V] (in that order)."""
    targets = torch.tensor([t for i in order for t in reqs[i][1]])
    tok, greedy = _token_scores(logits, targets)
    _sum_requests(tok.cpu(), greedy.cpu(), order, reqs, out)


def _whole_pass(model: torch.nn.Module, reqs: list[tuple[list[int], list[int]]], pad_id: int) -> torch.Tensor:
    """The logits [N, V] predicting each request's continuation tokens, from one left-padded pass over them whole."""
    seqs = [ctx + cont[:-1] for ctx, cont in reqs]
    ids, mask = left_pad(seqs, pad_id, input_device(model))
    width = ids.shape[1]
    rows = torch.tensor([r for r, (_, cont) in enumerate(reqs) for _ in cont])
    cols = torch.tensor([width - len(cont) + j for _, cont in reqs for j in range(len(cont))])
    with eval_mode(model), torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask),
                       use_cache=False).logits
    return logits[rows.to(logits.device), cols.to(logits.device)]
