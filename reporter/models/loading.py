"""Load a model entry (hub, local, packaged or random) into a ready-to-use bundle.

>>> from reporter.config import ModelSpec
>>> lm = load_model(ModelSpec(name="tiny", source="random:llama",
...                           random={"layers": 2, "hidden": 64, "intermediate": 128, "heads": 4}))
>>> lm.meta["n_layers"], lm.kind
(2, 'base')
"""
from __future__ import annotations

import contextlib
import copy
import functools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from ..config import ModelSpec
from ..config.sources import SOURCES, ModelSource, SourceModel, check_loaded
from ..errors import UserError
from .adapters import Adapter, get_adapter
from .heap import return_free_memory
from .identity import plugin_source_identity, resolve_hub_revision, weights_sha256
from .packaged import PACKAGED, entry_dir, model_dir, tokenizer_dir
from .random_archs import RANDOM_ARCHS, SIZE_KEYS, random_config

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """A model ready for evaluation, with everything the analyses need to know about it."""

    spec: ModelSpec
    model: Any
    tokenizer: Any
    adapter: Adapter
    device: torch.device
    dtype: torch.dtype
    kind: str
    use_chat_template: bool
    meta: dict = field(default_factory=dict)


def resolve_device(requested: str | None, run_default: str = "auto") -> torch.device:
    """``auto`` picks the first GPU when one is present, else the CPU."""
    d = requested or run_default or "auto"
    if d == "auto":
        d = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(d)


def resolve_dtype(requested: str, run_default: str, device: torch.device) -> torch.dtype:
    """``auto`` is float32 on the CPU and bfloat16 (float16 where unsupported) on a GPU."""
    d = requested if requested != "auto" else run_default
    if d != "auto":
        return _DTYPES[d]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def load_tokenizer(path: str, **kw: Any) -> Any:
    """A Hugging Face tokenizer with a pad token (the EOS token when it has none).

    A local directory's tokenizer asked for a second time in a process is kept, and from then on handed out as a
    copy: several models of a run often share one (random models borrow a packaged model's), and parsing SmolLM2's
    49,152-token ``tokenizer.json`` costs about twice the copy. The first request pays nothing for this (a run of
    one model per tokenizer copies none). The memo is keyed by the directory's files (names, sizes, modification
    times) and the keyword arguments, so an edited tokenizer is read again.

    >>> a = load_tokenizer(str(tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    >>> b, c = (load_tokenizer(str(tokenizer_dir(PACKAGED["smollm2-135m-instruct"]))) for _ in range(2))
    >>> a is not b is not c and a("Hi there").input_ids == b("Hi there").input_ids and a.pad_token == c.pad_token
    True
    """
    key = _tokenizer_key(path, kw)
    if key is not None and key in _TOKENIZERS:
        _TOKENIZERS[key] = _TOKENIZERS.pop(key)  # the most recently used last
        return copy.deepcopy(_TOKENIZERS[key])
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, **kw)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if key is not None and key not in _ASKED:
        _ASKED.add(key)  # asked once: kept only if asked again
    elif key is not None:
        try:
            _TOKENIZERS[key] = copy.deepcopy(tok)  # the memo's own copy: the caller may change the one it gets
        except Exception:  # a tokenizer class that cannot be copied (remote code …) is parsed every time
            return tok
        while len(_TOKENIZERS) > _TOKENIZERS_KEPT:
            _TOKENIZERS.pop(next(iter(_TOKENIZERS)))
    return tok


#: tokenizers parsed in this process, by :func:`_tokenizer_key`; the least recently used beyond a few are dropped
_TOKENIZERS: dict[tuple[Any, ...], Any] = {}
#: the keys asked for once (a tokenizer is kept from its second request on)
_ASKED: set[tuple[Any, ...]] = set()
_TOKENIZERS_KEPT = 4


