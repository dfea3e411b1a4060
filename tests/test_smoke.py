"""The smoke perplexity (``smoke.json``): batched, and equal to one text at a time in float64."""
import math

import numpy as np
import pytest
import torch

from reporter.collect.smoke import perplexity
from reporter.tasks.sources import lambada_texts

from .conftest import tiny_lm


def _reference(lm, texts, max_tokens):
    """Each text alone, unpadded: BOS + its first ``max_tokens`` tokens, -log p of every token after the first."""
    nll, n = 0.0, 0
    for text in texts:
        ids = [lm.tokenizer.bos_token_id] + lm.tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens]
        with torch.no_grad():
            logits = lm.model(input_ids=torch.tensor([ids])).logits[0].double()
        for t in range(1, len(ids)):
            row = logits[t - 1]
            nll -= float(row[ids[t]] - torch.logsumexp(row, 0))
            n += 1
    return nll / n, n


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_batched_perplexity_equals_each_text_alone(batch_size):
    lm = tiny_lm("llama", init_std=0.05)
    # passages of different lengths (left padding in every batch of more than one), one cut by max_tokens
    texts = lambada_texts(5) + ["Short one.", ""]
    mean, n = _reference(lm, texts, max_tokens=40)
    got = perplexity(lm, texts, max_tokens=40, progress=False, batch_size=batch_size)
    assert got["n_tokens"] == n and got["n_texts"] == len(texts)
    assert got["mean_nll"] == pytest.approx(mean, rel=1e-5)
    assert got["perplexity"] == pytest.approx(math.exp(mean), rel=1e-5)
    assert np.isfinite(got["perplexity"]) and got["perplexity"] > 1
