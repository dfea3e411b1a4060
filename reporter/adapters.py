"""Architecture adapters: where the parts the analyses need live in each model family.

An adapter answers, for a loaded Hugging Face causal LM: the decoder layers; per layer
the MLP's down/output projection (whose INPUT is the neuron activation vector of width
d_ff); whether the MLP is gated; the final norm; the unembedding matrix. Adapters are
registered by ``config.model_type`` with :func:`register_adapter`.

>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
>>> a = get_adapter(m)
>>> a.n_layers, a.d_ff, a.gated
(2, 64, True)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .errors import UserError


def _get(obj: object, path: str):
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
        return list(self._layers)

    @property
    def n_layers(self) -> int:
        return len(self._layers)

    @property
    def gated(self) -> bool:
        return self.spec.gated

    def down_proj(self, layer_idx: int) -> nn.Module:
        """The module whose input is layer ``layer_idx``'s neuron activation vector."""
        return _get(self._layers[layer_idx], self.spec.down_proj)

    def down_weight(self, layer_idx: int) -> torch.Tensor:
        """W_down as [d_model, d_ff] (column i = neuron i's write vector)."""
        w = self.down_proj(layer_idx).weight
        return w.t() if self.spec.conv1d else w

    @property
    def d_ff(self) -> int:
        return int(self.down_weight(0).shape[1])

    @property
    def d_model(self) -> int:
        return int(self.down_weight(0).shape[0])

    def final_norm(self) -> nn.Module:
        for path in self.spec.final_norm:
            try:
                return _get(self.model, path)
            except AttributeError:
                continue
        raise UserError(f"model type '{self.model_type}': final norm not found")

    def unembedding(self) -> torch.Tensor:
        """W_U as [vocab, d_model] (rows are the vocabulary vectors), untruncated."""
        return self.model.get_output_embeddings().weight


ADAPTERS: dict[str, AdapterSpec] = {}


def register_adapter(spec: AdapterSpec) -> AdapterSpec:
    """Register an adapter for every ``model_type`` in ``spec.families``."""
    for fam in spec.families:
        ADAPTERS[fam] = spec
    return spec


_LLAMA_LIKE = dict(layers=("model.layers", "model.language_model.layers"), down_proj="mlp.down_proj",
                   final_norm=("model.norm", "model.language_model.norm"), gated=True)
register_adapter(AdapterSpec(families=("llama", "mistral", "qwen2", "qwen3", "phi3"), **_LLAMA_LIKE))
register_adapter(AdapterSpec(families=("gemma", "gemma2", "gemma3", "gemma3_text"), **_LLAMA_LIKE))
register_adapter(AdapterSpec(families=("gpt2",), layers=("transformer.h",), down_proj="mlp.c_proj",
                             final_norm=("transformer.ln_f",), gated=False, conv1d=True))
register_adapter(AdapterSpec(families=("gpt_neox",), layers=("gpt_neox.layers",), down_proj="mlp.dense_4h_to_h",
                             final_norm=("gpt_neox.final_layer_norm",), gated=False))
register_adapter(AdapterSpec(families=("opt",), layers=("model.decoder.layers",), down_proj="fc2",
                             final_norm=("model.decoder.final_layer_norm",), gated=False))


def supported_families() -> list[str]:
    return sorted(ADAPTERS)


def get_adapter(model: nn.Module) -> Adapter:
    """The adapter for ``model``; a clear error listing supported families otherwise."""
    mt = getattr(model.config, "model_type", None)
    if mt not in ADAPTERS:
        raise UserError(f"architecture '{mt}' is not supported; supported: {', '.join(supported_families())}")
    return Adapter(ADAPTERS[mt], model)


# --- random-initialised models -------------------------------------------------------

@dataclass(frozen=True)
class RandomArch:
    """How to build a seeded random model of one family: its config and default sizes."""

    name: str
    build_config: Callable[..., object]
    defaults: dict
    tokenizer: str  # packaged model whose tokenizer it borrows


def _cfg(cls_name: str, **kw):
    import transformers

    return getattr(transformers, cls_name)(**kw)


