"""MUI key neurons against a slow float64 reference, on tiny random models of four families.

The reference below is written independently of ``reporter.collect.collectors.mui``: explicit Python loops
over positions and neurons, float64 numpy, W_down / W_U recovered by applying the modules
to unit vectors in float64 (so GPT-2's Conv1D layout is not taken from the adapter).
"""
from __future__ import annotations

import copy
import math
import operator

import numpy as np
import pytest
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from reporter.collect.ablation import ablate
from reporter.collect.collectors import mui
from reporter.collect.collectors.mui import MUICollector, key_neurons
from reporter.instrument.hooked_pass import Collector, PassBatch, hooked_pass
from reporter.instrument.hooks import HookSet
from reporter.metrics.mui import k_per_layer, per_layer_utilization, random_neurons_like, utilization
from reporter.models.adapters import get_adapter
from reporter.store.neurons import load_neuron_sets, merge_neuron_sets, save_neuron_sets

V, D, F, L = 97, 32, 64, 2
ARCHS = ("llama", "qwen2", "gemma2", "gemma3", "gpt2", "gpt_neox")
#: where each family keeps its layers, MLP and down projection, written out here so that the reference does not find
#: them through the adapters it checks
REF_PATHS = {"llama": ("model.layers", "down_proj"), "qwen2": ("model.layers", "down_proj"),
             "gemma2": ("model.layers", "down_proj"), "gemma3_text": ("model.layers", "down_proj"),
             "gpt2": ("transformer.h", "c_proj"), "gpt_neox": ("gpt_neox.layers", "dense_4h_to_h")}
MODES = ("score", "activation", "topscore", "global_topk")


def make_model(arch: str, dtype=torch.float32, seed: int = 0):
    torch.manual_seed(seed)
    common = dict(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L, num_attention_heads=4)
    if arch == "llama":
        m = LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, initializer_range=0.1, **common))
    elif arch == "qwen2":
        m = Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=2, initializer_range=0.1, **common))
    elif arch == "gemma2":
        m = Gemma2ForCausalLM(Gemma2Config(num_key_value_heads=2, head_dim=8, initializer_range=0.1,
                                           sliding_window=6, **common))
    elif arch == "gemma3":
        m = Gemma3ForCausalLM(Gemma3TextConfig(num_key_value_heads=2, head_dim=8, initializer_range=0.1,
                                               sliding_window=6, **common))
    elif arch == "gpt2":
        m = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=D, n_inner=F, n_layer=L, n_head=4,
                                       initializer_range=0.1, bos_token_id=0, eos_token_id=0))
    elif arch == "gpt_neox":
        m = GPTNeoXForCausalLM(GPTNeoXConfig(initializer_range=0.1, **common))
    else:
        raise ValueError(arch)
    return m.to(dtype).eval()


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one intra-op thread is fastest


@pytest.fixture(scope="module")
def models():
    return {a: make_model(a) for a in ARCHS}


# (total length, prompt length) per sample: mixed lengths, one prompt-only sample (no
# response), one with a single response token, one whose response starts at token 0.
SAMPLES = [(9, 4), (5, 2), (11, 6), (3, 3), (7, 6), (12, 5), (4, 0)]


def make_batch(side: str, seed: int = 1, samples=SAMPLES) -> PassBatch:
    g = torch.Generator().manual_seed(seed)
    T = max(n for n, _ in samples)
    B = len(samples)
    ids = torch.zeros(B, T, dtype=torch.long)
    am = torch.zeros(B, T, dtype=torch.long)
    rm = torch.zeros(B, T, dtype=torch.bool)
    for b, (n, p) in enumerate(samples):
        s = T - n if side == "left" else 0
        ids[b, s:s + n] = torch.randint(1, V, (n,), generator=g)
        am[b, s:s + n] = 1
        rm[b, s + p:s + n] = True
    return PassBatch(ids, am, rm)


def unpadded(batch: PassBatch, b: int) -> PassBatch:
    keep = batch.attention_mask[b].bool()
    return PassBatch(batch.input_ids[b, keep][None], batch.attention_mask[b, keep][None],
                     batch.response_mask[b, keep][None])


def run_key_neurons(model, batch, **kw):
    return key_neurons(model, batch.input_ids, batch.attention_mask, batch.response_mask, **kw)


# --- slow float64 reference -----------------------------------------------------------------

def _module_matrix(mod: torch.nn.Module, n_in: int) -> np.ndarray:
    """The linear map of ``mod`` as [n_out, n_in] in float64: mod(e_i) - mod(0)."""
    m64 = copy.deepcopy(mod).to(torch.float64)
    with torch.no_grad():
        eye = torch.eye(n_in, dtype=torch.float64)
        return (m64(eye) - m64(torch.zeros(1, n_in, dtype=torch.float64))).numpy().T.copy()


