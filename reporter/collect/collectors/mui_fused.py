"""MUI key neurons collected during greedy generation itself (no teacher-forced pass).

The same definitions, modes ``score`` / ``activation`` / ``global_topk``, tie-break and float64
refinement as :class:`reporter.collect.collectors.mui.MUICollector`, fed by the forward passes
of :func:`reporter.instrument.decode.greedy_decode`: at step j the layer hooks see the
activation of the one position that predicts response token j, and after the step's logits the
greedy token ``y_j`` is known, so the position's scores ``a * <W_down[:, i], W_U[y_j]>`` are
computed then. Each step keeps, per sample and layer, its ``2k + 16`` best candidates (fast
value, activation, neuron, token) on the device; :meth:`MUIStepCollector.finish` drops the
steps past each sample's kept response, takes the best ``2k + 16`` of the rest by fast value —
the same pool the teacher-forced pass ranks — recomputes their scores in float64 and picks k by
that value, ties to the earlier position, then the lower neuron. Step j is slot j of the teacher-forced layout, so both paths
give the same sets (exactly in float64; the tests compare them).

``topscore`` (a per-neuron maximum over positions whose validity is only known at the end) and
the ``mui-eval`` definition keep the teacher-forced pass.

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> from reporter.instrument.decode import greedy_decode
>>> from reporter.models.adapters import get_adapter
>>> _ = torch.manual_seed(0)
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100)).eval()
>>> c = MUIStepCollector(top_ratio=0.05)                  # k = 3 per layer
>>> out = greedy_decode(m, get_adapter(m), [[5, 6, 7]], pad_id=0, eos_ids=set(), max_new_tokens=4,
...                     collectors=[c])
>>> c.finish([len(out[0])]); [len(s) <= 6 for s in c.results()]
[True]
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from ...instrument.batch import PassBatch
from ...instrument.hooks import HookSet
from ...metrics.mui import k_per_layer
from .ranking import exact_dtype, ordered

#: the modes the fused path computes (``topscore`` keeps the teacher-forced pass)
FUSED_MODES = ("score", "activation", "global_topk")
#: the definitions it computes (``mui-eval`` keeps the teacher-forced pass)
FUSED_DEFINITIONS = ("paper", "contribution")
#: activations of the steps that wait for their tokens' projections, at most (then they are scored)
PENDING_BYTES = 32 << 20


class MUIStepCollector:
    """Key-neuron sets of each sample from the generation's own passes (see the module docstring).

    Results accumulate over batches in order; :meth:`results` returns one sorted int64 array of
    flat ids ``layer * d_ff + i`` per sample, as :meth:`MUICollector.results` does.

    Per step, all layers at once: the activations of the step's position are stacked ([b, L, F]);
    each response token's projections ``<W_down[l][:, i], W_U[y]>`` ([L, F]) are computed the first
    time the token appears in the batch and reused when it comes back (responses repeat tokens:
    "The answer is", digits, spaces); one ``topk`` picks every layer's candidates. The float64
    values are computed once per batch, in :meth:`finish`, for the pooled candidates only.

    The projections of new tokens read every layer's ``W_down`` (106 MB for SmolLM2 in float32), as
    much memory traffic as a decode step's whole MLP. So steps wait, their activations kept, until
    :data:`PENDING_BYTES` of them are kept or the batch finishes; then one product per layer gives
    every new token of the waiting steps, and each step is scored as it would have been at once.
    """

    #: the prefill's last position is all it reads
    prompt_positions = 1
    #: so a prefix every prompt shares may run once (its hooks read the last position)
    shares_prefix = True

    def __init__(self, top_ratio: float = 0.001, mode: str = "score", *, definition: str = "paper",
                 refine: bool = True) -> None:
        if mode not in FUSED_MODES or definition not in FUSED_DEFINITIONS:
            raise ValueError(f"MUI during generation computes modes {FUSED_MODES} and definitions "
                             f"{FUSED_DEFINITIONS}, not mode {mode!r} / definition {definition!r}")
        self.top_ratio, self.mode, self.definition, self.refine = float(top_ratio), mode, definition, refine
        self._results: list[np.ndarray] = []
        self._acts: list[torch.Tensor | None] = []
        self._steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._pending: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._pending_bytes = 0

    # -- StepCollector protocol -------------------------------------------------------------
    def attach(self, hooks: HookSet, adapter: Any, prompt: PassBatch) -> None:
        """Hook every layer's activation (the same module as the teacher-forced collector)."""
        self._adapter = adapter
        self.n_layers, self.d_ff = adapter.n_layers, adapter.d_ff
        L, F = self.n_layers, self.d_ff
        self._acts = [None] * L
        self._steps = []
        self._pending, self._pending_bytes = [], 0
        self._B = prompt.input_ids.shape[0]
        self._W0 = adapter.down_weight(0)
        self._dev = self._W0.device
        k = k_per_layer(self.top_ratio, F, L if self.mode == "global_topk" else 1)
        self._m = min(2 * k + 16, F) if self.refine else min(k, F)
        self._row: dict[int, int] = {}  # token id -> its row of the projection cache
        self._proj = torch.empty(0, L, F, dtype=self._W0.dtype, device=self._dev)
        self._shape: tuple[int, int] = (0, 0)
        # [b, T] of each forward, for a family that flattens its MLP's input to [b * T, d_ff] (OPT)
        hooks.on_input(adapter.layers[0], self._record_shape)
        for l in range(L):
            if self.definition == "paper" and adapter.gated:
                hooks.on_output(adapter.act_module(l), self._keep(l))
            else:
                hooks.on_input(adapter.down_proj(l), self._keep(l))

    def _record_shape(self, h: Any) -> None:
        if isinstance(h, torch.Tensor) and h.dim() == 3:
            self._shape = (int(h.shape[0]), int(h.shape[1]))

    def _keep(self, layer: int) -> Callable[[torch.Tensor], None]:
        def hook(x: torch.Tensor) -> None:
            if x.dim() == 2:  # OPT runs its MLP on [b * T, d_ff]
                x = x.view(*self._shape, x.shape[-1])
            # the position predicting this step's token, copied: a view would keep the prefill's whole
            # [B, T, d_ff] activation of every layer alive until the step ends (0.4 GB for SmolLM2 at 8 x 300)
            self._acts[layer] = x[:, -1, :].clone()
        return hook

    def _add_projections(self, ids: list[int]) -> None:
        """Put the projections of the tokens ``ids`` not yet in the batch's cache into it: one product per layer."""
        new = sorted({t for t in ids if t not in self._row})
        if new:
            W_U = self._adapter.unembedding()
            u = W_U.index_select(0, torch.tensor(new, device=W_U.device))  # [n, d]
            block = torch.stack([torch.matmul(u.to(device=W.device, dtype=W.dtype), W).to(self._dev)
                                 for W in (self._adapter.down_weight(l) for l in range(self.n_layers))], 1)
            for t in new:
                self._row[t] = len(self._row)
            self._proj = torch.cat([self._proj, block], 0)

    def _projections(self, ids: list[int]) -> torch.Tensor:
        """[b, L, F] ``<W_down[l][:, i], W_U[y]>`` of each row's token ``ids``, from the batch's cache."""
        self._add_projections(ids)
        return self._proj.index_select(0, torch.tensor([self._row[t] for t in ids], device=self._dev))

    def after_step(self, step: int, logits: torch.Tensor, next_tokens: torch.Tensor, rows: torch.Tensor) -> None:
        """Score this step's position against its greedy token; keep each layer's best candidates.

        Rows that finished earlier (not in ``rows``) get -inf candidates: their later steps never count.
        """
        if any(a is None for a in self._acts):
            raise RuntimeError("MUI: an activation hook did not fire; the adapter does not match this model's forward")
        A = torch.stack([a.to(self._dev) for a in self._acts], 1)  # [b, L, F]
        self._acts = [None] * self.n_layers
        if self.mode == "activation":
            self._score(A, A, next_tokens, rows)
            return
        self._pending.append((A, next_tokens.clone(), rows.clone()))
        self._pending_bytes += A.numel() * A.element_size()
        if self._pending_bytes >= PENDING_BYTES:
            self._flush()

    def _flush(self) -> None:
        """Score the waiting steps: their new tokens' projections at once, then each step as it came."""
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        if not pending:
            return
        ids = [t.tolist() for _, t, _ in pending]  # the loop has synced on these tokens already
        with torch.inference_mode():  # finish() runs after the decoding loop's inference mode
            self._add_projections([t for step in ids for t in step])
            for (A, tokens, rows), step in zip(pending, ids):
                self._score(self._projections(step).mul_(A.to(self._W0.dtype)), A, tokens, rows)

    def _score(self, s: torch.Tensor, A: torch.Tensor, next_tokens: torch.Tensor, rows: torch.Tensor) -> None:
        """Keep one step's best candidates per sample and layer (scores ``s`` [b, L, F] of activations ``A``)."""
        vals, idx = s.topk(self._m, dim=2, sorted=False)  # [b, L, m]
        av = A.gather(2, idx)
        tok = next_tokens.to(self._dev)
        if rows.numel() != self._B:  # scatter the live rows into the batch's layout
            r = rows.to(self._dev)
            vals = vals.new_full((self._B, *vals.shape[1:]), float("-inf")).index_copy_(0, r, vals)
            idx = idx.new_zeros((self._B, *idx.shape[1:])).index_copy_(0, r, idx)
            av = av.new_zeros((self._B, *av.shape[1:])).index_copy_(0, r, av)
            tok = tok.new_zeros(self._B).index_copy_(0, r, tok)
        self._steps.append((vals, idx, av, tok))

    def finish(self, lengths: Sequence[int]) -> None:
        """Drop the steps past each kept response; pick each sample's key neurons; move them to the host."""
        self._flush()
        L, F = self.n_layers, self.d_ff
        B = len(lengths)
        S = len(self._steps)
        if S == 0 or max(lengths, default=0) == 0:
            self._results.extend(np.empty(0, dtype=np.int64) for _ in range(B))
            self._steps = []
            return
        glob = self.mode == "global_topk"
        k = k_per_layer(self.top_ratio, F, L if glob else 1)
        dev = self._dev
        m = self._m
        vals = torch.stack([st[0] for st in self._steps], 1)  # [B, S, L, m]
        idx = torch.stack([st[1] for st in self._steps], 1)
        av = torch.stack([st[2] for st in self._steps], 1)
        tok = torch.stack([st[3] for st in self._steps], 1)  # [B, S]
        self._steps = []
        valid = torch.arange(S, device=dev)[None, :] < torch.as_tensor(list(lengths), device=dev)[:, None]
        vals = vals.masked_fill(~valid[:, :, None, None], float("-inf"))
        step_of = torch.arange(S, device=dev)[None, :, None].expand(B, S, m)
        W_U = self._adapter.unembedding() if self.mode != "activation" else None
        xd = exact_dtype(dev)
        run_vals: torch.Tensor | None = None
        run_ids: torch.Tensor | None = None
        picked = []
        for l in range(L):
            v = vals[:, :, l].reshape(B, S * m)
            pv, pi = v.topk(min(m, S * m), dim=1, sorted=False)  # the teacher-forced pass's candidate pool
            neuron = idx[:, :, l].reshape(B, S * m).gather(1, pi)
            step = step_of.reshape(B, S * m).gather(1, pi)
            flat = step * F + neuron  # slot-major ids: ties go to the earlier position, then the lower neuron
            if self.refine:
                ex = av[:, :, l].reshape(B, S * m).gather(1, pi).to(xd)
                if W_U is not None:
                    W = self._adapter.down_weight(l)
                    y = tok.gather(1, step).reshape(-1)
                    u = W_U.index_select(0, y.to(W_U.device)).to(device=dev, dtype=xd)  # [B*pool, d]
                    w = W.t().index_select(0, neuron.reshape(-1).to(W.device)).to(device=dev, dtype=xd)
                    ex = ex * (u * w).sum(-1).view(B, -1)
                ex = ex.masked_fill(pv == float("-inf"), float("-inf"))
                ev, f = ordered(ex, flat)
            else:
                ev, order = pv.sort(dim=1, descending=True, stable=True)
                f = flat.gather(1, order)
            ev, f = ev[:, :k], f[:, :k]
            ids = f % F + l * F
            if not glob:
                picked.append(ids)
                continue
            if run_vals is None:
                run_vals, run_ids = ev, ids
                continue
            cat_v, cat_i = torch.cat([run_vals, ev], 1), torch.cat([run_ids, ids], 1)
            cat_v, order = cat_v.sort(dim=1, descending=True, stable=True)
            run_vals, run_ids = cat_v[:, :k], cat_i.gather(1, order[:, :k])
        if glob:
            assert run_vals is not None and run_ids is not None
            out = run_ids.masked_fill(run_vals == float("-inf"), -1).cpu().numpy()
        else:
            out = torch.cat(picked, 1).cpu().numpy()
        for b in range(B):
            row = out[b]
            self._results.append(np.unique(row[row >= 0]).astype(np.int64) if lengths[b] > 0
                                 else np.empty(0, dtype=np.int64))

    def results(self) -> list[np.ndarray]:
        """One sorted int64 array of flat neuron ids per sample, in the order of the batches."""
        return list(self._results)
