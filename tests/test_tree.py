"""The prefix-tree pass (``reduce_over_tree``) against each text run alone, and the option-order test on it.

Each group's texts run as one row, every shared token once, under a tree attention mask. These tests
hold it to the slow, obviously-correct computation: every text run whole, alone (no padding, no
cache, no mask), in float64, on the four architectures of the shared-prefix tests (Gemma-3 with a
sliding window shorter than the texts: the window must count positions of the text, not of the row).
The option-order statistic computed on the tree equals the one computed on the KV-cache path it
replaced (item values and p-values, float64).
"""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from reporter.analyse.contamination import option_order_signal
from reporter.collect.option_order import option_order_evidence
from reporter.collect.text_scores import prefix_scores
from reporter.instrument.tree import probe_errors, reduce_over_tree, tree_supported, tree_tokens
from reporter.models.adapters import get_adapter
from tests.test_prefix import FAMILIES, _model


def _forest(g: torch.Generator) -> tuple[list[list[int]], list[int]]:
    """Three groups of texts sharing prefixes at several depths: a stem, then branches that share a first
    segment, a text that is a prefix of another, a text repeated, and a group of one text."""
    def r(n: int) -> list[int]:
        return torch.randint(3, 211, (n,), generator=g).tolist()

    texts, groups = [], []
    for grp, stem_len in enumerate((6, 2, 9)):
        stem, a, b = r(stem_len), r(3), r(4)
        mine = [stem + a + r(5), stem + a + r(2), stem + b + r(6), stem + a, stem + b + r(3)]
        mine.append(list(mine[2]))  # the same text twice
        if grp == 1:
            mine = mine[:1]
        texts += mine
        groups += [grp] * len(mine)
    texts.append(list(texts[0]))  # the same tokens as text 0, in a group of its own: shares nothing
    groups.append(7)
    return texts, groups


