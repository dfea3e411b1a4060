"""The paper's validation: re-score with the task's key neurons zeroed, and with as many random ones."""
import json

import numpy as np

from reporter.collect.ablation import ablate, validate_neurons
from reporter.collect.plan import plan_task
from reporter.collect.task_run import run_task
from reporter.config import MUIConfig, Profile, TaskConfig
from reporter.metrics.mui import random_neurons_like
from reporter.models.generation import generate
from reporter.store.neurons import load_neuron_sets

from .conftest import tiny_lm


def test_validate_neurons_records_both_ablations(tmp_path):
    lm = tiny_lm("llama", init_std=0.3, seed=1)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "q": f"Count: {i} {i+1} {i+2}", "a": str(i + 3)}) + "\n"
                            for i in range(6)))
    task = TaskConfig(name="count", type="jsonl", path=str(data), prompt_field="q", answer_field="a",
                      scorer="numeric", max_new_tokens=6)
    profile = Profile(name="t", tasks=(task,), mui=MUIConfig(top_ratio=0.05, validate_neurons=True))
    tdir = tmp_path / "task"
    plan = plan_task(lm, task, seed=0)
    summary = run_task(lm, profile, task, plan, tdir, seed=0, progress=False)
    v = validate_neurons(lm, plan, tdir, seed=0)
    _, sets, _ = load_neuron_sets(tdir / "neurons.npz")
    union = np.unique(np.concatenate(sets))
    assert v["n_neurons"] == union.size > 0
    assert v["score"] == summary["score"]
    assert 0 <= v["score_ablated_key"] <= 1 and 0 <= v["score_ablated_random"] <= 1
    assert json.loads((tdir / "validation.json").read_text()) == v
    # the ablation really reaches the model: zeroing the key neurons changes its greedy output
    prompts = [lm.tokenizer(f"Count: {i} {i+1} {i+2}")["input_ids"] for i in range(6)]
    base = [g.response_ids for g in generate(lm, prompts, max_new_tokens=6)]
    with ablate(lm.model, lm.adapter, union):
        cut = [g.response_ids for g in generate(lm, prompts, max_new_tokens=6)]
    assert base != cut
    rnd = random_neurons_like(union, lm.adapter.n_layers, lm.adapter.d_ff, seed=0)
    assert rnd.size == union.size and not set(rnd.tolist()) & set(union.tolist())
