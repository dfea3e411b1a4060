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

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .batch import PassBatch, left_pad, position_ids_from_mask
from .gather import head_scores
from .hooked_pass import Collector, eval_mode, input_device
from .hooks import HookSet
from .prefix import reduce_after_prefix

__all__ = ["ContinuationPasses", "continuation_loglikelihoods", "continuation_passes"]


@dataclass
class ContinuationPasses:
    """What :func:`continuation_passes` measured, per request in input order.

    ``scores``: ``(log P(continuation | context), is_greedy)``; ``token_logprobs``: each
    continuation token's log-probability (float32 at least, summing to the score);
    ``prompt_logprobs``: the log-probabilities of the context's tokens after the first
    (``log p(ctx[j] | ctx[:j])`` at index ``j - 1``; NaN before the request's ``prompt_from`` and
    on tokens cut by ``max_length``), None when they were not asked for; ``seen``: the request of
    each sample the riders saw, in the order they saw them.
    """

    scores: list[tuple[float, bool]]
    token_logprobs: list[np.ndarray]
    prompt_logprobs: list[np.ndarray] | None = None
    seen: list[int] = field(default_factory=list)


def continuation_loglikelihoods(model: torch.nn.Module, adapter: Any, contexts: Sequence[Sequence[int]],
                                continuations: Sequence[Sequence[int]], *, pad_id: int, batch_size: int,
                                max_length: int | None = None) -> list[tuple[float, bool]]:
    """``(log P(continuation | context), is_greedy)`` for each request, in input order.

    Contexts are grouped by their tokens; ``batch_size`` distinct contexts run at a time, each
    with all of its continuations. A context of one token (lm-eval's prefix token before an empty
    context) has nothing to cache: those requests run whole, ``batch_size`` at a time.
    """
    return continuation_passes(model, adapter, contexts, continuations, pad_id=pad_id, batch_size=batch_size,
                               max_length=max_length).scores


def continuation_passes(model: torch.nn.Module, adapter: Any, contexts: Sequence[Sequence[int]],
                        continuations: Sequence[Sequence[int]], *, pad_id: int, batch_size: int,
                        max_length: int | None = None, riders: Sequence[Collector] = (),
                        prompt_from: Sequence[int] | None = None) -> ContinuationPasses:
    """:func:`continuation_loglikelihoods`, with collectors riding the same passes.

    * ``riders`` (hooks-only teacher-forced collectors, such as MUI's) see every request as one
      sample whose response is its continuation: on the shared context's cache, the pass runs the
      context's last token and the whole continuation (one token more than scoring alone needs, so
      that the last scored position's next token is in the sample), its response mask on the
      continuation. The positions whose next token is a continuation token are those of a
      teacher-forced pass over context + continuation; they attend to the same tokens.
    * ``prompt_from`` (per request, the first context token whose log-probability is wanted)
      asks for the context's token log-probabilities: the LM head runs on the prefix pass's final
      hidden states at those positions only, a chunk at a time. Needs a model whose head output is
      its logits (:func:`reporter.instrument.gather.head_output_is_logits`) and a ``base_model``.

    >>> import torch
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> torch.manual_seed(0) and None
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50)).eval()
    >>> got = continuation_passes(m, None, [[3, 4, 5]], [[6, 7]], pad_id=0, batch_size=4, prompt_from=[1])
    >>> with torch.no_grad():
    ...     lp = torch.log_softmax(m(torch.tensor([[3, 4, 5, 6, 7]])).logits[0].double(), -1)
    >>> bool(np.allclose(got.prompt_logprobs[0], [lp[0, 4], lp[1, 5]], atol=1e-4))
    True
    """
    if len(contexts) != len(continuations):
        raise ValueError("continuation_loglikelihoods needs one continuation per context")
    if any(len(c) == 0 for c in continuations) or any(len(c) == 0 for c in contexts):
        raise ValueError("continuation_loglikelihoods needs non-empty contexts and continuations")
    if prompt_from is not None and len(prompt_from) != len(contexts):
        raise ValueError("continuation_passes needs one prompt_from per request")
    reqs = [_truncate(list(c), list(x), max_length) for c, x in zip(contexts, continuations)]
    res = ContinuationPasses(scores=[None] * len(reqs), token_logprobs=[None] * len(reqs))  # type: ignore[list-item]
    cut = [len(c) - len(r[0]) for c, r in zip(contexts, reqs)]  # context tokens lost to max_length
    if prompt_from is not None:
        res.prompt_logprobs = [np.full(max(0, len(c) - 1), np.nan, dtype=np.float32) for c in contexts]
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
    extra = 1 if riders else 0  # riders need the continuation's last token in the pass
    for k0 in range(0, len(keys), bs):
        chunk = keys[k0:k0 + bs]
        prefixes = [list(k[:-1]) for k in chunk]
        members = [(p, i) for p, k in enumerate(chunk) for i in groups[k]]
        tails = [[reqs[i][0][-1]] + reqs[i][1][:len(reqs[i][1]) - 1 + extra] for _, i in members]
        owners = [p for p, _ in members]
        rows = torch.tensor([r for r, (_, i) in enumerate(members) for _ in reqs[i][1]])
        cols = torch.tensor([c for _, i in members for c in range(len(reqs[i][1]))])
        on_prefix = None
        if prompt_from is not None:
            on_prefix = _prompt_reader(model, [[i for i in groups[k]] for k in chunk], reqs, cut, prompt_from, res)
        seen: list[int] = []
        _score_on_prefixes(model, adapter, prefixes, tails, owners, rows, cols, [i for _, i in members], reqs, res,
                           pad_id, bs, on_prefix=on_prefix, riders=riders, seen=seen)
        res.seen += [members[t][1] for t in seen]
    for w0 in range(0, len(whole), bs):
        idx = whole[w0:w0 + bs]
        _score(_whole_pass(model, adapter, [reqs[i] for i in idx], pad_id, riders), idx, reqs, res)
        if riders:
            res.seen += idx
    return res


