"""Texts that share prefixes, every shared token run once: :func:`reduce_over_tree`.

The option-order test scores each item's text in nine orders of its options. The orders share
their stem, and orders that start with the same option share that option's line too, and so on:
the texts of an item form a prefix tree. :func:`reduce_over_tree` packs each group's tree (its
distinct prefixes, each token once) into one row and runs it with a tree attention mask: a token
attends to itself and its ancestors in the tree only, at the position it has in its texts. A
causal model's state at a token depends only on the tokens before it in its text, which are
exactly its ancestors, so every position's logits are those of the whole texts run alone (up to
floating-point summation order), while a token shared by several texts runs once. Sliding-window
layers get the window over those positions (a distance of depths, as in the text alone).

No KV cache is copied or expanded, and the rows are long (a whole tree), which a CPU runs faster
than many short rows. Models whose attention does not take a prepared 4D mask (checked once per
model by :func:`tree_supported`, a probe against the plain pass) keep the KV-cache path of
:mod:`reporter.instrument.prefix`.

>>> import torch
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> torch.manual_seed(0) and None
>>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50)).eval()
>>> texts, groups = [[3, 4, 5, 6], [3, 4, 7, 8, 9], [1, 2]], [0, 0, 1]
>>> rows, cols = torch.tensor([0, 1, 1, 2]), torch.tensor([3, 2, 4, 1])  # (text, position) pairs
>>> got = torch.zeros(4, 50)
>>> def keep(sel, x): got[sel] = x
>>> reduce_over_tree(m, None, texts, groups, rows, cols, keep)
>>> full = m(torch.tensor([texts[1]])).logits[0]
>>> torch.allclose(got[1:3], full[[2, 4]], atol=1e-5)
True
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .batch import PassBatch
from .gather import GatherHead
from .hooked_pass import eval_mode, input_device
from .hooks import HookSet

__all__ = ["float_dtype", "probe_errors", "reduce_over_tree", "tree_supported", "tree_tokens"]


@dataclass
class _Tree:
    """One group's prefix tree, its nodes in creation order (a parent before its children)."""

    tokens: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    children: dict[tuple[int, int], int] = field(default_factory=dict)

    def add(self, text: Sequence[int]) -> list[int]:
        """Insert ``text``; the node of each of its positions."""
        nodes, at = [], -1
        for d, tok in enumerate(text):
            key = (at, int(tok))
            node = self.children.get(key)
            if node is None:
                node = self.children[key] = len(self.tokens)
                self.tokens.append(int(tok))
                self.parent.append(at)
                self.depth.append(d)
            nodes.append(node)
            at = node
        return nodes

    def allowed(self, width: int, windows: dict[str, int | None]) -> dict[str, np.ndarray]:
        """Per attention kind, which node [width, width] may attend to which: ancestors and itself, within the
        kind's window of depths; padding rows attend to themselves only (no row is all masked).
        """
        n = len(self.tokens)
        anc = np.zeros((width, width), dtype=bool)
        for i in range(n):
            if self.parent[i] >= 0:
                anc[i, :n] = anc[self.parent[i], :n]
            anc[i, i] = True
        anc[np.arange(n, width), np.arange(n, width)] = True
        depth = np.zeros(width, dtype=np.int64)
        depth[:n] = self.depth
        out = {}
        for kind, w in windows.items():
            # q - kv < window, as transformers' sliding_window_overlay, in positions of the text
            out[kind] = anc if w is None else anc & ((depth[:, None] - depth[None, :]) < int(w))
            out[kind][np.arange(width), np.arange(width)] = True
        return out


#: the widest row (tokens) a group's tree grows to before its further texts start another tree
MAX_WIDTH = 2048


def _fits(tree: _Tree, text: Sequence[int], max_width: int) -> bool:
    """Whether ``text`` adds few enough new nodes to ``tree`` to keep it within ``max_width``."""
    at, new = -1, 0
    for tok in text:
        node = tree.children.get((at, int(tok)))
        if node is None:
            new = len(text) - (0 if at < 0 else tree.depth[at] + 1)
            break
        at = node
    return len(tree.tokens) + new <= max_width


