"""Calibration: ECE and Brier against plain loops; option probabilities on a tiny model's logits."""
import math

import numpy as np
import pytest
import torch

from reporter.collect.collectors.calibration import (
    CalibrationCollector,
    answer_positions,
    letter_token_ids,
    option_probs,
)
from reporter.instrument.hooked_pass import PassBatch, hooked_pass
from reporter.metrics.calibration import brier_score, calibration_summary, expected_calibration_error

from .conftest import tiny_lm


def ref_ece(conf, correct, n_bins=10):
    """Guo et al. (2017): bins (lo, hi] with edges k / n_bins; a confidence of exactly 0 goes to bin 0."""
    edges = [k / n_bins for k in range(n_bins + 1)]
    total = 0.0
    for k in range(n_bins):
        members = [i for i, c in enumerate(conf) if (edges[k] < c <= edges[k + 1]) or (k == 0 and c == 0)]
        if members:
            acc = sum(correct[i] for i in members) / len(members)
            avg = sum(conf[i] for i in members) / len(members)
            total += len(members) / len(conf) * abs(acc - avg)
    return total


def ref_brier(probs, gold):
    total = 0.0
    for row, g in zip(probs, gold):
        total += sum((p - (1.0 if k == g else 0.0)) ** 2 for k, p in enumerate(row))
    return total / len(probs)


def test_ece_matches_loop_reference():
    rng = np.random.default_rng(0)
    for n_bins in (5, 10, 15):
        conf = rng.uniform(0, 1, 300).tolist() + [0.0, 1.0, 0.3, 0.7, 0.5]  # bin edges included
        correct = rng.integers(0, 2, len(conf)).tolist()
        assert expected_calibration_error(conf, correct, n_bins) == pytest.approx(ref_ece(conf, correct, n_bins),
                                                                                  abs=1e-12)
    assert expected_calibration_error([1.0, 1.0], [1, 1]) == 0.0
    assert expected_calibration_error([0.8] * 5, [1, 1, 1, 1, 0]) == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(expected_calibration_error([], []))


def test_brier_matches_loop_reference():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(50, 4))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    gold = rng.integers(0, 4, 50)
    assert brier_score(probs, gold) == pytest.approx(ref_brier(probs.tolist(), gold.tolist()), rel=1e-12)
    assert brier_score([[1.0, 0.0]], [1]) == 2.0


def test_calibration_summary_ragged_rows():
    probs = [[0.7, 0.2, 0.1], [0.4, 0.6], [0.25, 0.25, 0.25, 0.25]]
    gold = [0, 0, 3]
    s = calibration_summary(probs, gold, n_bins=10)
    assert s["n"] == 3 and s["accuracy"] == pytest.approx(1 / 3)  # argmax of row 3 is 0
    assert s["brier"] == pytest.approx(np.mean([ref_brier([p], [g]) for p, g in zip(probs, gold)]))
    assert s["ece"] == pytest.approx(ref_ece([0.7, 0.6, 0.25], [1, 0, 0]))


@pytest.fixture(scope="module")
def lm():
    return tiny_lm("llama", init_std=0.5)


def test_letter_token_ids_cover_both_spellings(lm):
    ids = letter_token_ids(lm.tokenizer, 4)
    assert len(ids) == 4
    for letter, toks in zip("ABCD", ids):
        assert lm.tokenizer.convert_tokens_to_ids(letter) in toks  # "A"
        assert lm.tokenizer.encode(" " + letter, add_special_tokens=False)[0] in toks  # " A"
        assert len(toks) == len(set(toks)) == 2


def test_option_probs_on_tiny_model_logits_match_manual_softmax(lm):
    ids = torch.tensor([lm.tokenizer("Question: 2+2? A. 3 B. 4 C. 5\nAnswer:")["input_ids"][:14],
                        lm.tokenizer("Which is red? A. sky B. grass C. blood\nAnswer:")["input_ids"][:14]])
    with torch.no_grad():
        logits = lm.model(ids).logits[:, -1]  # [B, V]
    letters = letter_token_ids(lm.tokenizer, 3)
    got, mass = option_probs(logits, letters, return_mass=True)
    for b in range(2):  # manual: softmax over V in float64, sum each letter's spellings, renormalise
        z = logits[b].double().numpy()
        p = np.exp(z - z.max())
        p /= p.sum()
        m = np.array([sum(p[t] for t in toks) for toks in letters])
        np.testing.assert_allclose(got[b], m / m.sum(), rtol=1e-9)
        assert mass[b] == pytest.approx(m.sum(), rel=1e-9)
    assert got.shape == (2, 3)


def test_collector_reads_the_last_prompt_position_in_a_shared_pass(lm):
    prompts = [lm.tokenizer("Pick one. A. x B. y\nAnswer:")["input_ids"],
               lm.tokenizer("Q? A. a B. b C. c D. d\nAnswer:")["input_ids"]]
    responses = [lm.tokenizer(" B")["input_ids"], lm.tokenizer(" D because")["input_ids"]]
    seqs = [p + r for p, r in zip(prompts, responses)]
    width = max(map(len, seqs))
    ids = torch.zeros(2, width, dtype=torch.long)
    am = torch.zeros(2, width, dtype=torch.long)
    resp = torch.zeros(2, width, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompts, responses)):  # left padded, as the evaluation pass
        ids[i, width - len(p) - len(r):] = torch.tensor(p + r)
        am[i, width - len(p) - len(r):] = 1
        resp[i, width - len(r):] = True
    batch = PassBatch(ids, am, resp)
    pos = answer_positions(batch)
    assert pos.tolist() == [width - len(responses[0]) - 1, width - len(responses[1]) - 1]
    letters = letter_token_ids(lm.tokenizer, 4)
    col = CalibrationCollector(letters, n_options=[2, 4])
    logits = hooked_pass(lm.model, lm.adapter, batch, [col])
    assert [len(p) for p in col.probs] == [2, 4]
    for b, k in enumerate([2, 4]):
        expect = option_probs(logits[b, pos[b]][None], letters[:k])[0]
        np.testing.assert_allclose(col.probs[b], expect, rtol=1e-12)
        # and against a separate forward on the prompt alone (causal: same distribution)
        with torch.no_grad():
            alone = lm.model(torch.tensor([prompts[b]])).logits[0, -1]
        np.testing.assert_allclose(col.probs[b], option_probs(alone[None], letters[:k])[0], rtol=1e-4, atol=1e-6)
    assert all(0 < m <= 1 for m in col.mass)
    # explicit positions give the same
    col2 = CalibrationCollector(letters, n_options=[2, 4], positions=pos.tolist())
    hooked_pass(lm.model, lm.adapter, batch, [col2])
    np.testing.assert_allclose(col2.probs[1], col.probs[1])
