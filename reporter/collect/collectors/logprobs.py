"""Per-token log-probabilities from the one teacher-forced pass (the evidence for Min-K%).

:class:`TokenLogProbCollector` rides along :func:`reporter.instrument.hooked_pass.hooked_pass`
(no hooks, no extra pass: it only reads the logits) and keeps, per sample, the
log-probability the model gave to each ACTUAL next token, ``log p(x_{t+1} | x_{<=t})``,
separately for

* prompt tokens (every valid prompt token but the first, which has no left context), and
* response tokens (the model's own answer, teacher-forced).

Arrays are float32, in token order. Left or right padding is handled through the mask. The
:class:`LogProbsPlugin` stores them per task in ``logprobs.npz`` (format:
:mod:`reporter.store.logprobs`); the analyse stage compares them with the same for held-out
text, ``reference_logprobs.npz`` (:mod:`reporter.collect.reference`,
:mod:`reporter.analyse.contamination`).

>>> import torch
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, bos_token_id=0, eos_token_id=0))
>>> ids = torch.tensor([[0, 5, 6, 7, 8]]); am = torch.tensor([[0, 1, 1, 1, 1]])
>>> resp = torch.tensor([[False, False, False, True, True]])
>>> col = TokenLogProbCollector()
>>> from reporter.instrument.hooked_pass import hooked_pass
>>> _ = hooked_pass(m, None, PassBatch(ids, am, resp), [col])
>>> [a.shape for a in col.prompt_results()], [a.shape for a in col.response_results()]
([(1,)], [(2,)])
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ...config import Profile
from ...instrument.batch import PassBatch
from ...instrument.gather import head_output_is_logits, head_scores, target_logprobs
from ...store.layout import LOGPROBS
from ...store.logprobs import merge_logprobs, save_logprobs
from ...store.ragged import ragged_ok
from .base import BatchContext, CollectorPlugin, OptionPasses, TaskContext, register_collector

__all__ = ["TokenLogProbCollector", "LogProbsPlugin", "question_span", "target_logprobs"]


#: the prefill's prompt log-probs: at most this many logits computed at a time (32 MB in float32)
_HEAD_CHUNK = 1 << 23


class TokenLogProbCollector:
    """Collector of per-token log-probs of the actual next tokens, for both collection paths.

    In the teacher-forced pass (:mod:`reporter.instrument.hooked_pass`) it reads the logits of
    prompt + response. During generation (a :class:`~reporter.instrument.decode.StepCollector`)
    it reads the prompt's log-probs from the prefill's logits and each response token's from
    the step that picked it. Results accumulate over batches in order:
    :meth:`prompt_results` / :meth:`response_results` return one float32 array per sample. The
    log-softmax is computed in float32, in chunks of positions so that memory stays bounded for
    large vocabularies; results move to the host once per batch.

    ``question_spans`` (one [start, end) per sample, in prompt-token indices, or None) limits
    the prompt's log-probs to the question and what follows it: prompt tokens before the
    question's first token are stored as NaN on both paths, and during generation the prefill's
    LM head runs only on the positions from the question on (``prompt_positions``), which is
    most of a large-vocabulary model's prefill. Min-K% (the only reader of prompt log-probs)
    reads the question span alone. A sample whose span is None keeps the whole prompt.
    """

    def __init__(self, question_spans: Sequence[tuple[int, int] | None] | None = None, *,
                 prefill_head: torch.nn.Module | None = None) -> None:
        self.question_spans = list(question_spans) if question_spans is not None else None
        #: how many of the prefill's last positions need logits (0 = all): set per batch in attach
        self.prompt_positions = 0
        #: per row, the first prompt position read (None: all of them): set per batch in attach
        self.prompt_reads_from: list[int] | None = None
        #: during generation it reads the prefill's logits from ``prompt_reads_from`` on only (its one
        #: hook replaces the head's input at those positions), so a shared prefix may run once
        self.shares_prefix = True
        #: during generation: the LM head, when its output is the model's logits
        #: (:func:`~reporter.instrument.gather.head_output_is_logits`); the prefill's prompt log-probs are
        #: then computed from it in chunks of positions and the model's own head runs on the last position only
        self.prefill_head = prefill_head
        self._prompt: list[np.ndarray] = []
        self._response: list[np.ndarray] = []
        self._batch: PassBatch | None = None
        self._prefill: torch.Tensor | None = None
        self._prefill_lp: torch.Tensor | None = None
        self._busy = False
        self._steps: list[torch.Tensor] = []

    def _starts(self, n: int) -> list[int] | None:
        """Per sample, the first prompt token whose log-prob is kept, or None to keep them all."""
        if self.question_spans is None:
            return None
        if len(self.question_spans) != n:
            raise ValueError(f"TokenLogProbCollector: {len(self.question_spans)} question spans for a batch of {n}")
        if any(s is None for s in self.question_spans):
            return None
        return [max(1, int(s[0])) for s in self.question_spans if s is not None]

    def attach(self, hooks: Any, adapter: Any, batch: PassBatch) -> None:
        """No hooks: the logits are enough (the batch is kept for the generation path); sets
        ``prompt_positions`` from the question spans (one host sync per batch).
        """
        self._batch, self._prefill, self._prefill_lp, self._steps = batch, None, None, []
        starts = self._starts(batch.input_ids.shape[0])
        if starts is None:
            self.prompt_positions, self.prompt_reads_from = 0, None
        else:  # the position predicting token j of a left-padded prompt of n tokens is j - 1 from n's start
            lengths = batch.attention_mask.sum(-1).tolist()
            self.prompt_positions = max(max(1, int(n) - s + 1) for n, s in zip(lengths, starts))
            # per row, the first position read: what comes before the question may run once for the batch
            self.prompt_reads_from = [min(s - 1, int(n) - 1) for n, s in zip(lengths, starts)]
        if self.prefill_head is not None:
            hooks.replace_input(self.prefill_head, self._prefill_rows)

    def _prefill_rows(self, h: torch.Tensor) -> torch.Tensor:
        """At the prefill: the prompt's log-probs from the head's input [B, K, H], CHUNK positions at a time;
        the head then runs on the last position only. Any other call of the head is left as it is.
        """
        batch = self._batch
        if self._busy or self._prefill_lp is not None or batch is None or h.dim() != 3:
            return h
        B, T = batch.input_ids.shape
        K = T if self.prompt_positions <= 0 or self.prompt_positions >= T else self.prompt_positions
        if tuple(h.shape[:2]) != (B, K) or K < 2:
            return h  # not this batch's prefill as this collector asked for it: the logits path reads it
        off = T - K
        head = self.prefill_head
        assert head is not None
        self._busy = True  # the head's own calls below pass through this hook unchanged
        try:  # position off + k predicts token off + k + 1
            lp, _ = head_scores(head, h[:, :K - 1], batch.input_ids[:, off + 1:], budget=_HEAD_CHUNK)
        finally:
            self._busy = False
        self._prefill_lp = lp
        return h[:, -1:]

    def _keep(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        starts = self._starts(len(arrays))
        if starts is None:
            return arrays
        for a, s in zip(arrays, starts):
            a[: s - 1] = np.nan  # prompt token j is at index j - 1
        return arrays

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Log-softmax in float32 chunks, gather the actual next tokens, split prompt from response."""
        B, T = batch.input_ids.shape
        if T < 2:
            self._prompt += [np.zeros(0, np.float32)] * B
            self._response += [np.zeros(0, np.float32)] * B
            return
        lp, prompt, resp = _next_token_logprobs(batch, logits)
        self._prompt += self._keep([lp[b][prompt[b]].astype(np.float32) for b in range(B)])
        self._response += [lp[b][resp[b]].astype(np.float32) for b in range(B)]

    # -- during generation --------------------------------------------------------------
    def after_step(self, step: int, logits: torch.Tensor, next_tokens: torch.Tensor, rows: torch.Tensor) -> None:
        """Every step: the log-prob of its greedy token (NaN for rows already finished); the
        prefill's logits are kept for the prompt.
        """
        x = logits[:, -1].float()
        lp = x.gather(-1, next_tokens.to(x.device)[:, None]).squeeze(-1) - torch.logsumexp(x, dim=-1)
        B = self._batch.input_ids.shape[0] if self._batch is not None else lp.shape[0]
        if rows.numel() != B:
            lp = lp.new_full((B,), float("nan")).index_copy_(0, rows.to(lp.device), lp)
        self._steps.append(lp)
        if step == 0 and self._prefill_lp is None:
            self._prefill = logits  # no chunked prompt log-probs: keep the prefill's logits until finish

    def finish(self, lengths: Sequence[int]) -> None:
        """The prompt's log-probs from the prefill, each response's from its first ``lengths[b]`` steps."""
        if self._batch is None or (self._prefill is None and self._prefill_lp is None):
            raise RuntimeError("TokenLogProbCollector.finish without a generation")
        B, P = self._batch.input_ids.shape
        if P < 2:
            self._prompt += [np.zeros(0, np.float32)] * B
        else:
            if self._prefill_lp is not None:
                lp, prompt, _ = _next_token_logprobs(self._batch, None, self._prefill_lp)
            else:
                lp, prompt, _ = _next_token_logprobs(self._batch, self._prefill)
            self._prompt += self._keep([lp[b][prompt[b]].astype(np.float32) for b in range(B)])
        steps = torch.stack(self._steps, 1).cpu().numpy()
        self._response.extend(steps[b, :lengths[b]].astype(np.float32) for b in range(B))
        self._batch, self._prefill, self._prefill_lp, self._steps = None, None, None, []

    def prompt_results(self) -> list[np.ndarray]:
        """Per sample, the log-probs of its prompt tokens (after the first; NaN before the question)."""
        return list(self._prompt)

    def response_results(self) -> list[np.ndarray]:
        """Per sample, the log-probs of its response tokens."""
        return list(self._response)


