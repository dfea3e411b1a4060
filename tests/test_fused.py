"""Collectors fed by the generation's own forward passes give what the teacher-forced pass gives.

The reference is the teacher-forced hooked pass over prompt + kept response (itself tested
against slow float64 loops in test_mui / test_logprobs): in float64 both paths must give the
same key-neuron sets, log-probs and option probabilities on tiny Llama, Gemma-3, GPT-2 and
GPT-NeoX models with left padding; in float32 the sets must agree to a per-sample Jaccard of
at least 0.99. The greedy loop itself must reproduce ``generate`` token for token.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reporter.collect.collectors.calibration import CalibrationCollector
from reporter.collect.collectors.logprobs import TokenLogProbCollector
from reporter.collect.collectors.mui import MUICollector
from reporter.collect.collectors.mui_fused import MUIStepCollector
from reporter.instrument.batch import left_pad, teacher_forced_batch
from reporter.instrument.decode import greedy_decode
from reporter.instrument.hooked_pass import hooked_pass
from reporter.models.adapters import get_adapter
from reporter.models.generation import fusable_generation, generate, generate_collecting, hf_generate_batch

from .conftest import assert_same_results, tiny_lm, tiny_model

ARCHS = ("llama", "gemma3", "gpt2", "gpt_neox", "opt")
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17], [18, 19, 20, 21, 22, 23, 24, 25, 26], [27]]
LETTERS = [[30], [31, 32], [33], [34]]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one intra-op thread is fastest


def _hf_greedy(model, prompts, eos, max_new):
    ids, mask = left_pad(prompts, 0, "cpu")
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                         pad_token_id=0, eos_token_id=sorted(eos), temperature=None, top_p=None, top_k=None)
    res = []
    for i in range(len(prompts)):
        new = out[i, ids.shape[1]:].tolist()
        cut = next((j for j, t in enumerate(new) if t in eos), None)
        res.append(new if cut is None else new[:cut + 1])
    return res


def _early_eos(model, max_new=10):
    """EOS ids the model does produce early in two rows, so rows finish at different steps."""
    first = greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=max_new)
    return {first[0][3], first[2][1]}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype,prune", [(torch.float32, False), (torch.float64, True), (torch.float32, True)])
def test_greedy_loop_reproduces_generate(arch, dtype, prune):
    """Token for token; pruning finished rows changes the batch shape, so float32 may differ in a
    near-tie (not on these models), float64 must not."""
    model = tiny_model(arch, vocab=97, seed=1).to(dtype)
    eos = _early_eos(model)
    ours = greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=eos, max_new_tokens=10, prune=prune)
    assert ours == _hf_greedy(model, PROMPTS, eos, 10)
    assert any(len(o) < 10 for o in ours) and any(len(o) == 10 for o in ours)


def _fused_and_reference(model, definition, mode, lengths_cut, top_ratio=0.05):
    """Run both paths; ``lengths_cut`` shortens some kept responses (as a stop string would)."""
    adapter = get_adapter(model)
    mui_s = MUIStepCollector(top_ratio, mode, definition=definition)
    lp_s, cal_s = TokenLogProbCollector(), CalibrationCollector(LETTERS, n_options=[4, 3, 4, 2, 4])
    eos = _early_eos(model, 6)  # rows finish at different steps and leave the batch
    raw = greedy_decode(model, adapter, PROMPTS, pad_id=0, eos_ids=eos, max_new_tokens=6,
                        collectors=[mui_s, lp_s, cal_s])
    kept = [r[:-1] if r and r[-1] in eos else r for r in raw]  # EOS is not part of a response
    assert len({len(k) for k in kept}) > 1
    kept = [r[:max(0, len(r) - c)] for r, c in zip(kept, lengths_cut)]
    for c in (mui_s, lp_s, cal_s):
        c.finish([len(k) for k in kept])
    mui_t, lp_t = MUICollector(top_ratio, mode, definition=definition), TokenLogProbCollector()
    cal_t = CalibrationCollector(LETTERS, n_options=[4, 3, 4, 2, 4])
    batch = teacher_forced_batch(PROMPTS, kept, 0, "cpu")
    hooked_pass(model, adapter, batch, [mui_t, lp_t, cal_t])
    return (mui_s, lp_s, cal_s), (mui_t, lp_t, cal_t), kept


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("definition,mode", [("paper", "score"), ("contribution", "score"), ("paper", "activation"),
                                             ("contribution", "global_topk")])
def test_float64_equal_to_teacher_forced(arch, definition, mode):
    model = tiny_model(arch, vocab=97, seed=2).to(torch.float64)
    (mui_s, lp_s, cal_s), (mui_t, lp_t, cal_t), kept = _fused_and_reference(
        model, definition, mode, lengths_cut=[0, 2, 6, 1, 0])
    assert [len(k) for k in kept][2] == 0  # one sample keeps no response at all
    assert_same_results((mui_s, lp_s, cal_s), (mui_t, lp_t, cal_t), kept)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_question_span_limits_the_prefill_lm_head(arch):
    """With question spans the prefill's LM head runs on the positions from the earliest question
    start on only; prompt tokens before each question are NaN on both paths, and from the question
    on the log-probs equal the whole-prompt computation."""
    model = tiny_model(arch, vocab=97, seed=4).to(torch.float64)
    spans = [(3, 6), (1, 2), (2, 4), (6, 8), (0, 1)]  # [start, end) in prompt-token indices
    shapes = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape)))
    try:
        with_span, whole = TokenLogProbCollector(spans), TokenLogProbCollector()
        raw = greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=3, collectors=[with_span])
        n_span = shapes[0][1]
        shapes.clear()
        greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=3, collectors=[whole])
        n_whole = shapes[0][1]
    finally:
        handle.remove()
    lengths = [len(r) for r in raw]
    with_span.finish(lengths)
    whole.finish(lengths)
    # the longest need: prompt 3 has 9 tokens and its question starts at token 6 -> positions 5..8
    assert (n_span, n_whole) == (max(len(p) - max(1, s) + 1 for p, (s, _) in zip(PROMPTS, spans)), 9)
    tf = TokenLogProbCollector(spans)
    hooked_pass(model, None, teacher_forced_batch(PROMPTS, raw, 0, "cpu"), [tf])
    for a, full, b, (s, _) in zip(with_span.prompt_results(), whole.prompt_results(), tf.prompt_results(), spans):
        first = max(1, s) - 1  # prompt token j is at index j - 1
        assert np.isnan(a[:first]).all() and np.isnan(b[:first]).all() and not np.isnan(a[first:]).any()
        np.testing.assert_allclose(a[first:], full[first:], rtol=0, atol=1e-6)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)  # NaN where NaN


@pytest.mark.parametrize("arch", ARCHS)
def test_float32_sets_agree(arch):
    model = tiny_model(arch, vocab=97, seed=3, layers=3, hidden=64, intermediate=256)
    (mui_s, lp_s, _), (mui_t, lp_t, _), kept = _fused_and_reference(model, "paper", "score", [0, 0, 1, 0, 3],
                                                                   top_ratio=0.02)
    for a, b in zip(mui_s.results(), mui_t.results()):
        union = len(set(a) | set(b))
        assert union == 0 or len(set(a) & set(b)) / union >= 0.99
    for a, b in zip(lp_s.response_results(), lp_t.response_results()):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


def test_stop_strings_and_eos_match_generate():
    """Through a LoadedModel: the same kept responses, texts and stop reasons as ``generate``."""
    lm = tiny_lm("llama", seed=4)
    assert fusable_generation(lm) is None
    prompts = [lm.tokenizer(t)["input_ids"] for t in ("The cat sat on", "Numbers: 1, 2,", "Question: why")]
    plain = hf_generate_batch(lm, prompts, 12, ())
    stop = [plain[0].text[3:5]] if len(plain[0].text) >= 5 else ["\n"]
    ref = hf_generate_batch(lm, prompts, 12, stop)
    for ours in (generate_collecting(lm, prompts, max_new_tokens=12, stop=stop),
                 generate(lm, prompts, max_new_tokens=12, stop=stop, batch_size=3)):
        assert [(g.response_ids, g.text, g.stopped_by) for g in ours] == \
            [(g.response_ids, g.text, g.stopped_by) for g in ref]
    assert any(g.stopped_by == "stop" for g in ref) and any(g.stopped_by != "stop" for g in ref)


def test_generation_config_with_a_processor_is_not_fused():
    lm = tiny_lm("llama", seed=4)
    lm.model.generation_config.repetition_penalty = 1.3
    assert "repetition_penalty" in fusable_generation(lm)
    with pytest.raises(ValueError, match="repetition_penalty"):
        generate_collecting(lm, [[1, 2, 3]], max_new_tokens=2)
    assert generate(lm, [[1, 2, 3]], max_new_tokens=3)[0] == hf_generate_batch(lm, [[1, 2, 3]], 3, ())[0]


def test_nonfinite_logits_are_reported():
    model = tiny_model("llama", vocab=97)
    with torch.no_grad():
        model.model.norm.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError):
        greedy_decode(model, None, [[1, 2, 3]], pad_id=0, eos_ids=set(), max_new_tokens=2)


def test_task_run_fused_equals_teacher_forced(tmp_path):
    """Through the task runner: the same samples, key-neuron sets, log-probs and option probabilities
    from both collection paths (float64), on a multiple-choice task and a generative one cut by a
    stop string; each summary records its path."""
    import dataclasses
    import json
    import time

    from reporter.collect.plan import plan_task
    from reporter.collect.task_run import collection_path, run_task
    from reporter.config import MUIConfig, Profile, TaskConfig
    from reporter.store.logprobs import load_logprobs
    from reporter.store.neurons import load_neuron_sets
    from reporter.store.samples import read_samples

    lm = tiny_lm("llama", seed=5, init_std=0.3)
    lm.model.double()
    lm = dataclasses.replace(lm, dtype=torch.float64)
    data = tmp_path / "gen.jsonl"
    data.write_text("".join(json.dumps({"id": f"g{i}", "q": f"List: {i}, {i + 1}, {i + 2},", "a": str(i + 3)}) + "\n"
                            for i in range(5)))
    gen = TaskConfig(name="lists", type="jsonl", path=str(data), prompt_field="q", answer_field="a",
                     scorer="numeric", max_new_tokens=10, stop=("o",))  # cuts inside words too
    tasks = (TaskConfig(name="arc_easy", limit=5, max_new_tokens=6), gen)
    out = {}
    for path in ("fused", "teacher-forced"):
        profile = Profile(name="t", tasks=tasks, mui=MUIConfig(top_ratio=0.02), collection=path)
        assert collection_path(lm, profile) == path
        for cfg in tasks:
            d = tmp_path / path / cfg.name
            t0 = time.perf_counter()
            summary = run_task(lm, profile, cfg, plan_task(lm, cfg, seed=0), d, seed=0, progress=False)
            wall = time.perf_counter() - t0
            assert summary["collection"] == path
            # the task's own wall time, inside the call's; a finished task is read back as it was written
            assert 0 < summary["seconds"] <= wall
            assert run_task(lm, profile, cfg, plan_task(lm, cfg, seed=0), d, seed=0, progress=False) == summary
            out[path, cfg.name] = (summary, read_samples(d / "samples.jsonl"), load_neuron_sets(d / "neurons.npz"),
                                   load_logprobs(d / "logprobs.npz")[0])
    for cfg in tasks:
        (s_f, rec_f, (ids_f, sets_f, _), lp_f), (s_t, rec_t, (ids_t, sets_t, _), lp_t) = \
            out["fused", cfg.name], out["teacher-forced", cfg.name]
        assert s_f["mui"] == s_t["mui"] > 0 and s_f["score"] == s_t["score"]
        for i, r in rec_f.items():
            assert (r["response"], r["score"], r.get("option_probs")) == \
                (rec_t[i]["response"], rec_t[i]["score"], rec_t[i].get("option_probs"))
        assert ids_f == ids_t and all(a.tolist() == b.tolist() for a, b in zip(sets_f, sets_t))
        for i in lp_f:
            for part in ("prompt", "response"):
                np.testing.assert_allclose(lp_f[i][part], lp_t[i][part], rtol=0, atol=1e-6)
    assert any(r["stopped_by"] == "stop" for r in out["fused", "lists"][1].values())
    assert "option_probs" in next(iter(out["fused", "arc_easy"][1].values()))
    # the runner passes each question's span: the prompt before it is not computed (NaN), the question is
    for path in ("fused", "teacher-forced"):
        for lp in (out[path, "arc_easy"][3], out[path, "lists"][3]):
            for rec in lp.values():
                start, end = rec["question_span"]
                assert start > 1 and end > start
                assert np.isnan(rec["prompt"][:start - 1]).all() and not np.isnan(rec["prompt"][start - 1:]).any()


@pytest.mark.parametrize("path", ["fused", "teacher-forced"])
def test_a_model_with_nonfinite_logits_fails_the_task_with_one_line(tmp_path, path):
    """Both collection paths decode with reporter's loop, which checks the logits: a clear UserError
    naming the model and the task, not a traceback."""
    from reporter.collect.plan import plan_task
    from reporter.collect.task_run import run_task
    from reporter.config import Profile, TaskConfig
    from reporter.errors import UserError

    lm = tiny_lm("llama", seed=6)
    with torch.no_grad():
        lm.model.model.norm.weight.fill_(float("nan"))
    cfg = TaskConfig(name="arc_easy", limit=2, max_new_tokens=3)
    profile = Profile(name="t", tasks=(cfg,), collection=path)
    with pytest.raises(UserError, match=r"model 'tiny-llama', task 'arc_easy': the model gives NaN or infinite logits"):
        run_task(lm, profile, cfg, plan_task(lm, cfg, seed=0), tmp_path / "t", seed=0, progress=False)


def test_small_batch_head_equals_linear_and_is_always_removed():
    """The decode loop's LM-head kernel: the same product as nn.Linear (float64: to rounding), used for
    few rows only, and the module's own forward is back after the block, even after an exception."""
    from reporter.instrument.head import small_batch_head

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=True).double()
    calls = []
    for rows in (1, 3, 32, 33):  # 33 > MAX_ROWS: nn.Linear itself
        x = torch.randn(rows, 1, 16, dtype=torch.float64)
        ref = x @ head.weight.T + head.bias
        with small_batch_head(head):
            y = head(x)
            calls.append("forward" in vars(head))
        assert y.shape == ref.shape
        np.testing.assert_allclose(y.detach().numpy(), ref.detach().numpy(), rtol=0, atol=1e-12)
    assert calls == [True] * 4 and "forward" not in vars(head)
    with pytest.raises(RuntimeError):
        with small_batch_head(head):
            raise RuntimeError("boom")
    assert "forward" not in vars(head)
    with small_batch_head(None):  # no head (or not a Linear): nothing to do
        pass


