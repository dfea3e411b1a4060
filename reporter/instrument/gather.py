"""The LM head on chosen (sequence, position) pairs only: :func:`logits_at`.

``logits_to_keep`` lets a forward pass compute the logits of the last positions, or of one list
of positions shared by every row. Evidence that scores scattered tokens (the option-order test
scores the first tokens of each option line, and each variant has its lines elsewhere) needs
other positions in every row. :func:`logits_at` runs the pass with a pre-hook on the LM head
that replaces the head's input, the final hidden states [B, T, H], by the chosen rows [1, N, H]:
the head, and whatever the model applies after it (Gemma-2's logit soft-capping), then run on
those N positions alone. A model that does not call its output-embedding module gets the full
logits, gathered afterwards: the same numbers, at the full cost.

>>> import torch
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
>>> ids = torch.tensor([[0, 5, 6, 7], [1, 2, 3, 4]]); am = torch.ones_like(ids)
>>> batch = PassBatch(ids, am, torch.zeros_like(ids, dtype=torch.bool))
>>> rows, cols = torch.tensor([0, 1, 1]), torch.tensor([2, 0, 3])
>>> full = hooked_pass(m, None, batch, [])
>>> torch.allclose(logits_at(m, None, batch, rows, cols), full[rows, cols], atol=1e-5)
True
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

from .batch import PassBatch
from .hooked_pass import eval_mode, hooked_pass, input_device
from .hooks import HookSet

__all__ = ["GatherHead", "head_output_is_logits", "head_scores", "linear_head_scores", "logits_at",
           "target_logprobs"]

#: log-softmax over at most this many logits at once (bounded memory for a large vocabulary)
CHUNK_ELEMENTS = 1 << 25


class GatherHead:
    """Collector: the head's input [B, T, H] becomes its rows ``(rows[i], cols[i])``, as [1, N, H].

    ``fired`` says whether the head ran on the gathered rows (a model that does not call its
    output-embedding module leaves the logits whole). Used by :func:`logits_at` and
    :func:`reporter.instrument.prefix.logits_after_prefix`. ``keep=True``: the gathered rows are kept
    (``kept`` [N, H]) and the head runs on none of them (its output has 0 positions), for a caller that
    applies the head's matrix itself (:func:`linear_head_scores`).
    """

    def __init__(self, head: torch.nn.Module, rows: torch.Tensor, cols: torch.Tensor, *, keep: bool = False):
        self.head, self.rows, self.cols, self.keep = head, rows, cols, keep
        self.fired = False
        self.kept: torch.Tensor | None = None

    def attach(self, hooks: HookSet, adapter: Any, batch: PassBatch) -> None:
        """Replace the head's input by the chosen rows (only for this batch's final hidden states)."""
        shape = tuple(batch.input_ids.shape)
        rows, cols = self.rows.to(batch.input_ids.device), self.cols.to(batch.input_ids.device)

        def gather(h: torch.Tensor) -> torch.Tensor:
            if h.dim() != 3 or tuple(h.shape[:2]) != shape:
                return h  # not the final hidden states of this batch (a model calling its head twice)
            self.fired = True
            picked = h[rows.to(h.device), cols.to(h.device)]
            if self.keep:
                self.kept = picked
                return h[:1, :0]
            return picked.unsqueeze(0)

        hooks.replace_input(self.head, gather)

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Nothing to collect: the caller reads the logits."""


def logits_at(model: torch.nn.Module, adapter: Any, batch: PassBatch, rows: torch.Tensor,
              cols: torch.Tensor) -> torch.Tensor:
    """The logits [N, V] at positions ``(rows[i], cols[i])`` of ``batch``, the LM head run on those alone.

    One :func:`~reporter.instrument.hooked_pass.hooked_pass` (eval mode, no gradient, no KV
    cache, hooks removed on exit). Positions are in the batch's (padded) coordinates.
    """
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Module):
        return hooked_pass(model, adapter, batch, [])[rows, cols]
    gather = GatherHead(head, rows, cols)
    logits = hooked_pass(model, adapter, batch, [gather])
    if gather.fired and logits.dim() == 3 and logits.shape[0] == 1 and logits.shape[1] == rows.numel():
        return logits[0]
    return logits[rows.to(logits.device), cols.to(logits.device)]


