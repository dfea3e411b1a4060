"""MUI, the Model Utilization Index (Cao et al., arXiv 2504.07440): key neurons found inside one forward pass.

Definitions (``mui.definition`` of the profile; a run uses one, recorded in ``mui_settings``):

``"paper"`` (default)
    activation ``a[l,t,i]`` = the OUTPUT of the MLP's activation function, σ(W_gate x) in a
    gated MLP (Llama, Qwen, Mistral, Gemma, Phi-3) and the plain activation in a non-gated
    one (GPT-2, NeoX, OPT) — the paper's σ(W_in x) read literally, and what the authors' code
    hooks (``mlp.act_fn``). Next-token alignment (below).
``"contribution"``
    ``a[l,t,i]`` = the INPUT of the down projection, σ(W_gate x) ⊙ (W_up x) in a gated MLP:
    the true coefficient of the neuron's write vector ``W_down[:, i]`` in the MLP's output,
    so ``s`` below is exactly the neuron's direct logit contribution. reporter's own choice
    (the only one before definitions were named); identical to ``paper`` for non-gated MLPs.
``"mui-eval"``
    the authors' MUI-Eval scoring as written, defects included:
    :mod:`reporter.collect.collectors.mui_eval`.

For ``paper`` and ``contribution``, at layer l, position t, FFN neuron i:

* score ``s[l,t,i] = a[l,t,i] * <W_down[l][:, i], W_U[y_{t+1}]>`` — position t is scored
  against the NEXT token y_{t+1}, the token its output predicts (the public reference code
  scores against token t: an off-by-one these two definitions do not reproduce);
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
A sample without scored positions has an empty set. k is :func:`reporter.metrics.mui.k_per_layer`.

Task MUI = |union of the samples' sets| / (n_layers * d_ff)
(:func:`reporter.metrics.mui.utilization`); it grows with the number of samples, so compare
only at equal sample count and ``top_ratio``. The :class:`MUIPlugin` stores each task's sets
in ``neurons.npz`` (:mod:`reporter.store.neurons`) and its MUI in the task summary.

How it is computed (:class:`MUICollector`): once per batch, the scored positions are
gathered into a padded [B, R] layout (R = most scored positions of any sample) and the
unembedding rows of their next tokens ``W_U[y_{t+1}]`` ([B*R, d]) are gathered ONCE and
reused by every layer (deduplicated when responses repeat tokens: each distinct next token
is projected once and the rows are gathered back). In each layer's activation hook (the
activation function's output, or the down projection's input): gather the activation rows
[B*R, d_ff], one matmul ``W_U[y] @ W_down``
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

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from ...config import Profile
from ...instrument.batch import PassBatch
from ...instrument.hooked_pass import hooked_pass
from ...instrument.hooks import HookSet
from ...metrics.mui import DEFINITIONS, MODES, k_per_layer, per_layer_utilization, utilization
from ...models.adapters import Adapter, get_adapter
from ...store.layout import NEURONS
from .base import BatchContext, TaskContext, register_collector
from .keysets import KeySetPlugin
from .mui_eval import MUIEvalCollector
from .mui_fused import FUSED_DEFINITIONS, FUSED_MODES, MUIStepCollector
from .ranking import exact_dtype, ordered

__all__ = ["MUICollector", "MUIEvalCollector", "MUIPlugin", "key_neurons", "make_collector"]

_DEDUP_MAX_FRACTION = 0.9  # project distinct next tokens once when they are <= this share of the slots
_TOPSCORE_REFINE = 32  # neurons recomputed exactly near the threshold / at the top (topscore)


@dataclass
class _DeviceTensors:
    """The per-batch index tensors on one device (gathered once, reused by every layer there)."""

    rows: torch.Tensor  # [B*R] row of the flattened [B*T, d_ff] activation for each slot
    pad: torch.Tensor | None  # [B*R, 1] True on padding slots, None when there are none
    unembed: torch.Tensor | None  # [B*R or distinct, d] W_U rows of the next tokens (None: activation mode)
    inverse: torch.Tensor | None  # [B*R] slot -> row of ``unembed`` when next tokens were deduplicated
    batch_offset: torch.Tensor  # [B, 1] first slot of each sample


@dataclass
class _BatchState:
    B: int
    R: int  # padded number of scored positions per sample
    has_resp: torch.Tensor  # [B] bool
    rows: torch.Tensor  # [B*R] row of the flattened [B*T, d_ff] activation for each slot
    pad_rows: torch.Tensor | None  # [B*R] bool, None when no slot is padding
    targets: torch.Tensor  # [B*R] next-token ids (0 on padding slots)
    T: int
    inverse: torch.Tensor | None = None  # [B*R] slot -> row of the unique targets (when deduplicated)
    per_device: dict[tuple[torch.device, torch.dtype], _DeviceTensors] = field(default_factory=dict)
    picked: list[torch.Tensor] = field(default_factory=list)  # per layer: [B, k] ids, or [B, d_ff] bool (topscore)
    run_vals: torch.Tensor | None = None  # global_topk running best
    run_ids: torch.Tensor | None = None
    layers_seen: int = 0


class MUICollector:
    """Collects per-sample key-neuron sets during :func:`reporter.instrument.hooked_pass.hooked_pass`.

    Results accumulate over batches in order; :meth:`results` returns one sorted int64 array
    of flat ids ``layer * d_ff + i`` per sample. Semantics: see the module docstring.

    >>> import torch
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_inner=32, n_head=2, vocab_size=50))
    >>> ids = torch.randint(0, 50, (3, 6)); am = torch.ones_like(ids); resp = am.bool()
    >>> c = MUICollector(top_ratio=0.1, mode="score")     # k = 3 per layer
    >>> _ = hooked_pass(m, get_adapter(m), PassBatch(ids, am, resp), [c])
    >>> [len(s) <= 6 for s in c.results()]
    [True, True, True]
    """

    def __init__(self, top_ratio: float = 0.001, mode: str = "score", rho: float = 0.9, *, refine: bool = True,
                 definition: str = "paper"):
        if definition not in ("paper", "contribution"):
            raise ValueError(f"MUICollector computes the 'paper' and 'contribution' definitions, not {definition!r} "
                             "(use make_collector)")
        self.definition = definition
        if mode not in MODES:
            raise ValueError(f"MUI mode '{mode}' is not valid; use one of {', '.join(MODES)}")
        if not 0 < top_ratio <= 1:
            raise ValueError(f"MUI top_ratio must be in (0, 1], got {top_ratio}")
        if not 0 < rho <= 1:
            raise ValueError(f"MUI rho must be in (0, 1], got {rho}")
        self.top_ratio, self.mode, self.rho, self.refine = float(top_ratio), mode, float(rho), refine
        self.n_layers: int | None = None
        self.d_ff: int | None = None
        self._results: list[np.ndarray] = []
        self._st: _BatchState | None = None

    # -- Collector protocol ---------------------------------------------------------------
    def attach(self, hooks: HookSet, adapter: Adapter, batch: PassBatch) -> None:
        """Gather the scored positions once and hook every layer's down-projection input."""
        L, F = adapter.n_layers, adapter.d_ff
        self.n_layers, self.d_ff = L, F
        sl = batch.scored_slots()  # one host sync per batch, before the forward
        B, T = batch.input_ids.shape
        R, dev = sl.R, sl.rows.device
        st = _BatchState(B=B, R=R, T=T, has_resp=sl.counts > 0, rows=torch.empty(0, dtype=torch.long, device=dev),
                         pad_rows=None, targets=torch.empty(0, dtype=torch.long, device=dev))
        self._st = st
        if R == 0:
            return
        rows = sl.rows
        targets = torch.zeros(B * R, dtype=torch.long, device=dev)
        targets[sl.slot] = batch.input_ids[sl.bb, sl.tt + 1]
        st.pad_rows = None if bool(sl.valid.all()) else ~sl.valid
        if self.mode != "activation":
            # responses repeat tokens: project each distinct next token once per layer
            uniq, inv = torch.unique(targets, return_inverse=True)
            if uniq.numel() <= _DEDUP_MAX_FRACTION * targets.numel():
                targets, st.inverse = uniq, inv
        st.rows, st.targets = rows, targets
        self._adapter = adapter
        for l in range(L):
            if self.definition == "paper" and adapter.gated:  # σ(W_gate x): the activation function's output
                hooks.on_output(adapter.act_module(l), self._make_hook(l))
            else:  # the down projection's input (= the activation's output in a non-gated MLP)
                hooks.on_input(adapter.down_proj(l), self._make_hook(l))

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Move the batch's chosen neuron ids to the host, one set per sample."""
        st, self._st = self._st, None
        if st is None:
            raise RuntimeError("MUICollector.after_forward called without attach")
        L, F = self.n_layers, self.d_ff
        if st.R == 0:
            self._results.extend(np.empty(0, dtype=np.int64) for _ in range(st.B))
            return
        if st.layers_seen != L:
            raise RuntimeError(f"MUI: {st.layers_seen} of {L} activation hooks fired; "
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

    # -- inside the pass ------------------------------------------------------------------
    def _on_device(self, st: _BatchState, device: torch.device, dtype: torch.dtype) -> _DeviceTensors:
        key = (device, dtype)
        d = st.per_device.get(key)
        if d is None:  # gathered once per batch and device, reused by every layer
            W_U = self._adapter.unembedding()
            tg = st.targets.to(W_U.device)
            d = _DeviceTensors(
                rows=st.rows.to(device),
                pad=None if st.pad_rows is None else st.pad_rows.to(device)[:, None],
                unembed=None if self.mode == "activation" else W_U.index_select(0, tg).to(device=device, dtype=dtype),
                inverse=None if st.inverse is None else st.inverse.to(device),
                batch_offset=torch.arange(st.B, device=device)[:, None] * st.R)
            st.per_device[key] = d
        return d

    def _exact(self, flat: torch.Tensor, a: torch.Tensor, U: torch.Tensor | None, W: torch.Tensor | None,
               boff: torch.Tensor, inv: torch.Tensor | None = None) -> torch.Tensor:
        """Exact (float64) values at flat candidate indices [B, n] into the padded [B, R*F] layout."""
        B, F = flat.shape[0], a.shape[1]
        xd = exact_dtype(a.device)
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

    def _make_hook(self, layer: int) -> Callable[[torch.Tensor], None]:
        def hook(x: torch.Tensor) -> None:
            st = self._state()
            F, B, R = self.d_ff, st.B, st.R
            W = self._adapter.down_weight(layer)  # [d, F]
            d = self._on_device(st, x.device, W.dtype)
            if x.numel() != B * st.T * F:
                raise RuntimeError(f"MUI: layer {layer} activation has shape {tuple(x.shape)}, "
                                   f"expected [{B}, {st.T}, {F}]")
            a = x.reshape(B * st.T, F).index_select(0, d.rows)  # [B*R, F] scored rows only
            if self.mode == "activation":
                s = a.clone() if d.pad is not None else a
            else:
                s = torch.matmul(d.unembed, W)  # [B*R, d] @ [d, F]: <W_down[:, i], W_U[y_{t+1}]>
                if d.inverse is not None:  # rows were computed per distinct token
                    s = s.index_select(0, d.inverse)
                s.mul_(a.to(s.dtype))
            if d.pad is not None:
                s.masked_fill_(d.pad, float("-inf"))
            s = s.view(B, R * F)
            if self.mode == "topscore":
                self._topscore(layer, s, a, d, W)
            else:
                self._topk(layer, s, a, d, W)
            st.layers_seen += 1
        return hook

    def _state(self) -> _BatchState:
        if self._st is None:
            raise RuntimeError("MUICollector: a hook fired outside attach/after_forward")
        return self._st

    def _topk(self, layer: int, s: torch.Tensor, a: torch.Tensor, d: _DeviceTensors, W: torch.Tensor) -> None:
        st, F = self._state(), self.d_ff
        glob = self.mode == "global_topk"
        k = k_per_layer(self.top_ratio, F, self.n_layers if glob else 1)
        n = s.shape[1]
        if self.refine:
            vals, idx = s.topk(min(2 * k + 16, n), dim=1, sorted=False)
            ex = self._exact(idx, a, d.unembed, W, d.batch_offset, d.inverse).masked_fill_(
                vals == float("-inf"), float("-inf"))
            vals, idx = ordered(ex, idx)
            vals, idx = vals[:, :k], idx[:, :k]
        else:
            vals, idx = s.topk(min(k, n), dim=1)
        ids = idx % F + layer * F
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

    def _topscore(self, layer: int, s: torch.Tensor, a: torch.Tensor, d: _DeviceTensors, W: torch.Tensor) -> None:
        st, F, rho = self._state(), self.d_ff, self.rho
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
            ex = self._exact(flat, a, d.unembed, W, d.batch_offset, d.inverse)
            ex.masked_fill_(nm.gather(1, cand) == float("-inf"), float("-inf"))
            Me = ex[:, :r].amax(1)
            thr_e = Me - (1 - rho) * Me.abs()
            keep.scatter_(1, cand, ex >= thr_e[:, None])
        st.picked.append(keep)


def make_collector(definition: str = "paper", top_ratio: float = 0.001, mode: str = "score", rho: float = 0.9, *,
                   vocab_size: int | None = None) -> MUICollector | MUIEvalCollector:
    """The collector of a named MUI definition (``vocab_size``: the tokenizer's, used by ``mui-eval`` only).

    >>> type(make_collector("mui-eval")).__name__, make_collector("contribution").definition
    ('MUIEvalCollector', 'contribution')
    """
    if definition not in DEFINITIONS:
        raise ValueError(f"MUI definition {definition!r} is not valid; use one of {', '.join(DEFINITIONS)}")
    if definition == "mui-eval":
        return MUIEvalCollector(top_ratio=top_ratio, mode=mode, rho=rho, vocab_size=vocab_size)
    return MUICollector(top_ratio=top_ratio, mode=mode, rho=rho, definition=definition)


def key_neurons(model: torch.nn.Module, input_ids: Any, attention_mask: Any, response_mask: Any, *,
                top_ratio: float = 0.001, mode: str = "score", rho: float = 0.9, definition: str = "paper",
                vocab_size: int | None = None) -> list[np.ndarray]:
    """Key-neuron set of every sample: one sorted int64 array of flat ids ``layer * d_ff + i``.

    ``input_ids``/``attention_mask``/``response_mask`` are [B, T] (left or right padded); the
    response mask is True on the teacher-forced response tokens. One hooked forward pass.
    Definitions, modes, ties and precision: see the module docstring.

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
    c = make_collector(definition, top_ratio, mode, rho, vocab_size=vocab_size)
    hooked_pass(model, adapter, PassBatch(torch.as_tensor(input_ids), torch.as_tensor(attention_mask),
                                          torch.as_tensor(response_mask).bool()), [c])
    return c.results()


@register_collector
class MUIPlugin(KeySetPlugin):
    """Key-neuron sets of every item (``neurons.npz``) and the task's MUI, overall and per layer."""

    name = "mui"

    switch = "unless mui: {enabled: false} or mui.unit: sae"
    label = "MUI"
    artifact = NEURONS

    def enabled(self, profile: Profile) -> bool:
        """On unless the profile says ``mui: {enabled: false}`` or counts SAE features only (``unit: sae``)."""
        return profile.mui.enabled and profile.mui.unit in ("neurons", "both")

    def for_batch(self, batch: BatchContext) -> MUICollector | MUIEvalCollector:
        """A fresh collector of the profile's definition, with its settings."""
        m = batch.task.profile.mui
        return make_collector(m.definition, m.top_ratio, m.mode, m.rho,
                              vocab_size=getattr(batch.task.lm.tokenizer, "vocab_size", None))

    def fusable(self, profile: Profile) -> bool:
        """Modes ``score``, ``activation``, ``global_topk`` of the ``paper`` and ``contribution`` definitions."""
        return profile.mui.definition in FUSED_DEFINITIONS and profile.mui.mode in FUSED_MODES

    def for_generation(self, batch: BatchContext) -> MUIStepCollector:
        """A :class:`~reporter.collect.collectors.mui_fused.MUIStepCollector` of the profile's settings."""
        m = batch.task.profile.mui
        return MUIStepCollector(m.top_ratio, m.mode, definition=m.definition)

    def finish_task(self, task: TaskContext, samples: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Merge the parts into ``neurons.npz``; MUI of the union over the task's items, in percent."""
        ordered = self.merged_sets(task)
        L, F = task.lm.adapter.n_layers, task.lm.adapter.d_ff
        m = task.profile.mui
        return {"mui": 100.0 * utilization(ordered, L, F),
                "mui_per_layer": [100.0 * v for v in per_layer_utilization(ordered, L, F)],
                "mui_settings": {"definition": m.definition, "mode": m.mode, "top_ratio": m.top_ratio, "rho": m.rho,
                                 "n_samples": len(task.plan.items), "n_layers": L, "d_ff": F}}

    def _meta(self, task: TaskContext) -> dict[str, Any]:
        lm, m = task.lm, task.profile.mui
        return {"model": lm.spec.name, "n_layers": lm.adapter.n_layers, "d_ff": lm.adapter.d_ff,
                "definition": m.definition, "top_ratio": m.top_ratio, "mode": m.mode, "rho": m.rho,
                "dtype": str(lm.dtype).replace("torch.", "")}
