"""The ONE teacher-forced, hooked forward pass that feeds every collector.

A batch of full sequences (prompt + the model's own response, teacher-forced) is run
through the model once. Each *collector* registers the hooks it needs in one shared
:class:`~reporter.instrument.hooks.HookSet` (so they are all removed together, whatever
happens), computes what it needs on the device inside the pass, and gets the logits
afterwards. The collectors of a run (MUI key neurons, token log-probs, option
probabilities, LPP hidden states) are plugins: :mod:`reporter.collect.collectors`.

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> torch.manual_seed(0) and None
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
>>> ids = torch.randint(0, 100, (2, 6))
>>> batch = PassBatch(ids, torch.ones_like(ids), torch.zeros_like(ids, dtype=torch.bool))
>>> hooked_pass(m, None, batch, []).shape
torch.Size([2, 6, 100])

Writing a collector
-------------------
A collector is any object with ``attach`` and ``after_forward`` (see :class:`Collector`).
``attach`` is called once per batch, before the forward, with the batch already on the
model's input device; it precomputes per-batch index tensors and registers hooks with
``hooks.on_input`` / ``hooks.on_output`` (never ``register_forward_hook`` directly). Work
in the hooks should stay on the device and avoid host syncs (``.item()``, ``.cpu()``);
move results to the host once, in ``after_forward``. The ``adapter`` argument says where
the model's parts are (:class:`reporter.models.adapters.Adapter`).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import torch

from .batch import PassBatch, position_ids_from_mask
from .hooks import HookSet

__all__ = ["Collector", "PassBatch", "eval_mode", "hooked_pass", "input_device"]


@runtime_checkable
class Collector(Protocol):
    """Something that rides along one hooked forward pass."""

    def attach(self, hooks: HookSet, adapter: Any, batch: PassBatch) -> None:
        """Register the hooks this collector needs for ``batch`` (already on the model's device)."""

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Called after the forward with the logits [B, T, V]; move results to the host here."""


def input_device(model: torch.nn.Module) -> torch.device:
    """Device of the input embedding (the first device under a multi-device ``device_map``)."""
    try:
        return model.get_input_embeddings().weight.device
    except Exception:  # pragma: no cover - exotic models
        return next(model.parameters()).device


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Dropout off for an analysis pass; the modules' training flags are restored on exit.

    >>> m = torch.nn.Dropout().train()
    >>> with eval_mode(m):
    ...     m.training
    False
    >>> m.training
    True
    """
    training = [m for m in model.modules() if m.training]
    for m in training:
        m.training = False
    try:
        yield
    finally:
        for m in training:
            m.training = True


def hooked_pass(model: torch.nn.Module, adapter: Any, batch: PassBatch,
                collectors: Sequence[Collector], *, logits_to_keep: int | torch.Tensor = 0) -> torch.Tensor:
    """Run one forward pass over ``batch`` with every collector's hooks; return the logits [B, T, V].

    Runs under ``torch.inference_mode()`` in eval mode (dropout off; the modules' training
    flags are restored afterwards), with no KV cache and position ids derived from the
    attention mask. With no collectors this is exactly the plain forward pass (the
    benchmark uses it as the baseline). Hooks are removed on exit, even on exceptions.
    ``logits_to_keep`` > 0 computes the logits of the last that many positions only (the LM
    head is the costliest layer of a large-vocabulary model); collectors then get [B, n, V]. A
    1-D tensor of positions computes the logits of those positions only, in that order.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    >>> ids = torch.tensor([[0, 5, 6, 7]]); am = torch.tensor([[0, 1, 1, 1]])
    >>> hooked_pass(m, None, PassBatch(ids, am, am.bool()), []).shape
    torch.Size([1, 4, 50])
    """
    batch = batch.to(input_device(model))
    position_ids = position_ids_from_mask(batch.attention_mask)
    with eval_mode(model):
        with torch.inference_mode():
            with HookSet() as hooks:
                for c in collectors:
                    c.attach(hooks, adapter, batch)
                keep = isinstance(logits_to_keep, torch.Tensor) or logits_to_keep
                kw = {"logits_to_keep": logits_to_keep} if keep else {}
                out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                            position_ids=position_ids, use_cache=False, **kw)
            logits = out.logits
            for c in collectors:
                c.after_forward(batch, logits)
    return logits