GATED = ("llama", "gemma3")


def reference_scores(model, batch: PassBatch, align: str = "next", definition: str = "paper"):
    """Per sample: list of (value_score, value_activation, layer, t, neuron) over scored positions.

    Activations: ``contribution`` — the down projection's input; ``paper`` — for a gated MLP,
    act(gate_proj(x)) recomputed from the MLP's input x with the MLP's own gate_proj and act_fn (in
    the model's dtype, so the same numbers as the forward), for a plain MLP the down input.
    """
    where, down = REF_PATHS[model.config.model_type]
    layers = list(operator.attrgetter(where)(model))
    n_layers = len(layers)
    acts = [None] * n_layers
    mlp_in = [None] * n_layers
    am = batch.attention_mask
    pos_ids = (am.long().cumsum(-1) - 1).clamp(min=0)
    with HookSet() as hs:
        for l in range(n_layers):
            hs.on_input(getattr(layers[l].mlp, down),
                        lambda x, l=l: acts.__setitem__(l, x.detach().to(torch.float64).numpy()))
            hs.on_input(layers[l].mlp, lambda x, l=l: mlp_in.__setitem__(l, x.detach()))
        with torch.no_grad():
            model(input_ids=batch.input_ids, attention_mask=am, position_ids=pos_ids, use_cache=False)
    if definition == "paper" and hasattr(layers[0].mlp, "gate_proj"):
        with torch.no_grad():
            acts = [layers[l].mlp.act_fn(layers[l].mlp.gate_proj(mlp_in[l])).to(torch.float64).numpy()
                    for l in range(n_layers)]
    d_ff, d_model = acts[0].shape[-1], model.config.hidden_size  # the down projection's input, the residual
    w_down = [_module_matrix(getattr(layers[l].mlp, down), d_ff) for l in range(n_layers)]  # [d, F]
    w_u = _module_matrix(model.get_output_embeddings(), d_model)  # [V, d]
    ids, amn, rm = batch.input_ids.numpy(), am.numpy(), batch.response_mask.numpy()
    B, T = ids.shape
    out = []
    for b in range(B):
        entries = []
        positions = [t for t in range(T - 1) if rm[b, t + 1] and amn[b, t + 1] and amn[b, t]]
        for l in range(n_layers):
            for t in positions:
                y = ids[b, t + 1] if align == "next" else ids[b, t]
                for i in range(d_ff):
                    a = float(acts[l][b, t, i])
                    proj = float(np.dot(w_down[l][:, i], w_u[y]))
                    entries.append((a * proj, a, l, t, i))
        out.append(entries)
    return out


def reference_select(entries, mode: str, top_ratio: float, rho: float, n_layers: int, d_ff: int) -> np.ndarray:
    val = (lambda e: e[1]) if mode == "activation" else (lambda e: e[0])
    chosen = set()
    if mode in ("score", "activation"):
        k = max(1, math.floor(top_ratio * d_ff + 1e-9))
        for l in range(n_layers):
            ranked = sorted((e for e in entries if e[2] == l), key=lambda e: (-val(e), e[3], e[4]))
            chosen |= {l * d_ff + e[4] for e in ranked[:k]}
    elif mode == "global_topk":
        k = max(1, math.floor(top_ratio * d_ff * n_layers + 1e-9))
        ranked = sorted(entries, key=lambda e: (-val(e), e[2], e[3], e[4]))
        chosen |= {e[2] * d_ff + e[4] for e in ranked[:k]}
    elif mode == "topscore":
        for l in range(n_layers):
            best = {}
            for e in entries:
                if e[2] == l:
                    best[e[4]] = max(best.get(e[4], -math.inf), val(e))
            if not best:
                continue
            M = max(best.values())
            thr = M - (1 - rho) * abs(M)
            chosen |= {l * d_ff + i for i, v in best.items() if v >= thr}
    return np.array(sorted(chosen), dtype=np.int64)


def assert_sets_equal(got, want, what=""):
    assert len(got) == len(want)
    for b, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, w, err_msg=f"{what} sample {b}")


# --- exactness against the reference --------------------------------------------------------

