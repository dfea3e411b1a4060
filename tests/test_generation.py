"""Batched greedy decoding: batch-size invariance, stop sequences, OOM halving."""
import pytest

from reporter.instrument.hooks import HookSet
from reporter.models.generation import generate

from .conftest import tiny_lm

TEXTS = ["The cat sat on the", "Once upon a time in a land far away, there lived", "1, 2, 3,", "Hello",
         "Paris is the capital of", "A B C D E F G", "def add(a, b):\n    return", "Q: What is 2+2?\nA:",
         "The quick brown fox jumps over the lazy dog because it was"]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_same_tokens_for_batch_size_1_and_8(family):
    lm = tiny_lm(family)
    prompts = [lm.tokenizer(t)["input_ids"] for t in TEXTS]
    assert len({len(p) for p in prompts}) > 4  # mixed lengths: left padding matters
    one = [generate(lm, [p], max_new_tokens=12)[0] for p in prompts]
    eight = generate(lm, prompts, max_new_tokens=12, batch_size=8)
    for a, b in zip(one, eight):
        assert a.response_ids == b.response_ids
        assert a.prompt_ids == b.prompt_ids
    assert any(len(set(g.response_ids)) > 1 for g in eight)


def test_stop_sequence_cuts_text_and_tokens():
    lm = tiny_lm("llama")
    p = lm.tokenizer("Once upon a time")["input_ids"]
    full = generate(lm, [p], max_new_tokens=16)[0]
    assert full.stopped_by == "length" and len(full.response_ids) == 16
    # stop at the third generated token's text
    stop_text = lm.tokenizer.decode(full.response_ids[:3])[-3:]
    cut = generate(lm, [p], max_new_tokens=16, stop=[stop_text])[0]
    assert cut.stopped_by == "stop"
    assert stop_text not in cut.text and full.text.startswith(cut.text)
    assert lm.tokenizer.decode(cut.response_ids) .startswith(cut.text)
    assert len(cut.response_ids) <= 3


def test_out_of_memory_halves_the_batch():
    lm = tiny_lm("llama")
    prompts = [lm.tokenizer(t)["input_ids"] for t in TEXTS[:8]]
    ref = generate(lm, prompts, max_new_tokens=6, batch_size=8)
    sizes = []

    def fail_big(x):
        sizes.append(x.shape[0])
        if x.shape[0] > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with HookSet() as hs:  # a real model whose forward fails like a GPU out of memory
        hs.on_input(lm.model.model.embed_tokens, fail_big)
        got = generate(lm, prompts, max_new_tokens=6, batch_size=8)
    assert [g.response_ids for g in got] == [g.response_ids for g in ref]
    assert 8 in sizes and 4 in sizes and max(s for s in sizes[-3:]) <= 2


def test_other_errors_are_not_swallowed():
    lm = tiny_lm("llama")
    with HookSet() as hs:
        hs.on_input(lm.model.model.embed_tokens, lambda x: (_ for _ in ()).throw(RuntimeError("shape mismatch")))
        with pytest.raises(RuntimeError, match="shape mismatch"):
            generate(lm, [[1, 2, 3]], max_new_tokens=2)