def test_waiting_steps_are_scored_as_if_at_once_with_one_product_per_layer_per_flush(monkeypatch):
    """Steps wait for their tokens' projections until PENDING_BYTES of activations are kept: the key neurons
    are then still the teacher-forced pass's (float64) whatever the budget, and each flush reads each layer's
    W_down once for all its new tokens, not once per step that brings one."""
    from reporter.collect.collectors import mui_fused

    model = tiny_model("gpt_neox", vocab=97, seed=0).to(torch.float64)  # its greedy tokens change at most steps
    adapter = get_adapter(model)
    step_bytes = len(PROMPTS) * adapter.n_layers * adapter.d_ff * 8
    add, after, flush = MUIStepCollector._add_projections, MUIStepCollector.after_step, MUIStepCollector._flush
    counts: dict[str, int] = {}

    def counting_add(self, ids):
        counts["products"] += bool({t for t in ids if t not in self._row})
        return add(self, ids)

    def counting_after(self, *a):
        counts["steps"] += 1
        return after(self, *a)

    def counting_flush(self):
        counts["flushes"] += bool(self._pending)
        return flush(self)

    monkeypatch.setattr(MUIStepCollector, "_add_projections", counting_add)
    monkeypatch.setattr(MUIStepCollector, "after_step", counting_after)
    monkeypatch.setattr(MUIStepCollector, "_flush", counting_flush)
    seen = {}
    for budget, size in (("every step", 1), ("about every 3 steps", 3 * step_bytes), ("whole batch", 1 << 40)):
        counts.update(products=0, steps=0, flushes=0)
        monkeypatch.setattr(mui_fused, "PENDING_BYTES", size)
        (mui_s, _, _), (mui_t, _, _), _ = _fused_and_reference(model, "paper", "score", lengths_cut=[0, 2, 6, 1, 0])
        for a, b in zip(mui_s.results(), mui_t.results()):
            assert a.tolist() == b.tolist(), budget
        assert sum(len(s) for s in mui_s.results()) > 0
        assert counts["products"] <= counts["flushes"], budget  # at most one product per layer per flush
        seen[budget] = dict(counts)
    assert seen["every step"]["flushes"] == seen["every step"]["steps"] >= 6
    assert 1 < seen["about every 3 steps"]["flushes"] < seen["every step"]["flushes"]
    assert seen["whole batch"]["flushes"] == seen["whole batch"]["products"] == 1
    assert seen["every step"]["products"] > seen["about every 3 steps"]["products"] >= 1


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_mui_during_generation_keeps_one_position_per_layer_not_the_prefill(arch):
    """Between a step's layer hooks and its scoring, each layer's kept activation is that step's one
    position ([b, d_ff] of its own storage): a view of the prefill's [B, T, d_ff] activation kept every
    layer's whole prompt alive until the step ended (0.4 GB for SmolLM2 at 8 prompts of 300 tokens)."""
    model = tiny_model(arch, vocab=97, seed=4)
    c = MUIStepCollector(top_ratio=0.05)
    held: list[int] = []
    original = c.after_step

    def spy(step, logits, next_tokens, rows):
        held.append(max(a.untyped_storage().nbytes() // a.element_size() for a in c._acts))
        return original(step, logits, next_tokens, rows)

    c.after_step = spy
    out = greedy_decode(model, get_adapter(model), PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=3,
                        collectors=[c])
    c.finish([len(o) for o in out])
    d_ff = get_adapter(model).d_ff
    assert held and held[0] == len(PROMPTS) * d_ff  # the prefill: one position of each prompt, not all 9


@pytest.mark.parametrize("arch", ["llama", "gemma3", "gpt2"])
def test_prefill_log_probs_from_the_head_in_chunks_equal_the_full_logits(arch, monkeypatch):
    """Where the head's output is the model's logits, the prefill's prompt log-probs are computed from the
    head in chunks of positions and the model's own head runs on the last position only: the same
    numbers as from the prefill's [B, K, V] logits (float64)."""
    from reporter.collect.collectors import logprobs as lp_module
    from reporter.instrument.gather import head_output_is_logits

    model = tiny_model(arch, vocab=97, seed=4).to(torch.float64)
    head = model.get_output_embeddings()
    assert head_output_is_logits(model)
    monkeypatch.setattr(lp_module, "_HEAD_CHUNK", 2 * len(PROMPTS) * 97)  # two positions per chunk
    spans = [(3, 6), (1, 2), (2, 4), (6, 8), (0, 1)]
    shapes: list[tuple[int, ...]] = []
    handle = head.register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape)))
    try:
        chunked = TokenLogProbCollector(spans, prefill_head=head)
        raw = greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=3, collectors=[chunked])
    finally:
        handle.remove()
    full = TokenLogProbCollector(spans)
    again = greedy_decode(model, None, PROMPTS, pad_id=0, eos_ids=set(), max_new_tokens=3, collectors=[full])
    assert again == raw
    lengths = [len(r) for r in raw]
    chunked.finish(lengths)
    full.finish(lengths)
    # the model's head module runs on the last position only; the prompt's chunks are read from its matrix
    # (linear_head_scores, blocks of _HEAD_CHUNK logits: tests/test_head_scores.py)
    assert {s[1] for s in shapes} == {1} and (len(PROMPTS), 1, 97) in shapes
    for a, b in zip(chunked.prompt_results(), full.prompt_results()):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)  # NaN where NaN
    for a, b in zip(chunked.response_results(), full.response_results()):
        np.testing.assert_array_equal(a, b)


def test_a_model_that_transforms_its_head_output_keeps_the_full_logits():
    """Gemma-2 soft-caps its logits after the head: log-probs of the head's own output would be wrong,
    so the probe says no and the collector reads the model's logits, as before."""
    from reporter.instrument.gather import head_output_is_logits

    model = tiny_model("gemma2", vocab=97, seed=4)
    model.config.final_logit_softcapping = 5.0
    assert not head_output_is_logits(model)
    assert head_output_is_logits(tiny_model("qwen2", vocab=97, seed=4))
