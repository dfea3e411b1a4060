"""A prefix every prompt of a batch shares runs once, and nothing a user reads changes.

:func:`reporter.instrument.decode.greedy_decode` runs the longest common prefix of a batch's
prompts (a chat template's system prompt and instruction, few-shot examples) once and the rest
of each prompt on its repeated KV cache. The reference is the same loop with the prefix run in
every row (``share_prefix=False``, itself tested against ``generate`` and the teacher-forced
pass in test_fused): in float64 the tokens, MUI's key neurons, the prompt's and response's
log-probs and the option probabilities must be equal, on Llama, Qwen2, Gemma-3, GPT-2,
GPT-NeoX, OPT and Phi-3, with prompts of different lengths (the rest is left-padded after the prefix). The
tests also check, by counting the tokens the embedding sees, that the prefix did run once, and
that it does not where it must not.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reporter.collect.collectors.calibration import CalibrationCollector
from reporter.collect.collectors.logprobs import TokenLogProbCollector
from reporter.collect.collectors.mui_fused import MUIStepCollector
from reporter.instrument.decode import SHARED_PREFIX_MIN, greedy_decode, shared_prefix_length
from reporter.models.adapters import get_adapter

from .conftest import assert_same_results, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

ARCHS = ("llama", "qwen2", "gemma3", "gpt2", "gpt_neox", "opt", "phi3")
PREFIX = [3, 9, 4, 17, 5, 22, 6, 40, 7, 41, 8, 42]  # 12 tokens, like a template's system prompt
TAILS = [[50, 51, 52, 53, 54, 55, 56, 57, 58], [60, 61], [62, 63, 64, 65], [66], [67, 68, 69, 70, 71, 72],
         [73, 74, 75], [76, 77, 78, 79, 80, 81, 82], [83, 84]]
PROMPTS = [PREFIX + t for t in TAILS]
LETTERS = [[30], [31, 32], [33], [34]]
#: each prompt's question starts after the prefix, at a different token (Min-K% reads from there)
SPANS = [(len(PREFIX) + k % 2, len(p)) for k, p in enumerate(PROMPTS)]


def _count_prefill_tokens(model):
    """A hook counting the tokens each forward embeds (the first forward of a decode is the prefill)."""
    seen: list[int] = []
    emb = model.get_input_embeddings()
    return seen, emb.register_forward_hook(lambda m, i, o: seen.append(int(i[0].numel())))


def _decode(model, share, collectors, eos, max_new=6):
    seen, handle = _count_prefill_tokens(model)
    try:
        out = greedy_decode(model, get_adapter(model), PROMPTS, pad_id=0, eos_ids=eos, max_new_tokens=max_new,
                            collectors=collectors, share_prefix=share)
    finally:
        handle.remove()
    return out, seen


def _collectors():
    return [MUIStepCollector(0.05, "score"), TokenLogProbCollector(SPANS),
            CalibrationCollector(LETTERS, n_options=[4, 3, 4, 2, 4, 4, 3, 4])]


@pytest.mark.parametrize("arch", ARCHS)
def test_shared_prefix_changes_nothing_in_float64(arch):
    model = tiny_model(arch, vocab=97, seed=5).to(torch.float64)
    free = greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=8, share_prefix=False)
    eos = {free[1][2], free[4][1]}  # two rows finish early and leave the batch (and its cache)
    shared_c, plain_c = _collectors(), _collectors()
    shared, seen_shared = _decode(model, True, shared_c, eos)
    plain, seen_plain = _decode(model, False, plain_c, eos)
    assert shared == plain
    assert len({len(s) for s in shared}) > 1  # rows finished at different steps
    width = max(len(t) for t in TAILS)
    # the prefix ran once (batch size 1), then every row's rest: not 8 rows of the whole prompt. The
    # log-probs read from the position predicting the first question token, the prefix's last: it stays
    shared_len = len(PREFIX) - 1
    assert seen_shared[:2] == [shared_len, len(PROMPTS) * (width + 1)]
    assert seen_plain[0] == len(PROMPTS) * (len(PREFIX) + width)
    kept = [s[:-1] if s and s[-1] in eos else s for s in shared]
    for group in (shared_c, plain_c):
        for c in group:
            c.finish([len(k) for k in kept])
    assert_same_results(shared_c, plain_c, kept)
    for a, (s, _) in zip(shared_c[1].prompt_results(), SPANS, strict=True):  # NaN before the question only
        assert np.isnan(a[:s - 1]).all() and not np.isnan(a[s - 1:]).any()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_float32_tokens_equal(arch):
    """In float32 the prefix's numbers are summed in another batch shape; the tokens do not move here."""
    model = tiny_model(arch, vocab=97, seed=6, layers=3, hidden=64, intermediate=256)
    shared = greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=8)
    plain = greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=8, share_prefix=False)
    assert shared == plain


