"""MUI — Model Utilization Index (Cao et al., arXiv 2504.07440), computed inside one forward pass.

Definitions (``shared/reference/metrics.md`` §1). For layer l, position t and FFN neuron i:

* activation ``a[l,t,i]`` = the i-th entry of the INPUT of the MLP's down/output projection;
* score ``s[l,t,i] = a[l,t,i] * <W_down[l][:, i], W_U[y_{t+1}]>`` — position t is scored
  against the NEXT token y_{t+1}, the token its output predicts (the public reference code
  scores against token t: an off-by-one this module does not reproduce);
* only positions t whose next token t+1 is a (non-padding) response token count.

Key neurons of one sample, per ``mode``:

``"score"`` (default, the paper's per-layer top-k)
    per layer, the top k of all (t, i) by signed score, k = max(1, floor(top_ratio * d_ff));
    the set of the picked (l, i) (a neuron picked at two positions counts once).
``"activation"``
    the same, ranking by ``a`` instead of ``s`` (no projection).
``"topscore"``
    per layer, neuron i is kept when ``max_t s[l,t,i] >= thr`` with M the layer's maximum
    score for the sample and ``thr = M - (1 - rho) * |M|`` — i.e. ``rho * M`` when M > 0 (the
    paper's rule). When M < 0 (every score of the layer negative) ``rho * M`` would lie ABOVE
    the maximum and keep nothing; this rule instead keeps the neurons within ``(1 - rho)|M|``
    of the maximum, so the best neuron is always kept. M = 0 keeps the neurons whose best
    score is exactly 0.
``"global_topk"``
    the top k of all (l, t, i) of all layers at once, k = max(1, floor(top_ratio * d_ff * n_layers)).

Ties are broken towards the earlier layer, then earlier position, then lower neuron index.
A sample without scored positions has an empty set. ``floor`` uses a 1e-9 tolerance so that
e.g. ``0.29 * 100`` gives 29.

Task MUI = |union of the samples' sets| / (n_layers * d_ff) (:func:`utilization`); it grows
with the number of samples, so compare only at equal sample count and ``top_ratio``.

How it is computed (:class:`MUICollector`): once per batch, the scored positions are
gathered into a padded [B, R] layout (R = most scored positions of any sample) and the
unembedding rows of their next tokens ``W_U[y_{t+1}]`` ([B*R, d]) are gathered ONCE and
reused by every layer (deduplicated when responses repeat tokens: each distinct next token
is projected once and the rows are gathered back). In each layer's down-projection input
hook: gather the activation rows [B*R, d_ff], one matmul ``W_U[y] @ W_down``
([B*R, d] @ [d, d_ff]), multiply, fill the
padding rows with -inf and take a batched ``topk`` over the flattened [B, R*d_ff] scores — no
[d_ff x vocab] matrix, no per-token loop, nothing of size tokens x d_ff x layers. Only the
chosen neuron ids ([B, k] per layer) stay on the device; they are moved to the host once,
after the pass.

Precision: the fast path runs in the model dtype (bf16 on GPU). To make the ranking agree
exactly with a float64 computation (the same activations, float64 projection), each layer
takes ``2k + 16`` candidates in the fast dtype, recomputes their scores exactly in float64
(k dot products of length d — negligible) and picks the final k from those, with the
deterministic tie-break above. Near-ties within the fast dtype's rounding error are thus
decided exactly; only more than k + 16 entries inside one rounding band could differ. For
"topscore", the 32 best neurons (for the layer maximum) and the 32 neurons closest to the
threshold are recomputed in
float64 (at each neuron's best position). ``refine=False`` skips this.

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> _ = torch.manual_seed(0)
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
>>> ids = torch.randint(0, 100, (2, 8)); am = torch.ones_like(ids)
>>> resp = torch.zeros_like(ids, dtype=torch.bool); resp[:, 5:] = True
>>> sets = key_neurons(m, ids, am, resp)           # k = 1 per layer here (64 * 0.001 < 1)
>>> [len(s) <= 2 for s in sets]
[True, True]
>>> 0 < utilization(sets, n_layers=2, d_ff=64) <= 4 / 128
True
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch

from .adapters import Adapter, get_adapter
from .errors import UserError
from .forward import PassBatch, hooked_pass
from .hooks import HookSet

__all__ = [
    "MODES", "key_neurons", "utilization", "per_layer_utilization", "MUICollector",
    "save_neuron_sets", "load_neuron_sets", "merge_neuron_sets", "ablate", "random_neurons_like",
    "k_per_layer",
]

MODES = ("score", "activation", "topscore", "global_topk")
_DEDUP_MAX_FRACTION = 0.9  # project distinct next tokens once when they are <= this share of the slots
_TOPSCORE_REFINE = 32  # neurons recomputed exactly near the threshold / at the top (topscore)
_FORMAT = "reporter.neuron_sets/1"
# meta keys that must agree for two neuron-set files to be merged
_COMPARABLE_META = ("format", "model", "revision", "dtype", "n_layers", "d_ff", "top_ratio", "mode", "rho")


def k_per_layer(top_ratio: float, d_ff: int, n_layers: int = 1) -> int:
    """k = max(1, floor(top_ratio * d_ff * n_layers)) (n_layers > 1 for "global_topk").

    >>> k_per_layer(0.001, 14336), k_per_layer(0.001, 1536), k_per_layer(0.29, 100)
    (14, 1, 29)
    """
    return max(1, int(math.floor(top_ratio * d_ff * n_layers + 1e-9)))


def _exact_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def _ordered(exact: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort candidates by exact value (desc), ties by flat index (asc). Returns (values, idx)."""
    idx_s, perm = idx.sort(dim=1)
    ex = exact.gather(1, perm)
    ex_s, order = ex.sort(dim=1, descending=True, stable=True)
    return ex_s, idx_s.gather(1, order)


