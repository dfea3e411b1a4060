"""The smoke perplexity (``smoke.json``): batched, and equal to one text at a time in float64; read from the held-out
reference pass where it ran, equal to a pass of its own."""
import math

import numpy as np
import pytest
import torch

from reporter.collect.reference import REFERENCE_MAX_TOKENS, collect_reference
from reporter.collect.smoke import FROM_REFERENCE, OWN_PASS, from_reference, perplexity, smoke
from reporter.config import ContaminationConfig
from reporter.store.layout import REFERENCE_LOGPROBS
from reporter.tasks.sources import lambada_texts

from .conftest import tiny_lm


def _reference(lm, texts, max_tokens):
    """Each text alone, unpadded: its first ``max_tokens`` tokens as the tokenizer gives them, -log p of every token
    after the first."""
    nll, n = 0.0, 0
    for text in texts:
        ids = lm.tokenizer(text)["input_ids"][:max_tokens]
        if len(ids) < 2:
            continue
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


def test_smoke_reads_the_reference_pass_and_equals_its_own(tmp_path):
    """With the held-out reference pass's log-probs of the same passages, smoke.json runs no pass of its own, and its
    number is the float64 loop's; without them (missing, fewer passages, another corpus) it runs its own pass over the
    same tokens and gives the same number."""
    lm = tiny_lm("llama", init_std=0.05)
    mean, n = _reference(lm, lambada_texts(3), REFERENCE_MAX_TOKENS)
    collect_reference(lm, tmp_path / "m", ContaminationConfig(reference_texts=5), batch_size=4)
    ref = tmp_path / "m" / REFERENCE_LOGPROBS
    calls = []
    forward = lm.model.forward
    lm.model.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    read = smoke(lm, 3, progress=False, reference=ref)
    assert calls == [] and read["source"] == FROM_REFERENCE
    own = smoke(lm, 3, progress=False, reference=tmp_path / "missing.npz")
    assert calls and own["source"] == OWN_PASS
    for got in (read, own):
        assert (got["n_tokens"], got["n_texts"], got["max_tokens"]) == (n, 3, REFERENCE_MAX_TOKENS)
        assert got["mean_nll"] == pytest.approx(mean, rel=1e-5)
    assert from_reference(ref, 6) is None  # the pass scored 5 passages: a 6th is not there
    collect_reference(lm, tmp_path / "given", ContaminationConfig(reference_texts=5), texts=["x y z"] * 5,
                      verbatim=False)
    assert from_reference(tmp_path / "given" / REFERENCE_LOGPROBS, 3) is None  # other texts than LAMBADA's