def test_no_sharing_where_a_collector_reads_the_prefix():
    """A collector reading every prompt position (log-probs without question spans) sees the batch's own
    pass over the whole prompts; a span starting inside the prefix cuts the shared part before it."""
    model = tiny_model("llama", vocab=97, seed=5).to(torch.float64)
    _, seen = _decode(model, True, [TokenLogProbCollector()], set(), max_new=2)
    width = max(len(p) for p in PROMPTS)
    assert seen[0] == len(PROMPTS) * width
    spans = [(SHARED_PREFIX_MIN + 3, len(p)) for p in PROMPTS]  # the question starts at token 11 everywhere
    col = TokenLogProbCollector(spans)
    _, seen = _decode(model, True, [col], set(), max_new=2)
    shared = SHARED_PREFIX_MIN + 2  # the position predicting token 11 must be in the batch's pass
    assert seen[:2] == [shared, len(PROMPTS) * (width - shared)]


class _PluginStep:
    """A plugin's step collector written before prefixes were shared: its hook sees the prefill's full width."""

    prompt_positions = 1

    def __init__(self):
        self.widths = []

    def attach(self, hooks, adapter, prompt):
        self.width = prompt.input_ids.shape[1]
        hooks.on_input(adapter.down_proj(0), lambda x: self.widths.append(x.shape[1]))

    def after_step(self, step, logits, next_tokens, rows):
        pass

    def finish(self, lengths):
        pass


def test_a_collector_that_does_not_say_it_shares_sees_the_whole_prompts():
    """Sharing is opt-in (``shares_prefix``): a third-party step collector keeps the [B, P] prefill it was
    written for, and with it every other collector of the batch."""
    model = tiny_model("llama", vocab=97, seed=5).to(torch.float64)
    plugin = _PluginStep()
    _, seen = _decode(model, True, [plugin, MUIStepCollector(0.05, "score")], set(), max_new=2)
    assert seen[0] == len(PROMPTS) * max(len(p) for p in PROMPTS)
    assert plugin.widths[0] == plugin.width == max(len(p) for p in PROMPTS)


def test_no_sharing_past_a_sliding_window():
    """Pads after the prefix lengthen a short prompt's distances in the cache: with a window the prompts and
    answers could outgrow, the prompts run whole; the tokens stay those of the unshared loop."""
    model = tiny_model("gemma3", vocab=97, seed=5).to(torch.float64)
    width = max(len(p) for p in PROMPTS)
    model.config.sliding_window = width + 4  # 6 new tokens would reach past it
    shared, seen = _decode(model, True, [], set(), max_new=6)
    assert seen[0] == len(PROMPTS) * width
    plain, _ = _decode(model, False, [], set(), max_new=6)
    assert shared == plain
    model.config.sliding_window = width + 6  # everything fits: shared again
    _, seen = _decode(model, True, [], set(), max_new=6)
    assert seen[0] == len(PREFIX)


