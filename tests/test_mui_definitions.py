"""The named MUI definitions: paper, contribution and mui-eval, and LPP's short-text rule.

``paper`` and ``contribution`` are checked against the float64 loop reference in tests/test_mui.py;
here: that they differ where they should, and the ``mui-eval`` definition against a slow
reference written from the authors' pipeline as documented in reporter.collect.collectors.mui_eval
(the full [d_ff x vocab] projection per layer, half-precision products, a plain sort by score
with ties in flat-index order, the top 2000 kept, then the selection rules), one sample at a time.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from reporter.collect.collectors.lpp import LPPCollector
from reporter.collect.collectors.mui import key_neurons
from reporter.config.profile import _parse
from reporter.errors import ConfigError
from reporter.instrument.hooked_pass import PassBatch, hooked_pass
from reporter.instrument.hooks import HookSet
from reporter.metrics.mui import k_mui_eval
from reporter.metrics.spectra import entropy
from reporter.models.adapters import get_adapter

V, D, F, L = 97, 32, 64, 2


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                                        num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2)).eval()


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=D, n_inner=F, n_layer=L, n_head=4, bos_token_id=0,
                                      eos_token_id=0, initializer_range=0.2)).eval()


def samples(seed=0, shapes=((9, 4), (6, 2), (40, 5))):
    """(input_ids [1, n], response mask [1, n]) per sample; the last one has 35 response tokens
    (35 x 64 = 2240 scored entries per layer: more than the 2000 the authors keep)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, p in shapes:
        ids = torch.randint(0, V, (1, n), generator=g)
        rm = torch.zeros(1, n, dtype=torch.bool)
        rm[0, p:] = True
        out.append((ids, rm))
    return out


def mui_eval_reference(model, ids, rm, *, mode, top_ratio, rho=0.9, vocab_size=None):
    """One sample, by the documented pipeline, slowly."""
    layers = model.model.layers
    acts = {}
    with HookSet() as hs:
        for n, layer in enumerate(layers):
            hs.on_output(layer.mlp.act_fn, lambda out, n=n: acts.__setitem__(n, out.detach()))
        with torch.no_grad():
            model(input_ids=ids)
    vs = vocab_size or model.lm_head.weight.shape[0]
    unembedding = model.lm_head.weight.data.T[:, :vs]  # [d, V']
    positions = [t for t in range(ids.shape[1]) if rm[0, t]]
    kept = []  # per layer: [(value, flat index)] best first, at most 2000
    for n, layer in enumerate(layers):
        a = acts[n].half()[0]  # [T, F]
        full = torch.matmul(layer.mlp.down_proj.weight.data.T.float(), unembedding.float()).half()  # [F, V']
        entries = []
        for r, t in enumerate(positions):
            tok = int(ids[0, t])  # the token AT t
            for i in range(F):
                v = a[t, i] if mode == "activation" else a[t, i] * full[i, tok]  # half * half
                entries.append((float(v), r * F + i))
        entries.sort(key=lambda e: (-e[0], e[1]))
        kept.append(entries[:2000])
    chosen = set()
    if mode == "global_topk":
        allk = [(v, n, idx % F) for n in range(len(layers)) for v, idx in kept[n]]
        allk.sort(key=lambda e: -e[0])  # Python's sort is stable: layer order, then rank order
        chosen = {n * F + i for _, n, i in allk[: int(top_ratio * F * len(layers))]}
    else:
        for n in range(len(layers)):
            if not kept[n]:
                continue
            if mode == "topscore":
                top = kept[n][0][0]
                for v, idx in kept[n]:
                    if v < top * rho:
                        break
                    chosen.add(n * F + idx % F)
            else:
                chosen |= {n * F + idx % F for _, idx in kept[n][: int(top_ratio * F)]}
    return np.array(sorted(chosen), dtype=np.int64)


@pytest.mark.parametrize("mode, top_ratio", [("score", 0.05), ("score", 0.2), ("activation", 0.05),
                                             ("topscore", 0.05), ("global_topk", 0.05)])
def test_mui_eval_equals_the_documented_pipeline(llama, mode, top_ratio):
    for ids, rm in samples():
        got = key_neurons(llama, ids, torch.ones_like(ids), rm, top_ratio=top_ratio, mode=mode, rho=0.9,
                          definition="mui-eval")[0]
        want = mui_eval_reference(llama, ids, rm, mode=mode, top_ratio=top_ratio)
        np.testing.assert_array_equal(got, want, err_msg=f"{mode} n={ids.shape[1]}")


def test_mui_eval_slices_the_vocabulary_and_copies_k_zero(llama):
    ids, rm = samples(seed=1)[0]
    ids[0, 5] = V - 1  # a response token beyond the tokenizer's vocab_size: that position is not scored
    got = key_neurons(llama, ids, torch.ones_like(ids), rm, top_ratio=0.05, definition="mui-eval",
                      vocab_size=V - 5)[0]
    keep = rm.clone()
    keep[0, 5] = False
    want = mui_eval_reference(llama, ids, keep, mode="score", top_ratio=0.05, vocab_size=V - 5)
    np.testing.assert_array_equal(got, want)
    # int(0.001 * 64) = 0: the authors' code keeps no neuron for d_ff < 1000, and so does this definition
    assert k_mui_eval(0.001, F) == 0
    assert key_neurons(llama, ids, torch.ones_like(ids), rm, top_ratio=0.001, definition="mui-eval")[0].size == 0


