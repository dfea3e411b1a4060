"""Collectors riding the option passes (``continuation_passes``) against each request run alone, in float64.

A multiple-choice item's options are scored on one run of their shared context. MUI's key neurons and the token
log-probs of an lm-eval log-likelihood task come from those same passes; these tests hold them to the slow,
obviously-correct computation: context + continuation run whole, alone, in float64, the log-softmax taken position
by position, MUI by the plain-loop reference of ``tests/test_mui.py``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from reporter.collect.collectors.mui import MUICollector, make_collector
from reporter.instrument.batch import PassBatch
from reporter.instrument.continuations import continuation_loglikelihoods, continuation_passes
from reporter.instrument.hooked_pass import hooked_pass
from reporter.models.adapters import get_adapter
from tests.test_mui import reference_scores, reference_select
from tests.test_prefix import _model

FAMILIES = {
    "gpt2": {},
    "llama": {},
    # a window shorter than context + continuation: the cache's sliding layers must keep what the window sees
    "gemma3": {"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
}


def _requests():
    g = torch.Generator().manual_seed(3)
    ctx = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (9, 4, 14)]
    reqs = []
    for c in ctx:  # three or four options per context, of different lengths
        for n in (2, 5, 1, 3)[: 4 if len(c) != 4 else 3]:
            reqs.append((c, torch.randint(3, 211, (n,), generator=g).tolist()))
    reqs.append(([7], [9, 11, 13]))  # lm-eval's prefix token before an empty context: no cache to share
    return reqs


def _float64_logprobs(model, seq):
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([seq]), use_cache=False).logits[0].double(), -1)
    return [float(logp[t - 1, seq[t]]) for t in range(1, len(seq))]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_riders_see_every_request_as_its_context_and_continuation_run_alone(family):
    model = _model(family, **FAMILIES[family])
    adapter = get_adapter(model)
    reqs = _requests()
    max_length = 15  # the 14-token context with a 3- or 5-token option loses its oldest tokens, as lm-eval cuts it
    ctxs, conts = [r[0] for r in reqs], [r[1] for r in reqs]
    prompt_from = [1 + (i % 3) for i in range(len(reqs))]
    score = MUICollector(top_ratio=0.05, mode="score")
    topscore = MUICollector(top_ratio=0.05, mode="topscore", rho=0.8)
    authors = make_collector("mui-eval", top_ratio=0.05, vocab_size=211)
    got = continuation_passes(model, adapter, ctxs, conts, pad_id=0, batch_size=2, max_length=max_length,
                              riders=[score, topscore, authors], prompt_from=prompt_from)
    plain = continuation_loglikelihoods(model, adapter, ctxs, conts, pad_id=0, batch_size=2, max_length=max_length)
    assert sorted(got.seen) == list(range(len(reqs)))  # each request is one sample of the riders, once
    sets = {name: dict(zip(got.seen, c.results())) for name, c in
            (("score", score), ("topscore", topscore), ("mui-eval", authors))}
    L, F = adapter.n_layers, adapter.d_ff
    for i, (ctx, cont) in enumerate(reqs):
        keep = max(1, max_length + 1 - len(cont)) if len(ctx) + len(cont) > max_length + 1 else len(ctx)
        window = ctx[-keep:]
        lps = _float64_logprobs(model, window + cont)
        # the score, the per-token log-probs and is_greedy are those of scoring alone
        assert got.scores[i][0] == pytest.approx(plain[i][0], abs=1e-9) and got.scores[i][1] == plain[i][1]
        np.testing.assert_allclose(got.token_logprobs[i], lps[len(window) - 1:], atol=1e-9)
        # the prompt's log-probs from prompt_from on (NaN before it, and on tokens cut by max_length)
        want = np.full(len(ctx) - 1, np.nan)
        cut = len(ctx) - len(window)
        for j in range(max(prompt_from[i], cut + 1), len(ctx)):
            want[j - 1] = lps[j - cut - 1]
        np.testing.assert_allclose(got.prompt_logprobs[i], want, atol=1e-9, equal_nan=True, err_msg=str(i))
        # MUI: the key neurons of a teacher-forced pass over the window + continuation
        seq = torch.tensor([window + cont])
        resp = torch.tensor([[False] * len(window) + [True] * len(cont)])
        batch = PassBatch(seq, torch.ones_like(seq), resp)
        entries = reference_scores(model, batch)[0]
        np.testing.assert_array_equal(sets["score"][i], reference_select(entries, "score", 0.05, 0.8, L, F))
        np.testing.assert_array_equal(sets["topscore"][i], reference_select(entries, "topscore", 0.05, 0.8, L, F))
        alone = make_collector("mui-eval", top_ratio=0.05, vocab_size=211)
        hooked_pass(model, adapter, batch, [alone])
        np.testing.assert_array_equal(sets["mui-eval"][i], alone.results()[0])
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_without_riders_nothing_is_seen_and_no_prompt_is_read():
    model = _model("llama")
    reqs = _requests()
    got = continuation_passes(model, get_adapter(model), [r[0] for r in reqs], [r[1] for r in reqs], pad_id=0,
                              batch_size=3)
    assert got.seen == [] and got.prompt_logprobs is None
    assert all(math.isclose(float(np.sum(t)), s, abs_tol=1e-9) for t, (s, _) in zip(got.token_logprobs, got.scores))