@dataclass
class _BatchState:
    B: int
    R: int  # padded number of scored positions per sample
    has_resp: torch.Tensor  # [B] bool
    gidx: torch.Tensor  # [B*R] row of the flattened [B*T, d_ff] activation for each slot
    pad_rows: torch.Tensor | None  # [B*R] bool, None when no slot is padding
    targets: torch.Tensor  # [B*R] next-token ids (0 on padding slots)
    T: int
    inv: torch.Tensor | None = None  # [B*R] slot -> row of the unique targets (when deduplicated)
    per_device: dict = field(default_factory=dict)
    picked: list = field(default_factory=list)  # per layer: [B, k] ids, or [B, d_ff] bool (topscore)
    run_vals: torch.Tensor | None = None  # global_topk running best
    run_ids: torch.Tensor | None = None
    layers_seen: int = 0


class MUICollector:
    """Collects per-sample key-neuron sets during :func:`reporter.forward.hooked_pass`.

    Results accumulate over batches in order; :meth:`results` returns one sorted int64 array
    of flat ids ``layer * d_ff + i`` per sample. Semantics: see the module docstring.

    >>> import torch
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from reporter.adapters import get_adapter
    >>> from reporter.forward import PassBatch, hooked_pass
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_inner=32, n_head=2, vocab_size=50))
    >>> ids = torch.randint(0, 50, (3, 6)); am = torch.ones_like(ids); resp = am.bool()
    >>> c = MUICollector(top_ratio=0.1, mode="score")     # k = 3 per layer
    >>> _ = hooked_pass(m, get_adapter(m), PassBatch(ids, am, resp), [c])
    >>> [len(s) <= 6 for s in c.results()]
    [True, True, True]
    """

    def __init__(self, top_ratio: float = 0.001, mode: str = "score", rho: float = 0.9, *, refine: bool = True):
        if mode not in MODES:
            raise UserError(f"MUI mode '{mode}' is not valid; use one of {', '.join(MODES)}")
        if not 0 < top_ratio <= 1:
            raise UserError(f"MUI top_ratio must be in (0, 1], got {top_ratio}")
        if not 0 < rho <= 1:
            raise UserError(f"MUI rho must be in (0, 1], got {rho}")
        self.top_ratio, self.mode, self.rho, self.refine = float(top_ratio), mode, float(rho), refine
        self.n_layers: int | None = None
        self.d_ff: int | None = None
        self._results: list[np.ndarray] = []
        self._st: _BatchState | None = None

    # -- Collector protocol ---------------------------------------------------------------
    def attach(self, hooks: HookSet, adapter: Adapter, batch: PassBatch) -> None:
        L, F = adapter.n_layers, adapter.d_ff
        self.n_layers, self.d_ff = L, F
        pos = batch.scored_positions()  # [B, T]
        B, T = pos.shape
        counts = pos.sum(1)
        R = int(counts.max().item()) if B else 0  # one host sync per batch, before the forward
        dev = pos.device
        st = _BatchState(B=B, R=R, T=T, has_resp=counts > 0, gidx=torch.empty(0, dtype=torch.long, device=dev),
                         pad_rows=None, targets=torch.empty(0, dtype=torch.long, device=dev))
        self._st = st
        if R == 0:
            return
        rank = pos.long().cumsum(1) - 1
        bb, tt = pos.nonzero(as_tuple=True)
        slot = bb * R + rank[bb, tt]
        gidx = torch.zeros(B * R, dtype=torch.long, device=dev)
        gidx[slot] = bb * T + tt
        targets = torch.zeros(B * R, dtype=torch.long, device=dev)
        targets[slot] = batch.input_ids[bb, tt + 1]
        valid = torch.zeros(B * R, dtype=torch.bool, device=dev)
        valid[slot] = True
        st.pad_rows = None if bool(valid.all()) else ~valid
        if self.mode != "activation":
            # responses repeat tokens: project each distinct next token once per layer
            uniq, inv = torch.unique(targets, return_inverse=True)
            if uniq.numel() <= _DEDUP_MAX_FRACTION * targets.numel():
                targets, st.inv = uniq, inv
        st.gidx, st.targets = gidx, targets
        self._adapter = adapter
        for l in range(L):
            hooks.on_input(adapter.down_proj(l), self._make_hook(l))

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        st, self._st = self._st, None
        if st is None:
            raise RuntimeError("MUICollector.after_forward called without attach")
        L, F = self.n_layers, self.d_ff
        if st.R == 0:
            self._results.extend(np.empty(0, dtype=np.int64) for _ in range(st.B))
            return
        if st.layers_seen != L:
            raise RuntimeError(f"MUI: {st.layers_seen} of {L} down-projection hooks fired; "
                               "the adapter does not match this model's forward")
        has = st.has_resp.cpu().numpy()
        if self.mode == "topscore":
            dev0 = st.picked[0].device
            keep = torch.stack([p.to(dev0) for p in st.picked], 1).reshape(st.B, L * F).cpu().numpy()  # [B, L*F] bool
            per = [np.flatnonzero(keep[b]).astype(np.int64) for b in range(st.B)]
        else:
            if self.mode == "global_topk":
                ids = st.run_ids.masked_fill(st.run_vals == float("-inf"), -1)
            else:
                dev0 = st.picked[0].device
                ids = torch.cat([p.to(dev0) for p in st.picked], 1)  # [B, L*k]
            ids = ids.cpu().numpy()
            per = [np.unique(r[r >= 0]).astype(np.int64) for r in ids]
        self._results.extend(p if h else np.empty(0, dtype=np.int64) for p, h in zip(per, has))

    # -- results --------------------------------------------------------------------------
    def results(self) -> list[np.ndarray]:
        """One sorted int64 array of flat neuron ids per sample, in the order of the batches."""
        return list(self._results)

    def clear(self) -> None:
        self._results.clear()

    # -- inside the pass ------------------------------------------------------------------
    def _dev(self, st: _BatchState, device: torch.device, dtype: torch.dtype) -> dict:
        key = (device, dtype)
        d = st.per_device.get(key)
        if d is None:  # gathered once per batch and device, reused by every layer
            W_U = self._adapter.unembedding()
            tg = st.targets.to(W_U.device)
            d = {"gidx": st.gidx.to(device),
                 "pad": None if st.pad_rows is None else st.pad_rows.to(device)[:, None],
                 "U": None if self.mode == "activation" else W_U.index_select(0, tg).to(device=device, dtype=dtype),
                 "inv": None if st.inv is None else st.inv.to(device),
                 "boff": torch.arange(st.B, device=device)[:, None] * st.R}
            st.per_device[key] = d
        return d

    def _exact(self, flat: torch.Tensor, a: torch.Tensor, U: torch.Tensor | None, W: torch.Tensor | None,
               boff: torch.Tensor, inv: torch.Tensor | None = None) -> torch.Tensor:
        """Exact (float64) values at flat candidate indices [B, n] into the padded [B, R*F] layout."""
        B, F = flat.shape[0], a.shape[1]
        xd = _exact_dtype(a.device)
        av = a.view(B, -1).gather(1, flat).to(xd)
        if self.mode == "activation":
            return av
        rows = (flat // F + boff).reshape(-1)
        if inv is not None:
            rows = inv[rows]
        cols = (flat % F).reshape(-1)
        u = U.index_select(0, rows).to(xd)
        w = W.t().index_select(0, cols).to(xd)  # W: [d, F] -> candidate write vectors [n, d]
        return av * (u * w).sum(-1).view(B, -1)

    def _make_hook(self, l: int):
        def hook(x: torch.Tensor) -> None:
            st = self._st
            F, B, R = self.d_ff, st.B, st.R
            W = self._adapter.down_weight(l)  # [d, F]
            d = self._dev(st, x.device, W.dtype)
            if x.numel() != B * st.T * F:
                raise RuntimeError(f"MUI: layer {l} down-projection input has shape {tuple(x.shape)}, "
                                   f"expected [{B}, {st.T}, {F}]")
            a = x.reshape(B * st.T, F).index_select(0, d["gidx"])  # [B*R, F] scored rows only
            if self.mode == "activation":
                s = a.clone() if d["pad"] is not None else a
            else:
                s = torch.matmul(d["U"], W)  # [B*R, d] @ [d, F]: <W_down[:, i], W_U[y_{t+1}]>
                if d["inv"] is not None:  # rows were computed per distinct token
                    s = s.index_select(0, d["inv"])
                s.mul_(a.to(s.dtype))
            if d["pad"] is not None:
                s.masked_fill_(d["pad"], float("-inf"))
            s = s.view(B, R * F)
            if self.mode == "topscore":
                self._topscore(l, s, a, d, W)
            else:
                self._topk(l, s, a, d, W)
            st.layers_seen += 1
        return hook

    def _topk(self, l: int, s: torch.Tensor, a: torch.Tensor, d: dict, W: torch.Tensor) -> None:
        st, F = self._st, self.d_ff
        glob = self.mode == "global_topk"
        k = k_per_layer(self.top_ratio, F, self.n_layers if glob else 1)
        n = s.shape[1]
        if self.refine:
            vals, idx = s.topk(min(2 * k + 16, n), dim=1, sorted=False)
            ex = self._exact(idx, a, d["U"], W, d["boff"], d["inv"]).masked_fill_(vals == float("-inf"), float("-inf"))
            vals, idx = _ordered(ex, idx)
            vals, idx = vals[:, :k], idx[:, :k]
        else:
            vals, idx = s.topk(min(k, n), dim=1)
        ids = idx % F + l * F
        if not glob:
            st.picked.append(ids)
            return
        if st.run_vals is None:
            st.run_vals, st.run_ids = vals, ids
            return
        # merge with the best of the earlier layers (they come first: ties go to the earlier layer)
        v = torch.cat([st.run_vals, vals.to(st.run_vals)], 1)
        i = torch.cat([st.run_ids, ids.to(st.run_ids.device)], 1)
        v, order = v.sort(dim=1, descending=True, stable=True)
        st.run_vals, st.run_ids = v[:, :k], i.gather(1, order[:, :k])

    def _topscore(self, l: int, s: torch.Tensor, a: torch.Tensor, d: dict, W: torch.Tensor) -> None:
        st, F, rho = self._st, self.d_ff, self.rho
        s3 = s.view(st.B, st.R, F)
        nm = s3.amax(dim=1)  # per-neuron best score over the positions (amax: no argmax needed here)
        M = nm.amax(1)
        thr = M - (1 - rho) * M.abs()
        keep = nm >= thr[:, None]
        if self.refine:
            r = min(_TOPSCORE_REFINE, F)
            top_i = nm.topk(r, dim=1).indices
            near_i = (nm - thr[:, None]).abs().topk(r, dim=1, largest=False).indices
            cand = torch.cat([top_i, near_i], 1)
            targ = s3.gather(2, cand[:, None, :].expand(-1, st.R, -1)).argmax(1)  # best position of each
            flat = targ * F + cand
            ex = self._exact(flat, a, d["U"], W, d["boff"], d["inv"])
            ex.masked_fill_(nm.gather(1, cand) == float("-inf"), float("-inf"))
            Me = ex[:, :r].amax(1)
            thr_e = Me - (1 - rho) * Me.abs()
            keep.scatter_(1, cand, ex >= thr_e[:, None])
        st.picked.append(keep)


def key_neurons(model, input_ids, attention_mask, response_mask, *, top_ratio=0.001, mode="score",
                rho=0.9) -> list[np.ndarray]:
    """Key-neuron set of every sample: one sorted int64 array of flat ids ``layer * d_ff + i``.

    ``input_ids``/``attention_mask``/``response_mask`` are [B, T] (left or right padded); the
    response mask is True on the teacher-forced response tokens. One hooked forward pass.
    Modes, ties and precision: see the module docstring.

    >>> import torch
    >>> from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    >>> m = GPTNeoXForCausalLM(GPTNeoXConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    ...                                      num_attention_heads=2, vocab_size=50))
    >>> ids = torch.randint(0, 50, (1, 5)); am = torch.ones_like(ids)
    >>> resp = torch.tensor([[False, False, False, True, True]])
    >>> [s.dtype.name for s in key_neurons(m, ids, am, resp, top_ratio=0.1)]
    ['int64']
    >>> key_neurons(m, ids, am, torch.zeros_like(resp))[0].size      # no response: empty set
    0
    """
    adapter = get_adapter(model)
    c = MUICollector(top_ratio=top_ratio, mode=mode, rho=rho)
    hooked_pass(model, adapter, PassBatch(torch.as_tensor(input_ids), torch.as_tensor(attention_mask),
                                          torch.as_tensor(response_mask).bool()), [c])
    return c.results()


# --- set arithmetic ---------------------------------------------------------------------------

def _union(neuron_sets: Sequence[np.ndarray], n_layers: int, d_ff: int) -> np.ndarray:
    arrs = [np.asarray(s, dtype=np.int64).ravel() for s in neuron_sets]
    u = np.unique(np.concatenate(arrs)) if arrs else np.empty(0, dtype=np.int64)
    if u.size and (u[0] < 0 or u[-1] >= n_layers * d_ff):
        raise UserError(f"neuron ids out of range [0, {n_layers * d_ff}) for {n_layers} layers x {d_ff}")
    return u


def utilization(neuron_sets: Sequence[np.ndarray], n_layers: int, d_ff: int) -> float:
    """MUI: |union of the sets| / (n_layers * d_ff), a fraction in [0, 1].

    >>> utilization([np.array([0, 1]), np.array([1, 5])], n_layers=2, d_ff=4)
    0.375
    """
    return float(_union(neuron_sets, n_layers, d_ff).size / (n_layers * d_ff))


def per_layer_utilization(neuron_sets: Sequence[np.ndarray], n_layers: int, d_ff: int) -> list[float]:
    """Per-layer MUI: for each layer, |union restricted to the layer| / d_ff.

    >>> per_layer_utilization([np.array([0, 1]), np.array([1, 5])], n_layers=2, d_ff=4)
    [0.5, 0.25]
    """
    u = _union(neuron_sets, n_layers, d_ff)
    return [float(c) / d_ff for c in np.bincount(u // d_ff, minlength=n_layers)]


# --- storage ----------------------------------------------------------------------------------

def _write_npz(path: str | os.PathLike, item_ids: list[str], sets: list[np.ndarray], meta: dict) -> None:
    arrs = [np.asarray(s, dtype=np.int64).ravel() for s in sets]
    flat = np.concatenate(arrs) if arrs else np.empty(0, dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() > np.iinfo(np.int32).max):
        raise UserError("neuron ids must be in [0, 2**31) to be stored")
    offsets = np.zeros(len(arrs) + 1, dtype=np.int64)
    np.cumsum([a.size for a in arrs], out=offsets[1:])
    meta = {**meta, "format": _FORMAT}
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, flat=flat.astype(np.int32), offsets=offsets,
                                item_ids=np.array([str(i) for i in item_ids], dtype=str),
                                meta=np.array(json.dumps(meta, sort_keys=True, default=str)))
        os.replace(tmp, path)  # atomic: an interrupted run never leaves a half-written file
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_neuron_sets(path: str | os.PathLike) -> tuple[list[str], list[np.ndarray], dict]:
    """Read a file written by :func:`save_neuron_sets`: ``(item_ids, sets, meta)``.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "mui.npz")
    >>> save_neuron_sets(p, ["q1", "q2"], [np.array([3, 1]), np.array([], int)], {"model": "m"})
    >>> ids, sets, meta = load_neuron_sets(p)
    >>> ids, [s.tolist() for s in sets], meta["model"]
    (['q1', 'q2'], [[1, 3], []], 'm')
    """
    with np.load(path, allow_pickle=False) as z:
        flat, offsets = z["flat"].astype(np.int64), z["offsets"]
        item_ids = [str(i) for i in z["item_ids"].tolist()]
        meta = json.loads(str(z["meta"]))
    sets = [flat[offsets[j]:offsets[j + 1]] for j in range(len(item_ids))]
    return item_ids, sets, meta


def _merge(a: tuple[list[str], list[np.ndarray], dict], b: tuple[list[str], list[np.ndarray], dict],
           where: str) -> tuple[list[str], list[np.ndarray], dict]:
    ids_a, sets_a, meta_a = a
    ids_b, sets_b, meta_b = b
    for key in _COMPARABLE_META:
        if key in meta_a and key in meta_b and meta_a[key] != meta_b[key]:
            raise UserError(f"{where}: cannot merge neuron sets with different {key} "
                            f"({meta_a[key]!r} vs {meta_b[key]!r})")
    index = {i: j for j, i in enumerate(ids_a)}
    ids, sets = list(ids_a), list(sets_a)
    for i, s in zip(ids_b, sets_b):
        if i in index:
            if not np.array_equal(sets[index[i]], s):
                raise UserError(f"{where}: item '{i}' is already stored with a different neuron set")
            continue  # already there (resume): keep one copy
        index[i] = len(ids)
        ids.append(i)
        sets.append(s)
    return ids, sets, {**meta_b, **meta_a}


def save_neuron_sets(path: str | os.PathLike, item_ids: list[str], sets: list[np.ndarray], meta: dict,
                     *, append: bool = False) -> None:
    """Write per-item key-neuron sets to ONE compressed .npz (written atomically).

    Layout: ``flat`` (int32, all sets concatenated, each sorted and unique), ``offsets``
    (int64, n+1: item j is ``flat[offsets[j]:offsets[j+1]]``), ``item_ids`` (unicode) and
    ``meta`` (a JSON string; include model, n_layers, d_ff, top_ratio, mode, rho).

    Resume: with ``append=True`` an existing file is merged with the new items (meta keys
    that define comparability — model, revision, dtype, n_layers, d_ff, top_ratio, mode, rho
    — must agree; an item already stored with the same set is skipped, with a different set
    is an error). :func:`merge_neuron_sets` merges whole files the same way.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "mui.npz")
    >>> save_neuron_sets(p, ["a"], [np.array([1, 2])], {"mode": "score"})
    >>> save_neuron_sets(p, ["a", "b"], [np.array([1, 2]), np.array([7])], {"mode": "score"}, append=True)
    >>> load_neuron_sets(p)[0]
    ['a', 'b']
    """
    item_ids = [str(i) for i in item_ids]
    if len(item_ids) != len(sets):
        raise UserError(f"save_neuron_sets: {len(item_ids)} item ids but {len(sets)} sets")
    if len(set(item_ids)) != len(item_ids):
        raise UserError("save_neuron_sets: duplicate item ids")
    sets = [np.unique(np.asarray(s, dtype=np.int64).ravel()) for s in sets]
    n_total = meta.get("n_layers", 0) * meta.get("d_ff", 0)
    if n_total and any(s.size and (s[0] < 0 or s[-1] >= n_total) for s in sets):
        raise UserError(f"save_neuron_sets: neuron ids out of range [0, {n_total})")
    new = (item_ids, sets, dict(meta))
    if append and os.path.exists(path):
        new = _merge(load_neuron_sets(path), new, os.fspath(path))
    _write_npz(path, *new)


def merge_neuron_sets(out_path: str | os.PathLike, paths: Sequence[str | os.PathLike]) -> int:
    """Merge several neuron-set files (e.g. shards or resumed runs) into ``out_path``; returns the item count.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p1, p2, out = (os.path.join(d, n) for n in ("1.npz", "2.npz", "all.npz"))
    >>> save_neuron_sets(p1, ["a"], [np.array([1])], {}); save_neuron_sets(p2, ["b"], [np.array([2])], {})
    >>> merge_neuron_sets(out, [p1, p2])
    2
    """
    if not paths:
        raise UserError("merge_neuron_sets: no input files")
    acc = load_neuron_sets(paths[0])
    for p in paths[1:]:
        acc = _merge(acc, load_neuron_sets(p), os.fspath(p))
    _write_npz(out_path, *acc)
    return len(acc[0])


# --- validation (the paper's ablation) --------------------------------------------------------

@contextmanager
def ablate(model, adapter: Adapter | None, neuron_ids) -> Iterator[HookSet]:
    """Zero the given neurons' activations (the input of each layer's down projection).

    Any forward pass of ``model`` inside the ``with`` block runs ablated; the hooks are removed
    on exit, also on exceptions. ``adapter=None`` looks it up.

    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> m = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    ...                                  num_attention_heads=2, num_key_value_heads=1, vocab_size=50)).eval()
    >>> ids = torch.randint(0, 50, (1, 5))
    >>> with torch.no_grad():
    ...     before = m(ids).logits
    ...     with ablate(m, None, np.arange(32)):     # all of layer 0
    ...         after = m(ids).logits
    >>> bool((before != after).any()), len(m.model.layers[0].mlp.down_proj._forward_pre_hooks)
    (True, 0)
    """
    adapter = adapter if adapter is not None else get_adapter(model)
    L, F = adapter.n_layers, adapter.d_ff
    ids = np.unique(np.asarray(neuron_ids, dtype=np.int64).ravel())
    if ids.size and (ids[0] < 0 or ids[-1] >= L * F):
        raise UserError(f"ablate: neuron ids out of range [0, {L * F})")
    with HookSet() as hooks:
        layers = ids // F
        for l in np.unique(layers).tolist():
            mod = adapter.down_proj(l)
            idx = torch.as_tensor(ids[layers == l] % F, device=adapter.down_weight(l).device)
            hooks.replace_input(mod, lambda x, idx=idx: x.index_fill(-1, idx.to(x.device), 0))
        yield hooks


def random_neurons_like(neuron_ids, n_layers: int, d_ff: int, seed: int = 0, *, exclude: bool = True) -> np.ndarray:
    """Random control set: the same number of neurons in each layer as ``neuron_ids``.

    With ``exclude=True`` (default) the random neurons avoid the given ones (when the layer
    has room). Deterministic for a given seed; sorted int64 flat ids.

    >>> r = random_neurons_like(np.array([0, 1, 9]), n_layers=2, d_ff=8, seed=1)
    >>> np.bincount(r // 8, minlength=2).tolist(), bool(np.isin(r, [0, 1, 9]).any())
    ([2, 1], False)
    """
    ids = np.unique(np.asarray(neuron_ids, dtype=np.int64).ravel())
    if ids.size and (ids[0] < 0 or ids[-1] >= n_layers * d_ff):
        raise UserError(f"random_neurons_like: neuron ids out of range [0, {n_layers * d_ff})")
    rng = np.random.default_rng(seed)
    out = []
    for l in range(n_layers):
        given = ids[ids // d_ff == l] % d_ff
        if given.size == 0:
            continue
        pool = np.setdiff1d(np.arange(d_ff), given) if exclude and d_ff - given.size >= given.size else np.arange(d_ff)
        out.append(l * d_ff + rng.choice(pool, size=given.size, replace=False))
    return np.sort(np.concatenate(out)).astype(np.int64) if out else np.empty(0, dtype=np.int64)