def test_definitions_differ_on_a_gated_mlp_and_agree_on_a_plain_one(llama, gpt2):
    ids, rm = samples(seed=2)[0]
    am = torch.ones_like(ids)
    sets = {d: key_neurons(llama, ids, am, rm, top_ratio=0.1, definition=d)[0] for d in
            ("paper", "contribution", "mui-eval")}
    assert not np.array_equal(sets["paper"], sets["contribution"])  # σ(W_gate x) vs σ(W_gate x) ⊙ (W_up x)
    assert not np.array_equal(sets["paper"], sets["mui-eval"])  # next token vs token t, float64 vs half
    plain = {d: key_neurons(gpt2, ids, am, rm, top_ratio=0.1, definition=d)[0] for d in ("paper", "contribution")}
    np.testing.assert_array_equal(plain["paper"], plain["contribution"])  # no gate: one activation


def test_paper_definition_hooks_the_activation_function_output(llama):
    """What the paper definition ranks is act_fn's output: zeroing up_proj cannot change it, but it changes
    the contribution definition (whose activation is act(gate) * up)."""
    import copy

    ids, rm = samples(seed=3)[0]
    am = torch.ones_like(ids)
    m2 = copy.deepcopy(llama)
    with torch.no_grad():
        for layer in m2.model.layers:  # up_proj scaled per neuron: act(gate) unchanged, a = act * up changes
            layer.mlp.up_proj.weight.mul_(torch.linspace(0.1, 3.0, F)[:, None])
    # only layer 0's activations are unchanged (layer 1 sees a different residual stream): compare layer 0
    p1 = key_neurons(llama, ids, am, rm, top_ratio=0.1, mode="activation")[0]
    p2 = key_neurons(m2, ids, am, rm, top_ratio=0.1, mode="activation")[0]
    np.testing.assert_array_equal(p1[p1 < F], p2[p2 < F])
    c1 = key_neurons(llama, ids, am, rm, top_ratio=0.1, mode="activation", definition="contribution")[0]
    c2 = key_neurons(m2, ids, am, rm, top_ratio=0.1, mode="activation", definition="contribution")[0]
    assert not np.array_equal(c1[c1 < F], c2[c2 < F])


def test_definition_is_validated_in_the_profile():
    with pytest.raises(ConfigError, match=r"mui.definition: unknown definition 'paper2' \(did you mean 'paper'\?\)"):
        _parse({"tasks": ["arc_easy"], "mui": {"definition": "paper2"}}, "p.yaml", None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lpp.short_texts: 'drop' is not valid; use official or exclude"):
        _parse({"tasks": ["arc_easy"], "lpp": {"short_texts": "drop"}}, "p.yaml", None)  # type: ignore[arg-type]
    p = _parse({"tasks": ["arc_easy"]}, "p.yaml", None)  # type: ignore[arg-type]
    assert (p.mui.definition, p.lpp.short_texts) == ("paper", "official")


# --- LPP: texts shorter than a prefix ------------------------------------------------------------

def test_short_texts_official_and_exclude_against_a_per_text_loop(gpt2):
    lengths = [20, 13, 7, 20, 16]  # context 20, prefixes 4, 8, ..., 20: three texts end early
    g = torch.Generator().manual_seed(0)
    texts = [torch.randint(0, V, (n,), generator=g) for n in lengths]
    T = max(lengths)
    ids = torch.zeros(len(texts), T, dtype=torch.long)
    am = torch.zeros(len(texts), T, dtype=torch.long)
    for r, t in enumerate(texts):
        ids[r, :t.numel()] = t
        am[r, :t.numel()] = 1
    got = {}
    for rule in ("official", "exclude"):
        col = LPPCollector(context=20, step=4, min_tokens=1, short_texts=rule)
        hooked_pass(gpt2, get_adapter(gpt2), PassBatch(ids, am, torch.zeros_like(am, dtype=torch.bool)), [col])
        got[rule] = {p["m"]: (p["entropy"], p["n_texts"]) for p in col.result()["per_prefix"]}
    for m in (4, 8, 12, 16, 20):
        official, kept = [], []
        for t in texts:  # one text at a time, unpadded
            with torch.no_grad():
                logits = gpt2(input_ids=t[None]).logits[0]
            at = min(m, t.numel()) - 1
            e = float(entropy(logits[at].to(torch.float64)))
            official.append(e)
            if t.numel() >= m:
                kept.append(e)
        assert got["official"][m][1] == len(texts)
        assert got["official"][m][0] == pytest.approx(sum(official) / len(official), abs=1e-6)
        assert got["exclude"][m][1] == len(kept)
        assert got["exclude"][m][0] == pytest.approx(sum(kept) / len(kept), abs=1e-6) if kept else \
            math.isnan(got["exclude"][m][0])
    assert got["official"][20][0] != pytest.approx(got["exclude"][20][0], abs=1e-6)