def target_logprobs(x: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """``log_softmax(x)[i, tgt[i]]`` for logits [N, V], float32 on ``x``'s device, at most
    :data:`CHUNK_ELEMENTS` logits upcast at a time (bounded memory for a large vocabulary).

    >>> [round(v, 4) for v in target_logprobs(torch.zeros(2, 4), torch.tensor([0, 3])).tolist()]  # log(1/4)
    [-1.3863, -1.3863]
    """
    tgt = tgt.to(x.device)
    if x.shape[0] == 0:
        return torch.zeros(0, dtype=torch.float32, device=x.device)
    step = max(1, CHUNK_ELEMENTS // max(1, x.shape[-1]))
    acc = torch.promote_types(x.dtype, torch.float32)  # float64 logits stay float64 until the result
    return torch.cat([(x[a:a + step].to(acc).gather(-1, tgt[a:a + step, None]).squeeze(-1)
                       - torch.logsumexp(x[a:a + step].to(acc), dim=-1)).float()
                      for a in range(0, x.shape[0], step)])


_HEAD_IS_LOGITS: "weakref.WeakKeyDictionary[torch.nn.Module, bool]" = weakref.WeakKeyDictionary()


def head_output_is_logits(model: torch.nn.Module) -> bool:
    """Whether ``model``'s logits are its output-embedding module's output as it is (no soft-capping or scale after it).

    Then log-probs may be computed from the head's own output on chosen rows, in chunks, while the
    model runs the head on fewer positions (:class:`reporter.collect.collectors.logprobs.TokenLogProbCollector`
    during generation). Decided once per model object by one forward pass of two tokens: the
    logits must equal the head's output bit for bit (Gemma-2's ``final_logit_softcapping``, for
    one, makes them differ). False when the model has no head module or the probe fails.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> head_output_is_logits(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)))
    True
    """
    if model in _HEAD_IS_LOGITS:
        return _HEAD_IS_LOGITS[model]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    seen: list[torch.Tensor] = []
    ok = False
    if isinstance(head, torch.nn.Module):
        handle = head.register_forward_hook(lambda _m, _i, out: seen.append(out) if isinstance(out, torch.Tensor)
                                            else None)
        try:
            with eval_mode(model), torch.inference_mode():
                ids = torch.tensor([[1, 2]], device=input_device(model))
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
            ok = len(seen) == 1 and seen[0].shape[-1] == logits.shape[-1] \
                and torch.equal(seen[0][..., -1:, :].to(logits.dtype), logits[..., -1:, :])
        except Exception:  # noqa: BLE001 - any failure: keep the full-logits path
            ok = False
        finally:
            handle.remove()
    _HEAD_IS_LOGITS[model] = ok
    return ok


#: :func:`head_scores` on the CPU: the LM head's matrix is read this many rows (vocabulary entries) at a time
VOCAB_SLICE = 2048
#: :func:`head_scores`: at most this many positions share one read of the head's matrix
POSITION_BLOCK = 2048


def head_scores(head: torch.nn.Module, h: torch.Tensor, targets: torch.Tensor, *,
                budget: int = 1 << 23) -> tuple[torch.Tensor, torch.Tensor]:
    """The head run on final hidden states ``h`` [B, N, H], at most ``budget`` logits at once: per position the
    log-prob of ``targets`` [B, N] (float32) and the argmax [B, N].

    Only for a head whose output is the model's logits (:func:`head_output_is_logits`). An ``nn.Linear`` head
    is run on a block of up to :data:`POSITION_BLOCK` positions against a slice of its vocabulary at a time
    (:func:`linear_head_scores`): its matrix is read once per block, where chunks of positions re-read it
    whole per chunk (a large vocabulary's 32 MB of logits are only 32 positions of Gemma-3's 262k entries).
    Any other head runs on a chunk of positions at a time.

    >>> head = torch.nn.Linear(4, 10, bias=False)
    >>> lp, best = head_scores(head, torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), budget=20)
    >>> lp.shape, best.shape
    (torch.Size([2, 3]), torch.Size([2, 3]))
    """
    B, N = targets.shape
    targets = targets.to(h.device)
    w = getattr(head, "weight", None)
    if isinstance(head, torch.nn.Linear) and isinstance(w, torch.Tensor) and w.dim() == 2 and B * N > 0:
        lp_flat, best_flat = linear_head_scores(w, head.bias, h.reshape(B * N, -1), targets.reshape(-1),
                                                budget=budget)
        return lp_flat.view(B, N), best_flat.view(B, N)
    vocab = int(w.shape[0]) if isinstance(w, torch.Tensor) and w.dim() == 2 else 1 << 17
    step = max(1, budget // max(1, B * vocab))
    lp = torch.empty((B, N), dtype=torch.float32, device=h.device)
    best = torch.empty((B, N), dtype=torch.long, device=h.device)
    for a in range(0, N, step):
        b = min(N, a + step)
        x = head(h[:, a:b])  # [B, c, V]
        lp[:, a:b] = target_logprobs(x.reshape(B * (b - a), -1), targets[:, a:b].reshape(-1)).view(B, b - a)
        best[:, a:b] = x.argmax(-1)
        del x
    return lp, best


def linear_head_scores(weight: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor, targets: torch.Tensor, *,
                       budget: int = 1 << 23) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_softmax(x @ weight.T + bias)[i, targets[i]]`` (float32) and the argmax of each row of ``x`` [M, H].

    The logits of a block of positions are computed a vocabulary slice at a time, in the weight's dtype as
    ``nn.Linear`` computes them, and upcast to float32 (a float64 head stays in float64); each slice's
    log-sum-exp is folded into a running one (``logaddexp``), its maximum into a running argmax (the first
    index of the largest logit, as ``argmax`` gives), and the target's logit is read from the slice that holds
    it. At most about ``budget`` logits exist at once (on the CPU :data:`VOCAB_SLICE` entries of the vocabulary
    by up to :data:`POSITION_BLOCK` positions: 16 MB), so the head's matrix is read once per block of
    positions, not once per few positions. Equal to the plain log-softmax up to float32 rounding
    (``tests/test_head_scores.py`` against float64).

    >>> w = torch.randn(10, 4); x = torch.randn(3, 4); t = torch.tensor([1, 2, 9])
    >>> lp, best = linear_head_scores(w, None, x, t, budget=6)  # slices of 2 entries
    >>> torch.allclose(lp, torch.log_softmax(x @ w.T, -1)[torch.arange(3), t], atol=1e-5), bool((best == (x @ w.T).argmax(-1)).all())
    (True, True)
    """
    M, V = x.shape[0], int(weight.shape[0])
    targets = targets.to(x.device)
    lp = torch.empty(M, dtype=torch.float32, device=x.device)
    best = torch.empty(M, dtype=torch.long, device=x.device)
    if M == 0:
        return lp, best
    budget = max(1, int(budget))
    if x.device.type == "cpu":
        width = max(1, min(V, VOCAB_SLICE, budget))
        block = max(1, min(M, POSITION_BLOCK, budget // width))
    else:  # an accelerator: as many positions as fit with the whole vocabulary, else the widest slices
        block = max(1, min(M, budget // max(1, V))) if budget >= V else 1
        width = max(1, min(V, budget // block))
    x = x.to(weight.dtype) if x.dtype != weight.dtype and x.is_floating_point() else x
    acc = torch.promote_types(weight.dtype, torch.float32)  # a float64 head is reduced in float64
    for p0 in range(0, M, block):
        xb, tb = x[p0:p0 + block], targets[p0:p0 + block]
        n = xb.shape[0]
        lse = torch.full((n,), -torch.inf, dtype=acc, device=x.device)
        tgt = torch.zeros(n, dtype=acc, device=x.device)
        top = torch.full((n,), -torch.inf, dtype=acc, device=x.device)
        arg = torch.zeros(n, dtype=torch.long, device=x.device)
        for a in range(0, V, width):
            e = min(V, a + width)
            logits = torch.nn.functional.linear(xb, weight[a:e], None if bias is None else bias[a:e]).to(acc)
            lse = torch.logaddexp(lse, torch.logsumexp(logits, dim=-1))
            s_top, s_arg = logits.max(dim=-1)
            later = s_top > top  # strictly: on a tie the earlier slice's (smaller) index stays
            top = torch.where(later, s_top, top)
            arg = torch.where(later, s_arg + a, arg)
            here = (tb >= a) & (tb < e)
            tgt = torch.where(here, logits.gather(-1, (tb - a).clamp(0, e - a - 1)[:, None]).squeeze(-1), tgt)
            del logits
        lp[p0:p0 + n] = tgt - lse
        best[p0:p0 + n] = arg
    return lp, best
