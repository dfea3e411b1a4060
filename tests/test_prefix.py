"""The shared-prefix pass (``logits_after_prefix``, ``prefix_logprobs``) against each text run alone.

The option-order test runs an item's stem once and reuses its KV cache for every order of the
options. These tests hold it to the slow, obviously-correct computation: every text run whole,
alone (no padding, no cache), in float64.
"""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from reporter.collect.text_scores import prefix_logprobs, prefix_scores
from reporter.instrument.prefix import logits_after_prefix, reduce_after_prefix
from reporter.models.adapters import get_adapter
from reporter.models.random_archs import random_config
from tests.conftest import TINY


def _model(family: str, **cfg_over):
    cfg = random_config(family, vocab=211, **TINY)
    if family.startswith("gemma"):
        cfg.head_dim = 16
    for k, v in cfg_over.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float64).eval()


FAMILIES = {
    "gpt2": {},
    "llama": {},
    "qwen2": {},
    # a window shorter than prefix + tail: the cache's sliding layers must keep what the window sees
    "gemma3": {"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_after_prefix_equal_each_text_run_alone(family):
    model = _model(family, **FAMILIES[family])
    g = torch.Generator().manual_seed(1)
    # prefixes of different lengths (left-padded together), tails of different lengths, several per prefix
    prefixes = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (7, 2, 5)]
    tails = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (3, 8, 1, 5, 6, 4, 2)]
    owners = [0, 1, 0, 2, 0, 1, 2]
    pairs = [(r, c) for r, t in enumerate(tails) for c in range(len(t))]
    pick = [pairs[k] for k in torch.randperm(len(pairs), generator=g)[:20].tolist()]  # any order, any rows
    rows, cols = torch.tensor([r for r, _ in pick]), torch.tensor([c for _, c in pick])
    got = logits_after_prefix(model, get_adapter(model), prefixes, tails, owners, rows, cols, pad_id=0, batch_size=2)
    assert got.shape == (len(pick), 211)
    with torch.no_grad():
        for k, (r, c) in enumerate(pick):
            text = prefixes[owners[r]] + tails[r]
            ref = model(torch.tensor([text]), use_cache=False).logits[0, len(prefixes[owners[r]]) + c]
            assert torch.allclose(got[k], ref, atol=1e-9, rtol=0), (family, r, c)


def test_a_long_stem_next_to_a_long_tail_stays_within_the_learned_positions():
    """GPT-2 learns 24 positions here: stem 20 + tail 3 and stem 2 + tail 12 are both valid texts,
    but one batch pads the first tail to 12 (positions up to 31 if pads kept counting)."""
    model = _model("gpt2", n_positions=24)
    g = torch.Generator().manual_seed(3)
    prefixes = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (20, 2)]
    tails = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (3, 12)]
    rows, cols = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 2, 0, 11])
    got = logits_after_prefix(model, get_adapter(model), prefixes, tails, [0, 1], rows, cols, pad_id=0, batch_size=2)
    with torch.no_grad():
        for k, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
            ref = model(torch.tensor([prefixes[r] + tails[r]]), use_cache=False).logits[0, len(prefixes[r]) + c]
            assert torch.allclose(got[k], ref, atol=1e-9, rtol=0), (r, c)


def test_logits_after_prefix_leaves_no_hooks_and_refuses_positions_outside_a_tail():
    model = _model("llama")
    before = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())
    logits_after_prefix(model, None, [[5, 6]], [[7, 8]], [0], torch.tensor([0]), torch.tensor([1]))
    assert sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()) == before
    with pytest.raises(ValueError, match="outside its tail"):
        logits_after_prefix(model, None, [[5, 6]], [[7, 8]], [0], torch.tensor([0]), torch.tensor([2]))
    with pytest.raises(ValueError, match="non-empty prefixes"):
        logits_after_prefix(model, None, [[]], [[7, 8]], [0], torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="owning prefix"):
        logits_after_prefix(model, None, [[5, 6]], [[7, 8]], [1], torch.tensor([0]), torch.tensor([0]))


def test_prefix_logprobs_equal_float64_log_softmax_of_each_text():
    """Scored tokens right after the shared prefix included: token ``shared`` is predicted by the
    prefix's last position, which the cached pass recomputes."""
    for family in ("llama", "gemma3"):
        model = _model(family, **FAMILIES[family])
        lm = types.SimpleNamespace(model=model, tokenizer=types.SimpleNamespace(pad_token_id=0),
                                   adapter=get_adapter(model), device=torch.device("cpu"))
        g = torch.Generator().manual_seed(3)
        one, two = (torch.randint(3, 211, (n,), generator=g).tolist() for n in (6, 3))
        seqs = [one + torch.randint(3, 211, (n,), generator=g).tolist() for n in (4, 9, 2)]
        seqs += [two + torch.randint(3, 211, (n,), generator=g).tolist() for n in (5, 2)]  # another stem
        shared = [6, 6, 6, 3, 3]
        positions = [[6, 7, 9], [6, 11, 14], [7], [3, 4, 7], [4]]
        got = prefix_logprobs(lm, seqs, shared, positions, batch_size=2)
        for s, js, a in zip(seqs, positions, got):
            with torch.no_grad():
                lp = torch.log_softmax(model(torch.tensor([s])).logits[0], -1)
            ref = np.array([float(lp[j - 1, s[j]]) for j in js])
            assert a.dtype == np.float32 and a.shape == ref.shape
            np.testing.assert_allclose(a, ref, atol=1e-6, rtol=0)
        with pytest.raises(ValueError, match="must lie in"):  # the KV cache's prefix runs apart: nothing inside it
            prefix_scores(lm, seqs[:1], [6], [[5]], path="cache")
        with pytest.raises(ValueError, match="must lie in"):
            prefix_logprobs(lm, seqs[:1], [6], [[0]])
        with pytest.raises(ValueError, match="at least 2 tokens"):
            prefix_logprobs(lm, seqs[:1], [1], [[5]])