def _truncate(ctx: list[int], cont: list[int], max_length: int | None) -> tuple[list[int], list[int]]:
    """lm-eval's window: the last ``max_length + 1`` tokens of context + continuation (the context loses its oldest)."""
    if max_length is None or len(ctx) + len(cont) <= max_length + 1:
        return ctx, cont
    keep = max(1, max_length + 1 - len(cont))
    return ctx[-keep:], cont


def _score_on_prefixes(model: torch.nn.Module, adapter: Any, prefixes: list[list[int]], tails: list[list[int]],
                       owners: list[int], rows: torch.Tensor, cols: torch.Tensor, order: list[int],
                       reqs: list[tuple[list[int], list[int]]], res: ContinuationPasses, pad_id: int, bs: int,
                       **ride: Any) -> None:
    """Fill ``res`` for requests ``order`` (whose continuation positions are ``rows``/``cols`` of ``tails``) from
    one shared-prefix pass, reducing one tail batch's logits at a time (``ride``: what rides the passes).
    """
    targets = torch.tensor([t for i in order for t in reqs[i][1]])
    got: dict[str, torch.Tensor] = {}

    def reduce(sel: torch.Tensor, x: torch.Tensor) -> None:
        a, b = _token_scores(x, targets[sel])
        if not got:  # the log-probs keep the log-softmax's dtype, as lm-eval sums them
            got["tok"], got["greedy"] = a.new_zeros(len(targets), device="cpu"), b.new_zeros(len(targets), device="cpu")
        got["tok"][sel], got["greedy"][sel] = a.cpu(), b.cpu()

    reduce_after_prefix(model, adapter, prefixes, tails, owners, rows, cols, reduce, pad_id=pad_id, batch_size=bs,
                        response_from=[1] * len(tails), **ride)
    _sum_requests(got["tok"], got["greedy"], order, reqs, res)


