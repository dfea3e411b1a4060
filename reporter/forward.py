"""The ONE teacher-forced, hooked forward pass that feeds every collector.

A batch of full sequences (prompt + the model's own response, teacher-forced) is run
through the model once. Each *collector* registers the hooks it needs in one shared
:class:`~reporter.hooks.HookSet` (so they are all removed together, whatever happens),
computes what it needs on the device inside the pass, and gets the logits afterwards.
Several collectors can share one pass: MUI key neurons, LPP hidden states, per-token
log-probs for contamination checks, …

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> from reporter.adapters import get_adapter
>>> torch.manual_seed(0) and None
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
>>> ids = torch.randint(0, 100, (2, 6))
>>> batch = PassBatch(ids, torch.ones_like(ids), torch.zeros_like(ids, dtype=torch.bool))
>>> hooked_pass(m, get_adapter(m), batch, []).shape
torch.Size([2, 6, 100])

Writing a collector
-------------------
A collector is any object with ``attach`` and ``after_forward`` (see :class:`Collector`).
``attach`` is called once per batch, before the forward, with the batch already on the
model's input device; it precomputes per-batch index tensors and registers hooks with
``hooks.on_input`` / ``hooks.on_output`` (never ``register_forward_hook`` directly). Work
in the hooks should stay on the device and avoid host syncs (``.item()``, ``.cpu()``);
move results to the host once, in ``after_forward``.

Planned collectors plug in the same way:

* LPP hidden states: ``hooks.on_output(adapter.final_norm(), …)`` keeps the last-layer
  hidden states of the non-pad positions; entropy floor uses ``after_forward``'s logits.
* log-probs for contamination: only ``after_forward`` —
  ``logits[:, :-1].log_softmax(-1).gather(-1, input_ids[:, 1:, None])`` on the response.
* sparse-autoencoder (SAE) feature variant of MUI: ``hooks.on_output(adapter.layers[l], …)``
  on the decoder layers whose residual stream the SAE was trained on (output[0] is the
  residual stream [B, T, d]); in the hook gather the response positions (the same index
  precomputation as :class:`reporter.mui.MUICollector`), encode with the SAE
  (``relu(x @ W_enc + b_enc)`` / JumpReLU threshold, [n_resp, n_features]) and keep, per
  sample, the features >= rho x the layer's max activation (the "topscore" reduction with a
  batched amax); SAE weights live on the layer's device and are loaded by the collector.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

import torch

from .hooks import HookSet

if TYPE_CHECKING:  # pragma: no cover
    from .adapters import Adapter


@dataclass
class PassBatch:
    """One batch of teacher-forced sequences.

    ``input_ids`` / ``attention_mask`` are [B, T] (left or right padded);
    ``response_mask`` [B, T] bool is True where token t is a response token (the model's own
    answer), False on prompt and padding.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor

    def to(self, device: torch.device | str) -> "PassBatch":
        return PassBatch(self.input_ids.to(device), self.attention_mask.to(device),
                         self.response_mask.to(device=device, dtype=torch.bool))

    def scored_positions(self) -> torch.Tensor:
        """[B, T] bool: positions t whose NEXT token t+1 is a valid response token.

        These are the positions whose output predicts a response token; the last column is
        always False.

        >>> b = PassBatch(torch.zeros(1, 4, dtype=torch.long), torch.tensor([[0, 1, 1, 1]]),
        ...               torch.tensor([[False, False, True, True]]))
        >>> b.scored_positions().tolist()
        [[False, True, True, False]]
        """
        am = self.attention_mask.bool()
        nxt = self.response_mask.bool()[:, 1:] & am[:, 1:] & am[:, :-1]
        return torch.cat([nxt, torch.zeros_like(nxt[:, :1])], dim=1)


@runtime_checkable
class Collector(Protocol):
    """Something that rides along one hooked forward pass."""

    def attach(self, hooks: HookSet, adapter: "Adapter", batch: PassBatch) -> None:
        """Register the hooks this collector needs for ``batch`` (already on the model's device)."""

    def after_forward(self, batch: PassBatch, logits: torch.Tensor) -> None:
        """Called after the forward with the logits [B, T, V]; move results to the host here."""


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count only real tokens (correct for left padding).

    >>> position_ids_from_mask(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])).tolist()
    [[1, 1, 0, 1, 2], [0, 1, 2, 1, 1]]
    """
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 1)  # pads: any valid id (HF generate's choice)


def input_device(model: torch.nn.Module) -> torch.device:
    """Device of the input embedding (the first device under a multi-device ``device_map``)."""
    try:
        return model.get_input_embeddings().weight.device
    except Exception:  # pragma: no cover - exotic models
        return next(model.parameters()).device


def hooked_pass(model: torch.nn.Module, adapter: "Adapter", batch: PassBatch,
                collectors: Sequence[Collector]) -> torch.Tensor:
    """Run one forward pass over ``batch`` with every collector's hooks; return the logits [B, T, V].

    Runs under ``torch.inference_mode()`` in eval mode (dropout off; the modules' training
    flags are restored afterwards), with no KV cache and position ids derived from the
    attention mask. With no collectors this is exactly the plain forward pass (the
    benchmark uses it as the baseline). Hooks are removed on exit, even on exceptions.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from reporter.adapters import get_adapter
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    >>> ids = torch.tensor([[0, 5, 6, 7]]); am = torch.tensor([[0, 1, 1, 1]])
    >>> hooked_pass(m, get_adapter(m), PassBatch(ids, am, am.bool()), []).shape
    torch.Size([1, 4, 50])
    """
    batch = batch.to(input_device(model))
    position_ids = position_ids_from_mask(batch.attention_mask)
    training = [m for m in model.modules() if m.training]  # analysis passes run without dropout
    for m in training:
        m.training = False
    try:
        with torch.inference_mode():
            with HookSet() as hooks:
                for c in collectors:
                    c.attach(hooks, adapter, batch)
                out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                            position_ids=position_ids, use_cache=False)
            logits = out.logits
            for c in collectors:
                c.after_forward(batch, logits)
    finally:
        for m in training:
            m.training = True
    return logits
