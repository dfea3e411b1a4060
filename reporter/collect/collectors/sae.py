"""MUI over sparse-autoencoder features (Cao et al. 2025, §3: "neurons or features"), on the same hooked pass.

For each SAE (one per layer, :mod:`reporter.models.sae`) and each sample, the feature
activations ``f[t, j]`` are computed at the sample's scored positions — the positions t whose
next token is a response token, as for neuron MUI — and feature j of that SAE is **key** when

    max_t f[t, j] >= rho * M,     M = max_{t, j} f[t, j]  (the sample's strongest feature there)

with ``rho`` = 0.9 by default (the paper uses 0.9 or 0.95). A sample whose features are all 0
there (M = 0) has no key feature. Task MUI(SAE) = |union of the samples' key features| /
(sum of the SAEs' widths), in percent; per SAE layer likewise.

How it is computed (:class:`SAECollector`): in each hooked module's hook the scored rows
[B*R, d] are gathered once, then the encoder runs **in chunks of features**, keeping only the
per-sample maximum over positions of each feature ([B, d_sae]), so a 131k-feature SAE at
batch 4 × 512 never materialises [tokens, d_sae]. The threshold test runs on the device;
nothing is moved to the host until after the pass. Precision: like neuron MUI, the
strongest features and those nearest the threshold (``_REFINE`` each) are re-scored in
float64 from the same activations, so the sets equal a float64 computation exactly unless more
than that many features fall inside one rounding band.

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> from reporter.instrument.batch import PassBatch
>>> from reporter.instrument.hooked_pass import hooked_pass
>>> from reporter.models.adapters import get_adapter
>>> from reporter.models.sae import SAE
>>> _ = torch.manual_seed(0)
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
...                                  num_attention_heads=2, num_key_value_heads=1, vocab_size=50))
>>> sae = SAE("random", 0, "resid_post", "standard", torch.randn(16, 64), torch.zeros(64), torch.zeros(16), None,
...           False, "")
>>> ids = torch.randint(0, 50, (2, 6)); am = torch.ones_like(ids); resp = am.bool()
>>> c = SAECollector([sae], rho=0.9)
>>> _ = hooked_pass(m, get_adapter(m), PassBatch(ids, am, resp), [c])
>>> [len(s) >= 1 for s in c.results()]
[True, True]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ...config import Profile
from ...errors import UserError
from ...instrument.batch import PassBatch
from ...instrument.hooks import HookSet
from ...models.sae import SAE, activate, encode, hook_module, load_saes
from ...store.layout import FEATURES
from .base import BatchContext, TaskContext, register_collector
from .keysets import KeySetPlugin

__all__ = ["SAECollector", "SAEPlugin", "key_features", "TOP_FEATURES"]

_REFINE = 32  # features re-scored in float64 at the top and near the threshold, per sample and SAE
_CHUNK_ELEMENTS = 1 << 22  # at most this many [rows x features] encoder outputs at a time
#: how many of a task's most often key features the summary lists
TOP_FEATURES = 10


def _first(x: Any) -> torch.Tensor:
    return x[0] if isinstance(x, (tuple, list)) else x


@dataclass
class _State:
    B: int
    R: int
    T: int
    rows: torch.Tensor  # [B*R] row of the flattened [B*T, d] activations per slot
    pad: torch.Tensor | None  # [B, R] True on padding slots
    has: torch.Tensor  # [B] bool: the sample has scored positions
    keep: list[torch.Tensor | None] = field(default_factory=list)  # per SAE: [B, d_sae] bool


class SAECollector:
    """Key SAE features per sample during :func:`reporter.instrument.hooked_pass.hooked_pass`.

    :meth:`results` gives one sorted int64 array per sample of flat ids ``offset[s] + j`` (SAE
    s, feature j; ``offsets`` are the cumulative widths). See the module docstring.
    """

    def __init__(self, saes: Sequence[SAE], rho: float = 0.9, *, refine: bool = True,
                 chunk_elements: int = _CHUNK_ELEMENTS):
        if not 0 < rho <= 1:
            raise ValueError(f"SAE rho must be in (0, 1], got {rho}")
        if not saes:
            raise ValueError("SAECollector needs at least one SAE")
        self.saes, self.rho, self.refine, self.chunk_elements = list(saes), float(rho), refine, int(chunk_elements)
        self.offsets = np.cumsum([0] + [s.d_sae for s in self.saes]).tolist()
        self._on_device: dict[tuple[int, torch.device], SAE] = {}
        self._results: list[np.ndarray] = []
        self._st: _State | None = None

    @property
    def n_features(self) -> int:
        """The total number of features over the SAEs."""
        return int(self.offsets[-1])

    def attach(self, hooks: HookSet, adapter: Any, batch: PassBatch) -> None:
        """Gather the scored positions once; hook each SAE's module."""
        sl = batch.scored_slots()  # one host sync per batch, before the forward
        B, T = batch.input_ids.shape
        st = _State(B=B, R=sl.R, T=T, rows=sl.rows, pad=None, has=sl.counts > 0, keep=[None] * len(self.saes))
        self._st = st
        if sl.R == 0:
            return
        st.pad = None if bool(sl.valid.all()) else ~sl.valid.view(B, sl.R)
        for i, sae in enumerate(self.saes):
            module, where = hook_module(adapter, sae)
            fn = self._make_hook(i)
            if where == "input":
                hooks.on_input(module, fn)
            else:
                hooks.on_output(module, lambda out, fn=fn: fn(_first(out)))

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Move the batch's key features to the host, one flat-id array per sample."""
        st, self._st = self._st, None
        if st is None:
            raise RuntimeError("SAECollector.after_forward called without attach")
        if st.R == 0:
            self._results.extend(np.empty(0, dtype=np.int64) for _ in range(st.B))
            return
        if any(k is None for k in st.keep):
            raise RuntimeError("SAE: a hook did not fire; the hook point does not match this model's forward")
        has = st.has.cpu().numpy()
        per: list[list[np.ndarray]] = [[] for _ in range(st.B)]
        for i, keep in enumerate(st.keep):
            k = keep.cpu().numpy()  # type: ignore[union-attr]
            for b in range(st.B):
                per[b].append(np.flatnonzero(k[b]).astype(np.int64) + self.offsets[i])
        self._results.extend(np.concatenate(p) if h else np.empty(0, dtype=np.int64) for p, h in zip(per, has))

    def results(self) -> list[np.ndarray]:
        """One sorted int64 array of flat feature ids per sample, in batch order."""
        return list(self._results)

    # -- inside the pass
    def _sae(self, i: int, device: torch.device) -> SAE:
        key = (i, device)
        if key not in self._on_device:
            self._on_device[key] = self.saes[i].to(device)
        return self._on_device[key]

    def _make_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(x: torch.Tensor) -> None:
            st = self._st
            if st is None:
                raise RuntimeError("SAECollector: a hook fired outside attach/after_forward")
            sae = self._sae(i, x.device)
            B, R, D = st.B, st.R, sae.d_sae
            a = x.reshape(B * st.T, -1).index_select(0, st.rows.to(x.device))  # [B*R, d]
            pad = None if st.pad is None else st.pad.to(x.device)[:, :, None]
            fmax = torch.empty(B, D, dtype=x.dtype, device=x.device)
            chunk = max(256, self.chunk_elements // max(1, B * R))
            for c0 in range(0, D, chunk):
                f = encode(sae, a, slice(c0, min(D, c0 + chunk))).view(B, R, -1)
                if pad is not None:
                    f = f.masked_fill(pad, float("-inf"))
                fmax[:, c0:c0 + f.shape[2]] = f.amax(1)
            M = fmax.amax(1)
            keep = (fmax >= self.rho * M[:, None]) & (M > 0)[:, None]
            if self.refine:
                self._refine(sae, a.view(B, R, -1), pad, fmax, keep)
            st.keep[i] = keep
        return hook

    def _refine(self, sae: SAE, a: torch.Tensor, pad: torch.Tensor | None, fmax: torch.Tensor,
                keep: torch.Tensor) -> None:
        """Decide the strongest features and those nearest the threshold in float64."""
        xd = torch.float32 if a.device.type == "mps" else torch.float64
        r = min(_REFINE, fmax.shape[1])
        M = fmax.amax(1, keepdim=True)
        top = fmax.topk(r, dim=1).indices
        near = (fmax - self.rho * M).abs().topk(r, dim=1, largest=False).indices
        cand = torch.cat([top, near], 1)  # [B, 2r]
        W = sae.W_enc.t().index_select(0, cand.reshape(-1)).view(*cand.shape, -1).to(xd)  # [B, 2r, d]
        x = a.to(xd) - (sae.b_dec.to(xd) if sae.apply_b_dec_to_input else 0)
        pre = torch.einsum("brd,bcd->brc", x, W) + sae.b_enc.to(xd)[cand][:, None, :]
        f = activate(sae, pre, cand[:, None, :])
        if pad is not None:
            f = f.masked_fill(pad, float("-inf"))
        ex = f.amax(1)  # [B, 2r] exact best activation of each candidate
        Me = ex[:, :r].amax(1, keepdim=True)
        keep.scatter_(1, cand, (ex >= self.rho * Me) & (Me > 0))


def key_features(model: torch.nn.Module, saes: Sequence[SAE], input_ids: Any, attention_mask: Any,
                 response_mask: Any, *, rho: float = 0.9) -> list[np.ndarray]:
    """Key-feature set of every sample (flat ids over ``saes``), from one hooked forward pass.

    >>> import torch
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from reporter.models.sae import SAE
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_inner=32, n_head=2, vocab_size=50))
    >>> sae = SAE("r", 1, "mlp_out", "standard", torch.randn(16, 40), torch.zeros(40), torch.zeros(16), None, True, "")
    >>> ids = torch.randint(0, 50, (1, 5)); am = torch.ones_like(ids)
    >>> key_features(m, [sae], ids, am, torch.zeros_like(ids, dtype=torch.bool))[0].size   # no response
    0
    """
    from ...instrument.hooked_pass import hooked_pass
    from ...models.adapters import get_adapter

    c = SAECollector(saes, rho=rho)
    hooked_pass(model, get_adapter(model), PassBatch(torch.as_tensor(input_ids), torch.as_tensor(attention_mask),
                                                     torch.as_tensor(response_mask).bool()), [c])
    return c.results()


def utilization_by_sae(sets: Sequence[np.ndarray], offsets: Sequence[int]) -> tuple[float, list[float]]:
    """(overall, per SAE) share of features key to at least one sample, as fractions.

    >>> utilization_by_sae([np.array([0, 5]), np.array([1])], [0, 4, 8])
    (0.375, [0.5, 0.25])
    """
    union = np.unique(np.concatenate([np.asarray(s, np.int64) for s in sets])) if sets else np.empty(0, np.int64)
    total = int(offsets[-1])
    per = [float(((union >= lo) & (union < hi)).sum()) / (hi - lo) for lo, hi in zip(offsets[:-1], offsets[1:])]
    return (union.size / total if total else 0.0), per


@register_collector
class SAEPlugin(KeySetPlugin):
    """Key SAE features of every item (``features.npz``) and the task's MUI over features."""

    name = "sae"

    switch = "with mui.unit: sae or both (MUI on), given SAEs (mui.sae, or a model's sae:)"
    label = "MUI (SAE features)"
    artifact = FEATURES

    def __init__(self) -> None:
        self._cache: dict[str, list[SAE]] = {}

    def enabled(self, profile: Profile) -> bool:
        """On when the profile's (or a model's) MUI unit includes SAE features."""
        return profile.mui.enabled and profile.mui.unit in ("sae", "both")

    def check_model(self, lm: Any, profile: Profile) -> None:
        """Load this model's SAEs and check that each fits it (hook point exists, ``d_in`` = hidden size)."""
        self._load(lm, profile)

    def saes(self, task: TaskContext) -> list[SAE]:
        """The SAEs of this model (its own ``sae:`` or the profile's ``mui.sae``), loaded once."""
        return self._load(task.lm, task.profile)

    def _load(self, lm: Any, profile: Profile) -> list[SAE]:
        cfg = getattr(lm.spec, "sae", None) or profile.mui.sae
        if cfg is None:
            raise UserError(f"mui.unit is {profile.mui.unit} but model '{lm.spec.name}' has no SAE: give "
                            "mui.sae in the profile or sae: for the model in the models YAML")
        key = repr(cfg)
        if key not in self._cache:
            self._cache.clear()
            self._cache[key] = load_saes(cfg)
        out = []
        for s in self._cache[key]:
            module, _ = hook_module(lm.adapter, s)  # the one-line errors: layer missing, widths differ
            device = next(module.parameters(), next(lm.model.parameters())).device
            if s.W_enc.device != device:  # once per model, not once per batch
                s = s.to(device)
            out.append(s)
        self._cache[key] = out
        return out

    def for_batch(self, batch: BatchContext) -> SAECollector:
        """A fresh collector over this model's SAEs."""
        return SAECollector(self.saes(batch.task), rho=self._rho(batch.task))

    def finish_task(self, task: TaskContext, samples: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Merge into ``features.npz``; MUI over features (overall, per SAE layer), the most often key features."""
        ordered = self.merged_sets(task)
        saes = self.saes(task)
        offsets = np.cumsum([0] + [s.d_sae for s in saes]).tolist()
        total, per = utilization_by_sae(ordered, offsets)
        counts: dict[int, int] = {}
        for s in ordered:
            for f in s.tolist():
                counts[f] = counts.get(f, 0) + 1
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_FEATURES]
        which = np.searchsorted(offsets, [f for f, _ in top], side="right") - 1
        return {"mui_sae": 100.0 * total, "mui_sae_per_layer": [100.0 * v for v in per],
                "mui_sae_settings": {"rho": self._rho(task), "n_samples": len(ordered),
                                     "saes": [s.describe() for s in saes]},
                "sae_top_features": [{"layer": saes[w].layer, "hook": saes[w].hook, "feature": int(f - offsets[w]),
                                      "share": n / max(1, len(ordered))} for (f, n), w in zip(top, which)]}

    @staticmethod
    def _rho(task: TaskContext) -> float:
        cfg = getattr(task.lm.spec, "sae", None) or task.profile.mui.sae
        return float(cfg.rho) if cfg is not None else 0.9

    def _meta(self, task: TaskContext) -> dict[str, Any]:
        saes = self.saes(task)
        return {"model": task.lm.spec.name, "unit": "sae", "n_layers": len(saes), "d_ff": max(s.d_sae for s in saes),
                "rho": self._rho(task), "saes": [s.describe() for s in saes],
                "dtype": str(task.lm.dtype).replace("torch.", "")}
