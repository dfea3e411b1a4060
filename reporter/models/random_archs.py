"""Seeded random-initialised models of the supported families (``source: random:ARCH``).

An untrained model is a reference row of the card (chance level), never a point of the
Utility Law. Each family borrows a packaged model's tokenizer.

>>> random_config("gpt2", vocab=100, layers=2, hidden=32, intermediate=64, heads=4).n_layer
2
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..config.models import RANDOM_KEYS
from ..errors import UserError

#: the keys of a ``random:`` entry that set the size (the others are ``vocab``, ``seed`` and ``tokenizer``)
SIZE_KEYS = tuple(k for k in RANDOM_KEYS if k not in ("vocab", "seed", "tokenizer"))


@dataclass(frozen=True)
class RandomArch:
    """How to build a seeded random model of one family: its config and default sizes."""

    name: str
    build_config: Callable[..., object]
    defaults: dict
    tokenizer: str  # packaged model whose tokenizer it borrows
    #: its rotary position embeddings turn pairs of a head's dimensions: the head size (hidden / heads) must be even
    even_heads: bool = False


def _cfg(cls_name: str, tokens: dict[str, Any], **kw):
    import transformers

    return getattr(transformers, cls_name)(**{**kw, **tokens})


def _llama_like(cls_name: str, extra: dict | None = None):
    def build(layers, hidden, intermediate, heads, kv_heads, vocab, tokens):
        kw = dict(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=intermediate,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                  max_position_embeddings=4096, tie_word_embeddings=True)
        kw.update(extra or {})
        if "head_dim" in (extra or {}):
            kw["head_dim"] = hidden // heads
        return _cfg(cls_name, tokens, **kw)
    return build


def _gpt2(layers, hidden, intermediate, heads, kv_heads, vocab, tokens):
    return _cfg("GPT2Config", tokens, n_layer=layers, n_embd=hidden, n_inner=intermediate, n_head=heads,
                vocab_size=vocab, n_positions=4096)


def _neox(layers, hidden, intermediate, heads, kv_heads, vocab, tokens):
    return _cfg("GPTNeoXConfig", tokens, num_hidden_layers=layers, hidden_size=hidden, intermediate_size=intermediate,
                num_attention_heads=heads, vocab_size=vocab, max_position_embeddings=4096)


def _opt(layers, hidden, intermediate, heads, kv_heads, vocab, tokens):
    return _cfg("OPTConfig", tokens, num_hidden_layers=layers, hidden_size=hidden, ffn_dim=intermediate,
                num_attention_heads=heads, vocab_size=vocab, word_embed_proj_dim=hidden,
                max_position_embeddings=4096)


_SMALL = dict(layers=4, hidden=256, intermediate=1024, heads=4, kv_heads=2)
_SMOL = dict(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3)  # SmolLM2-135M's shape
_GEMMA3 = dict(layers=18, hidden=640, intermediate=2048, heads=4, kv_heads=1)  # Gemma-3-270M's shape

RANDOM_ARCHS: dict[str, RandomArch] = {
    "llama": RandomArch("llama", _llama_like("LlamaConfig"), _SMOL, "smollm2-135m-instruct", even_heads=True),
    "mistral": RandomArch("mistral", _llama_like("MistralConfig"), _SMALL, "smollm2-135m-instruct", even_heads=True),
    "qwen2": RandomArch("qwen2", _llama_like("Qwen2Config"), _SMALL, "smollm2-135m-instruct", even_heads=True),
    "qwen3": RandomArch("qwen3", _llama_like("Qwen3Config", {"head_dim": None}), _SMALL, "smollm2-135m-instruct", even_heads=True),
    "phi3": RandomArch("phi3", _llama_like("Phi3Config", {"pad_token_id": 0}), _SMALL, "smollm2-135m-instruct", even_heads=True),
    "gemma": RandomArch("gemma", _llama_like("GemmaConfig", {"head_dim": None}), _SMALL, "gemma-3-270m", even_heads=True),
    "gemma2": RandomArch("gemma2", _llama_like("Gemma2Config", {"head_dim": None}), _SMALL, "gemma-3-270m", even_heads=True),
    "gemma3": RandomArch("gemma3", _llama_like("Gemma3TextConfig", {"head_dim": 256}), _GEMMA3, "gemma-3-270m"),
    "gpt2": RandomArch("gpt2", _gpt2, _SMALL, "smollm2-135m-instruct"),
    "gpt_neox": RandomArch("gpt_neox", _neox, _SMALL, "smollm2-135m-instruct"),
    "opt": RandomArch("opt", _opt, _SMALL, "smollm2-135m-instruct"),
}


def random_config(arch: str, vocab: int, *, tokens: dict[str, int | None] | None = None, **overrides: int) -> Any:
    """A ``transformers`` config for a random model of family ``arch``; size keys not given keep
    the family's defaults, other keys (``vocab``, ``seed``) are ignored here. ``tokens``: the borrowed tokenizer's
    ``bos_token_id``, ``eos_token_id`` and ``pad_token_id``, set when the config is made (a family's own, GPT-2's
    50256 among them, lie outside a smaller vocabulary, and transformers warns of it).

    >>> random_config("gpt2", vocab=100, layers=2, hidden=32, intermediate=64, heads=4).n_layer
    2
    """
    ra = RANDOM_ARCHS[arch]
    size = {**ra.defaults, **{k: v for k, v in overrides.items() if k in SIZE_KEYS}}
    if size["hidden"] % size["heads"]:
        raise UserError(f"random:{arch}: hidden ({size['hidden']}) must be divisible by heads ({size['heads']})")
    if size["heads"] % size["kv_heads"]:
        size["kv_heads"] = size["heads"]
    cfg = ra.build_config(vocab=vocab, tokens=tokens or {}, **size)
    if arch == "gemma3":
        cfg.head_dim = 256 if "hidden" not in overrides else size["hidden"] // size["heads"]
    return cfg