def test_shared_prefix_length_rules():
    assert shared_prefix_length(PROMPTS) == len(PREFIX)
    assert shared_prefix_length(PROMPTS[:1]) == 0  # one prompt: nothing to share
    assert shared_prefix_length(PROMPTS[:2]) == 0  # 12 positions saved: not worth a forward of its own
    assert shared_prefix_length([PREFIX[:5] + t for t in TAILS]) == 0  # shorter than SHARED_PREFIX_MIN
    assert shared_prefix_length([PREFIX] * 8) == len(PREFIX) - 1  # every prompt keeps its last token
    assert shared_prefix_length([PREFIX + [1]] * 5 + [PREFIX[:9] + [2]] * 5) == 9


@pytest.mark.parametrize("why", ["no batch_repeat_interleave", "a layer that is not plain keys and values"])
def test_a_cache_that_cannot_be_repeated_falls_back_to_the_whole_prompts(monkeypatch, why):
    """A model whose KV cache cannot be repeated across rows (no ``batch_repeat_interleave``, or a layer other than
    plain keys and values: a recurrent state would carry the pads) runs the whole prompts after the prefix's
    forward, with the same tokens."""
    from transformers import cache_utils

    from reporter.instrument import decode

    model = tiny_model("llama", vocab=97, seed=5).to(torch.float64)
    plain, _ = _decode(model, False, [], set(), max_new=4)
    if why == "no batch_repeat_interleave":
        monkeypatch.delattr(cache_utils.Cache, "batch_repeat_interleave")
    else:  # Llama's DynamicLayer taken off the list, as a Mamba or a quantised layer is
        monkeypatch.setattr(decode, "_REPEATABLE_LAYERS", frozenset({"DynamicSlidingWindowLayer"}))
    shared, seen = _decode(model, True, [], set(), max_new=4)
    assert shared == plain
    assert seen[:2] == [len(PREFIX), len(PROMPTS) * max(len(p) for p in PROMPTS)]


def _scaled_rope_models():
    """Phi-3 with ``longrope`` (original context 16) and Llama with ``dynamic`` NTK scaling (16): RoPE chosen
    per forward call from its longest position, below the prompts' 21 tokens plus answers."""
    from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM

    hd = 16
    torch.manual_seed(5)
    phi = Phi3ForCausalLM(Phi3Config(
        num_hidden_layers=2, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=97, pad_token_id=0, max_position_embeddings=64, original_max_position_embeddings=16,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 16,
                         "short_factor": [1.0] * (hd // 2), "long_factor": [float(1 + i) for i in range(hd // 2)]}))
    torch.manual_seed(5)
    llama = LlamaForCausalLM(LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=97, max_position_embeddings=16,
        rope_parameters={"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0}))
    return {"longrope": phi.eval().to(torch.float64), "dynamic": llama.eval().to(torch.float64)}


@pytest.mark.parametrize("rope", ["longrope", "dynamic"])
def test_no_sharing_where_rope_depends_on_the_call(rope, monkeypatch):
    """A prefix run alone would be rotated as a short text: the prompts run whole, and the log-probs equal the
    unshared loop's. Forced to share, the same model's log-probs move (the guard is what keeps them). Each run
    gets a fresh model: ``dynamic`` keeps the frequencies of the longest call so far."""
    from reporter.instrument import decode

    runs = {}
    for name, share in (("guarded", True), ("plain", False)):
        model = _scaled_rope_models()[rope]
        col = TokenLogProbCollector(SPANS)
        out, seen = _decode(model, share, [col], set(), max_new=4)
        col.finish([len(o) for o in out])
        runs[name] = (seen, col.prompt_results())
    assert runs["guarded"][0][0] == len(PROMPTS) * max(len(p) for p in PROMPTS)  # not shared
    for a, b in zip(runs["guarded"][1], runs["plain"][1]):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(decode, "_sharing_limit", lambda model: None)
    model = _scaled_rope_models()[rope]
    col = TokenLogProbCollector(SPANS)
    out, seen = _decode(model, True, [col], set(), max_new=4)
    col.finish([len(o) for o in out])
    assert seen[0] < len(PROMPTS) * max(len(p) for p in PROMPTS)  # shared
    moved = float(np.nanmax(np.abs(np.concatenate(col.prompt_results()) - np.concatenate(runs["plain"][1]))))
    assert moved > 1e-6
