"""The LM head's log-probs and argmaxes a vocabulary slice at a time (instrument.gather.linear_head_scores),
against a float64 log-softmax written out with plain loops."""
from __future__ import annotations

import math

import pytest
import torch

from reporter.instrument import gather
from reporter.instrument.gather import head_scores, linear_head_scores


def slow_scores(logits: torch.Tensor, targets: torch.Tensor) -> tuple[list[float], list[int]]:
    """log_softmax(row)[target] and the first index of the row's maximum, one row and one entry at a time."""
    lps, best = [], []
    for row, t in zip(logits.double().tolist(), targets.tolist()):
        top = max(row)
        lse = top + math.log(sum(math.exp(v - top) for v in row))
        lps.append(row[t] - lse)
        best.append(row.index(top))
    return lps, best


@pytest.mark.parametrize("budget", [1 << 23, 64, 7, 1])
@pytest.mark.parametrize("bias", [False, True])
def test_equals_float64_log_softmax_for_any_slicing(budget, bias, monkeypatch):
    # small slices and blocks: several slices of the vocabulary (one of 3 entries at the end), several blocks
    monkeypatch.setattr(gather, "VOCAB_SLICE", 8)
    monkeypatch.setattr(gather, "POSITION_BLOCK", 5)
    g = torch.Generator().manual_seed(0)
    V, H, M = 43, 6, 13
    lin = torch.nn.Linear(H, V, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(V, H, generator=g) * 2)
        if bias:
            lin.bias.copy_(torch.randn(V, generator=g))
    x = torch.randn(M, H, generator=g)
    t = torch.tensor([0, 7, 8, 15, 16, 42, 40, 41, 3, 24, 31, 32, 39])  # first and last entries of slices
    lp, best = linear_head_scores(lin.weight, lin.bias, x, t, budget=budget)
    ref_lp, ref_best = slow_scores(lin(x).detach(), t)
    assert lp.dtype == torch.float32 and best.dtype == torch.long
    assert lp.tolist() == pytest.approx(ref_lp, abs=2e-5)
    assert best.tolist() == ref_best


def test_argmax_ties_keep_the_first_index_across_slices(monkeypatch):
    monkeypatch.setattr(gather, "VOCAB_SLICE", 4)
    w = torch.zeros(12, 2)
    w[2] = w[6] = w[10] = torch.tensor([1.0, 0.0])  # the same largest logit in three slices
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])  # row 2: every entry but 2, 6, 10 ties at 0
    lp, best = linear_head_scores(w, None, x, torch.tensor([6, 0]))
    assert best.tolist() == [2, 0]
    assert best.tolist() == (x @ w.T).argmax(-1).tolist()


def test_float64_head_is_exact_and_bfloat16_head_rounds_as_nn_linear():
    g = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(5, 300, bias=False).double()
    with torch.no_grad():
        lin.weight.copy_(torch.randn(300, 5, generator=g, dtype=torch.float64))
    x = torch.randn(2, 9, 5, generator=g, dtype=torch.float64)
    t = torch.randint(0, 300, (2, 9), generator=g)
    lp, best = head_scores(lin, x, t, budget=100)
    ref_lp, ref_best = slow_scores(lin(x).detach().reshape(18, 300), t.reshape(-1))
    assert lp.reshape(-1).tolist() == pytest.approx(ref_lp, abs=1e-6)  # float32 result of float64 logits
    assert best.reshape(-1).tolist() == ref_best
    # bfloat16: the logits are the head's own (bfloat16, as nn.Linear gives them), then float32
    lin16 = torch.nn.Linear(5, 300, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        lin16.weight.copy_(lin.weight.to(torch.bfloat16))
    x16 = x.to(torch.bfloat16)
    lp16, best16 = head_scores(lin16, x16, t, budget=100)
    ref16_lp, ref16_best = slow_scores(lin16(x16).detach().float().reshape(18, 300), t.reshape(-1))
    assert lp16.reshape(-1).tolist() == pytest.approx(ref16_lp, abs=1e-4)
    assert best16.reshape(-1).tolist() == ref16_best


def test_a_head_that_is_not_linear_keeps_the_chunked_path():
    class Scaled(torch.nn.Module):  # not an nn.Linear: its forward is what counts
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Linear(4, 30, bias=False)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return 0.5 * self.inner(h)

    head = Scaled()
    x = torch.randn(1, 6, 4)
    t = torch.randint(0, 30, (1, 6))
    lp, best = head_scores(head, x, t, budget=60)
    ref_lp, ref_best = slow_scores(head(x).detach()[0], t[0])
    assert lp[0].tolist() == pytest.approx(ref_lp, abs=2e-5)
    assert best[0].tolist() == ref_best


def test_the_head_probe_gives_its_mask_so_transformers_does_not_warn_of_padding():
    """The probe's two tokens [1, 2] hold SmolLM2's pad id (2), and without an attention mask transformers printed "We
    strongly recommend passing in an `attention_mask`" into the log of every run of a GPT-2 family model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from .conftest import transformers_warnings

    def model():
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, pad_token_id=2,
                                          bos_token_id=1, eos_token_id=2)).eval()

    with transformers_warnings() as seen:
        model()(input_ids=torch.tensor([[1, 2]]))  # the negative control: the probe's call as it was
    assert any("attention_mask" in m for m in seen), seen
    with transformers_warnings() as seen:
        assert gather.head_output_is_logits(model())
    assert not any("attention_mask" in m for m in seen), seen
