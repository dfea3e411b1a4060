"""The Utility Law paper's check of key neurons: re-score with them zeroed, and with as many random ones.

If the key neurons matter, zeroing them should hurt the score far more than zeroing the same
number of random neurons in the same layers (``validation.json`` per task, with
``mui: {validate_neurons: true}``).

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
...                                  num_attention_heads=2, num_key_value_heads=1, vocab_size=50)).eval()
>>> ids = torch.randint(0, 50, (1, 5))
>>> with torch.no_grad():
...     before = m(ids).logits
...     with ablate(m, None, np.arange(32)):     # all of layer 0
...         after = m(ids).logits
>>> bool((before != after).any()), len(m.model.layers[0].mlp.down_proj._forward_pre_hooks)
(True, 0)
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from ..config import Profile, TaskConfig
from ..instrument.hooks import HookSet
from ..metrics.mui import random_neurons_like, union
from ..models.adapters import Adapter, get_adapter
from ..models.generation import generate
from ..scoring import get_scorer
from ..store.atomic import read_json
from ..store.layout import NEURONS, SUMMARY, VALIDATION
from ..store.neurons import load_neuron_sets
from .evidence import EvidenceContext, EvidencePass, measured, register_evidence
from .plan import TaskPlan


@contextmanager
def ablate(model: torch.nn.Module, adapter: Adapter | None, neuron_ids: Any) -> Iterator[HookSet]:
    """Zero the given neurons' activations (the input of each layer's down projection).

    Any forward pass of ``model`` inside the ``with`` block runs ablated; the hooks are removed
    on exit, also on exceptions. ``adapter=None`` looks it up.
    """
    adapter = adapter if adapter is not None else get_adapter(model)
    F = adapter.d_ff
    ids = union([np.asarray(neuron_ids)], adapter.n_layers, F)
    with HookSet() as hooks:
        layers = ids // F
        for layer in np.unique(layers).tolist():
            idx = torch.as_tensor(ids[layers == layer] % F, device=adapter.down_weight(layer).device)
            hooks.replace_input(adapter.down_proj(layer), lambda x, idx=idx: x.index_fill(-1, idx.to(x.device), 0))
        yield hooks


def validate_neurons(lm: Any, plan: TaskPlan, task_dir: Path, *, seed: int) -> dict[str, Any]:
    """Scores with the task's key neurons zeroed and with as many random ones; writes ``validation.json``."""

    def compute(_batch_size: int) -> dict[str, Any]:
        scorer = get_scorer(plan.task.scorer)
        _, sets, _ = load_neuron_sets(task_dir / NEURONS)
        key = np.unique(np.concatenate(sets)) if sets else np.zeros(0, dtype=np.int64)
        rnd = random_neurons_like(key, lm.adapter.n_layers, lm.adapter.d_ff, seed=seed)
        res: dict[str, Any] = {"n_neurons": int(key.size)}
        for label, neurons in (("key", key), ("random", rnd)):
            with ablate(lm.model, lm.adapter, neurons):
                gens = generate(lm, plan.prompt_ids, max_new_tokens=plan.task.max_new_tokens, stop=plan.stop,
                                batch_size=lm.spec.max_batch_size)
            scores = [scorer(g.text, it.scorer_item())[1] for g, it in zip(gens, plan.items)]
            res[f"score_ablated_{label}"] = float(np.mean(scores)) if scores else float("nan")
        res["score"] = read_json(task_dir / SUMMARY)["score"]
        return res

    return measured(task_dir / VALIDATION, compute, lm)


@register_evidence
class AblationPass(EvidencePass):
    """MUI's validation: each task's key neurons ablated against as many random ones (``validation.json``), on every
    reporter task (not lm-eval's), probes too, and every model.
    """

    name = "ablation"
    switch = "with mui: {validate_neurons: true} and MUI on"
    order = 50
    artifact = VALIDATION
    label = "key-neuron ablation"
    contamination = False

    def enabled(self, profile: Profile) -> bool:
        """On with ``mui.validate_neurons`` (and MUI itself)."""
        return profile.mui.validate_neurons and profile.mui.enabled

    def applies(self, task: TaskConfig) -> bool:
        """Reporter's own tasks and jsonl tasks: an lm-eval task's answers are scored by lm-eval, which the
        re-generation with neurons zeroed does not call (its card row says the check was not run).
        """
        return task.lm_eval is None

    def run(self, ctx: EvidenceContext) -> None:
        """Re-generate the task twice, with the key and with random neurons zeroed."""
        if ctx.plan is None:
            raise ValueError("the ablation check is a task-scope pass")
        validate_neurons(ctx.lm, ctx.plan, ctx.directory, seed=ctx.seed)