def tree_tokens(texts: Sequence[Sequence[int]], groups: Sequence[int]) -> int:
    """How many tokens :func:`reduce_over_tree` runs for ``texts`` in ``groups``: the distinct prefixes.

    >>> tree_tokens([[1, 2, 3], [1, 2, 4], [1, 5]], [0, 0, 0]), tree_tokens([[1, 2], [1, 2]], [0, 1])
    (5, 4)
    """
    trees: dict[int, _Tree] = {}
    for t, g in zip(texts, groups):
        trees.setdefault(int(g), _Tree()).add(t)
    return sum(len(tr.tokens) for tr in trees.values())


def _text_config(model: torch.nn.Module) -> Any:
    cfg = getattr(model, "config", None)
    get = getattr(cfg, "get_text_config", None)
    return get() if callable(get) else cfg


#: the architectures whose attention in transformers takes a prepared 4D mask as it is and reads ``position_ids``
#: (read in their 5.x sources: sdpa and eager); any other keeps the KV-cache path (GPT-Neo, for one, applies
#: its local window in row coordinates, which a tree row would break without any probe noticing)
TREE_FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3", "gemma3_text",
                           "gpt2", "gpt_neox", "opt"})
#: config fields of windows this module does not translate into the tree mask
_OTHER_WINDOWS = ("window_size", "attention_window", "attention_types", "attention_chunk_size")


def _windows(model: torch.nn.Module) -> dict[str, int | None] | None:
    """The model's attention kinds (transformers' ``layer_types``) and each one's window; one kind ``""`` for a
    model of one kind (a window when its config has a sliding window in use); None for a kind this module does
    not know (chunked attention), or for an architecture outside :data:`TREE_FAMILIES`.
    """
    cfg = _text_config(model)
    if getattr(cfg, "model_type", None) not in TREE_FAMILIES or any(getattr(cfg, f, None) for f in _OTHER_WINDOWS):
        return None
    window = getattr(cfg, "sliding_window", None)
    types = set(getattr(cfg, "layer_types", None) or ())
    if not types:
        used = window is not None and getattr(cfg, "use_sliding_window", True) is not False
        return {"": int(window) if used else None}
    known = {"full_attention": None, "sliding_attention": None if window is None else int(window)}
    if not types <= set(known):
        return None
    return {t: known[t] for t in sorted(types)}


def _mask(allowed: list[dict[str, np.ndarray]], dtype: torch.dtype, device: Any) -> Any:
    """The additive 4D masks [B, 1, W, W] (0 where allowed, the dtype's minimum elsewhere): one tensor for a
    model of one attention kind, else a dict by kind (what transformers' models take in place of their own).
    """
    lowest = torch.finfo(dtype).min
    out = {}
    for kind in allowed[0]:
        ok = torch.from_numpy(np.stack([a[kind] for a in allowed]))[:, None].to(device)
        out[kind] = torch.zeros(ok.shape, dtype=dtype, device=device).masked_fill_(~ok, lowest)
    return next(iter(out.values())) if len(out) == 1 else out


