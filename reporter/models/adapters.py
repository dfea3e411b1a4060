"""Architecture adapters: where the parts the analyses need live in each model family.

An adapter answers, for a loaded Hugging Face causal LM: the decoder layers; per layer
the MLP's down/output projection (whose INPUT is the neuron activation vector of width
d_ff) and its activation-function module (whose OUTPUT is σ(W_gate x) in a gated MLP);
whether the MLP is gated; the final norm; the unembedding matrix. Adapters are
registered by ``config.model_type`` in the :data:`ADAPTERS` registry with :func:`register_adapter`.

>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
>>> a = get_adapter(m)
>>> a.n_layers, a.d_ff, a.gated
(2, 64, True)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import UserError
from ..registry import Registry


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class AdapterSpec:
    """Attribute paths describing one family (relative to the CausalLM module)."""

    families: tuple[str, ...]
    layers: tuple[str, ...]  # candidate paths to the ModuleList of decoder layers
    down_proj: str  # path inside one layer
    final_norm: tuple[str, ...]
    gated: bool
    act: str = "mlp.act_fn"  # path inside one layer of the activation-function module (its OUTPUT is sigma(.))
    conv1d: bool = False  # GPT-2's Conv1D stores weight as [in, out]


class Adapter:
    """A bound adapter for one model instance."""

    def __init__(self, spec: AdapterSpec, model: nn.Module):
        self.spec = spec
        self.model = model
        self.model_type = model.config.model_type
        self._layers = None
        for path in spec.layers:
            try:
                self._layers = _get(model, path)
                break
            except AttributeError:
                continue
        if self._layers is None:
            raise UserError(f"model type '{self.model_type}': decoder layers not found at {' or '.join(spec.layers)}")

    @property
    def layers(self) -> list[nn.Module]:
        """The decoder layers, first to last."""
        return list(self._layers)

    @property
    def n_layers(self) -> int:
        """Number of decoder layers."""
        return len(self._layers)

    @property
    def gated(self) -> bool:
        """Whether the MLP is gated (SwiGLU / GeGLU)."""
        return self.spec.gated

    def down_proj(self, layer_idx: int) -> nn.Module:
        """The module whose input is layer ``layer_idx``'s neuron activation vector."""
        return _get(self._layers[layer_idx], self.spec.down_proj)

    def act_module(self, layer_idx: int) -> nn.Module:
        """The activation-function module of layer ``layer_idx``: its output is σ(W_gate x) in a gated MLP
        (the paper's neuron activation), the neuron activation itself in a plain one.
        """
        mod = _get(self._layers[layer_idx], self.spec.act)
        if not isinstance(mod, nn.Module):
            raise UserError(f"model type '{self.model_type}': the MLP activation at {self.spec.act} is not a module, "
                            "so it cannot be hooked; use mui.definition: contribution")
        return mod

    def down_weight(self, layer_idx: int) -> torch.Tensor:
        """W_down as [d_model, d_ff] (column i = neuron i's write vector)."""
        w = self.down_proj(layer_idx).weight
        return w.t() if self.spec.conv1d else w

    @property
    def d_ff(self) -> int:
        """Width of the MLP (neurons per layer)."""
        return int(self.down_weight(0).shape[1])

    @property
    def d_model(self) -> int:
        """Width of the residual stream."""
        return int(self.down_weight(0).shape[0])

    def final_norm(self) -> nn.Module:
        """The norm applied to the last layer's output before the unembedding."""
        for path in self.spec.final_norm:
            try:
                return _get(self.model, path)
            except AttributeError:
                continue
        raise UserError(f"model type '{self.model_type}': final norm not found")

    def unembedding(self) -> torch.Tensor:
        """W_U as [vocab, d_model] (rows are the vocabulary vectors), untruncated."""
        return self.model.get_output_embeddings().weight


#: adapter specs by ``config.model_type``
ADAPTERS: Registry[AdapterSpec] = Registry("architecture")


def register_adapter(spec: AdapterSpec) -> AdapterSpec:
    """Register an adapter for every ``model_type`` in ``spec.families``."""
    for fam in spec.families:
        ADAPTERS.add(fam, spec)
    return spec


_LLAMA_LIKE = dict(layers=("model.layers", "model.language_model.layers"), down_proj="mlp.down_proj",
                   final_norm=("model.norm", "model.language_model.norm"), gated=True)
register_adapter(AdapterSpec(families=("llama", "mistral", "qwen2", "qwen3"), **_LLAMA_LIKE))
register_adapter(AdapterSpec(families=("phi3",), **{**_LLAMA_LIKE, "act": "mlp.activation_fn"}))
register_adapter(AdapterSpec(families=("gemma", "gemma2", "gemma3", "gemma3_text"), **_LLAMA_LIKE))
register_adapter(AdapterSpec(families=("gpt2",), layers=("transformer.h",), down_proj="mlp.c_proj",
                             final_norm=("transformer.ln_f",), gated=False, act="mlp.act", conv1d=True))
register_adapter(AdapterSpec(families=("gpt_neox",), layers=("gpt_neox.layers",), down_proj="mlp.dense_4h_to_h",
                             final_norm=("gpt_neox.final_layer_norm",), gated=False, act="mlp.act"))
register_adapter(AdapterSpec(families=("opt",), layers=("model.decoder.layers",), down_proj="fc2",
                             final_norm=("model.decoder.final_layer_norm",), gated=False, act="activation_fn"))


def supported_families() -> list[str]:
    """Every ``model_type`` with an adapter, sorted."""
    return sorted(ADAPTERS)


def get_adapter(model: nn.Module) -> Adapter:
    """The adapter for ``model``; a clear error listing supported families otherwise."""
    mt = getattr(model.config, "model_type", None)
    if mt not in ADAPTERS:
        raise UserError(f"architecture '{mt}' is not supported; supported: {', '.join(supported_families())}")
    return Adapter(ADAPTERS.get(mt), model)
