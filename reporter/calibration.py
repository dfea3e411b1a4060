"""Calibration of multiple-choice answers: option probabilities, ECE and the Brier score.

For a multiple-choice prompt, the next-token distribution at the last prompt position
is the model's distribution over the answer letter. :func:`option_probs` sums, per option,
the probability of every token that spells its letter ("A", " A", ...) and renormalises
over the options; the max of that vector is the model's confidence, its argmax the
model's answer. :class:`CalibrationCollector` reads these from the shared hooked pass.

>>> import numpy as np
>>> probs = np.array([[0.9, 0.1], [0.6, 0.4]]); gold = np.array([0, 1])
>>> round(brier_score(probs, gold), 3), round(expected_calibration_error(probs.max(1), probs.argmax(1) == gold), 3)
(0.37, 0.35)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .forward import PassBatch
from .hooks import HookSet

LETTERS = "ABCDEFGHIJ"


def letter_token_ids(tokenizer, n_options: int, letters: str = LETTERS) -> list[list[int]]:
    """Token ids spelling each of the first ``n_options`` letters: the single-token encodings
    of "A", " A" (and "\\u2581A"-style variants the tokenizer produces for them), de-duplicated.

    A letter with no single-token spelling falls back to the first token of " A" (then "A").

    >>> class Tok:  # a toy tokenizer: one id per character
    ...     def encode(self, s, add_special_tokens=False): return [ord(c) for c in s]
    >>> letter_token_ids(Tok(), 2)
    [[65], [66]]
    """
    out: list[list[int]] = []
    for letter in letters[:n_options]:
        ids: list[int] = []
        fallback: list[int] = []
        for variant in (letter, " " + letter):
            enc = list(_encode(tokenizer, variant))
            if len(enc) == 1 and enc[0] not in ids:
                ids.append(enc[0])
            elif enc and not fallback:
                fallback = [enc[0]]
        out.append(ids or fallback)
    return out


def _encode(tokenizer, text: str) -> list[int]:
    try:
        return tokenizer.encode(text, add_special_tokens=False)
    except TypeError:  # pragma: no cover - tokenizers without the keyword
        return tokenizer.encode(text)


def option_probs(logits: torch.Tensor, letter_ids: Sequence[Sequence[int]], *, return_mass: bool = False):
    """Probability of each option from the answer-position logits [B, V], renormalised over the options.

    ``letter_ids[k]``: every token id spelling option k (their probabilities are summed).
    Softmax over the whole vocabulary in float64. With ``return_mass`` also returns the
    total probability the options had before renormalising ([B]; how much of the
    distribution went to answer letters at all).

    >>> lg = torch.log(torch.tensor([[0.5, 0.2, 0.1, 0.2]]))
    >>> option_probs(lg, [[0], [1, 3]]).round(6).tolist()
    [[0.555556, 0.444444]]
    """
    lp = torch.log_softmax(logits.detach().to(torch.float64), dim=-1)
    cols = []
    for ids in letter_ids:
        if not len(ids):
            raise ValueError("every option needs at least one token id")
        idx = torch.as_tensor(list(ids), device=lp.device, dtype=torch.long)
        cols.append(torch.logsumexp(lp.index_select(-1, idx), dim=-1))
    logmass = torch.stack(cols, dim=-1)  # [B, K] log of each option's mass
    probs = torch.softmax(logmass, dim=-1).cpu().numpy()
    if return_mass:
        return probs, torch.logsumexp(logmass, dim=-1).exp().cpu().numpy()
    return probs


def expected_calibration_error(confidences, correct, n_bins: int = 10) -> float:
    """Standard ECE: equal-width bins (lo, hi] over [0, 1] (confidence 0 goes to the first bin);
    ECE = sum over bins of |bin| / N * |accuracy(bin) - mean confidence(bin)|.

    >>> round(expected_calibration_error([0.95, 0.95, 0.55, 0.55], [1, 1, 1, 0]), 12)
    0.05
    """
    conf = np.asarray(confidences, dtype=np.float64).ravel()
    corr = np.asarray(correct, dtype=np.float64).ravel()
    if conf.shape != corr.shape:
        raise ValueError("confidences and correct must have the same length")
    if conf.size == 0:
        return float("nan")
    bounds = np.linspace(0.0, 1.0, n_bins + 1)  # bin k = (bounds[k], bounds[k+1]], as Guo et al. (2017)
    b = np.clip(np.searchsorted(bounds, conf, side="left") - 1, 0, n_bins - 1)
    ece = 0.0
    for k in range(n_bins):
        sel = b == k
        if sel.any():
            ece += sel.sum() / conf.size * abs(corr[sel].mean() - conf[sel].mean())
    return float(ece)


def brier_score(probs, gold_idx) -> float:
    """Multi-class Brier score: mean over items of sum_k (p_k - 1[k = gold])^2 (0 best, 2 worst).

    >>> brier_score([[1.0, 0.0], [0.5, 0.5]], [0, 1])
    0.25
    """
    p = np.asarray(probs, dtype=np.float64)
    g = np.asarray(gold_idx, dtype=int).ravel()
    if p.ndim != 2 or p.shape[0] != g.size:
        raise ValueError("probs must be [N, K] with one gold index per row")
    if p.shape[0] == 0:
        return float("nan")
    onehot = np.zeros_like(p)
    onehot[np.arange(g.size), g] = 1.0
    return float(((p - onehot) ** 2).sum(1).mean())


def calibration_summary(probs: Sequence[Sequence[float]], gold_idx: Sequence[int], n_bins: int = 10) -> dict:
    """Per-task calibration from per-item option probabilities (rows may differ in length).

    Returns ``{n, accuracy, mean_confidence, ece, brier, n_bins}``; accuracy is of the argmax
    option (the model's most probable letter, not its generated text).

    >>> calibration_summary([[0.9, 0.1], [0.6, 0.4]], [0, 1])["accuracy"]
    0.5
    """
    rows = [np.asarray(p, dtype=np.float64) for p in probs]
    g = np.asarray(gold_idx, dtype=int)
    if not rows:
        return {"n": 0, "accuracy": float("nan"), "mean_confidence": float("nan"), "ece": float("nan"),
                "brier": float("nan"), "n_bins": n_bins}
    conf = np.array([r.max() for r in rows])
    correct = np.array([int(r.argmax() == gi) for r, gi in zip(rows, g)])
    brier = float(np.mean([brier_score(r[None], [gi]) for r, gi in zip(rows, g)]))
    return {"n": len(rows), "accuracy": float(correct.mean()), "mean_confidence": float(conf.mean()),
            "ece": expected_calibration_error(conf, correct, n_bins), "brier": brier, "n_bins": n_bins}


def answer_positions(batch: PassBatch) -> torch.Tensor:
    """[B] column of the last prompt token: just before the first response token, else the last
    real token (prompt-only sequences). Works for left and right padding.

    >>> b = PassBatch(torch.zeros(2, 5, dtype=torch.long), torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
    ...               torch.tensor([[False, False, False, True, True], [False, False, False, False, False]]))
    >>> answer_positions(b).tolist()
    [2, 2]
    """
    am = batch.attention_mask.bool()
    resp = batch.response_mask.bool() & am
    T = am.shape[1]
    cols = torch.arange(T, device=am.device).expand_as(am)
    first_resp = torch.where(resp, cols, torch.full_like(cols, T)).amin(1)
    last_real = torch.where(am, cols, torch.full_like(cols, -1)).amax(1)
    return torch.where(resp.any(1), first_resp - 1, last_real)


class CalibrationCollector:
    """Option probabilities at each sample's answer position, from the logits of a hooked pass.

    ``letter_ids``: :func:`letter_token_ids` for the largest option count; ``n_options``: per
    sample (None = all options); ``positions``: per-sample column of the last prompt token
    (None = :func:`answer_positions` of the batch). Needs no hooks. After the pass,
    ``probs`` holds one numpy vector per sample (its own option count), and ``mass`` the
    share of probability the options had. One collector may ride several batches when
    ``positions``/``n_options`` are None or are reset with :meth:`set_batch`.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from reporter.adapters import get_adapter
    >>> from reporter.forward import hooked_pass
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    >>> ids = torch.randint(0, 50, (2, 6))
    >>> col = CalibrationCollector([[1], [2], [3]], n_options=[3, 2])
    >>> _ = hooked_pass(m, get_adapter(m), PassBatch(ids, torch.ones_like(ids), torch.zeros_like(ids).bool()), [col])
    >>> [len(p) for p in col.probs], round(float(col.probs[1].sum()), 6)
    ([3, 2], 1.0)
    """

    def __init__(self, letter_ids: Sequence[Sequence[int]], *, n_options: Sequence[int] | None = None,
                 positions: Sequence[int] | torch.Tensor | None = None) -> None:
        self.letter_ids = [list(x) for x in letter_ids]
        self.probs: list[np.ndarray] = []
        self.mass: list[float] = []
        self.set_batch(positions, n_options)

    def set_batch(self, positions=None, n_options=None) -> None:
        """Answer positions and option counts of the next batch (None: derive / all options)."""
        self._positions, self._n_options = positions, n_options

    def attach(self, hooks: HookSet, adapter, batch: PassBatch) -> None:  # no hooks: logits suffice
        return None

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        B = logits.shape[0]
        pos = answer_positions(batch) if self._positions is None else torch.as_tensor(self._positions)
        pos = pos.to(device=logits.device, dtype=torch.long)
        rows = logits[torch.arange(B, device=logits.device), pos]  # [B, V]
        full, mass = option_probs(rows, self.letter_ids, return_mass=True)
        counts = [len(self.letter_ids)] * B if self._n_options is None else list(self._n_options)
        for b in range(B):
            k = int(counts[b])
            if k == len(self.letter_ids):
                self.probs.append(full[b])
                self.mass.append(float(mass[b]))
            else:
                p, mm = option_probs(rows[b:b + 1], self.letter_ids[:k], return_mass=True)
                self.probs.append(p[0])
                self.mass.append(float(mm[0]))
