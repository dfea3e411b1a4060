"""Checks of a models file against this machine, registered into its validation.

:mod:`reporter.config` checks a file's syntax without importing torch or any model code;
importing this module registers the checks that need them (a ``random:ARCH`` family is known,
a ``packaged:NAME`` model is known and its wheels are installed, a ``cuda`` device exists), so
they run in the same pass, one line per problem with the key path, before anything loads.

>>> from reporter.config import parse_config
>>> parse_config([{"name": "m", "source": "random:lama"}], "m.yaml")
Traceback (most recent call last):
reporter.errors.ConfigError: m.yaml: models[0].source: unknown architecture 'lama' (did you mean 'random:llama'?); supported: llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3, gpt2, gpt_neox, opt
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..config.models import DEVICE_CHECKS, RANDOM_CHECKS, SOURCE_CHECKS
from ..installed import cache_root, cache_unwritable
from ..registry import did_you_mean
from . import packaged
from .random_archs import RANDOM_ARCHS, SIZE_KEYS


@SOURCE_CHECKS.register("packaged")
def check_packaged(name: str) -> str | None:
    """A ``packaged:NAME`` model must be known and its wheels installed."""
    pm = packaged.PACKAGED.get(name)
    if pm is None:
        return (f"unknown packaged model '{name}'{did_you_mean(name, packaged.PACKAGED, prefix='packaged:')}; "
                "available: " + ", ".join(f"packaged:{n}" for n in packaged.PACKAGED))
    if packaged.missing_modules(pm):
        return f"packaged model '{name}' is not installed; run: {pm.pip_command}"
    return _packaged_cache_problem(name, f"packaged model '{name}' is converted once into")


def _packaged_cache_problem(name: str, what: str) -> str | None:
    """A packaged model not converted yet needs a writable cache: why it is not, or None."""
    pm = packaged.PACKAGED.get(name)
    if pm is None or packaged.missing_modules(pm) or packaged.entry_dir(pm).is_dir():
        return None
    if (why := cache_unwritable()) is None:
        return None
    return (f"{what} reporter's cache {cache_root()}; the cache cannot be written ({why}): set XDG_CACHE_HOME to "
            "a writable directory")


#: the ``model_type`` s of reporter's own adapters (:mod:`reporter.models.adapters`, which imports torch: a validation
#: of a local model reads this list instead; tests/test_user_hints.py keeps the two equal)
BUILTIN_FAMILIES = ("gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "gpt_neox", "llama", "mistral", "opt", "phi3",
                    "qwen2", "qwen3")


@SOURCE_CHECKS.register("local")
def check_local_model_type(folder: str) -> str | None:
    """A local model directory's ``config.json`` names a ``model_type`` reporter has an adapter for: one it has none
    for (``bert``), or none at all, passed validation and failed after the weights had loaded, naming neither the
    model nor the file.

    >>> import json, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text(json.dumps({"model_type": "bert"}))
    >>> check_local_model_type(str(d)).split(";")[0]
    "its config.json's model_type 'bert' is not supported"
    """
    import json

    try:
        model_type = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):  # unreadable: the checks before this one say so
        return None
    adapters = sys.modules.get("reporter.models.adapters")  # loaded (by a plugin that adds a family): its registry
    families = sorted(adapters.ADAPTERS) if adapters is not None else list(BUILTIN_FAMILIES)  # else no torch import
    if not isinstance(model_type, str) or not model_type:
        return (f"its config.json names no model_type; it must name the model's family (one of "
                f"{', '.join(families)}), as save_pretrained writes it")
    if model_type not in families:
        return f"its config.json's model_type {model_type!r} is not supported; supported: {', '.join(families)}"
    return None


@SOURCE_CHECKS.register("random")
def check_random(arch: str) -> str | None:
    """A ``random:ARCH`` family must have a random-initialisation recipe."""
    if arch in RANDOM_ARCHS:
        return None
    return (f"unknown architecture '{arch}'{did_you_mean(arch, RANDOM_ARCHS, prefix='random:')}; supported: "
            + ", ".join(RANDOM_ARCHS))


#: the vocabulary of each packaged tokenizer a random model may borrow (for the size estimate)
_VOCAB = {"smollm2-135m-instruct": 49152, "gemma-3-270m": 262144}


def random_parameters(arch: str, sizes: dict[str, Any]) -> int:
    """About how many parameters a ``random:ARCH`` entry makes (embeddings, attention and FFN of every layer).

    >>> random_parameters("llama", {}) // 10**6   # SmolLM2-135M's shape
    134
    """
    size = {**RANDOM_ARCHS[arch].defaults, **{k: v for k, v in sizes.items() if k in SIZE_KEYS}}
    tok = sizes.get("tokenizer") or f"packaged:{RANDOM_ARCHS[arch].tokenizer}"
    # a tokenizer directory's vocabulary is not known here: the estimate is then the model without it
    vocab = sizes.get("vocab") or _VOCAB.get(tok.removeprefix("packaged:"), 0)
    h, layers = size["hidden"], size["layers"]
    kv = h * size.get("kv_heads", size["heads"]) // size["heads"]
    return int(vocab) * h + layers * (2 * h * h + 2 * h * kv + 3 * h * size["intermediate"])


@RANDOM_CHECKS.register("tokenizer cache")
def check_random_tokenizer(arch: str, sizes: dict[str, Any]) -> str | None:
    """Without its own ``random.tokenizer``, a ``random:`` model borrows its family's packaged tokenizer, built
    into the cache on first use: the cache must be writable then.
    """
    if arch not in RANDOM_ARCHS or sizes.get("tokenizer"):
        return None
    name = RANDOM_ARCHS[arch].tokenizer
    return _packaged_cache_problem(name, f"random:{arch} borrows the tokenizer of packaged:{name}, built once into")


@RANDOM_CHECKS.register("shape")
def check_random_shape(arch: str, sizes: dict[str, Any]) -> str | None:
    """The attention heads must divide the hidden size, into heads of an even size in a family with rotary position
    embeddings (:attr:`~reporter.models.random_archs.RandomArch.even_heads`: a head size of 15 failed as the model
    was built, with validate's OK), and the key-value heads given must divide the heads (a family's own
    ``kv_heads`` that does not divide the heads given is set to them, as before). The size suggested passes both.

    >>> check_random_shape("llama", {"hidden": 63, "heads": 4})
    'hidden (63) must be divisible by heads (4); e.g. hidden 64'
    >>> check_random_shape("llama", {"hidden": 64, "heads": 5})
    'hidden (64) must be divisible by heads (5); e.g. hidden 70'
    >>> check_random_shape("llama", {"hidden": 60, "heads": 4})
    'hidden / heads (15, the size of a head) must be even for random:llama (its rotary position embeddings turn pairs of dimensions); e.g. hidden 64'
    >>> check_random_shape("gpt2", {"hidden": 60, "heads": 4}) is None
    True
    >>> check_random_shape("llama", {"heads": 4, "kv_heads": 3, "hidden": 64})
    'heads (4) must be divisible by kv_heads (3); e.g. kv_heads 1, 2 or 4'
    >>> check_random_shape("llama", {"hidden": 64, "heads": 4}) is None
    True
    """
    if arch not in RANDOM_ARCHS:
        return None
    size = {**RANDOM_ARCHS[arch].defaults, **{k: sizes[k] for k in SIZE_KEYS if k in sizes}}
    h, heads, even = size["hidden"], size["heads"], RANDOM_ARCHS[arch].even_heads

    def fits(hidden: int) -> bool:  # a head of one dimension builds and runs too (transformers' rotary check)
        return hidden % heads == 0 and not (even and (hidden // heads) % 2 and hidden != heads)

    if not fits(h):
        fix = next(c for c in range(h + 1, h + 2 * heads + 1) if fits(c))
        if h % heads:
            return f"hidden ({h}) must be divisible by heads ({heads}); e.g. hidden {fix}"
        return (f"hidden / heads ({h // heads}, the size of a head) must be even for random:{arch} (its rotary "
                f"position embeddings turn pairs of dimensions); e.g. hidden {fix}")
    if "kv_heads" in sizes and heads % sizes["kv_heads"]:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0]
        listed = ", ".join(map(str, divisors[:-1])) + f" or {divisors[-1]}" if len(divisors) > 1 else str(heads)
        return f"heads ({heads}) must be divisible by kv_heads ({sizes['kv_heads']}); e.g. kv_heads {listed}"
    return None


@RANDOM_CHECKS.register("vocab")
def check_random_vocab(arch: str, sizes: dict[str, Any]) -> str | None:
    """``random.vocab`` must hold every token of the tokenizer the model borrows (a packaged one's size is known; a
    tokenizer directory's is read from its ``tokenizer.json``): a smaller one failed only after loading.

    >>> check_random_vocab("llama", {"vocab": 100})
    'vocab (100) is smaller than the 49152 tokens of its tokenizer (packaged:smollm2-135m-instruct); leave vocab out or give at least 49152'
    >>> check_random_vocab("llama", {"vocab": 50000}) is None
    True
    """
    if arch not in RANDOM_ARCHS or "vocab" not in sizes:
        return None
    tok = sizes.get("tokenizer") or f"packaged:{RANDOM_ARCHS[arch].tokenizer}"
    n = _VOCAB.get(tok.removeprefix("packaged:")) if tok.startswith("packaged:") else _tokenizer_size(tok)
    if n is None or sizes["vocab"] >= n:
        return None
    return (f"vocab ({sizes['vocab']}) is smaller than the {n} tokens of its tokenizer ({tok}); leave vocab out or "
            f"give at least {n}")


def _tokenizer_size(folder: str) -> int | None:
    """The number of token ids a tokenizer directory's ``tokenizer.json`` defines (its vocabulary and added tokens),
    or None where it has none or it cannot be read (then the load checks).
    """
    import json

    try:
        data = json.loads((Path(folder) / "tokenizer.json").read_text(encoding="utf-8"))
        vocab = data["model"]["vocab"]
        ids = set(vocab.values()) if isinstance(vocab, dict) else set(range(len(vocab)))
        ids |= {int(t["id"]) for t in data.get("added_tokens") or []}
        return len(ids)
    except (OSError, ValueError, KeyError, TypeError):
        return None


@RANDOM_CHECKS.register("memory")
def check_random_size(arch: str, sizes: dict[str, Any]) -> str | None:
    """A ``random:`` model must fit in this machine's memory in float32 (a typo in ``vocab`` makes a terabyte)."""
    import os

    if arch not in RANDOM_ARCHS:
        return None
    need = 4 * random_parameters(arch, sizes)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    if need <= have:
        return None
    return (f"makes a model of about {need / 4 / 1e9:.3g} billion parameters, {need / (1 << 30):,.0f} GiB in "
            f"float32, more than this machine's {have / (1 << 30):,.0f} GiB of memory; use smaller sizes")


def cuda_count() -> int:
    """CUDA devices visible to torch."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@DEVICE_CHECKS.register("cuda")
def check_cuda(device: str) -> str | None:
    """A ``cuda`` / ``cuda:N`` device must exist here."""
    if not device.startswith("cuda"):
        return None
    n = cuda_count()
    if n == 0:
        return f"'{device}' was asked for but no CUDA GPU is available here; use auto or cpu"
    if ":" in device and int(device.split(":")[1]) >= n:
        return f"'{device}' does not exist: this machine has {n} GPU(s), cuda:0..cuda:{n - 1}"
    return None