def _tokenizer_key(path: str, kw: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a local tokenizer directory's tokenizer depends on: the directory, its files' names, sizes and times,
    and the loading arguments; None for anything else (a hub id: its files are resolved by revision).
    """
    d = Path(path)
    try:
        if not d.is_dir():
            return None
        files = tuple((p.name, st.st_size, st.st_mtime_ns) for p in sorted(d.iterdir())
                      if p.is_file() and (st := p.stat()))
        return (str(d.resolve()), json.dumps(kw, sort_keys=True, default=repr), files)
    except (OSError, TypeError, ValueError):
        return None


def _damaged_json(folder: str) -> str | None:
    """The first JSON file of a local model directory that does not parse (its name), or None (a hub id, or none)."""
    d = Path(folder)
    if not d.is_dir():
        return None
    for p in sorted(d.glob("*.json")):
        try:
            json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return p.name
    return None


def _from_pretrained(path: str, spec: ModelSpec, dtype: torch.dtype, what: str,
                     revision: Any = None) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    kw = dict(revision=revision, trust_remote_code=spec.trust_remote_code)
    try:
        tok = load_tokenizer(path, **kw)
        extra = {"device_map": spec.device_map} if spec.device_map else {}
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kw, **extra)
    except (OSError, ValueError) as e:  # the whole message on one line (its first line can end mid-sentence)
        first = " ".join(str(e).split()) or type(e).__name__
        first = first if len(first) <= 500 else first[:499] + "…"
        if isinstance(e, json.JSONDecodeError) and (bad := _damaged_json(path)) is not None:
            first = f"{bad} is not valid JSON ({first})"  # the decoder's message names no file
        raise UserError(f"model '{spec.name}': cannot load {what} '{spec.source}': {first}") from None
    except (MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:  # damaged weight files (safetensors' SafetensorError, torch's UnpicklingError …)
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise UserError(f"model '{spec.name}': cannot load {what} '{spec.source}': its files look damaged "
                        f"({type(e).__name__}: {first})") from None
    return model, tok


def _load_packaged(spec: ModelSpec, device: torch.device, dtype: torch.dtype, seed: int) -> SourceModel:
    """``packaged:NAME``: a model shipped in PyPI wheels, converted once into the cache."""
    pm = PACKAGED[spec.source.split(":", 1)[1]]
    was_cached = (entry_dir(pm) / "model").is_dir()
    path = model_dir(pm)
    if not was_cached:  # the conversion freed more than the model will need: give it back before loading
        return_free_memory()
    model, tok = _from_pretrained(str(path), spec, dtype, "packaged model")
    return SourceModel(model, tok, kind=pm.kind,
                       meta=dict(upstream=pm.upstream, cache_path=str(path), converted_now=not was_cached))


def to_dtype_keeping_rotary(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """``model.to(dtype)``, but the rotary embeddings' frequency buffers (every buffer named ``*inv_freq``: ``inv_freq``,
    ``original_inv_freq``, Gemma-3's ``sliding_attention_inv_freq`` and ``full_attention_inv_freq``) stay float32, as
    ``from_pretrained`` keeps them.

    A plain ``.to(torch.bfloat16)`` rounds ``inv_freq`` too, and the rotary angle ``position × inv_freq`` then drifts
    by up to ``position × 2⁻⁹`` radians (about 1 rad at position 500): a bf16 ``random:`` baseline would not be the
    architecture a real bf16 checkpoint of it is.

    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
    ...                                  num_attention_heads=2, vocab_size=64))
    >>> m = to_dtype_keeping_rotary(m, torch.bfloat16)
    >>> m.model.rotary_emb.inv_freq.dtype, m.model.layers[0].mlp.down_proj.weight.dtype
    (torch.float32, torch.bfloat16)
    """
    kept = {name: buf.detach().clone() for name, buf in model.named_buffers(remove_duplicate=False)
            if name.rsplit(".", 1)[-1].endswith("inv_freq") and buf.dtype == torch.float32}
    model = model.to(dtype)
    for name, buf in kept.items():
        owner, _, attr = name.rpartition(".")
        model.get_submodule(owner)._buffers[attr] = buf  # .to(dtype) moved nothing across devices
    return model


def _load_random(spec: ModelSpec, device: torch.device, dtype: torch.dtype, seed: int) -> SourceModel:
    """``random:ARCH``: an untrained model of a real architecture, initialised from the seed."""
    arch = spec.source.split(":", 1)[1]
    from transformers import AutoModelForCausalLM

    borrowed = spec.random.get("tokenizer") or f"packaged:{RANDOM_ARCHS[arch].tokenizer}"
    if borrowed.startswith("packaged:"):
        tok = load_tokenizer(str(tokenizer_dir(PACKAGED[borrowed.split(":", 1)[1]])))
    else:  # a tokenizer directory (validated: it exists and holds a tokenizer file)
        try:
            tok = load_tokenizer(borrowed)
        except (OSError, ValueError) as e:
            raise UserError(f"model '{spec.name}': cannot load random.tokenizer '{borrowed}': "
                            f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__}") from None
    vocab = spec.random.get("vocab", len(tok))
    if vocab < len(tok):
        raise UserError(f"model '{spec.name}': random.vocab ({vocab}) is smaller than the tokenizer "
                        f"({len(tok)} tokens from {borrowed})")
    cfg = random_config(arch, vocab=vocab, tokens={"pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id,
                                                   "eos_token_id": tok.eos_token_id},
                        **{k: v for k, v in spec.random.items() if k in SIZE_KEYS})
    seed = spec.random.get("seed", seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return SourceModel(to_dtype_keeping_rotary(model, dtype), tok, kind="base",
                       meta=dict(random_seed=seed, tokenizer_from=borrowed))


SOURCES.add("packaged", ModelSource("packaged", _load_packaged))
SOURCES.add("random", ModelSource("random", _load_random))


def load_model(spec: ModelSpec, *, run_device: str = "auto", run_dtype: str = "auto",
               run_seed: int = 0, progress: bool = True) -> LoadedModel:
    """Load one model entry; packaged models are converted once and then read from the cache.

    ``progress=False`` (``reporter run --no-progress``) hides transformers' own bars while it loads ("Loading
    weights", "Writing model shards"); the library's setting before is restored after.
    """
    with _transformers_bars(progress):
        return _load(spec, run_device, run_dtype, run_seed)


@contextlib.contextmanager
def _transformers_bars(shown: bool) -> Iterator[None]:
    """transformers' progress bars hidden inside where ``shown`` is False; the setting before restored after. The
    GGUF conversion's "Converting and de-quantizing GGUF tensors" bar is tqdm's own, which transformers' setting does
    not reach: its module's ``tqdm`` is a disabled one inside.
    """
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as tf_logging

    was, bar = tf_logging.is_progress_bar_enabled(), getattr(gguf_utils, "tqdm", None)
    if not shown:
        tf_logging.disable_progress_bar()
        if bar is not None:
            gguf_utils.tqdm = functools.partial(bar, disable=True)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if not shown:
            if was:
                tf_logging.enable_progress_bar()
            if bar is not None:
                gguf_utils.tqdm = bar  # type: ignore[attr-defined]


def _load(spec: ModelSpec, run_device: str, run_dtype: str, run_seed: int) -> LoadedModel:
    t0 = time.perf_counter()
    device = resolve_device(spec.device, run_device)
    dtype = resolve_dtype(spec.dtype, run_dtype, device)
    st = spec.source_type
    meta: dict[str, Any] = {"source": spec.source, "source_type": st}
    kind = spec.kind
    if st in ("hub", "local"):
        # a hub id's revision resolved once: every file is read at that commit, the one recorded (model_identity)
        revision = resolve_hub_revision(spec.source, spec.revision) if st == "hub" else spec.revision
        model, tok = _from_pretrained(spec.source, spec, dtype, f"{st} model", revision)
        if commit := getattr(revision, "resolved", None):
            meta["commit"] = commit
    else:  # packaged:, random: or a plugin's prefix (reporter.config.sources.SOURCES)
        loaded = check_loaded(st, spec.name, SOURCES.get(st).load(spec, device, dtype, run_seed))
        model, tok = loaded.model, loaded.tokenizer
        meta.update(loaded.meta)
        if st not in ("packaged", "random"):  # a plugin's source: what it says it loads, or else what it loaded
            if SOURCES.get(st).identity is not None:  # never the other kind: the check before loading reads this one
                if said := plugin_source_identity(spec):
                    meta["identity"] = said
            elif digest := weights_sha256(model, tok):
                meta["identity"] = f"weights:{digest}"
        kind = kind or loaded.kind
    placed = getattr(model, "hf_device_map", None)
    if spec.device_map and (placed or st in ("hub", "local", "packaged")):
        # placed by transformers (and accelerate, across devices): inputs go to the embedding's device. A map that
        # fits one device is not dispatched in transformers 5 and sets no hf_device_map: the model is where it
        # landed (a small model under balanced_low_0 on cuda:1), not moved to the run's device
        device = model.get_input_embeddings().weight.device
        meta["device_map"] = {k: str(v) for k, v in (placed or {"": device}).items()}
    else:
        model = model.to(device)
    model = model.eval()
    if spec.generation_backend == "vllm":
        meta["generation_backend"] = "vllm"
        meta["vllm_path"] = str(meta.get("cache_path") or spec.source)
    if kind is None:
        kind = "instruct" if getattr(tok, "chat_template", None) else "base"
    use_chat = spec.chat_template != "none" and kind == "instruct" and bool(getattr(tok, "chat_template", None))
    adapter = get_adapter(model)
    meta.update(
        model_type=model.config.model_type,
        n_params=int(sum(p.numel() for p in model.parameters())),
        n_layers=adapter.n_layers,
        d_ff=adapter.d_ff,
        d_model=adapter.d_model,
        vocab_size=int(adapter.unembedding().shape[0]),
        gated_mlp=adapter.gated,
        kind=kind,
        chat_template=use_chat,
        dtype=str(dtype).replace("torch.", ""),
        device=str(device),
        load_seconds=round(time.perf_counter() - t0, 2),
    )
    if spec.checkpoint is not None:
        meta["checkpoint"] = spec.checkpoint
    return LoadedModel(spec=spec, model=model, tokenizer=tok, adapter=adapter, device=device, dtype=dtype,
                       kind=kind, use_chat_template=use_chat, meta=meta)