@pytest.mark.parametrize("definition", ["paper", "contribution"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("arch", ARCHS)
def test_matches_float64_reference_every_mode(models, arch, side, definition, monkeypatch):
    model = models[arch]
    batch = make_batch(side)
    ref = reference_scores(model, batch, definition=definition)
    for mode, top_ratio, rho in [("score", 0.05, 0.9), ("score", 0.001, 0.9), ("activation", 0.05, 0.9),
                                 ("topscore", 0.001, 0.9), ("topscore", 0.001, 0.5), ("global_topk", 0.05, 0.9)]:
        want = [reference_select(e, mode, top_ratio, rho, L, F) for e in ref]
        for dedup in (0.0, 1.0):  # never / always project the distinct next tokens only
            monkeypatch.setattr(mui, "_DEDUP_MAX_FRACTION", dedup)
            got = run_key_neurons(model, batch, top_ratio=top_ratio, mode=mode, rho=rho, definition=definition)
            assert_sets_equal(got, want, f"{arch}/{side}/{definition}/{mode}/{top_ratio}/{rho}/dedup={dedup}")
    # the prompt-only sample has no scored position -> empty set; the others are non-empty
    assert got[3].size == 0 and all(s.size for j, s in enumerate(got) if j != 3)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_matches_reference_with_repeated_response_tokens(models, arch):
    """Responses drawn from 3 tokens: the per-distinct-token projection path (by default)."""
    batch = make_batch("left", seed=4)
    ids = batch.input_ids.clone()
    ids[batch.response_mask] = torch.tensor([5, 9, 11])[torch.arange(int(batch.response_mask.sum())) % 3]
    batch = PassBatch(ids, batch.attention_mask, batch.response_mask)
    ref = reference_scores(models[arch], batch)
    for mode in MODES:
        got = run_key_neurons(models[arch], batch, top_ratio=0.05, mode=mode)
        assert_sets_equal(got, [reference_select(e, mode, 0.05, 0.9, L, F) for e in ref], f"{arch}/{mode}")


def test_topscore_when_every_score_of_a_layer_is_negative():
    """rho * M with M < 0 would keep nothing; the rule M - (1 - rho)|M| keeps the best neurons."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=D, n_inner=F, n_layer=L, n_head=4, bos_token_id=0,
                                       eos_token_id=0, activation_function="sigmoid")).eval()  # a > 0
    with torch.no_grad():
        model.transformer.wte.weight.abs_()  # tied W_U: positive rows
        for blk in model.transformer.h:
            blk.mlp.c_proj.weight.copy_(-blk.mlp.c_proj.weight.abs())  # negative write vectors -> s < 0
    batch = make_batch("left", seed=3)
    ref = reference_scores(model, batch)
    assert all(e[0] < 0 for entries in ref for e in entries)
    got = run_key_neurons(model, batch, mode="topscore", rho=0.9)
    assert_sets_equal(got, [reference_select(e, "topscore", 0.001, 0.9, L, F) for e in ref])
    for j, s in enumerate(got):
        if j != 3:
            assert (np.bincount(s // F, minlength=L) >= 1).all()


def test_bf16_model_ranking_is_exact_in_float64():
    """The fast path runs in bf16; candidate rescoring in float64 makes the ranking exact."""
    model = make_model("llama", dtype=torch.bfloat16, seed=3)
    batch = make_batch("left", seed=5)
    ref = reference_scores(model, batch)
    for mode, top_ratio in [("score", 0.05), ("global_topk", 0.05), ("activation", 0.05), ("topscore", 0.001)]:
        got = run_key_neurons(model, batch, top_ratio=top_ratio, mode=mode)
        want = [reference_select(e, mode, top_ratio, 0.9, L, F) for e in ref]
        assert_sets_equal(got, want, f"bf16/{mode}")


def test_off_by_one_position_t_scored_against_token_t_plus_1(models):
    """The public reference code scores position t against token t; that must NOT be what we compute."""
    model = models["llama"]
    batch = make_batch("right", seed=7)
    got = run_key_neurons(model, batch, top_ratio=0.05, mode="score")
    right = [reference_select(e, "score", 0.05, 0.9, L, F) for e in reference_scores(model, batch, "next")]
    wrong = [reference_select(e, "score", 0.05, 0.9, L, F) for e in reference_scores(model, batch, "current")]
    assert_sets_equal(got, right)
    assert any(not np.array_equal(g, w) for g, w in zip(got, wrong))


def test_scored_positions_are_those_predicting_a_response_token():
    am = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    rm = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0]]).bool()
    b = PassBatch(torch.zeros_like(am), am, rm)
    assert b.scored_positions().tolist() == [[False, False, True, True, True, False],
                                             [False, True, True, False, False, False]]


def test_single_response_token_uses_only_the_last_prompt_position(models):
    """Changing the activations at any position but the last prompt one cannot change the set."""
    model = models["gpt_neox"]
    ids = torch.randint(1, V, (1, 6), generator=torch.Generator().manual_seed(0))
    rm = torch.tensor([[False] * 5 + [True]])
    ad = get_adapter(model)
    seen = []
    with HookSet() as hs:
        hs.on_input(ad.down_proj(0), lambda x: seen.append(x[0].detach().clone()))
        got = run_key_neurons(model, PassBatch(ids, torch.ones_like(ids), rm), top_ratio=0.001, mode="activation")
    # activation mode, k = 1: layer 0's pick is the argmax of the activation at position 4
    assert int(got[0][0]) == int(seen[0][4].argmax())


# --- batching and padding invariance --------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_batch_of_7_equals_batch_of_1_left_and_right_padding(models, arch):
    model = models[arch]
    for side in ("left", "right"):
        batch = make_batch(side, seed=11)
        for mode in MODES:
            got = run_key_neurons(model, batch, top_ratio=0.05, mode=mode)
            one = [run_key_neurons(model, unpadded(batch, b), top_ratio=0.05, mode=mode)[0] for b in range(len(SAMPLES))]
            assert_sets_equal(got, one, f"{arch}/{side}/{mode}")


def test_collector_accumulates_over_batches_and_shares_the_pass(models):
    model = models["gemma3"]
    ad = get_adapter(model)
    batch = make_batch("left", seed=2)
    c1, c2 = MUICollector(0.05, "score"), MUICollector(0.05, "activation")
    assert isinstance(c1, Collector)
    logits = hooked_pass(model, ad, batch, [c1, c2])
    plain = hooked_pass(model, ad, batch, [])
    torch.testing.assert_close(logits, plain, rtol=0, atol=0)  # collectors do not change the pass
    hooked_pass(model, ad, batch, [c1])
    assert len(c1.results()) == 2 * len(SAMPLES)
    assert_sets_equal(c1.results()[:7], c1.results()[7:])
    assert_sets_equal(c2.results(), run_key_neurons(model, batch, top_ratio=0.05, mode="activation"))


def test_all_samples_without_response_give_empty_sets(models):
    batch = make_batch("left", samples=[(5, 5), (3, 3)])
    assert [s.size for s in run_key_neurons(models["gpt2"], batch)] == [0, 0]


def test_k_is_at_least_one(models):
    batch = make_batch("right")
    got = run_key_neurons(models["llama"], batch, top_ratio=1e-9, mode="score")
    for j, s in enumerate(got):
        if j != 3:  # exactly one (t, i) per layer -> one neuron per layer
            assert np.bincount(s // F, minlength=L).tolist() == [1] * L
    assert k_per_layer(1e-9, 64) == 1 and k_per_layer(0.001, 14336) == 14
    g = run_key_neurons(models["llama"], batch, top_ratio=1e-9, mode="global_topk")
    assert all(s.size == 1 for j, s in enumerate(g) if j != 3)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="mode 'bogus' is not valid"):
        MUICollector(mode="bogus")
    with pytest.raises(ValueError, match="top_ratio"):
        MUICollector(top_ratio=0)


def test_hooks_removed_even_when_a_collector_fails(models):
    model = models["llama"]
    ad = get_adapter(model)

    class Boom(MUICollector):
        def after_forward(self, batch, logits):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        hooked_pass(model, ad, make_batch("left"), [Boom(0.05)])
    assert all(len(ad.down_proj(l)._forward_pre_hooks) == 0 for l in range(L))


def test_hooked_pass_runs_in_eval_mode_and_restores_training_flag():
    model = make_model("gpt2").train()
    batch = make_batch("left")
    ad = get_adapter(model)
    a = hooked_pass(model, ad, batch, [])
    b = hooked_pass(model, ad, batch, [])
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # no dropout
    assert model.training and model.transformer.h[0].mlp.dropout.training


# --- set arithmetic -------------------------------------------------------------------------

def test_utilization_and_per_layer_against_set_arithmetic(models):
    sets = run_key_neurons(models["gpt2"], make_batch("left"), top_ratio=0.05, mode="topscore", rho=0.5)
    union = set()
    for s in sets:
        union |= set(s.tolist())
    assert utilization(sets, L, F) == len(union) / (L * F)
    per = per_layer_utilization(sets, L, F)
    assert per == [len({n for n in union if n // F == l}) / F for l in range(L)]
    assert utilization([], L, F) == 0.0
    assert per_layer_utilization([np.array([0, 0, 65])], 2, 64) == [1 / 64, 1 / 64]
    with pytest.raises(ValueError, match="out of range"):
        utilization([np.array([L * F])], L, F)


# --- storage --------------------------------------------------------------------------------

def test_npz_round_trip_and_merge(tmp_path):
    rng = np.random.default_rng(0)
    sets = [np.sort(rng.choice(L * F, size=n, replace=False)) for n in (5, 0, 17)]
    meta = {"model": "tiny", "n_layers": L, "d_ff": F, "top_ratio": 0.05, "mode": "score", "rho": 0.9}
    p = tmp_path / "mui.npz"
    save_neuron_sets(p, ["a", "b", "c"], sets, meta)
    with np.load(p) as z:
        assert z["flat"].dtype == np.int32 and z["offsets"].tolist() == [0, 5, 5, 22]
    ids, got, m = load_neuron_sets(p)
    assert ids == ["a", "b", "c"] and m["model"] == "tiny" and m["d_ff"] == F
    assert_sets_equal(got, sets)
    with pytest.raises(ValueError, match="out of range"):
        save_neuron_sets(tmp_path / "bad.npz", ["x"], [np.array([L * F])], meta)
    with pytest.raises(ValueError, match="duplicate item ids"):
        save_neuron_sets(tmp_path / "bad.npz", ["x", "x"], [np.array([1]), np.array([2])], meta)
    # merge of parts (resume): an item stored twice identically is kept once, in part order
    q = tmp_path / "part2.npz"
    save_neuron_sets(q, ["c", "d"], [sets[2], np.array([3, 1, 3])], meta)
    assert merge_neuron_sets(tmp_path / "all.npz", [p, q]) == 4
    ids, got, _ = load_neuron_sets(tmp_path / "all.npz")
    assert ids == ["a", "b", "c", "d"] and got[3].tolist() == [1, 3]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["all.npz", "mui.npz", "part2.npz"]  # no temp files
    save_neuron_sets(q, ["a"], [np.array([1])], meta)
    with pytest.raises(RuntimeError, match="'a' is already stored with different values"):
        merge_neuron_sets(tmp_path / "all.npz", [p, q])
    save_neuron_sets(q, ["e"], [np.array([1])], {**meta, "top_ratio": 0.01})
    with pytest.raises(RuntimeError, match="different top_ratio"):
        merge_neuron_sets(tmp_path / "all.npz", [p, q])


# --- ablation -------------------------------------------------------------------------------

def test_ablation_zeroes_the_neurons_changes_output_and_removes_hooks(models):
    model = models["llama"]
    ad = get_adapter(model)
    batch = make_batch("left")
    sets = run_key_neurons(model, batch, top_ratio=0.05)
    key = np.unique(np.concatenate(sets))
    plain = hooked_pass(model, ad, batch, [])
    seen = {}
    with ablate(model, ad, key):
        with HookSet() as hs:  # registered after the ablation -> sees the ablated input
            for l in range(L):
                hs.on_input(ad.down_proj(l), lambda x, l=l: seen.__setitem__(l, x.clone()))
            ablated = hooked_pass(model, ad, batch, [])
    for l in range(L):
        cols = key[key // F == l] % F
        assert cols.size and torch.count_nonzero(seen[l][..., cols]) == 0
        others = np.setdiff1d(np.arange(F), cols)
        assert torch.count_nonzero(seen[l][..., others]) > 0
    assert not torch.equal(plain, ablated)
    assert all(len(ad.down_proj(l)._forward_pre_hooks) == 0 for l in range(L))
    with ablate(model, None, np.array([], dtype=np.int64)):
        torch.testing.assert_close(hooked_pass(model, ad, batch, []), plain, rtol=0, atol=0)
    with pytest.raises(KeyError):
        with ablate(model, ad, key):
            assert len(ad.down_proj(0)._forward_pre_hooks) == 1
            raise KeyError("inside")
    assert all(len(ad.down_proj(l)._forward_pre_hooks) == 0 for l in range(L))
    torch.testing.assert_close(hooked_pass(model, ad, batch, []), plain, rtol=0, atol=0)


def test_random_neurons_like_matches_per_layer_counts():
    key = np.array([0, 3, 5, 64 + 7, 3 * 64 + 1, 3 * 64 + 2])
    r = random_neurons_like(key, 4, 64, seed=0)
    assert np.bincount(r // 64, minlength=4).tolist() == np.bincount(key // 64, minlength=4).tolist()
    assert not np.isin(r, key).any() and r.dtype == np.int64 and np.all(np.diff(r) > 0)
    np.testing.assert_array_equal(r, random_neurons_like(key, 4, 64, seed=0))
    assert not np.array_equal(r, random_neurons_like(key, 4, 64, seed=1))
    full = np.arange(64)  # the whole layer: no room to exclude, still the same count
    assert random_neurons_like(full, 1, 64, seed=0).size == 64