def test_prefix_scores_argmax_equal_float64_argmax_of_each_text():
    """The most probable tokens the same pass gives (the verbatim check's answers), at positions of their
    own, next to the scored ones."""
    model = _model("gemma3", **FAMILIES["gemma3"])
    lm = types.SimpleNamespace(model=model, tokenizer=types.SimpleNamespace(pad_token_id=0),
                               adapter=get_adapter(model), device=torch.device("cpu"))
    g = torch.Generator().manual_seed(4)
    stem = torch.randint(3, 211, (5,), generator=g).tolist()
    seqs = [stem + torch.randint(3, 211, (n,), generator=g).tolist() for n in (7, 4)]
    lps, best = prefix_scores(lm, seqs, [5, 5], [[6, 8], [5]], [[5, 6, 7, 11], []], batch_size=1)
    only, none = prefix_scores(lm, seqs, [5, 5], [[], []], [[9, 10], [6]])
    with torch.no_grad():
        ref = [model(torch.tensor([s])).logits[0].argmax(-1).tolist() for s in seqs]
    assert best == [[ref[0][j - 1] for j in (5, 6, 7, 11)], []]
    assert [a.shape for a in lps] == [(2,), (1,)] and [a.shape for a in only] == [(0,), (0,)]
    assert none == [[ref[0][8], ref[0][9]], [ref[1][5]]]


def test_reduce_after_prefix_hands_over_each_position_once_one_tail_batch_at_a_time():
    """The evidence passes reduce each tail batch's logits as it comes (a target's log-prob, an argmax)
    instead of keeping every scored position's full vocabulary: the option-order test of 32 items in 9
    orders kept 7,000 rows of SmolLM2's 49k-token vocabulary (1.4 GB). Every position comes once, with
    the logits logits_after_prefix keeps, and no call carries more than one tail batch's positions."""
    model = _model("llama")
    g = torch.Generator().manual_seed(5)
    prefixes = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (6, 3, 4)]
    tails = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (4, 5, 3, 6, 2, 5, 4, 3)]
    owners = [0, 0, 1, 1, 1, 2, 2, 0]
    pairs = [(r, c) for r, t in enumerate(tails) for c in range(len(t))]
    rows, cols = torch.tensor([r for r, _ in pairs]), torch.tensor([c for _, c in pairs])
    kept = logits_after_prefix(model, None, prefixes, tails, owners, rows, cols, batch_size=2)
    seen = torch.zeros(len(pairs), dtype=torch.long)
    sizes: list[int] = []

    def consume(sel, x):
        assert x.shape == (sel.numel(), 211)
        assert torch.equal(x, kept[sel])
        seen[sel] += 1
        sizes.append(sel.numel())

    reduce_after_prefix(model, None, prefixes, tails, owners, rows, cols, consume, batch_size=2)
    assert seen.tolist() == [1] * len(pairs)
    longest_two = sum(sorted((len(t) for t in tails), reverse=True)[:2])
    assert len(sizes) > 2 and max(sizes) <= longest_two


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2"])
def test_reference_scores_in_chunks_equal_the_full_logits(family, monkeypatch):
    """The held-out reference and other-split passes take each position's log-prob and argmax from the LM head
    two positions at a time inside the pass (a large vocabulary's [B, T, V] logits never exist at once): the
    same numbers as from the whole pass's logits, in float64, and the same as each text run alone."""
    from reporter.collect import reference

    model = _model(family, **FAMILIES[family])
    lm = types.SimpleNamespace(model=model, tokenizer=types.SimpleNamespace(pad_token_id=0),
                               adapter=get_adapter(model), device=torch.device("cpu"))
    g = torch.Generator().manual_seed(6)
    seqs = [torch.randint(3, 211, (n,), generator=g).tolist() for n in (9, 4, 1, 7, 12)]
    monkeypatch.setattr(reference, "SCORE_CHUNK", 2 * 2 * 211)  # batch 2: two positions per chunk
    chunked = reference.logprobs_and_greedy(lm, seqs, batch_size=2)
    monkeypatch.setattr(reference, "head_output_is_logits", lambda m: False)
    full = reference.logprobs_and_greedy(lm, seqs, batch_size=2)
    for s, a, b, ga, gb in zip(seqs, chunked[0], full[0], chunked[1], full[1]):
        assert a.shape == b.shape == (max(0, len(s) - 1),) and a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(ga, gb)
        if len(s) > 1:
            with torch.no_grad():
                lp = torch.log_softmax(model(torch.tensor([s])).logits[0], -1)
            np.testing.assert_allclose(a, [float(lp[j - 1, s[j]]) for j in range(1, len(s))], rtol=0, atol=1e-6)