def _llama_like(cls_name: str, extra: dict | None = None):
    def build(layers, hidden, intermediate, heads, kv_heads, vocab):
        kw = dict(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=intermediate,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                  max_position_embeddings=4096, tie_word_embeddings=True)
        kw.update(extra or {})
        if "head_dim" in (extra or {}):
            kw["head_dim"] = hidden // heads
        return _cfg(cls_name, **kw)
    return build


def _gpt2(layers, hidden, intermediate, heads, kv_heads, vocab):
    return _cfg("GPT2Config", n_layer=layers, n_embd=hidden, n_inner=intermediate, n_head=heads,
                vocab_size=vocab, n_positions=4096)


def _neox(layers, hidden, intermediate, heads, kv_heads, vocab):
    return _cfg("GPTNeoXConfig", num_hidden_layers=layers, hidden_size=hidden, intermediate_size=intermediate,
                num_attention_heads=heads, vocab_size=vocab, max_position_embeddings=4096)


def _opt(layers, hidden, intermediate, heads, kv_heads, vocab):
    return _cfg("OPTConfig", num_hidden_layers=layers, hidden_size=hidden, ffn_dim=intermediate,
                num_attention_heads=heads, vocab_size=vocab, word_embed_proj_dim=hidden,
                max_position_embeddings=4096)


_SMALL = dict(layers=4, hidden=256, intermediate=1024, heads=4, kv_heads=2)
_SMOL = dict(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3)  # SmolLM2-135M's shape
_GEMMA3 = dict(layers=18, hidden=640, intermediate=2048, heads=4, kv_heads=1)  # Gemma-3-270M's shape

RANDOM_ARCHS: dict[str, RandomArch] = {
    "llama": RandomArch("llama", _llama_like("LlamaConfig"), _SMOL, "smollm2-135m-instruct"),
    "mistral": RandomArch("mistral", _llama_like("MistralConfig"), _SMALL, "smollm2-135m-instruct"),
    "qwen2": RandomArch("qwen2", _llama_like("Qwen2Config"), _SMALL, "smollm2-135m-instruct"),
    "qwen3": RandomArch("qwen3", _llama_like("Qwen3Config", {"head_dim": None}), _SMALL, "smollm2-135m-instruct"),
    "phi3": RandomArch("phi3", _llama_like("Phi3Config", {"pad_token_id": 0}), _SMALL, "smollm2-135m-instruct"),
    "gemma": RandomArch("gemma", _llama_like("GemmaConfig", {"head_dim": None}), _SMALL, "gemma-3-270m"),
    "gemma2": RandomArch("gemma2", _llama_like("Gemma2Config", {"head_dim": None}), _SMALL, "gemma-3-270m"),
    "gemma3": RandomArch("gemma3", _llama_like("Gemma3TextConfig", {"head_dim": 256}), _GEMMA3, "gemma-3-270m"),
    "gpt2": RandomArch("gpt2", _gpt2, _SMALL, "smollm2-135m-instruct"),
    "gpt_neox": RandomArch("gpt_neox", _neox, _SMALL, "smollm2-135m-instruct"),
    "opt": RandomArch("opt", _opt, _SMALL, "smollm2-135m-instruct"),
}


def random_config(arch: str, vocab: int, **overrides):
    """A ``transformers`` config for a random model of family ``arch``.

    >>> random_config("gpt2", vocab=100, layers=2, hidden=32, intermediate=64, heads=4).n_layer
    2
    """
    ra = RANDOM_ARCHS[arch]
    size = {**ra.defaults, **{k: v for k, v in overrides.items() if k in ("layers", "hidden", "intermediate", "heads", "kv_heads")}}
    if size["hidden"] % size["heads"]:
        raise UserError(f"random:{arch}: hidden ({size['hidden']}) must be divisible by heads ({size['heads']})")
    if size["heads"] % size["kv_heads"]:
        size["kv_heads"] = size["heads"]
    cfg = ra.build_config(vocab=vocab, **size)
    if arch == "gemma3":
        cfg.head_dim = 256 if "hidden" not in overrides else size["hidden"] // size["heads"]
    return cfg
