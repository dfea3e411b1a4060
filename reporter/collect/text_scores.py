"""Log-probs of given texts, outside any task's generation: whole texts, chosen positions, and texts that share prefixes.

The evidence passes score texts of their own: the option-order test every order of an item's
options (texts sharing their stem), the verbatim check the published continuations. These
functions run those passes with the teacher-forced collector
(:class:`~reporter.collect.collectors.logprobs.TokenLogProbCollector`), the LM head on the
positions needed only (:func:`reporter.instrument.gather.logits_at`), and shared prefixes run
once: as a prefix tree (:mod:`reporter.instrument.tree`) or on a stem's KV cache
(:mod:`reporter.instrument.prefix`).

>>> [a.shape for a in token_logprobs(lm, [[1, 2, 3], [4, 5]])]
[(2,), (1,)]
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ..instrument.batch import PassBatch, padded_batches
from ..instrument.gather import head_output_is_logits, linear_head_scores, logits_at, target_logprobs
from ..instrument.hooked_pass import hooked_pass
from ..instrument.prefix import reduce_after_prefix
from ..instrument.tree import reduce_over_tree, tree_supported
from .collectors.logprobs import TokenLogProbCollector

__all__ = ["KV_CACHE", "PREFIX_TREE", "prefix_logprobs", "prefix_path", "prefix_scores", "token_logprobs"]


def token_logprobs(lm: Any, id_lists: Sequence[Sequence[int]], *, batch_size: int = 8,
                   starts: Sequence[int] | None = None,
                   positions: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
    """Log-probs ``log p(x_j | x_<j)`` of whole token sequences (no response), one hooked pass per batch.

    By default every token but the first (j >= 1). ``starts[i]`` >= 1 scores sequence i's tokens
    from index ``starts[i]`` on only, and the LM head runs on the positions that predict them
    alone (the batch's longest scored tail): for variants of one text that share a prefix, the
    prefix's log-probs are the same in every variant and need not be computed. ``positions[i]``
    (token indices >= 1, in order) scores those tokens only, the LM head run on exactly the
    positions that predict them (:func:`reporter.instrument.gather.logits_at`).

    >>> [a.shape for a in token_logprobs(lm, [[1, 2, 3]])], [a.shape for a in token_logprobs(lm, [[1, 2, 3]], starts=[2])]
    ([(2,)], [(1,)])
    >>> token_logprobs(lm, [[1, 2, 3, 4]], positions=[[1, 3]])[0].shape
    (2,)
    """
    out: list[np.ndarray | None] = [None] * len(id_lists)
    for pb in padded_batches(id_lists, batch_size, lm.tokenizer.pad_token_id, lm.device):
        idx, lens, batch, ids = pb.idx, pb.lengths, pb.batch, pb.input_ids
        if positions is not None:
            _logprobs_at(lm, batch, idx, lens, positions, out)
            continue
        if starts is None:
            col = TokenLogProbCollector()
            hooked_pass(lm.model, lm.adapter, batch, [col])
            for i, a in zip(idx, col.prompt_results()):
                out[i] = a
            continue
        first = [min(max(1, int(starts[i])), n) for i, n in zip(idx, lens)]
        keep = max(n - f for n, f in zip(lens, first)) + 1  # the positions predicting the scored tails (+ the last)
        W = pb.width
        logits = hooked_pass(lm.model, lm.adapter, batch, [], logits_to_keep=keep)  # [B, keep, V]
        for r, (i, n, f) in enumerate(zip(idx, lens, first)):
            if n - f <= 0:
                out[i] = np.zeros(0, np.float32)
                continue
            x = logits[r, keep - 1 - (n - f): keep - 1]  # predicts tokens f..n-1
            out[i] = target_logprobs(x, ids[r, W - (n - f):]).cpu().numpy()
    return out  # type: ignore[return-value]


def _logprobs_at(lm: Any, batch: PassBatch, idx: Sequence[int], lens: Sequence[int],
                 positions: Sequence[Sequence[int]], out: list[np.ndarray | None]) -> None:
    """:func:`token_logprobs` of one left-padded batch at the given token indices (``out[idx[r]]``)."""
    W = batch.input_ids.shape[1]
    rows: list[int] = []
    cols: list[int] = []
    for r, (i, n) in enumerate(zip(idx, lens)):
        js = [int(j) for j in positions[i]]
        if any(j < 1 or j >= n for j in js):
            raise ValueError(f"token positions of sequence {i} must lie in [1, {n}), got {js}")
        rows += [r] * len(js)
        cols += [W - n + j - 1 for j in js]  # the position that predicts token j
    if not rows:
        for i in idx:
            out[i] = np.zeros(0, np.float32)
        return
    r_t, c_t = torch.tensor(rows), torch.tensor(cols)
    x = logits_at(lm.model, lm.adapter, batch, r_t, c_t)
    vals = target_logprobs(x, batch.input_ids[r_t, c_t + 1]).cpu().numpy()
    k = 0
    for i in idx:
        m = len(positions[i])
        out[i] = vals[k:k + m]
        k += m


def prefix_logprobs(lm: Any, id_lists: Sequence[Sequence[int]], shared: Sequence[int],
                    positions: Sequence[Sequence[int]], *, batch_size: int = 8) -> list[np.ndarray]:
    """:func:`token_logprobs` with ``positions`` for sequences whose first ``shared[i]`` tokens other sequences share.

    Sequences that start with the same ``shared[i] - 1`` tokens share one run of them: as one prefix
    tree, each token they share (beyond those too) run once (:func:`reporter.instrument.tree.reduce_over_tree`),
    or, for a model whose attention takes no tree mask, their prefix's KV cache computed once and reused
    (:func:`reporter.instrument.prefix.logits_after_prefix`). The numbers are :func:`token_logprobs`'s up to float rounding, without repeating a prefix's
    work per sequence. ``positions[i]`` are token indices >= ``shared[i]`` (token
    ``shared[i]`` is predicted by the prefix's last position, which runs with the rest).

    >>> seqs = [[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9]]
    >>> a = prefix_logprobs(lm, seqs, [2, 2, 2], [[2, 3], [3], [2]])
    >>> b = token_logprobs(lm, seqs, positions=[[2, 3], [3], [2]])
    >>> all(np.allclose(x, y, atol=1e-5) for x, y in zip(a, b))
    True
    """
    return prefix_scores(lm, id_lists, shared, positions, batch_size=batch_size)[0]


#: the names :func:`prefix_path` gives the two ways :func:`prefix_scores` can run
PREFIX_TREE, KV_CACHE = "prefix tree", "KV cache"


def prefix_path(lm: Any, path: str = "auto") -> str:
    """Which way :func:`prefix_scores` runs on ``lm`` for ``path``: ``"prefix tree"`` (every shared token once, in
    one row per group) or ``"KV cache"`` (each stem once, its cache expanded to the tails). ``"auto"`` takes the
    tree where :func:`~reporter.instrument.tree.tree_supported` (decided once per model, dtype and attention).

    >>> prefix_path(lm), prefix_path(lm, "cache")
    ('prefix tree', 'KV cache')
    """
    if path not in ("auto", "tree", "cache"):
        raise ValueError(f"prefix_scores: path must be auto, tree or cache, not {path!r}")
    return PREFIX_TREE if path == "tree" or (path == "auto" and tree_supported(lm.model)) else KV_CACHE


def prefix_scores(lm: Any, id_lists: Sequence[Sequence[int]], shared: Sequence[int],
                  positions: Sequence[Sequence[int]], greedy: Sequence[Sequence[int]] | None = None, *,
                  batch_size: int = 8, path: str = "auto") -> tuple[list[np.ndarray], list[list[int]]]:
    """:func:`prefix_logprobs`, and per sequence the model's most probable token in place of each token of ``greedy[i]``.

    ``greedy[i]``: token indices >= ``shared[i]``, like ``positions[i]``; the pass that gives
    the log-probs gives these argmaxes too (the LM head on both sets of positions). ``path``:
    ``"tree"``, ``"cache"`` (the KV-cache path), or ``"auto"``: the tree where
    :func:`~reporter.instrument.tree.tree_supported`. On the tree, where every token of a sequence
    runs in the pass, positions and argmaxes may also lie inside the shared prefix (any index >= 1);
    on the KV-cache path, whose prefix runs apart, they may not.

    >>> lps, best = prefix_scores(lm, [[1, 2, 3, 4], [1, 2, 5, 6]], [2, 2], [[3], [3]], [[2, 3], []])
    >>> [a.shape for a in lps], [len(b) for b in best]
    ([(1,), (1,)], [2, 0])
    """
    greedy = greedy if greedy is not None else [[] for _ in id_lists]
    if len(shared) != len(id_lists) or len(positions) != len(id_lists) or len(greedy) != len(id_lists):
        raise ValueError("prefix_scores needs one shared length and one list of positions per sequence")
    tree = prefix_path(lm, path) == PREFIX_TREE
    keys: dict[tuple[int, ...], int] = {}
    owners: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    for i, (s, n) in enumerate(zip(id_lists, shared)):
        if not 2 <= n < len(s):
            raise ValueError(f"prefix_scores: sequence {i} must share at least 2 tokens and go on (shared {n}, "
                             f"length {len(s)})")
        low = 1 if tree else n  # the tree runs the shared tokens in the pass; the KV cache's prefix runs apart
        if any(int(j) < low or int(j) >= len(s) for j in [*positions[i], *greedy[i]]):
            raise ValueError(f"token positions of sequence {i} must lie in [{low}, {len(s)}), "
                             f"got {list(positions[i])} and {list(greedy[i])}")
        owners.append(keys.setdefault(tuple(s[:n - 1]), len(keys)))
    for which in (positions, greedy):  # the log-prob rows first, then the argmax rows
        for i, (n, js) in enumerate(zip(shared, which)):
            rows += [i] * len(js)
            cols += [int(j) - n for j in js]  # the tail starts at token n - 1: position j - 1 predicts token j
    n_lp = sum(len(js) for js in positions)
    if not rows:
        return [np.zeros(0, np.float32) for _ in id_lists], [[] for _ in id_lists]
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    tails = [list(s[n - 1:]) for s, n in zip(id_lists, shared)]
    # token j = c + shared: read from the whole sequence (c < 0 for a position inside the prefix, on the tree)
    targets = torch.tensor([int(id_lists[r][c + shared[r]]) for r, c in zip(rows[:n_lp], cols[:n_lp])],
                           dtype=torch.long)
    vals_t = torch.zeros(n_lp, dtype=torch.float32)
    best_t = torch.zeros(len(rows) - n_lp, dtype=torch.long)

    def reduce(sel: torch.Tensor, x: torch.Tensor) -> None:  # one tail batch's logits, never all of them
        lp = sel < n_lp
        if bool(lp.any()):
            vals_t[sel[lp]] = target_logprobs(x[lp.to(x.device)], targets[sel[lp]]).cpu()
        if not bool(lp.all()):
            best_t[sel[~lp] - n_lp] = x[(~lp).to(x.device)].argmax(-1).cpu()

    if tree:
        # every token the sequences share runs once, not only their first shared[i] - 1
        full = [c + n - 1 for r, c in zip(rows, cols) for n in (shared[r],)]
        head = lm.model.get_output_embeddings() if hasattr(lm.model, "get_output_embeddings") else None
        if isinstance(head, torch.nn.Linear) and head_output_is_logits(lm.model):
            # the final hidden states only; the head's matrix read a vocabulary slice at a time (no [N, V] logits)
            all_targets = torch.cat([targets, torch.zeros(len(rows) - n_lp, dtype=torch.long)])

            def reduce_hidden(sel: torch.Tensor, h: torch.Tensor) -> None:
                lp_h, best_h = linear_head_scores(head.weight, head.bias, h, all_targets[sel])
                lp, lp_h, best_h = sel < n_lp, lp_h.cpu(), best_h.cpu()
                vals_t[sel[lp]] = lp_h[lp]
                best_t[sel[~lp] - n_lp] = best_h[~lp]

            reduce_over_tree(lm.model, lm.adapter, id_lists, owners, torch.tensor(rows), torch.tensor(full),
                             reduce_hidden, pad_id=pad, batch_size=batch_size, hidden=True)
        else:
            reduce_over_tree(lm.model, lm.adapter, id_lists, owners, torch.tensor(rows), torch.tensor(full), reduce,
                             pad_id=pad, batch_size=batch_size)
    else:
        reduce_after_prefix(lm.model, lm.adapter, [list(k) for k in keys], tails, owners, torch.tensor(rows),
                            torch.tensor(cols), reduce, pad_id=pad, batch_size=batch_size)
    vals = vals_t.numpy()
    best = best_t.tolist()
    lps, out, k, g = [], [], 0, 0
    for js, gs in zip(positions, greedy):
        lps.append(vals[k:k + len(js)])
        out.append([int(v) for v in best[g:g + len(gs)]])
        k, g = k + len(js), g + len(gs)
    return lps, out
