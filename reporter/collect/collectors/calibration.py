"""Option probabilities of multiple-choice answers, read from the one teacher-forced pass.

For a multiple-choice prompt, the next-token distribution at the last prompt position is the
model's distribution over the answer letter. :func:`option_probs` sums, per option, the
probability of every token that spells its letter ("A", " A", ...) and renormalises over the
options; the max of that vector is the model's confidence, its argmax the model's answer.
:class:`CalibrationCollector` reads these from the shared hooked pass; the
:class:`CalibrationPlugin` stores them in each sample record (``option_probs``), falls back to
the model's most probable letter when a response names no option, and summarises ECE and the
Brier score (:mod:`reporter.metrics.calibration`).

>>> lg = torch.log(torch.tensor([[0.5, 0.2, 0.1, 0.2]]))
>>> option_probs(lg, [[0], [1, 3]]).round(6).tolist()
[[0.555556, 0.444444]]
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ...config import Profile
from ...instrument.batch import PassBatch
from ...instrument.hooks import HookSet
from ...metrics.calibration import calibration_summary
from ...tasks import LETTERS
from .base import BatchContext, CollectorPlugin, TaskContext, register_collector


def letter_token_ids(tokenizer: Any, n_options: int, letters: str = LETTERS) -> list[list[int]]:
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


def _encode(tokenizer: Any, text: str) -> list[int]:
    try:
        return tokenizer.encode(text, add_special_tokens=False)
    except TypeError:  # pragma: no cover - tokenizers without the keyword
        return tokenizer.encode(text)


def option_probs(logits: torch.Tensor, letter_ids: Sequence[Sequence[int]], *, return_mass: bool = False) -> Any:
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
    >>> from reporter.instrument.hooked_pass import hooked_pass
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    >>> ids = torch.randint(0, 50, (2, 6))
    >>> col = CalibrationCollector([[1], [2], [3]], n_options=[3, 2])
    >>> _ = hooked_pass(m, None, PassBatch(ids, torch.ones_like(ids), torch.zeros_like(ids).bool()), [col])
    >>> [len(p) for p in col.probs], round(float(col.probs[1].sum()), 6)
    ([3, 2], 1.0)
    """

    def __init__(self, letter_ids: Sequence[Sequence[int]], *, n_options: Sequence[int] | None = None,
                 positions: Sequence[int] | torch.Tensor | None = None) -> None:
        self.letter_ids = [list(x) for x in letter_ids]
        self.probs: list[np.ndarray] = []
        self.mass: list[float] = []
        self.set_batch(positions, n_options)

    def set_batch(self, positions: Sequence[int] | torch.Tensor | None = None,
                  n_options: Sequence[int] | None = None) -> None:
        """Answer positions and option counts of the next batch (None: derive / all options)."""
        self._positions, self._n_options = positions, n_options

    #: during generation it reads only the prefill's last position (the answer position)
    prompt_positions = 1
    #: so a prefix every prompt shares may run once (reporter.instrument.decode.shared_prefix_length)
    shares_prefix = True

    def attach(self, hooks: HookSet, adapter: Any, batch: PassBatch) -> None:
        """No hooks: the logits suffice."""

    # -- during generation (a reporter.instrument.decode.StepCollector) -------------------
    def after_step(self, step: int, logits: torch.Tensor, next_tokens: torch.Tensor, rows: torch.Tensor) -> None:
        """At the prefill, the options' probabilities at the last prompt position (the answer position)."""
        if step == 0:
            self._read(logits[:, -1])

    def finish(self, lengths: Sequence[int]) -> None:
        """Nothing to cut: the answer position is in the prompt."""

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Option probabilities at each sample's answer position."""
        B = logits.shape[0]
        pos = answer_positions(batch) if self._positions is None else torch.as_tensor(self._positions)
        pos = pos.to(device=logits.device, dtype=torch.long)
        self._read(logits[torch.arange(B, device=logits.device), pos])

    def _read(self, rows: torch.Tensor) -> None:
        """Option probabilities from the answer-position logits [B, V] of a batch."""
        B = rows.shape[0]
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


@register_collector
class CalibrationPlugin(CollectorPlugin):
    """Option probabilities of multiple-choice items, the answer fallback, ECE and Brier."""

    name = "calibration"

    switch = "always, on multiple-choice items"
    label = "calibration"

    def for_batch(self, batch: BatchContext) -> CalibrationCollector | None:
        """A collector for multiple-choice tasks whose items have options; None otherwise."""
        letters = self._letter_ids(batch.task)
        if letters is None:
            return None
        return CalibrationCollector(letters, n_options=[len(it.choices or []) for it in batch.items])

    def fusable(self, profile: Profile) -> bool:
        """Yes: the answer position is the prefill's last position."""
        return True

    def rides_options(self, task: TaskContext) -> bool:
        """Yes where it measures nothing (a task scored by its options' log-likelihoods has no option letters to
        read at an answer position); no for a task of lettered options.
        """
        return self._letter_ids(task) is None

    def for_generation(self, batch: BatchContext) -> CalibrationCollector | None:
        """The same collector as :meth:`for_batch` (it reads the prefill's last logits)."""
        return self.for_batch(batch)

    def save_batch(self, collector: Any, batch: BatchContext) -> None:
        """Store each item's option probabilities in its sample record.

        When a response contains no option letter, the answer falls back to the letter the model
        itself puts most probability on at the answer position (lm-eval's log-likelihood reading),
        so a model that ignores the format scores at its real preference (an untrained model:
        chance) instead of zero. ``answer_source`` says which reading a sample's answer is.
        """
        if collector is None:
            return
        for r, probs in zip(batch.records, collector.probs):
            r["option_probs"] = [round(float(x), 6) for x in probs]
            r["answer_source"] = "response"
            if r["extracted"] is None and len(probs):
                letter = LETTERS[int(np.argmax(probs))]
                r.update(extracted=letter, score=float(letter == r["gold"]), answer_source="logprob")

    def finish_task(self, task: TaskContext, samples: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The share of answers read from the log-probs and, with every item's probabilities, calibration."""
        items = task.plan.items
        if task.plan.task.scorer != "choice" or not items:
            return {}
        recs = [samples[it.id] for it in items]
        out: dict[str, Any] = {"answer_from_logprob_share": float(np.mean(
            [r.get("answer_source") == "logprob" for r in recs]))}
        if all("option_probs" in r for r in recs):
            gold = [LETTERS.index(it.answer) for it in items]
            out["calibration"] = calibration_summary([r["option_probs"] for r in recs], gold)
        return out

    @staticmethod
    def _letter_ids(task: TaskContext) -> list[list[int]] | None:
        if task.plan.task.scorer != "choice":
            return None
        n_opts = max((len(it.choices) for it in task.plan.items if it.choices), default=0)
        return letter_token_ids(task.lm.tokenizer, n_opts) if n_opts else None
