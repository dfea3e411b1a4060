"""Spectra of hidden states and next-token entropy: the maths of the LPP latent signature.

Definitions (Latent Performance Profiling, arXiv 2605.30018):

* **participation ratio** PR = (sum lambda)^2 / sum lambda^2 and **effective rank**
  ER = exp(entropy of lambda / sum lambda) of the eigenvalues lambda of the covariance of the
  hidden states H (N x d), each also normalised by min(N, d);
* **entropy** of a next-token distribution divided by ln|V| (in [0, 1]).

Eigenvalues come from the covariance (centred, divided by N - 1) in float64 on the device of
the hidden states, from the smaller of the two Gram matrices (N x N when N <= d, else d x d),
the same non-zero spectrum as S^2/(N-1) of the SVD; eigenvalues below
``max(N, d) * eps * lambda_max`` count as zero. How LPP collects H is
:mod:`reporter.collect.collectors.lpp`.

>>> H = torch.tensor([[1., 0.], [-1., 0.], [0., 1.], [0., -1.]])
>>> participation_ratio(H), effective_rank(H)
(1.0, 1.0)
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch


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


def pr_er(ev: torch.Tensor, n: int, d: int) -> dict[str, float]:
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
    return pr_er(covariance_eigenvalues(X), *X.shape)["pr" if normalize else "pr_raw"]


def effective_rank(H, normalize: bool = True) -> float:
    """ER = exp(entropy of lambda / sum lambda) of the covariance spectrum of ``H``, / min(N, d).

    Zero eigenvalues are left out of the entropy (0 ln 0 = 0).

    >>> round(effective_rank(np.diag([1., 1., 1., 1.]) - 0.25, normalize=False), 6)  # 3 equal eigenvalues
    3.0
    """
    X = _as_f64(H)
    return pr_er(covariance_eigenvalues(X), *X.shape)["er" if normalize else "er_raw"]


#: :func:`entropy` works on at most about this many elements of the distribution at a time (32 MB in float64)
ENTROPY_ELEMENTS = 1 << 22


def entropy(logits: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Next-token entropy over the last dimension divided by ln|V| (in [0, 1]), computed in ``dtype``.

    Stable through ``log_softmax``; ``-inf`` logits (masked tokens) contribute 0. float64 by
    default (LPP only evaluates it at the few schedule positions, so the cost is negligible).
    Rows are taken :data:`ENTROPY_ELEMENTS` // |V| at a time (each row's arithmetic is its own, so
    the result does not depend on it): with Gemma-3's 262k-token vocabulary, a batch's schedule
    positions in float64 made a demo's peak memory (a few temporaries of 2 MB per row at once).

    >>> [round(x, 9) for x in entropy(torch.zeros(2, 8)).tolist()]  # uniform
    [1.0, 1.0]
    >>> abs(float(entropy(torch.tensor([0., -1e4, -1e4])))) < 1e-9  # one-hot
    True
    """
    V = logits.shape[-1]
    flat = logits.reshape(-1, V)
    out = torch.empty(flat.shape[0], dtype=dtype, device=logits.device)
    step = max(1, ENTROPY_ELEMENTS // max(1, V))
    for a in range(0, flat.shape[0], step):
        logp = torch.log_softmax(flat[a:a + step].to(dtype), dim=-1)
        p = logp.exp()
        out[a:a + step] = -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1)
    return (out / math.log(V)).reshape(logits.shape[:-1])


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


def robust_pr_er(H: torch.Tensor, n_clip: int = 5, n_sigma: float = 3.0) -> dict[str, float]:
    """PR and ER (see :func:`pr_er`) of ``H`` with its highest-variance dimensions clipped."""
    X = clip_top_dims(H, n_clip, n_sigma)
    return pr_er(covariance_eigenvalues(X), *X.shape)


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
    m = robust_pr_er(X, n_clip, n_sigma)
    if normalize:
        return {"participation_ratio": m["pr"], "effective_rank": m["er"], "pr_raw": m["pr_raw"], "er_raw": m["er_raw"]}
    return {"participation_ratio": m["pr_raw"], "effective_rank": m["er_raw"], "pr_raw": m["pr_raw"],
            "er_raw": m["er_raw"]}



class StreamingCovariance:
    """Running d x d covariance in float64 (shifted by the first batch's mean against cancellation).

    >>> sc = StreamingCovariance(); sc.add(torch.tensor([[1., 0.], [-1., 0.]])); sc.add(torch.tensor([[0., 2.], [0., -2.]]))
    >>> [round(x, 4) for x in sc.cov().diagonal().tolist()]
    [0.6667, 2.6667]
    """

    def __init__(self) -> None:
        self.n, self.d = 0, 0
        self.shift = self.s = self.G = torch.zeros(0, dtype=torch.float64)

    def add(self, X: torch.Tensor) -> None:
        """Add the rows of ``X`` (N x d)."""
        if X.shape[0] == 0:
            return
        X = X.to(torch.float64)
        if self.n == 0:
            self.shift = X.mean(0)
            self.d = X.shape[1]
            self.s = torch.zeros_like(self.shift)
            self.G = X.new_zeros(self.d, self.d)
        Y = X - self.shift
        self.n += X.shape[0]
        self.s += Y.sum(0)
        self.G += Y.T @ Y

    def cov(self) -> torch.Tensor:
        """The covariance of every row added so far (divided by N - 1)."""
        mu = self.s / self.n
        return (self.G - self.n * torch.outer(mu, mu)) / (self.n - 1)

    def metrics(self) -> dict[str, float]:
        """PR, ER (normalised and raw) and the top-1 / top-5 variance shares of the rows added so far."""
        if self.n < 2:
            nan = float("nan")
            return {"pr": nan, "er": nan, "pr_raw": nan, "er_raw": nan, "top1_var_share": nan, "top5_var_share": nan}
        C = self.cov()
        ev = torch.linalg.eigvalsh(C).flip(0).clamp_min(0)
        ev = torch.where(ev <= ev[0] * max(self.n, self.d) * torch.finfo(torch.float64).eps, torch.zeros_like(ev), ev)
        v = C.diagonal().clamp_min(0).sort(descending=True).values
        tot = float(v.sum())
        out = pr_er(ev, self.n, self.d)
        out.update(top1_var_share=float(v[0]) / tot if tot > 0 else float("nan"),
                   top5_var_share=float(v[:5].sum()) / tot if tot > 0 else float("nan"))
        return out
