"""LPP — Latent Performance Profiling (arXiv 2605.30018): task-agnostic intrinsic metrics.

Three numbers per model, computed on a corpus of ordinary texts:

* **entropy floor** (EF): for each prefix length m of the schedule, the entropy of the
  next-token distribution at the last position of the prefix (position m-1), divided by
  ln|V| and averaged over texts; EF = min over m.
* **participation ratio** (PR) and **effective rank** (ER) of the covariance spectrum of the
  LAST-layer hidden states of all tokens at positions < m (all texts stacked, N x d),
  normalised by min(N, d); reported as the max over m, with the raw values as well.

Design decisions (documented here once):

* *Which hidden state.* "Last-layer hidden states" are the output of the model's final norm
  (``adapter.final_norm()``), i.e. exactly ``output_hidden_states[-1]`` of a Hugging Face
  model (HF applies the final norm to the last element; checked for llama, qwen2, gemma2,
  gpt2, gpt_neox, opt). This is what the official code stacks and what the unembedding
  reads. ``layers="all"`` adds a depth profile over the decoder layers' outputs (residual
  stream before the final norm, ``hidden_states[l + 1]``) at m = context.
* *One pass for every prefix.* Attention is causal, so the hidden state at position t and
  the logits at t are the same whether the text is cut after t or not: one forward pass
  per batch of texts (right padded) gives every prefix; positions are counted from the
  first real token, so a left-padded shared pass (:class:`LPPCollector`) gives the same
  values. Prefix m uses the hidden states at positions 0..m-1 and the logits at m-1.
* *Texts.* Texts with fewer than ``min_tokens`` tokens (default 128, as the official code)
  are skipped, the rest cut to ``context`` tokens (default 200). A text shorter than a
  prefix m contributes all its tokens to H_m; its entropy at m is, with
  ``short_texts="official"`` (default), the entropy at its own last token, as the official
  code does, and with ``"exclude"`` nothing (EF_m then averages over the texts that reach m;
  ``per_prefix[i]["n_texts"]`` says how many texts each EF_m averages).
* *Spectrum.* :mod:`reporter.metrics.spectra` (float64 covariance eigenvalues on the device).
* *Normalisation.* PR and ER are divided by min(N, d) (the spec); raw values are reported
  too, as the max over m (``pr_raw``/``er_raw``), with the m where each maximum occurs.
* *|V|* is the width of the logits (the model's output vocabulary, padding rows included),
  as ``log_softmax`` over the logits sees it.
* *Outliers.* A few "massive activation" dimensions can dominate the covariance; the
  report carries the top-1/top-5 per-dimension variance shares (at m = context) and a
  robust PR/ER (first position of every text dropped; the 5 highest-variance dimensions
  clipped to mean +- 3 sigma), max over m like the headline numbers.

Default corpus: CoQA stories shipped offline (:func:`reporter.tasks.corpora.lpp_corpus`).
The :class:`LPPPlugin` writes a model's signature to ``lpp.json`` (the key ``lpp`` of its
results.json entry).

>>> sig = run_lpp(lm, LPPConfig(n_texts=3, context=40, min_tokens=40))
>>> sig["n_texts"], 0 < sig["entropy_floor"] <= 1, [p["m"] for p in sig["per_prefix"]][:3]
(3, True, [4, 8, 12])
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from ...config import LPPConfig, Profile
from ...errors import UserError, user_path
from ...instrument.batch import PassBatch
from ...instrument.hooked_pass import hooked_pass, input_device
from ...instrument.hooks import HookSet
from ...metrics.spectra import (
    StreamingCovariance,
    covariance_eigenvalues,
    entropy,
    pr_er,
    robust_pr_er,
    variance_shares,
)
from ...store.atomic import write_json
from ...store.checked import document_ok
from ...store.digest import corpus_for_hash
from ...store.layout import LPP
from ...tasks.corpora import BUILTIN_CORPORA, corpus_sha256, lpp_corpus
from .base import CollectorPlugin, register_collector

__all__ = ["LPPCollector", "LPPPlugin", "latent_profile", "prefix_schedule", "run_lpp"]


def prefix_schedule(context: int = LPPConfig.context, step: int | None = None) -> list[int]:
    """m = step, 2*step, ..., up to context (context itself always included); step = context // 10.

    >>> prefix_schedule(200)
    [20, 40, 60, 80, 100, 120, 140, 160, 180, 200]
    >>> prefix_schedule(25, 10)
    [10, 20, 25]
    """
    step = step or max(1, context // 10)
    sched = list(range(step, context + 1, step))
    return sched if sched and sched[-1] == context else sched + [context]


# ----------------------------------------------------------------------------- the collector
def _layer_out(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


class LPPCollector:
    """Collects what LPP needs from hooked passes (the :class:`reporter.instrument.hooked_pass.Collector` protocol).

    Keeps, on the device, the final-norm output (= ``hidden_states[-1]``) of every real token at
    text position < ``context`` (positions counted from the first non-pad token, so left or
    right padding both work), and in ``after_forward`` the normalised entropy of the
    next-token distribution at positions m-1 for m in the schedule. Every sequence of the
    pass counts as a text (prompt and response alike); sequences with fewer than
    ``min_tokens`` real tokens are ignored. ``layers="all"`` also keeps a running float64
    covariance of each decoder layer's output (positions < context). Call :meth:`result`
    when all batches have run.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from reporter.models.adapters import get_adapter
    >>> torch.manual_seed(0) and None
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    >>> col = LPPCollector(context=8, step=4, min_tokens=1)
    >>> ids = torch.randint(0, 50, (3, 8))
    >>> _ = hooked_pass(m, get_adapter(m), PassBatch(ids, torch.ones_like(ids), torch.zeros_like(ids).bool()), [col])
    >>> r = col.result(); r["n_texts"], [p["m"] for p in r["per_prefix"]], 0 < r["entropy_floor"] <= 1
    (3, [4, 8], True)
    """

    def __init__(self, context: int = LPPConfig.context, step: int | None = None, *,
                 schedule: Sequence[int] | None = None, layers: str = "last", min_tokens: int = 1,
                 n_clip: int = 5, n_sigma: float = 3.0, short_texts: str = "official") -> None:
        if layers not in ("last", "all"):
            raise ValueError("layers must be 'last' or 'all'")
        if short_texts not in ("official", "exclude"):
            raise ValueError("short_texts must be 'official' or 'exclude'")
        self.short_texts = short_texts
        self.context = int(context)
        self.schedule = sorted({int(m) for m in schedule}) if schedule else prefix_schedule(self.context, step)
        if self.schedule[0] < 1 or self.schedule[-1] > self.context:
            raise ValueError(f"prefix lengths must lie in 1..context={self.context}")
        self.step = step or max(1, self.context // 10)
        self.layers, self.min_tokens = layers, int(min_tokens)
        self.n_clip, self.n_sigma = n_clip, n_sigma
        self.n_texts = 0
        self._rows: list[torch.Tensor] = []  # [n_b, d] float32 on the device
        self._pos: list[torch.Tensor] = []
        self._ent: list[torch.Tensor] = []  # [k, 3] (text id, m, entropy) on the host
        self._lengths: list[int] = []
        self._layer_cov: list[StreamingCovariance] = []
        self._cur: dict[str, torch.Tensor] = {}

    # -- protocol
    def attach(self, hooks: HookSet, adapter: Any, batch: PassBatch) -> None:
        """Hook the final norm (and with ``layers="all"`` every decoder layer) to keep the real tokens' states."""
        am = batch.attention_mask.bool()
        pos = am.long().cumsum(-1) - 1
        length = am.sum(-1)
        keep = length >= self.min_tokens
        valid = am & keep[:, None] & (pos < self.context)
        kept = int(keep.sum())  # one small host sync per batch, before the forward
        first = self.n_texts
        self.n_texts += kept
        self._lengths += length[keep].clamp(max=self.context).tolist()
        tid = (keep.long().cumsum(0) - 1 + first)[:, None].expand_as(pos)
        self._cur = {"valid": valid, "pos": pos, "tid": tid, "length": length.clamp(max=self.context)[:, None]}
        if kept == 0:
            return

        def keep_final(out: Any) -> None:
            h = _layer_out(out)
            v = valid.to(h.device)
            self._rows.append(h[v].float())
            self._pos.append(pos.to(h.device)[v])

        hooks.on_output(adapter.final_norm(), keep_final)
        if self.layers == "all":
            if not self._layer_cov:
                self._layer_cov = [StreamingCovariance() for _ in range(adapter.n_layers)]
            for li, layer in enumerate(adapter.layers):
                hooks.on_output(layer, self._keep_layer(li, valid))

    def _keep_layer(self, li: int, valid: torch.Tensor) -> Callable[[Any], None]:
        def keep(out: Any) -> None:
            h = _layer_out(out)
            self._layer_cov[li].add(h[valid.to(h.device)])
        return keep

    def logit_positions(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """The positions of a right-padded batch whose logits :meth:`after_forward` reads: the last
        position of every scheduled prefix, and (``short_texts="official"``) each short text's last
        one. Pass them to the forward as ``logits_to_keep``: the LM head then runs on those alone.

        >>> LPPCollector(20, 10).logit_positions(torch.tensor([[1] * 20, [1] * 15 + [0] * 5])).tolist()
        [9, 14, 19]
        """
        T = attention_mask.shape[1]
        cols = {m - 1 for m in self.schedule if m <= T}
        if self.short_texts == "official":
            lengths = attention_mask.bool().sum(-1).clamp(max=self.context).tolist()
            cols |= {int(n) - 1 for n in lengths if 0 < n < self.schedule[-1]}
        return torch.tensor(sorted(cols), dtype=torch.long, device=attention_mask.device)

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Entropy of the next-token distribution at the last position of every scheduled prefix.

        ``logits`` [B, T, V], or [B, K, V] for the K positions of :meth:`logit_positions`.
        """
        cur, self._cur = self._cur, {}
        if not cur:
            return
        valid, pos, tid, length = (cur[k].to(logits.device) for k in ("valid", "pos", "tid", "length"))
        if logits.shape[1] != valid.shape[1]:
            cols = self.logit_positions(batch.attention_mask).to(logits.device)
            if cols.numel() != logits.shape[1]:
                raise ValueError("LPPCollector: the logits cover neither every position nor logit_positions()")
            valid, pos, tid = valid[:, cols], pos[:, cols], tid[:, cols]
        sched = torch.tensor(self.schedule, device=logits.device)
        at = valid & torch.isin(pos + 1, sched)
        if bool(at.any()):
            ent = entropy(logits[at])
            self._ent.append(torch.stack([tid[at].double(), (pos[at] + 1).double(), ent.double()], dim=1).cpu())
        if self.short_texts == "official":  # a text shorter than m counts at m with its last token's entropy
            last = valid & (pos == length - 1) & (length < self.schedule[-1])
            if bool(last.any()):
                ent = entropy(logits[last]).double().cpu()
                for t, n, e in zip(tid[last].tolist(), length.expand_as(pos)[last].tolist(), ent.tolist()):
                    extra = [m for m in self.schedule if m > n]
                    self._ent.append(torch.tensor([[t, m, e] for m in extra], dtype=torch.float64))

    # -- results
    def hidden_states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All kept final-norm rows [N, d] (float32, on the device) and their text positions [N]."""
        if not self._rows:
            return torch.zeros(0, 0), torch.zeros(0, dtype=torch.long)
        dev = self._rows[0].device
        return torch.cat([r.to(dev) for r in self._rows]), torch.cat([p.to(dev) for p in self._pos])

    def result(self) -> dict[str, Any]:
        """The LPP signature (see :func:`latent_profile` for the fields)."""
        H, pos = self.hidden_states()
        ent = torch.cat(self._ent) if self._ent else torch.zeros(0, 3, dtype=torch.float64)
        per_prefix = []
        for m in self.schedule:
            sel = pos < m
            Hm = H[sel]
            met = pr_er(covariance_eigenvalues(Hm), *Hm.shape) if Hm.numel() else pr_er(torch.zeros(0), 0, 0)
            rob = robust_pr_er(H[sel & (pos >= 1)], self.n_clip, self.n_sigma) if H.numel() else met
            e = ent[ent[:, 1] == m, 2]
            per_prefix.append({"m": m, "entropy": float(e.mean()) if e.numel() else float("nan"),
                               "n_texts": int(e.numel()), "n_tokens": int(sel.sum()), **met,
                               "robust_pr": rob["pr"], "robust_er": rob["er"],
                               "robust_pr_raw": rob["pr_raw"], "robust_er_raw": rob["er_raw"]})
        top1, top5 = variance_shares(H) if H.shape[0] >= 2 else (float("nan"), float("nan"))

        def best(key: str, fn: Callable[..., Any] = max) -> tuple[float, int | None]:
            vals = [(p[key], p["m"]) for p in per_prefix if not math.isnan(p[key])]
            if not vals:
                return float("nan"), None
            return fn(vals, key=lambda x: x[0])

        ef, ef_m = best("entropy", min)
        pr, pr_m = best("pr")
        er, er_m = best("er")
        out = {
            "entropy_floor": ef, "entropy_floor_m": ef_m,
            "participation_ratio": pr, "participation_ratio_m": pr_m,
            "effective_rank": er, "effective_rank_m": er_m,
            "pr_raw": best("pr_raw")[0], "er_raw": best("er_raw")[0],
            "top1_var_share": top1, "top5_var_share": top5,
            "robust": {"participation_ratio": best("robust_pr")[0], "effective_rank": best("robust_er")[0],
                       "pr_raw": best("robust_pr_raw")[0], "er_raw": best("robust_er_raw")[0],
                       "n_clip": self.n_clip, "n_sigma": self.n_sigma},
            "per_prefix": per_prefix,
            "n_texts": self.n_texts, "n_tokens": int(H.shape[0]), "d_model": int(H.shape[1]) if H.ndim == 2 else 0,
            "context": self.context, "step": self.step, "schedule": list(self.schedule),
            "min_tokens": self.min_tokens, "hidden": "final_norm_output", "short_texts": self.short_texts,
        }
        if self.layers == "all":
            out["per_layer"] = [{"layer": li, **c.metrics()} for li, c in enumerate(self._layer_cov)]
        return out


def _encode(tokenizer: Any, texts: Iterable[str], min_tokens: int, context: int) -> list[list[int]]:
    out = []
    for t in texts:
        ids = tokenizer(t, add_special_tokens=True)["input_ids"]
        if len(ids) >= min_tokens:
            out.append(list(ids[:context]))
    return out


def latent_profile(model: torch.nn.Module, tokenizer: Any, texts: Sequence[str], *, context: int = LPPConfig.context,
                   step: int | None = None, layers: str = "last", min_tokens: int = LPPConfig.min_tokens,
                   batch_size: int = 8, schedule: Sequence[int] | None = None, adapter: Any = None,
                   short_texts: str = LPPConfig.short_texts) -> dict[str, Any]:
    """The LPP latent signature of ``model`` on ``texts``: one forward pass per batch gives every prefix.

    Texts with fewer than ``min_tokens`` tokens are skipped, the rest cut to ``context``
    tokens and run right-padded in batches of ``batch_size``. Prefixes m = step, 2*step, ...,
    context (``step`` default context // 10), or ``schedule``.

    Returns ``entropy_floor`` (min_m EF_m), ``participation_ratio`` / ``effective_rank``
    (max_m, normalised by min(N, d)), ``pr_raw`` / ``er_raw`` (max_m of the raw values), the
    m of each extreme (``*_m``), ``top1_var_share`` / ``top5_var_share`` (at m = context),
    ``robust`` {participation_ratio, effective_rank, pr_raw, er_raw} (max_m),
    ``per_prefix`` [{m, entropy, n_texts, n_tokens, pr, er, pr_raw, er_raw, robust_*}],
    ``per_layer`` [{layer, pr, er, pr_raw, er_raw, top1_var_share, top5_var_share}] (decoder
    layer outputs at m = context; only with ``layers="all"``), ``n_texts``, ``n_tokens``,
    ``context``, ``step``, ``schedule``, ``hidden``.

    >>> p = latent_profile(lm.model, lm.tokenizer, lpp_corpus(4, 64, tokenizer=lm.tokenizer), context=64)
    >>> sorted(k for k in p if k in ("entropy_floor", "participation_ratio", "effective_rank"))
    ['effective_rank', 'entropy_floor', 'participation_ratio']
    """
    from ...models.adapters import get_adapter

    adapter = adapter or get_adapter(model)
    seqs = _encode(tokenizer, texts, min_tokens, context)
    if not seqs:
        raise UserError(f"LPP: none of the {len(texts)} texts has at least {min_tokens} tokens")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    col = LPPCollector(context, step, schedule=schedule, layers=layers, min_tokens=1, short_texts=short_texts)
    dev = input_device(model)
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i:i + batch_size]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        am = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, s in enumerate(chunk):
            ids[r, :len(s)] = torch.tensor(s)
            am[r, :len(s)] = 1
        batch = PassBatch(ids, am, torch.zeros_like(am, dtype=torch.bool)).to(dev)
        hooked_pass(model, adapter, batch, [col], logits_to_keep=col.logit_positions(batch.attention_mask))
    out = col.result()
    out["min_tokens"] = min_tokens
    return out