def _next_token_logprobs(batch: PassBatch, logits: torch.Tensor | None,
                         computed: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``log p(x_{t+1} | x_{<=t})`` [B, T-1] on the host, with masks of prompt and response targets.

    ``logits`` [B, K, V] may cover the last K <= T positions only (``logits_to_keep``): targets
    predicted by positions before them are NaN. ``computed`` [B, K - 1] instead: those log-probs,
    already computed (the prefill's chunked head).
    """
    ids, am = batch.input_ids, batch.attention_mask.bool()
    B, T = ids.shape
    ref = computed if computed is not None else logits
    assert ref is not None
    off = T - ref.shape[1] - (1 if computed is not None else 0)  # logits[:, k] is position off + k
    tgt = ids[:, 1:].to(ref.device)
    lp = torch.full((B, T - 1), float("nan"), dtype=torch.float32, device=ref.device)
    if computed is not None:
        lp[:, off:] = computed
    elif T - 1 > off and logits is not None:
        for b in range(B):
            lp[b, off:] = target_logprobs(logits[b, :T - 1 - off], tgt[b, off:])
    valid = (am[:, 1:] & am[:, :-1]).to(ref.device)
    resp = batch.response_mask.bool()[:, 1:].to(ref.device) & valid
    prompt = valid & ~resp
    return lp.cpu().numpy(), prompt.cpu().numpy(), resp.cpu().numpy()


def question_span(tokenizer: Any, prompt_text: str, question_text: str, prompt_ids: Sequence[int]
                  ) -> tuple[int, int] | None:
    """[start, end) of ``question_text`` inside the tokenised prompt (prompt-token indices).

    The LAST occurrence of the question in the prompt text is used (few-shot demos come
    first). Returns None when the question is not found or the tokenisation with offsets does
    not line up with ``prompt_ids`` (the analysis then uses the whole prompt).

    >>> prompt = "Answer the question.\\n\\nWhat is 2 + 2?"
    >>> question_span(lm.tokenizer, prompt, "What is 2 + 2?", lm.tokenizer(prompt)["input_ids"])
    (6, 14)
    """
    c0 = prompt_text.rfind(question_text) if question_text else -1
    if c0 < 0:
        return None
    c1 = c0 + len(question_text)
    try:
        enc = tokenizer(prompt_text, add_special_tokens=False, return_offsets_mapping=True)
    except Exception:  # slow tokenizers have no offsets
        return None
    ids, offs = list(enc["input_ids"]), list(enc["offset_mapping"])
    shift = len(prompt_ids) - len(ids)  # special tokens added in front (BOS)
    if shift < 0 or list(prompt_ids[shift:]) != ids:
        return None
    toks = [j for j, (a, b) in enumerate(offs) if b > c0 and a < c1]
    if not toks:
        return None
    return shift + toks[0], shift + toks[-1] + 1


def _question_spans(batch: BatchContext) -> list[tuple[int, int] | None]:
    """Where each item's question lies in its tokenised prompt (:func:`question_span`)."""
    lm, plan = batch.task.lm, batch.task.plan
    return [question_span(lm.tokenizer, plan.prompts[i], plan.items[i].question, plan.prompt_ids[i])
            for i in batch.positions]


@register_collector
class LogProbsPlugin(CollectorPlugin):
    """Token log-probs of every item's prompt and response (``logprobs.npz``).

    The same for held-out reference text, once per model, is part of the contamination
    evidence (:mod:`reporter.collect.reference`).
    """

    name = "logprobs"

    switch = "always"
    label = "token log-probs"

    def for_batch(self, batch: BatchContext) -> TokenLogProbCollector:
        """A fresh collector (it only reads the logits) that keeps the prompt from the question on."""
        return TokenLogProbCollector(_question_spans(batch))

    def fusable(self, profile: Profile) -> bool:
        """Yes: the prefill and each decode step give the same log-probs."""
        return True

    def for_generation(self, batch: BatchContext) -> TokenLogProbCollector:
        """A fresh collector (prompt log-probs from the prefill, from the question on, computed from the LM head in
        chunks where its output is the logits; response log-probs per step).
        """
        model = batch.task.lm.model
        head = model.get_output_embeddings() if head_output_is_logits(model) else None
        return TokenLogProbCollector(_question_spans(batch), prefill_head=head)

    def rides_options(self, task: TaskContext) -> bool:
        """Yes: the option passes give each answer's token log-probs, and the prompt's from the context's pass."""
        return True

    def prompt_logprobs_from(self, batch: BatchContext) -> list[int]:
        """From each question's first token on, as the teacher-forced collector keeps them (all of every prompt of
        the batch when one question cannot be found in its prompt).
        """
        starts = TokenLogProbCollector(_question_spans(batch))._starts(len(batch.positions))
        return [1] * len(batch.positions) if starts is None else starts

    def save_options(self, collector: Any, batch: BatchContext, passes: OptionPasses) -> None:
        """The batch's log-probs as the option passes measured them (the prompt from its question on)."""
        assert passes.prompt_logprobs is not None
        lm = batch.task.lm
        spans = _question_spans(batch)
        prompt = TokenLogProbCollector(spans)._keep([np.array(a, dtype=np.float32) for a in passes.prompt_logprobs])
        save_logprobs(batch.task.part_path(self.name, batch.index), batch.item_ids, prompt,
                      [np.asarray(a, dtype=np.float32) for a in passes.answer_logprobs], spans, {"model": lm.spec.name})

    def save_batch(self, collector: Any, batch: BatchContext) -> None:
        """The batch's log-probs, with where each question lies in its prompt."""
        lm = batch.task.lm
        spans = collector.question_spans if collector.question_spans is not None else _question_spans(batch)
        save_logprobs(batch.task.part_path(self.name, batch.index), batch.item_ids, collector.prompt_results(),
                      collector.response_results(), spans, {"model": lm.spec.name})

    def batch_done(self, task: TaskContext, batch: int) -> bool:
        """Whether the batch's part exists."""
        return task.part_path(self.name, batch).is_file()

    def finish_task(self, task: TaskContext, samples: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Merge the parts into ``logprobs.npz`` (no summary fields: the analyse stage reads the file)."""
        merge_logprobs(task.task_dir / LOGPROBS, task.parts(self.name))
        return {}

    def task_done(self, task_dir: Path, n_items: int) -> bool:
        """Whether ``logprobs.npz`` reads back whole with every item."""
        return ragged_ok(task_dir / LOGPROBS, n_items)
