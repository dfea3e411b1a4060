"""Texts that continue shared prefixes, each prefix run once: :func:`logits_after_prefix`.

The option-order test scores one text in several orders of its options; every order starts
with the same stem. Running the model on each whole text repeats the stem's work in every
variant. :func:`logits_after_prefix` runs the stems once, in left-padded batches with the KV
cache on, selects each variant's stem from that cache, and runs the variants' remaining tokens
on top of it (right-padded, with the padding masked and positions continuing the stem's). A
causal model's states at a position depend only on the tokens up to it, so the logits are
those of the whole texts (up to floating-point summation order). Left padding keeps the
distance between any two real tokens, so sliding-window attention sees what it would see in
the text alone. The prefixes run without the LM head (only their cache is needed); the
variants' LM head runs on the chosen positions only, as in
:func:`reporter.instrument.gather.logits_at`.

>>> import torch
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> torch.manual_seed(0) and None
>>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50)).eval()
>>> prefixes, tails, owners = [[3, 4, 5], [9]], [[6, 7], [8, 9, 10], [11, 12]], [0, 0, 1]
>>> rows, cols = torch.tensor([0, 1, 1, 2]), torch.tensor([1, 0, 2, 1])  # positions in each tail
>>> x = logits_after_prefix(m, None, prefixes, tails, owners, rows, cols)
>>> full = m(torch.tensor([prefixes[0] + tails[1]])).logits[0]
>>> torch.allclose(x[1:3], full[[3, 5]], atol=1e-5)
True
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import torch

from .batch import PassBatch, left_pad, position_ids_from_mask
from .gather import GatherHead
from .hooked_pass import Collector, eval_mode, input_device
from .hooks import HookSet

__all__ = ["logits_after_prefix", "reduce_after_prefix"]


def logits_after_prefix(model: torch.nn.Module, adapter: Any, prefixes: Sequence[Sequence[int]],
                        tails: Sequence[Sequence[int]], owners: Sequence[int], rows: torch.Tensor,
                        cols: torch.Tensor, *, pad_id: int = 0, batch_size: int | None = None) -> torch.Tensor:
    """The logits [N, V] of the texts ``prefixes[owners[r]] + tails[r]`` at tail positions ``(rows[i], cols[i])``.

    Position ``c`` of tail ``r`` is its text's position ``len(prefix) + c`` (it predicts the
    text's next token). Prefixes run ``batch_size`` at a time (left-padded, KV cache on); the
    tails of those prefixes then run ``batch_size`` at a time on their prefix's cache, under
    eval mode and no gradient, the LM head on the chosen positions only; hooks are removed on
    exit. All N rows of V logits are kept: where only a few numbers per position are needed,
    :func:`reduce_after_prefix` keeps one tail batch's logits at a time.
    """
    out: list[torch.Tensor | None] = [None]

    def keep(sel: torch.Tensor, x: torch.Tensor) -> None:
        if out[0] is None:
            out[0] = x.new_empty((rows.numel(), x.shape[-1]))
        out[0][sel.to(x.device)] = x

    reduce_after_prefix(model, adapter, prefixes, tails, owners, rows, cols, keep, pad_id=pad_id,
                        batch_size=batch_size)
    assert out[0] is not None  # every chosen row belongs to some tail group (checked there)
    return out[0]


def reduce_after_prefix(model: torch.nn.Module, adapter: Any, prefixes: Sequence[Sequence[int]],
                        tails: Sequence[Sequence[int]], owners: Sequence[int], rows: torch.Tensor,
                        cols: torch.Tensor, consume: Callable[[torch.Tensor, torch.Tensor], None], *,
                        pad_id: int = 0, batch_size: int | None = None,
                        on_prefix: Callable[[list[int], torch.Tensor, torch.Tensor], None] | None = None,
                        riders: Sequence[Collector] = (), response_from: Sequence[int] | None = None,
                        seen: list[int] | None = None) -> None:
    """:func:`logits_after_prefix`, handing each tail batch's logits to ``consume(sel, logits)`` instead of keeping them.

    ``sel``: the indices (into ``rows``/``cols``) of that batch's chosen positions; ``logits``:
    their logits [len(sel), V], valid only during the call (reduce them: a target's log-prob, an
    argmax). Every chosen position is handed over exactly once. Peak memory is one tail batch's
    chosen rows of V logits, not all N of them (the option-order test of 32 items in 9 orders
    kept 7,000 rows of SmolLM2's 49k-token vocabulary, 1.4 GB).

    >>> import torch
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> torch.manual_seed(0) and None
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50)).eval()
    >>> best = torch.full((3,), -1)
    >>> def argmax(sel, x): best[sel] = x.argmax(-1)
    >>> reduce_after_prefix(m, None, [[3, 4]], [[5, 6], [7]], [0, 0], torch.tensor([0, 0, 1]),
    ...                     torch.tensor([0, 1, 0]), argmax)
    >>> bool((best >= 0).all())
    True

    Collectors can ride the same passes:

    * ``on_prefix(chunk, hidden, mask)`` gets each prefix batch's final hidden states [b, W, H]
      (left-padded, ``mask`` [b, W]; ``chunk``: the prefix indices of its rows), the LM head's input,
      so that a caller can run the head on the prefix positions it needs (the prompt's token log-probs).
      Needs a model with a ``base_model`` (the prefixes run without the head).
    * ``riders``: teacher-forced collectors (:class:`~reporter.instrument.hooked_pass.Collector`)
      attached to every tail pass, each tail one sample of a :class:`PassBatch` [b, W] (right-padded;
      ``response_mask`` True from tail position ``response_from[r]`` on). Their hooks see the tail
      positions only; ``after_forward`` gets the logits of the chosen positions, not [b, W, V], so
      only collectors that read hooks ride here (MUI's key neurons). ``seen`` receives the tail
      indices in the order the riders saw them, one per sample.
    """
    if not prefixes or any(len(p) == 0 for p in prefixes):
        raise ValueError("logits_after_prefix needs non-empty prefixes")
    if len(owners) != len(tails) or any(len(t) == 0 for t in tails) \
            or any(not 0 <= o < len(prefixes) for o in owners):
        raise ValueError("logits_after_prefix needs one owning prefix per tail, and non-empty tails")
    if rows.shape != cols.shape or rows.dim() != 1 or rows.numel() == 0:
        raise ValueError("logits_after_prefix needs as many rows as columns, at least one")
    rows, cols = rows.cpu().to(torch.long), cols.cpu().to(torch.long)
    lens = torch.tensor([len(t) for t in tails])
    if int(rows.min()) < 0 or int(rows.max()) >= len(tails) or int(cols.min()) < 0 \
            or bool((cols >= lens[rows.clamp(0, len(tails) - 1)]).any()):
        raise ValueError("logits_after_prefix: a chosen position lies outside its tail")
    device = input_device(model)
    bs = max(1, batch_size or len(tails))
    head = model.get_output_embeddings()
    body = getattr(model, "base_model", model)  # the prefixes need their cache, not their logits: no LM head
    if on_prefix is not None and body is model:
        raise ValueError("reduce_after_prefix: on_prefix needs a model whose body (base_model) runs without its head")
    starts = [0] * len(tails) if response_from is None else [int(x) for x in response_from]
    with eval_mode(model), torch.inference_mode():
        for p0 in range(0, len(prefixes), bs):
            chunk = list(range(p0, min(len(prefixes), p0 + bs)))
            pids, pmask = left_pad([list(prefixes[k]) for k in chunk], pad_id, device)
            first = body(input_ids=pids, attention_mask=pmask, position_ids=position_ids_from_mask(pmask),
                         use_cache=True, **({} if body is not model else {"logits_to_keep": 1}))
            kw = "cache" if "cache" in first else "past_key_values"  # transformers >= 5.2x names it cache
            if on_prefix is not None:
                on_prefix(chunk, first.last_hidden_state, pmask)
            mine = sorted((r for r in range(len(tails)) if p0 <= owners[r] < p0 + len(chunk)),
                          key=lambda r: (-len(tails[r]), r))
            for t0 in range(0, len(mine), bs):
                group = mine[t0:t0 + bs]
                x, sel = _tail_pass(model, head, adapter, first[kw], kw, pmask, [owners[r] - p0 for r in group],
                                    [tails[r] for r in group], group, rows, cols, pad_id,
                                    riders, [starts[r] for r in group])
                if seen is not None and riders:
                    seen.extend(group)
                if x is not None:
                    consume(sel, x)
                    del x
            del first


def _tail_pass(model: torch.nn.Module, head: Any, adapter: Any, cache: Any, kw: str, pmask: torch.Tensor, local: list[int],
               tails: list[Sequence[int]], group: list[int], rows: torch.Tensor, cols: torch.Tensor,
               pad_id: int, riders: Sequence[Collector] = (), starts: Sequence[int] = ()
               ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """One batch of tails on their prefixes' cache rows ``local``: the logits at the chosen positions among them
    (``riders`` attached, the tails' responses starting at ``starts``).
    """
    where = {r: k for k, r in enumerate(group)}
    sel = torch.tensor([i for i, r in enumerate(rows.tolist()) if r in where], dtype=torch.long)
    if sel.numel() == 0 and not riders:
        return None, sel
    r = torch.tensor([where[int(x)] for x in rows[sel]], dtype=torch.long)
    c = cols[sel]
    device = pmask.device
    width = max(len(t) for t in tails)
    ids = torch.tensor([list(t) + [pad_id] * (width - len(t)) for t in tails], device=device)
    tmask = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t in tails], device=device, dtype=pmask.dtype)
    idx = torch.tensor(local, device=device)
    mask = torch.cat([pmask[idx], tmask], dim=1)
    pos = pmask[idx].sum(-1, keepdim=True) + torch.arange(width, device=device)[None, :]
    # a padded tail token's position would run past its own text, and past a model's learned or
    # scaled positions when a long stem meets another item's long tail: pads sit at 1 (masked out)
    pos = pos.masked_fill(tmask == 0, 1)
    mine = copy.deepcopy(cache)
    mine.batch_select_indices(idx)  # each tail's prefix row (repeated for the prefix's several tails)
    batch = PassBatch(ids, tmask, torch.zeros_like(ids, dtype=torch.bool))
    if riders:
        resp = torch.arange(width, device=device)[None, :] >= torch.tensor(list(starts), device=device)[:, None]
        batch = PassBatch(ids, tmask, resp & tmask.bool())
    with HookSet() as hooks:
        gather = GatherHead(head, r, c) if isinstance(head, torch.nn.Module) and r.numel() else None
        if gather is not None:
            gather.attach(hooks, adapter, batch)
        for rider in riders:
            rider.attach(hooks, adapter, batch)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **{kw: mine}).logits
    if gather is not None and gather.fired and logits.shape[:2] == (1, r.numel()):
        x = logits[0]
    else:
        x = logits[r.to(logits.device), c.to(logits.device)]  # the head did not run on the final states alone
    for rider in riders:
        rider.after_forward(batch, x)
    return (x if sel.numel() else None), sel

