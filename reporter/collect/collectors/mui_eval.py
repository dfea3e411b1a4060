"""The ``mui-eval`` MUI definition: the authors' MUI-Eval scoring as written, for reproducing published numbers.

A transcription of ``neuron_and_sae/get_performance/get_neuron.py`` (scoring, top 2000 kept per
layer) and ``utils_neuron.py`` / ``depict_neuron.py`` (the key-neuron selection) of
ALEX-nlp/MUI-Eval, run inside reporter's one hooked pass. Per sample, per layer:

1. the activation is the OUTPUT of the MLP's activation function (``mlp.act_fn``: σ(W_gate x),
   without the up projection), cast to half precision (``act[n][0].half()``);
2. the scored positions are the response tokens themselves, ``[prompt_index, prompt_end_index)``,
   and position t is scored against the token AT t (``input_ids[b, t]``), not the next one;
3. ``projection = (W_downᵀ.float() @ W_U[:, :vocab_size].float()).half()`` and
   ``score = activation * projection[:, token]`` in half precision (``mode="activation"``: the
   activation itself, the authors' ``result_activate`` file);
4. the top ``min(2000, positions × d_ff)`` entries of the flattened [positions, d_ff] scores
   (``torch.topk``) are kept, in ``topk``'s order;
5. selection (``get_neuron_set_layer_topk_stream_file`` & co.): a stable sort by score,
   descending; ``score``/``activation``: the first ``k = int(top_ratio · d_ff)`` entries;
   ``topscore``: the entries down to the first below ``rho ×`` the layer's top score;
   ``global_topk``: all layers' kept entries (layer order), stable-sorted, the first
   ``int(top_ratio · d_ff · n_layers)`` (the authors give this mode an integer k; this mapping is
   reporter's). The sample's set is the (layer, neuron) of the chosen entries; the task's MUI is
   the union over samples.

Defects copied on purpose (each one changes numbers; see the ``paper`` definition for the fix):

* the off-by-one: the activation at t predicts token t+1 but is scored against token t;
* the activation omits the up projection (what the paper's σ(W_in x) says, read literally);
* half-precision rounding of the activations, of W_downᵀW_U and of their product, so near-ties
  are decided by float16 rounding and by ``torch.topk``'s order among equal values;
* the unembedding cut to ``tokenizer.vocab_size``, which leaves out added tokens (a response
  position whose token lies beyond it cannot be scored; the authors' code would fail there,
  here it is skipped);
* ``k = int(0.001 · d_ff)`` is 0 for d_ff < 1000 (small models get no key neuron at all);
* only the top 2000 entries per layer are stored, so ``topscore`` and ``global_topk`` see a
  truncated list.

Not copied: the authors re-tokenise prompt + response text jointly and load the model in
float16; reporter scores its own teacher-forced tokens in the model's dtype (load with
``dtype: float16`` to match), and writes no JSON. The authors' duplication of rows on machines
with several GPUs (a loop over devices that appends each row once per device) is not copied.

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> from reporter.instrument.hooked_pass import hooked_pass, PassBatch
>>> from reporter.models.adapters import get_adapter
>>> _ = torch.manual_seed(0)
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
>>> ids = torch.randint(0, 100, (1, 8)); resp = torch.zeros_like(ids, dtype=torch.bool); resp[:, 5:] = True
>>> c = MUIEvalCollector(top_ratio=0.05)              # k = int(0.05 * 64) = 3 per layer
>>> _ = hooked_pass(m, get_adapter(m), PassBatch(ids, torch.ones_like(ids), resp), [c])
>>> 0 < len(c.results()[0]) <= 6
True
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...instrument.batch import PassBatch
from ...instrument.hooks import HookSet
from ...metrics.mui import MODES, k_mui_eval

__all__ = ["MUIEvalCollector", "STORED_PER_LAYER"]

#: entries the authors' code keeps per layer and sample (``top_k = min(2000, total_neurons)``)
STORED_PER_LAYER = 2000


class MUIEvalCollector:
    """Per-sample key-neuron sets by the ``mui-eval`` definition (see the module docstring).

    The same collector protocol and :meth:`results` as :class:`reporter.collect.collectors.mui.MUICollector`.
    ``vocab_size`` is the tokenizer's ``vocab_size`` (None: the whole unembedding).
    """

    def __init__(self, top_ratio: float = 0.001, mode: str = "score", rho: float = 0.9, *,
                 vocab_size: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"MUI mode '{mode}' is not valid; use one of {', '.join(MODES)}")
        self.top_ratio, self.mode, self.rho, self.vocab_size = float(top_ratio), mode, float(rho), vocab_size
        self.n_layers: int | None = None
        self.d_ff: int | None = None
        self._results: list[np.ndarray] = []
        self._kept: list[list[tuple[list[float], list[int]]]] = []  # [sample][layer] -> (values, neuron ids)
        self._pos: list[torch.Tensor] = []
        self._tok: list[torch.Tensor] = []
        self._adapter: Any = None

    def attach(self, hooks: HookSet, adapter: Any, batch: PassBatch) -> None:
        """Hook every layer's activation-function output; the scored positions are the response tokens."""
        self._adapter = adapter
        self.n_layers, self.d_ff = adapter.n_layers, adapter.d_ff
        rm = batch.response_mask & batch.attention_mask.bool()
        V = adapter.unembedding().shape[0] if self.vocab_size is None else min(self.vocab_size,
                                                                                adapter.unembedding().shape[0])
        self._pos, self._tok = [], []
        for b in range(rm.shape[0]):
            pos = rm[b].nonzero().flatten()
            tok = batch.input_ids[b, pos]
            keep = tok < V  # the authors' projection has no column for a token beyond vocab_size
            self._pos.append(pos[keep])
            self._tok.append(tok[keep])
        self._V = V
        self._kept = [[([], []) for _ in range(adapter.n_layers)] for _ in range(rm.shape[0])]
        for layer in range(adapter.n_layers):
            hooks.on_output(adapter.act_module(layer), self._hook(layer))

    def _hook(self, layer: int):
        def hook(out: Any) -> None:
            act = out.detach().half()  # activations[layer] = act[n][0].half()
            if not any(p.numel() for p in self._pos):
                return
            W = self._adapter.down_weight(layer)  # [d, F]; W_downᵀ = [F, d]
            U = self._adapter.unembedding()[: self._V]  # rows = vocabulary vectors; unembedding = W_Uᵀ[:, :V]
            F = act.shape[-1]
            for b, (pos, tok) in enumerate(zip(self._pos, self._tok)):
                if pos.numel() == 0:
                    continue
                a = act[b, pos.to(act.device)]  # [n, F] half
                if self.mode == "activation":
                    scores = a
                else:
                    proj = torch.matmul(W.t().float(), U[tok.to(U.device)].t().float().to(W.device)).half()  # [F, n]
                    scores = a * proj.t().to(a.device)  # half * half
                flat = scores.flatten()
                vals, idx = torch.topk(flat, min(STORED_PER_LAYER, flat.numel()))
                self._kept[b][layer] = (vals.float().cpu().tolist(), (idx % F).cpu().tolist())
        return hook

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Select each sample's key neurons from the kept entries, as the authors' selection functions do."""
        L, F = self.n_layers or 0, self.d_ff or 0
        for kept in self._kept:
            chosen: set[int] = set()
            if self.mode == "global_topk":
                entries = [(v, layer, i) for layer in range(L) for v, i in zip(*kept[layer])]
                ranked = sorted(entries, key=lambda e: e[0], reverse=True)  # stable: layer order, then topk order
                chosen = {layer * F + i for _, layer, i in ranked[: k_mui_eval(self.top_ratio, F, L)]}
            else:
                for layer in range(L):
                    vals, ids = kept[layer]
                    if not vals:
                        continue
                    ranked = sorted(zip(vals, ids), key=lambda e: e[0], reverse=True)
                    if self.mode == "topscore":
                        thr = ranked[0][0] * self.rho
                        for v, i in ranked:
                            if v < thr:
                                break
                            chosen.add(layer * F + i)
                    else:
                        chosen |= {layer * F + i for _, i in ranked[: k_mui_eval(self.top_ratio, F)]}
            self._results.append(np.array(sorted(chosen), dtype=np.int64))
        self._kept, self._pos, self._tok = [], [], []

    def results(self) -> list[np.ndarray]:
        """One sorted int64 array of flat neuron ids ``layer * d_ff + i`` per sample, in batch order."""
        return list(self._results)