def run_lpp(lm: Any, settings: LPPConfig, *, batch_size: int | None = None) -> dict[str, Any]:
    """:func:`latent_profile` of a loaded model on its LPP corpus, with the settings recorded
    (``lpp.json``, the ``lpp`` block of a model in results.json).

    Texts are raw (no chat template) for base and instruct models alike, as the official code.
    """
    texts = lpp_corpus(settings.n_texts, settings.min_tokens, tokenizer=lm.tokenizer, corpus=settings.corpus)
    bs = batch_size or getattr(lm.spec, "max_batch_size", None) or 8
    out = latent_profile(lm.model, lm.tokenizer, texts, context=settings.context, step=settings.step,
                         layers=settings.layers, min_tokens=settings.min_tokens, batch_size=bs, adapter=lm.adapter,
                         short_texts=settings.short_texts)
    out.update(corpus=settings.corpus, n_texts_requested=settings.n_texts, dtype=str(lm.dtype).replace("torch.", ""))
    return out


@register_collector
class LPPPlugin(CollectorPlugin):
    """The LPP latent signature of a model on its corpus (``lpp.json``): a model-scope collector."""

    name = "lpp"

    switch = "unless lpp: {enabled: false}"
    label = "LPP"

    def enabled(self, profile: Profile) -> bool:
        """On unless the profile says ``lpp: {enabled: false}``."""
        return profile.lpp.enabled

    def run_model(self, lm: Any, profile: Profile, model_dir: Path) -> None:
        """Write ``lpp.json``."""
        write_json(model_dir / LPP, run_lpp(lm, profile.lpp))

    def model_done(self, profile: Profile, model_dir: Path) -> bool:
        """Whether ``lpp.json`` reads back whole, as its schema says."""
        return document_ok(model_dir / LPP, "lpp")

    def model_cache_key(self, profile: Profile) -> Any:
        """The LPP settings (the corpus by content: a local file by its bytes, a built-in or hub corpus by its texts;
        its texts and lengths, the probes): the signature depends on nothing else. None (computed, not cached) for a
        corpus that cannot be read now: the pass then fails with why.
        """
        key = {"lpp": corpus_for_hash(dataclasses.asdict(profile.lpp)), "version": 1}
        corpus = profile.lpp.corpus
        if corpus in BUILTIN_CORPORA or not user_path(corpus).is_file():  # a local file counts by its bytes above
            key["corpus_sha256"] = corpus_sha256(corpus)
            if key["corpus_sha256"] is None:  # cannot be read now: nothing to key on, never taken from the cache
                return None
        return key