def float_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype of the hidden states (transformers builds its masks in ``inputs_embeds.dtype``)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    w = getattr(emb, "weight", None)
    if isinstance(w, torch.Tensor) and w.is_floating_point():
        return w.dtype
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def reduce_over_tree(model: torch.nn.Module, adapter: Any, texts: Sequence[Sequence[int]], groups: Sequence[int],
                     rows: torch.Tensor, cols: torch.Tensor, consume: Callable[[torch.Tensor, torch.Tensor], None], *,
                     pad_id: int = 0, batch_size: int | None = None, hidden: bool = False) -> None:
    """Hand the logits at positions ``(rows[i], cols[i])`` of ``texts`` to ``consume(sel, logits)``, each group's
    texts run as one prefix tree.

    Position ``c`` of text ``r`` predicts its token ``c + 1``, as in a plain pass over the text. Texts
    with the same ``groups`` value share one tree (an item's orders); texts of different groups share
    nothing, whatever their tokens. Each text is cut after its last chosen position. ``sel``: the
    indices (into ``rows``/``cols``) of one call's rows; ``logits`` [len(sel), V], valid only during the
    call. Every chosen position is handed over exactly once. A pass holds trees of about ``batch_size``
    times the longest text's tokens and the logits of at most about :data:`HEAD_ELEMENTS` chosen (position,
    token) pairs (at least one tree), under eval mode and no gradient, the LM head on
    its distinct chosen positions only; hooks are removed on exit.

    ``hidden=True``: ``consume(sel, h)`` gets the final hidden states there instead (the LM head's input,
    [len(sel), H]) and the head does not run at all, so that the consumer reads the head's matrix in its own
    way (:func:`~reporter.instrument.gather.linear_head_scores`: a vocabulary slice at a time, no [N, V]
    logits). A pass is then bounded by its tokens only. Raises ``ValueError`` for a model that does not run its
    output-embedding module on the final hidden states.
    """
    if len(groups) != len(texts) or any(len(t) == 0 for t in texts):
        raise ValueError("reduce_over_tree needs one group per text, and non-empty texts")
    if rows.shape != cols.shape or rows.dim() != 1 or rows.numel() == 0:
        raise ValueError("reduce_over_tree needs as many rows as columns, at least one")
    windows = _windows(model)
    if windows is None:
        raise ValueError("reduce_over_tree: this model has an attention kind without a tree mask")
    rows, cols = rows.cpu().to(torch.long), cols.cpu().to(torch.long)
    lens = torch.tensor([len(t) for t in texts])
    if int(rows.min()) < 0 or int(rows.max()) >= len(texts) or int(cols.min()) < 0 \
            or bool((cols >= lens[rows.clamp(0, len(texts) - 1)]).any()):
        raise ValueError("reduce_over_tree: a chosen position lies outside its text")
    last = torch.full((len(texts),), -1, dtype=torch.long).scatter_reduce(0, rows, cols, reduce="amax")
    # a group's tree grows to at most max_width tokens (the attention of a row costs its width squared); texts
    # beyond it start another tree of the group
    max_width = max(MAX_WIDTH, int(last.max()) + 1)
    trees: dict[tuple[int, int], _Tree] = {}
    current: dict[int, tuple[int, int]] = {}
    node_of: dict[int, list[int]] = {}
    tree_of: dict[int, tuple[int, int]] = {}
    for r in sorted(set(rows.tolist())):
        text, g = texts[r][:int(last[r]) + 1], int(groups[r])
        key = current.setdefault(g, (g, 0))
        if key in trees and not _fits(trees[key], text, max_width):
            key = current[g] = (g, key[1] + 1)
        node_of[r], tree_of[r] = trees.setdefault(key, _Tree()).add(text), key
    order = sorted(trees, key=lambda g: (-len(trees[g].tokens), g))
    budget = max(1, batch_size or len(texts)) * int(last.max() + 1)
    chosen: dict[tuple[int, int], list[int]] = {}  # tree -> indices into rows
    for i, r in enumerate(rows.tolist()):
        chosen.setdefault(tree_of[r], []).append(i)
    vocab = int(getattr(_text_config(model), "vocab_size", 0) or 0)
    # the logits a pass keeps (one tree at least); hidden states are as few as the pass's tokens
    head_rows = max(1, HEAD_ELEMENTS // max(1, vocab)) if not hidden else len(rows)
    passes: list[list[tuple[int, int]]] = []
    n_head = 0
    for g in order:  # longest first: a pass's trees are about the same length (little padding)
        if passes and (len(passes[-1]) + 1) * len(trees[passes[-1][0]].tokens) <= budget \
                and n_head + len(chosen[g]) <= head_rows:
            passes[-1].append(g)
            n_head += len(chosen[g])
        else:
            passes.append([g])
            n_head = len(chosen[g])
    device, dtype = input_device(model), float_dtype(model)
    head = model.get_output_embeddings()
    if hidden and not isinstance(head, torch.nn.Module):
        raise ValueError("reduce_over_tree(hidden=True) needs a model with an output-embedding module")
    with eval_mode(model), torch.inference_mode():
        for gs in passes:
            _tree_pass(model, head, [trees[g] for g in gs], [chosen[g] for g in gs], node_of, rows, cols, consume,
                       windows, pad_id, device, dtype, hidden)


def _tree_pass(model: torch.nn.Module, head: Any, trees: list[_Tree], chosen: list[list[int]],
               node_of: dict[int, list[int]], rows: torch.Tensor, cols: torch.Tensor,
               consume: Callable[[torch.Tensor, torch.Tensor], None], windows: dict[str, int | None],
               pad_id: int, device: Any, dtype: torch.dtype, hidden: bool = False) -> None:
    """One pass over a few trees (right-padded to the longest): the logits (or, ``hidden``, the head's input) at
    their chosen positions, handed over.
    """
    width = max(len(t.tokens) for t in trees)
    ids = torch.tensor([t.tokens + [pad_id] * (width - len(t.tokens)) for t in trees], device=device)
    pos = torch.tensor([t.depth + [0] * (width - len(t.depth)) for t in trees], device=device)
    mask = _mask([t.allowed(width, windows) for t in trees], dtype, device)
    where: dict[tuple[int, int], int] = {}  # (tree in this pass, node) -> row of the head's output
    sel, src = [], []
    for b, idx in enumerate(chosen):
        for i in idx:
            key = (b, node_of[int(rows[i])][int(cols[i])])
            src.append(where.setdefault(key, len(where)))
            sel.append(i)
    r = torch.tensor([k[0] for k in where], dtype=torch.long)
    c = torch.tensor([k[1] for k in where], dtype=torch.long)
    batch = PassBatch(ids, torch.ones_like(ids), torch.zeros_like(ids, dtype=torch.bool))
    with HookSet() as hooks:
        gather = GatherHead(head, r, c, keep=hidden) if isinstance(head, torch.nn.Module) else None
        if gather is not None:
            gather.attach(hooks, None, batch)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
    if hidden:
        if gather is None or gather.kept is None:
            raise ValueError("reduce_over_tree(hidden=True): the model did not run its output-embedding module on "
                             "its final hidden states")
        x = gather.kept
        gather.kept = None
    elif gather is not None and gather.fired and logits.shape[:2] == (1, r.numel()):
        x = logits[0]
    else:
        x = logits[r.to(logits.device), c.to(logits.device)]  # the head did not run on the final states alone
    del logits
    src_t, sel_t = torch.tensor(src, dtype=torch.long), torch.tensor(sel, dtype=torch.long)
    # handed over a slice at a time (a position several texts share is copied for each), so that the copies, and
    # the consumer's own copies of a slice, stay within SLICE_ELEMENTS logits
    step = max(1, min(len(sel), SLICE_ELEMENTS // max(1, int(x.shape[-1])))) if not hidden else len(sel)
    for a in range(0, len(sel), step):
        consume(sel_t[a:a + step], x[src_t[a:a + step].to(x.device)])


#: a pass keeps the logits of at most about this many (position, token) pairs (one tree at least): 128 MB in float32
HEAD_ELEMENTS = 1 << 25
#: and hands them over in slices of at most this many (one position at least): 64 MB in float32
SLICE_ELEMENTS = 1 << 24

_SUPPORTED: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[Any, bool]]" = weakref.WeakKeyDictionary()


def _probe_texts(vocab: int) -> list[list[int]]:
    """Four texts that share prefixes, of ordinary tokens: seeded ids from the middle of the vocabulary (special
    tokens sit at its ends, and give degenerate, near-tied next-token distributions).
    """
    rng = np.random.default_rng(0)
    r = [int(v) for v in rng.integers(vocab // 10, max(vocab // 2, vocab // 10 + 1), size=24)]
    return [r[:12], r[:5] + r[12:19], r[:2] + r[19:23], r[:9] + r[12:15]]


def tree_supported(model: torch.nn.Module) -> bool:
    """Whether :func:`reduce_over_tree` gives ``model``'s own logits: decided once per model object (and attention
    implementation and dtype) by :func:`probe_errors`. The tree is taken where its next-token probabilities are
    as close to each text run alone as the KV-cache path's are (at most four times its mean error, or within
    1e-5 in float32 / 2e-2 in 16 bits, where a cache that happens to run the very kernels of the text alone
    misses by 0), and where a control (the same row without the tree mask, so that texts
    see their siblings) misses by at least five times the tree's error (a mask that is ignored makes the two
    equal). Measured on the packaged and showcase models: in float32 the tree's error is the cache's (1e-6) and
    the control's 1e5 times larger; in bfloat16 the tree's is 1-2 times the cache's (1e-2) and the control's
    16-44 times larger (``benchmarks/RESULTS.md``). A model whose attention ignores a
    prepared 4D mask, or an architecture outside :data:`TREE_FAMILIES`, keeps the KV-cache path.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> tree_supported(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)))
    True
    """
    key = (getattr(getattr(model, "config", None), "_attn_implementation", None), float_dtype(model))
    if model in _SUPPORTED and _SUPPORTED[model][0] == key:
        return _SUPPORTED[model][1]
    ok = False
    vocab = getattr(_text_config(model), "vocab_size", 0) or 0
    if _windows(model) is not None and hasattr(model, "get_output_embeddings") and vocab > 16:
        try:
            e = probe_errors(model)
            floor = 1e-5 if float_dtype(model) in (torch.float32, torch.float64) else 2e-2
            ok = e["tree"] <= max(floor, 4 * e["kv_cache"]) and e["control"] >= 5 * max(e["tree"], floor / 100)
        except Exception:  # noqa: BLE001 - any failure: keep the KV-cache path
            ok = False
    _SUPPORTED[model] = (key, ok)
    return ok


def probe_errors(model: torch.nn.Module) -> dict[str, float]:
    """How far from each text run alone the tree, the KV-cache path and the unmasked control are, on four texts
    of ordinary tokens that share prefixes: per path, the mean over positions of the largest difference of a
    next-token probability (the control over the positions where a text's own tokens follow its siblings').

    Probabilities, not log-probs: rounding moves the log of a 1e-9 probability by 1e-3, which says nothing
    about the mask. The KV-cache path is the yardstick because it is what the model gets otherwise: in
    bfloat16 every layout of the same computation (a padded batch, the cache, the tree) misses the text alone
    by about 1e-2, and in float32 by about 1e-6.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> e = probe_errors(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)))
    >>> e["tree"] < 1e-5 < e["control"]
    True
    """
    from .prefix import reduce_after_prefix  # (prefix does not import this module)

    texts = _probe_texts(int(getattr(_text_config(model), "vocab_size", 0) or 0))
    pairs = [(r, c) for r, t in enumerate(texts) for c in range(len(t))]
    got: dict[int, torch.Tensor] = {}

    def into(store: dict[int, torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], None]:
        def keep(sel: torch.Tensor, x: torch.Tensor) -> None:
            for k, v in zip(sel.tolist(), torch.softmax(x.float(), -1)):
                store[k] = v.cpu()
        return keep

    reduce_over_tree(model, None, texts, [0] * len(texts), torch.tensor([p[0] for p in pairs]),
                     torch.tensor([p[1] for p in pairs]), into(got), batch_size=1)
    kv: dict[int, torch.Tensor] = {}
    tail = [(r, c) for r, t in enumerate(texts) for c in range(len(t) - 1)]  # tail position c: text position c + 1
    reduce_after_prefix(model, None, [texts[0][:1]], [t[1:] for t in texts], [0] * len(texts),
                        torch.tensor([p[0] for p in tail]), torch.tensor([p[1] for p in tail]), into(kv),
                        batch_size=len(texts))
    device = input_device(model)
    with eval_mode(model), torch.inference_mode():
        ref = [torch.softmax(model(input_ids=torch.tensor([t], device=device), use_cache=False).logits[0].float(), -1)
               .cpu() for t in texts]
        tree = _Tree()
        nodes = [tree.add(t) for t in texts]
        plain = model(input_ids=torch.tensor([tree.tokens], device=device),
                      position_ids=torch.tensor([tree.depth], device=device), use_cache=False).logits[0]
        plain = torch.softmax(plain.float(), -1).cpu()
    seen: set[int] = set()
    branch = []  # positions of a text's own nodes, after another text's nodes in the row
    for r, ns in enumerate(nodes):
        branch += [(r, c) for c, n in enumerate(ns) if r > 0 and n not in seen]
        seen.update(ns)

    def mean(errs: list[float]) -> float:
        return float(np.mean(errs)) if errs else 0.0

    return {"tree": mean([float((got[k] - ref[r][c]).abs().max()) for k, (r, c) in enumerate(pairs)]),
            "kv_cache": mean([float((kv[k] - ref[r][c + 1]).abs().max()) for k, (r, c) in enumerate(tail)]),
            "control": mean([float((plain[nodes[r][c]] - ref[r][c]).abs().max()) for r, c in branch])}