def _pick(texts: list[list[int]], g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [(r, c) for r, t in enumerate(texts) for c in range(len(t))]
    pick = [pairs[k] for k in torch.randperm(len(pairs), generator=g)[:n].tolist()]
    return torch.tensor([p[0] for p in pick]), torch.tensor([p[1] for p in pick])


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reduce_over_tree_equals_each_text_run_alone(family, batch_size):
    model = _model(family, **FAMILIES[family])
    g = torch.Generator().manual_seed(2)
    texts, groups = _forest(g)
    rows, cols = _pick(texts, g, 90)  # shared positions chosen by several texts among them
    got = torch.full((rows.numel(), 211), float("nan"), dtype=torch.float64)
    handed = torch.zeros(rows.numel(), dtype=torch.long)

    def keep(sel, x):
        got[sel] = x
        handed[sel] += 1

    reduce_over_tree(model, get_adapter(model), texts, groups, rows, cols, keep, batch_size=batch_size)
    assert handed.tolist() == [1] * rows.numel()  # every chosen position once
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    with torch.no_grad():
        for k, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
            ref = model(torch.tensor([texts[r]]), use_cache=False).logits[0, c]
            assert torch.allclose(got[k], ref, atol=1e-9, rtol=0), (family, r, c)
    assert tree_supported(model)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_hidden_mode_hands_the_heads_input_and_never_runs_the_head(family):
    """reduce_over_tree(hidden=True): the final hidden states at the chosen positions, from which the head gives
    each text's own logits (float64), while the head module itself runs on no position."""
    model = _model(family, **FAMILIES[family])
    head = model.get_output_embeddings()
    g = torch.Generator().manual_seed(3)
    texts, groups = _forest(g)
    rows, cols = _pick(texts, g, 60)
    got = torch.full((rows.numel(), model.config.hidden_size), float("nan"), dtype=torch.float64)
    handed = torch.zeros(rows.numel(), dtype=torch.long)
    head_positions: list[int] = []
    handle = head.register_forward_hook(lambda m, i, o: head_positions.append(int(o.shape[-2])))

    def keep(sel, h):
        got[sel] = h
        handed[sel] += 1

    try:
        reduce_over_tree(model, get_adapter(model), texts, groups, rows, cols, keep, batch_size=2, hidden=True)
    finally:
        handle.remove()
    assert handed.tolist() == [1] * rows.numel() and head_positions and set(head_positions) == {0}
    with torch.no_grad():
        logits = head(got)
        for k, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
            ref = model(torch.tensor([texts[r]]), use_cache=False).logits[0, c]
            assert torch.allclose(logits[k], ref, atol=1e-9, rtol=0), (family, r, c)


def test_a_group_wider_than_the_widest_row_is_split_into_several_trees(monkeypatch):
    """A row's attention costs its width squared: past MAX_WIDTH tokens a group's further texts start another
    tree, and the numbers stay each text's own."""
    import reporter.instrument.tree as tree

    monkeypatch.setattr(tree, "MAX_WIDTH", 12)
    model = _model("gemma3", **FAMILIES["gemma3"])
    g = torch.Generator().manual_seed(8)
    texts, groups = _forest(g)
    rows, cols = _pick(texts, g, 60)
    widths = []
    emb = model.get_input_embeddings()
    handle = emb.register_forward_pre_hook(lambda _m, args: widths.append(args[0].shape[1]))
    got = torch.zeros(rows.numel(), 211, dtype=torch.float64)
    try:
        reduce_over_tree(model, None, texts, groups, rows, cols, lambda s, x: got.__setitem__(s, x), batch_size=1)
    finally:
        handle.remove()
    assert max(widths) <= max(12, max(len(t) for t in texts)) and len(widths) > 4
    with torch.no_grad():
        for k, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
            ref = model(torch.tensor([texts[r]]), use_cache=False).logits[0, c]
            assert torch.allclose(got[k], ref, atol=1e-9, rtol=0), (r, c)


def test_a_pass_keeps_the_logits_of_few_positions_and_hands_them_over_in_slices(monkeypatch):
    """Memory: a pass takes trees only while their chosen positions' logits stay within HEAD_ELEMENTS (one tree at
    least), and hands them over a slice at a time; every position still comes once, with its own numbers."""
    import reporter.instrument.tree as tree

    model = _model("llama", **FAMILIES["llama"])
    g = torch.Generator().manual_seed(3)
    texts, groups = _forest(g)
    rows, cols = _pick(texts, g, 60)
    emb = model.get_input_embeddings()
    got = torch.zeros(rows.numel(), 211, dtype=torch.float64)

    slices: list[int] = []

    def run() -> tuple[list[int], list[int]]:
        trees, seen = [], []
        slices.clear()

        def keep(sel, x):
            slices.append(sel.numel())
            seen.extend(sel.tolist())
            got[sel] = x

        handle = emb.register_forward_pre_hook(lambda _m, args: trees.append(args[0].shape[0]))
        try:
            reduce_over_tree(model, None, texts, groups, rows, cols, keep, batch_size=8)
        finally:
            handle.remove()
        return trees, seen

    assert run()[0] == [4] and slices == [rows.numel()]  # uncapped: the four trees in one pass, one slice
    monkeypatch.setattr(tree, "HEAD_ELEMENTS", 211 * 10)  # about 10 positions a pass, one tree at least
    monkeypatch.setattr(tree, "SLICE_ELEMENTS", 211 * 3)  # slices of 3 positions
    trees, seen = run()
    assert len(trees) >= 3 and sum(trees) == 4
    assert max(slices) == 3 and len(slices) >= rows.numel() // 3
    assert sorted(seen) == list(range(rows.numel()))
    with torch.no_grad():
        for k, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
            ref = model(torch.tensor([texts[r]]), use_cache=False).logits[0, c]
            assert torch.allclose(got[k], ref, atol=1e-9, rtol=0), (r, c)


def _auto_path_equals_each_text_alone(model: torch.nn.Module) -> None:
    """prefix_scores (auto) on two texts sharing a stem: each log-prob equals the text run alone (float64)."""
    lm = types.SimpleNamespace(model=model, tokenizer=types.SimpleNamespace(pad_token_id=0), adapter=None,
                               device=torch.device("cpu"))
    seqs = [[5, 6, 7, 8, 9, 10, 11, 12], [5, 6, 7, 20, 21, 22, 23]]
    lps, _ = prefix_scores(lm, seqs, [3, 3], [[4, 6, 7], [3, 6]])
    with torch.no_grad():
        for s, js, a in zip(seqs, [[4, 6, 7], [3, 6]], lps):
            lp = torch.log_softmax(model(torch.tensor([s])).logits[0], -1)
            np.testing.assert_allclose(a, [float(lp[j - 1, s[j]]) for j in js], atol=1e-6, rtol=0)


def test_an_architecture_outside_the_tree_families_keeps_the_cache_path():
    """GPT-Neo applies its local window in row coordinates: it is not in TREE_FAMILIES, the probe says no
    without running, and prefix_scores (auto) gives its numbers through the KV-cache path."""
    from transformers import AutoModelForCausalLM, GPTNeoConfig

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(GPTNeoConfig(vocab_size=211, hidden_size=32, num_layers=2, num_heads=2,
                                                          attention_types=[[["global", "local"], 1]],
                                                          window_size=4, max_position_embeddings=64),
                                             dtype=torch.float64).eval()
    assert not tree_supported(model)
    _auto_path_equals_each_text_alone(model)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_the_probe_accepts_a_model_with_the_packaged_vocabulary_and_the_run_takes_the_tree(family, monkeypatch):
    """A 49k-token vocabulary in float32: the probe compares probabilities (the log of a 1e-9 probability moves by
    1e-3 with float rounding, which made the first probe refuse the packaged SmolLM2 and every run fall back),
    and the option-order pass then goes through the tree."""
    import reporter.collect.text_scores as text_scores
    from tests.conftest import tiny_lm
    from tests.test_contamination import toy_items

    lm = tiny_lm(family)
    assert lm.model.get_input_embeddings().weight.shape[0] > 40000
    assert tree_supported(lm.model)
    calls = []
    monkeypatch.setattr(text_scores, "reduce_over_tree", lambda *a, **k: calls.append(1) or reduce_over_tree(*a, **k))
    e = option_order_evidence(lm, toy_items(4), n_perms=3, window=6)
    assert e["n"] == 4 and calls


def test_each_shared_token_runs_once():
    """The rows the model sees hold each group's distinct prefixes, cut after the last chosen position of each
    text: ``tree_tokens`` of the cut texts, no more (pads aside)."""
    model = _model("llama")
    g = torch.Generator().manual_seed(5)
    texts, groups = _forest(g)
    rows, cols = _pick(texts, g, 40)
    last = {r: max(c for rr, c in zip(rows.tolist(), cols.tolist()) if rr == r) for r in set(rows.tolist())}
    cut = [texts[r][:last[r] + 1] for r in sorted(last)]
    seen = []
    emb = model.get_input_embeddings()
    handle = emb.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    try:
        reduce_over_tree(model, None, texts, groups, rows, cols, lambda s, x: None, pad_id=0, batch_size=2)
    finally:
        handle.remove()
    ran = sum(int((ids != 0).sum()) for ids in seen)  # token 0 is the pad here (texts draw from 3..210)
    assert ran == tree_tokens(cut, [groups[r] for r in sorted(last)])
    assert ran < sum(len(t) for t in cut)


def test_reduce_over_tree_refuses_positions_outside_a_text():
    model = _model("llama")
    with pytest.raises(ValueError, match="outside its text"):
        reduce_over_tree(model, None, [[5, 6, 7]], [0], torch.tensor([0]), torch.tensor([3]), lambda s, x: None)
    with pytest.raises(ValueError, match="one group per text"):
        reduce_over_tree(model, None, [[5, 6, 7]], [0, 1], torch.tensor([0]), torch.tensor([1]), lambda s, x: None)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_prefix_scores_tree_and_cache_paths_give_the_same_numbers(family):
    model = _model(family, **FAMILIES[family])
    lm = types.SimpleNamespace(model=model, tokenizer=types.SimpleNamespace(pad_token_id=0),
                               adapter=get_adapter(model), device=torch.device("cpu"))
    g = torch.Generator().manual_seed(6)
    texts, _ = _forest(g)
    shared = [2] * len(texts)
    positions = [sorted(set(torch.randint(2, len(t), (4,), generator=g).tolist())) for t in texts]
    greedy = [sorted(set(torch.randint(2, len(t), (2,), generator=g).tolist())) for t in texts]
    tree = prefix_scores(lm, texts, shared, positions, greedy, batch_size=2, path="tree")
    cache = prefix_scores(lm, texts, shared, positions, greedy, batch_size=2, path="cache")
    for a, b in zip(tree[0], cache[0]):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert tree[1] == cache[1]
    with pytest.raises(ValueError, match="path must be"):
        prefix_scores(lm, texts, shared, positions, path="both")


def test_option_order_statistic_is_the_same_on_the_tree_as_on_the_cache_path():
    """The option-order test on a float64 model: every item's log-likelihoods in every order, and the test's
    p-values, as the KV-cache path gave them before the tree replaced it."""
    from tests.conftest import tiny_lm
    from tests.test_contamination import toy_items

    lm = tiny_lm("llama", vocab="small")
    lm.model.double()
    items = toy_items(12)
    assert tree_supported(lm.model)
    runs = {path: option_order_evidence(lm, items, n_perms=8, window=6, batch_size=3, path=path)
            for path in ("cache", "auto")}
    a, b = runs["cache"], runs["auto"]
    assert (a["path"], b["path"]) == ("KV cache", "prefix tree")
    assert a["n"] == b["n"] >= 10
    for x, y in zip(a["per_item"], b["per_item"]):
        assert x["id"] == y["id"] and x["perms"] == y["perms"] and x["n_scored"] == y["n_scored"]
        np.testing.assert_allclose([x["ll"], *x["perm_ll"]], [y["ll"], *y["perm_ll"]], rtol=0, atol=1e-5)
    sa, sb = option_order_signal(a), option_order_signal(b)
    for key in ("p_value", "p_value_exchangeable", "statistic"):
        assert sa[key] == pytest.approx(sb[key], rel=1e-9, abs=1e-12), key
    np.testing.assert_allclose(sa["item_values"], sb["item_values"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "qwen2"])  # (the tiny Gemma's next-token distributions are flat)
def test_the_probe_takes_the_tree_in_bfloat16_where_it_is_as_close_as_the_cache(family):
    """In bfloat16 every layout of the same computation misses the text alone by ~1e-2; the first probe held the
    tree to an absolute 1e-2 on special-token texts and refused the packaged models. The tree is now held to the
    KV-cache path's own error on ordinary tokens, and the option-order log-likelihoods of both paths agree to
    bfloat16's precision."""
    from tests.conftest import tiny_lm
    from tests.test_contamination import toy_items

    lm = tiny_lm(family)
    lm.model.to(torch.bfloat16)
    e = probe_errors(lm.model)
    assert e["tree"] <= max(2e-2, 4 * e["kv_cache"]) and e["control"] >= 5 * e["tree"], e
    assert tree_supported(lm.model)
    items = toy_items(6)
    tree = option_order_evidence(lm, items, n_perms=3, window=6)
    cache = option_order_evidence(lm, items, n_perms=3, window=6, path="cache")
    assert (tree["path"], cache["path"]) == ("prefix tree", "KV cache")
    for x, y in zip(tree["per_item"], cache["per_item"]):
        a, b = np.array([x["ll"], *x["perm_ll"]]), np.array([y["ll"], *y["perm_ll"]])
        assert np.abs(a - b).max() <= 0.05 * np.abs(b).max() + 0.1, (a, b)


def test_a_model_whose_attention_ignores_the_tree_mask_is_refused_and_keeps_the_cache_path():
    """An attention kernel that applies only causality to a pass without a cache (as some fused kernels do) makes
    the tree's texts see their siblings: the probe's control then equals the tree, it says no, and the numbers
    come from the KV-cache path, equal to each text run alone."""
    from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def causal_only(module, query, key, value, attention_mask, **kw):
        if query.shape[2] == key.shape[2]:  # no cache: the prepared mask is ignored
            return sdpa_attention_forward(module, query, key, value, None, is_causal=query.shape[2] > 1, **kw)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kw)

    AttentionInterface.register("causal_only_test", causal_only)
    AttentionMaskInterface.register("causal_only_test", sdpa_mask)  # transformers' own masks, as for sdpa
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=211, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1,
                                         attn_implementation="causal_only_test")).double().eval()
    e = probe_errors(model)
    assert e["control"] < 5 * e["tree"], e
    assert not tree_supported(model)
    _auto_path_equals_each_text_alone(model)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_prefix_scores_on_the_tree_score_positions_inside_the_shared_prefix(family):
    """On the tree every token of a text runs in the pass, so log-probs and argmaxes inside the shared prefix
    (what the other split's Min-K% needs of a published-order text) equal each text run alone, in float64,
    in the same call as positions after it; the KV-cache path, whose prefix runs apart, refuses them."""
    model = _model(family, **FAMILIES[family])
    lm = types.SimpleNamespace(model=model, tokenizer=types.SimpleNamespace(pad_token_id=0),
                               adapter=get_adapter(model), device=torch.device("cpu"))
    g = torch.Generator().manual_seed(8)
    texts, _ = _forest(g)
    shared = [min(5, len(t) - 1) for t in texts]
    positions = [list(range(1, len(t))) if i % 2 == 0 else [len(t) - 1] for i, t in enumerate(texts)]
    greedy = [[1, len(t) - 1] for t in texts]
    lps, best = prefix_scores(lm, texts, shared, positions, greedy, batch_size=2, path="tree")
    with torch.no_grad():
        for t, js, gs, a, b in zip(texts, positions, greedy, lps, best):
            lp = torch.log_softmax(model(torch.tensor([t]), use_cache=False).logits[0].double(), -1)
            # the scores are kept in float32
            np.testing.assert_allclose(a, [float(lp[j - 1, t[j]]) for j in js], atol=1e-6, rtol=0)
            assert b == [int(lp[j - 1].argmax()) for j in gs]
    with pytest.raises(ValueError, match=r"must lie in \[5,"):
        prefix_scores(lm, texts, shared, positions, greedy, batch_size=2, path="cache")
