"""MUI key neurons collected during greedy generation itself (no teacher-forced pass).

The same definitions, modes ``score`` / ``activation`` / ``global_topk``, tie-break and float64
refinement as :class:`reporter.collect.collectors.mui.MUICollector`, fed by the forward passes
of :func:`reporter.instrument.decode.greedy_decode`: at step j the layer hooks see the
activation of the one position that predicts response token j, and after the step's logits the
greedy token ``y_j`` is known, so the position's scores ``a * <W_down[:, i], W_U[y_j]>`` are
computed then. Each step keeps, per sample and layer, its ``2k + 16`` best candidates (fast
value, exact float64 value, neuron) on the device; :meth:`MUIStepCollector.finish` drops the
steps past each sample's kept response, takes the best ``2k + 16`` of the rest by fast value —
the same pool the teacher-forced pass ranks — and picks k by the exact value, ties to the earlier
position, then the lower neuron. Step j is slot j of the teacher-forced layout, so both paths
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


class MUIStepCollector:
    """Key-neuron sets of each sample from the generation's own passes (see the module docstring).

    Results accumulate over batches in order; :meth:`results` returns one sorted int64 array of
    flat ids ``layer * d_ff + i`` per sample, as :meth:`MUICollector.results` does.
    """

    needs_prompt_logits = False

    def __init__(self, top_ratio: float = 0.001, mode: str = "score", *, definition: str = "paper",
                 refine: bool = True) -> None:
        if mode not in FUSED_MODES or definition not in FUSED_DEFINITIONS:
            raise ValueError(f"MUI during generation computes modes {FUSED_MODES} and definitions "
                             f"{FUSED_DEFINITIONS}, not mode {mode!r} / definition {definition!r}")
        self.top_ratio, self.mode, self.definition, self.refine = float(top_ratio), mode, definition, refine
        self._results: list[np.ndarray] = []
        self._acts: list[torch.Tensor | None] = []
        self._steps: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = []

    # -- StepCollector protocol -------------------------------------------------------------
    def attach(self, hooks: HookSet, adapter: Any, prompt: PassBatch) -> None:
        """Hook every layer's activation (the same module as the teacher-forced collector)."""
        self._adapter = adapter
        self.n_layers, self.d_ff = adapter.n_layers, adapter.d_ff
        self._acts = [None] * self.n_layers
        self._steps = []
        self._B = prompt.input_ids.shape[0]
        for l in range(self.n_layers):
            if self.definition == "paper" and adapter.gated:
                hooks.on_output(adapter.act_module(l), self._keep(l))
            else:
                hooks.on_input(adapter.down_proj(l), self._keep(l))

    def _keep(self, layer: int) -> Callable[[torch.Tensor], None]:
        def hook(x: torch.Tensor) -> None:
            self._acts[layer] = x[:, -1, :]  # the position predicting this step's token
        return hook

    def after_step(self, step: int, logits: torch.Tensor, next_tokens: torch.Tensor, rows: torch.Tensor) -> None:
        """Score this step's position against its greedy token; keep each layer's best candidates.

        Rows that finished earlier (not in ``rows``) get -inf candidates: their later steps never count.
        """
        L, F = self.n_layers, self.d_ff
        glob = self.mode == "global_topk"
        k = k_per_layer(self.top_ratio, F, L if glob else 1)
        m = min(2 * k + 16, F) if self.refine else min(k, F)
        W_U = self._adapter.unembedding() if self.mode != "activation" else None
        per_layer = []
        for l in range(L):
            a = self._acts[l]
            if a is None:
                raise RuntimeError(f"MUI: the activation hook of layer {l} did not fire; "
                                   "the adapter does not match this model's forward")
            W = self._adapter.down_weight(l)  # [d, F]
            if W_U is None:
                s = a
                u = None
            else:
                u = W_U.index_select(0, next_tokens.to(W_U.device)).to(device=W.device, dtype=W.dtype)  # [B, d]
                s = torch.matmul(u, W).mul_(a.to(W.dtype))  # [B, F]
            vals, idx = s.topk(m, dim=1, sorted=False)
            xd = exact_dtype(a.device)
            ex = a.gather(1, idx.to(a.device)).to(xd)
            if u is not None:
                w = W.t().index_select(0, idx.reshape(-1)).to(xd).view(*idx.shape, -1)  # [B, m, d]
                ex = ex * (u.to(xd)[:, None, :] * w).sum(-1)
            if rows.numel() != self._B:  # scatter the live rows into the batch's layout
                r = rows.to(vals.device)
                vals = vals.new_full((self._B, m), float("-inf")).index_copy_(0, r, vals)
                idx = idx.new_zeros((self._B, m)).index_copy_(0, r, idx)
                ex = ex.new_full((self._B, m), float("-inf")).index_copy_(0, r.to(ex.device), ex)
            per_layer.append((vals, idx, ex))
        self._acts = [None] * L
        self._steps.append(per_layer)

    def finish(self, lengths: Sequence[int]) -> None:
        """Drop the steps past each kept response; pick each sample's key neurons; move them to the host."""
        L, F = self.n_layers, self.d_ff
        B = len(lengths)
        S = len(self._steps)
        if S == 0 or max(lengths, default=0) == 0:
            self._results.extend(np.empty(0, dtype=np.int64) for _ in range(B))
            return
        glob = self.mode == "global_topk"
        k = k_per_layer(self.top_ratio, F, L if glob else 1)
        run_vals: torch.Tensor | None = None
        run_ids: torch.Tensor | None = None
        picked = []
        dev0 = self._steps[0][0][0].device
        valid = (torch.arange(S, device=dev0)[None, :] < torch.as_tensor(list(lengths), device=dev0)[:, None])
        for l in range(L):
            vals = torch.stack([st[l][0].to(dev0) for st in self._steps], 1)  # [B, S, m]
            idx = torch.stack([st[l][1].to(dev0) for st in self._steps], 1)
            ex = torch.stack([st[l][2].to(dev0) for st in self._steps], 1)
            m = vals.shape[2]
            flat = (torch.arange(S, device=dev0)[None, :, None] * F + idx).reshape(B, S * m)  # slot-major ids
            bad = ~valid[:, :, None].expand(-1, -1, m).reshape(B, S * m)
            vals = vals.reshape(B, S * m).masked_fill(bad, float("-inf"))
            ex = ex.reshape(B, S * m).masked_fill(bad, float("-inf"))
            pool = min(m, S * m)
            pv, pi = vals.topk(pool, dim=1, sorted=False)  # the teacher-forced pass's candidate pool
            pe = ex.gather(1, pi).masked_fill(pv == float("-inf"), float("-inf"))
            if self.refine:
                v, f = ordered(pe, flat.gather(1, pi))
            else:
                v, order = pv.sort(dim=1, descending=True, stable=True)
                f = flat.gather(1, pi).gather(1, order)
            v, f = v[:, :k], f[:, :k]
            ids = f % F + l * F
            if not glob:
                picked.append(ids)
                continue
            if run_vals is None:
                run_vals, run_ids = v, ids
                continue
            cat_v, cat_i = torch.cat([run_vals, v], 1), torch.cat([run_ids, ids], 1)
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
        self._steps = []

    def results(self) -> list[np.ndarray]:
        """One sorted int64 array of flat neuron ids per sample, in the order of the batches."""
        return list(self._results)