def _prompt_reader(model: torch.nn.Module, members: list[list[int]], reqs: list[tuple[list[int], list[int]]],
                   cut: list[int], prompt_from: Sequence[int], res: ContinuationPasses
                   ) -> Callable[[list[int], torch.Tensor, torch.Tensor], None]:
    """``on_prefix`` of one chunk of contexts: the head on each context's wanted positions, into ``res``.

    ``members[p]``: the requests of the chunk's context p. Prefix position q of a context predicts its token
    q + 1; the wanted tokens are ``prompt_from`` on (in the untruncated context), the earliest over its requests.
    """
    head = model.get_output_embeddings()

    def read(chunk: list[int], hidden: torch.Tensor, mask: torch.Tensor) -> None:
        width = hidden.shape[1]
        bb, cc, tg, where = [], [], [], []
        for row, p in enumerate(chunk):
            idx = members[p]
            ctx = reqs[idx[0]][0]
            first = max(1, min(int(prompt_from[i]) - cut[i] for i in idx))  # token index in the truncated context
            for j in range(first, len(ctx)):
                bb.append(row)
                cc.append(width - (len(ctx) - 1) + j - 1)  # the prefix (ctx[:-1]) is right-aligned
                tg.append(ctx[j])
                where.append((idx, j))
        if not bb:
            return
        h = hidden[torch.tensor(bb, device=hidden.device), torch.tensor(cc, device=hidden.device)]
        lp, _ = head_scores(head, h[None], torch.tensor([tg]))  # its default: 32 MB of logits at a time
        vals = lp[0].float().cpu().numpy()
        assert res.prompt_logprobs is not None
        for v, (idx, j) in zip(vals, where):
            for i in idx:
                if j + cut[i] >= int(prompt_from[i]):
                    res.prompt_logprobs[i][j + cut[i] - 1] = v

    return read


def _token_scores(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of logits [N, V]: the target's log-probability (log-softmax in float32 at least) and whether it is
    the argmax of the log-softmax, as lm-eval's ``HFLM`` decides ``is_greedy``.
    """
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logp = torch.log_softmax(logits.to(dtype), dim=-1)
    targets = targets.to(logp.device)
    return logp.gather(1, targets[:, None])[:, 0], logp.argmax(-1) == targets


def _sum_requests(tok: torch.Tensor, greedy: torch.Tensor, order: list[int],
                  reqs: list[tuple[list[int], list[int]]], res: ContinuationPasses) -> None:
    """Fill ``res`` for requests ``order`` from their continuation tokens' scores (in that order)."""
    s = 0
    for i in order:
        n = len(reqs[i][1])
        res.scores[i] = (float(tok[s:s + n].sum()), bool(greedy[s:s + n].all()))
        res.token_logprobs[i] = tok[s:s + n].numpy().copy()
        s += n


def _score(logits: torch.Tensor, order: list[int], reqs: list[tuple[list[int], list[int]]],
           res: ContinuationPasses) -> None:
    """Fill ``res`` for requests ``order`` from their continuation positions' logits [N, V] (in that order)."""
    targets = torch.tensor([t for i in order for t in reqs[i][1]])
    tok, greedy = _token_scores(logits, targets)
    _sum_requests(tok.cpu(), greedy.cpu(), order, reqs, res)


def _whole_pass(model: torch.nn.Module, adapter: Any, reqs: list[tuple[list[int], list[int]]], pad_id: int,
                riders: Sequence[Collector] = ()) -> torch.Tensor:
    """The logits [N, V] predicting each request's continuation tokens, from one left-padded pass over them whole
    (with ``riders``: over context + the whole continuation, the riders' response mask on the continuation).
    """
    extra = 1 if riders else 0
    seqs = [ctx + cont[:len(cont) - 1 + extra] for ctx, cont in reqs]
    ids, mask = left_pad(seqs, pad_id, input_device(model))
    width = ids.shape[1]
    rows = torch.tensor([r for r, (_, cont) in enumerate(reqs) for _ in cont])
    cols = torch.tensor([width - extra - len(cont) + j for _, cont in reqs for j in range(len(cont))])
    resp = torch.zeros_like(ids, dtype=torch.bool)
    for r, (_, cont) in enumerate(reqs):
        resp[r, width - len(cont):] = bool(riders)
    batch = PassBatch(ids, mask, resp)
    with eval_mode(model), torch.inference_mode(), HookSet() as hooks:
        for rider in riders:
            rider.attach(hooks, adapter, batch)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask),
                       use_cache=False).logits
    x = logits[rows.to(logits.device), cols.to(logits.device)]
    for rider in riders:
        rider.after_forward(batch, x)
    return x
