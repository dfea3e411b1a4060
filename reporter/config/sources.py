"""Model sources: the ``<prefix>:<rest>`` forms of a models YAML ``source:``, registered by prefix.

``packaged:NAME`` and ``random:ARCH`` are registered by :mod:`reporter.models.loading`; a hub id
and a local directory need no prefix. An installed package adds a prefix through the
entry-point group ``reporter.sources`` (an entry point named like the prefix, pointing at a
:class:`ModelSource`); the models YAML then accepts ``source: <prefix>:<rest>``, its
:attr:`~ModelSource.check` validates ``<rest>`` in the same pass as every other key, and
:func:`reporter.models.loading.load_model` calls its :attr:`~ModelSource.load`. This module
imports no model code: a source's ``load`` imports what it needs when it is called.

>>> toy = ModelSource("toy", load=lambda spec, device, dtype, seed: None, check=lambda rest: None)
>>> SOURCES.add("toy", toy); source_prefix("toy:tiny"), source_prefix("org/model")
('toy', None)
>>> SOURCES.remove("toy")
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..registry import Registry


@dataclass
class SourceModel:
    """What a source's ``load`` returns: the model, its tokenizer (with a pad token), and what the run records."""

    model: Any  # a transformers causal LM, on the CPU or where it was loaded
    tokenizer: Any
    kind: str | None = None  # base | instruct; None: decided from the tokenizer's chat template
    meta: dict[str, Any] = field(default_factory=dict)  # extra keys of the model's results.json ``meta``


@dataclass(frozen=True)
class ModelSource:
    """One ``source:`` prefix: how to validate and how to load ``<prefix>:<rest>``."""

    name: str  # the prefix, without the colon
    #: ``load(spec, device, dtype, seed) -> SourceModel`` (``spec`` a ModelSpec, ``device``/``dtype`` torch's)
    load: Callable[[Any, Any, Any, int], SourceModel]
    #: ``check(rest) -> problem or None``, run when the models YAML is validated (nothing loaded yet)
    check: Callable[[str], "str | None"] | None = None
    #: ``identity(spec) -> text or None``: what ``load`` would load, by content, without loading it (the sha256 of
    #: the files it reads, a commit); None where it cannot say. With it, a rerun checks a finished model before it
    #: skips it, as it does a built-in source's; without it, the weights are hashed once loaded
    #: (:func:`reporter.models.identity.weights_sha256`)
    identity: Callable[[Any], "str | None"] | None = None


def _plugin_source(name: str, obj: Any) -> ModelSource:
    """An installed model source (entry-point group ``reporter.sources``): a :class:`ModelSource` named like
    its entry point.

    >>> _plugin_source("toy", "not a source")
    Traceback (most recent call last):
    TypeError: 'not a source' is not a reporter.config.sources.ModelSource
    """
    if not isinstance(obj, ModelSource):
        raise TypeError(f"{obj!r} is not a reporter.config.sources.ModelSource")
    if obj.name != name:
        raise ValueError(f"the entry point is named '{name}' but its source is named {obj.name!r}")
    if name in ("hub", "local"):
        raise ValueError(f"'{name}' names the sources without a prefix; choose another name")
    return obj


#: the keys of a model's ``meta`` that reporter itself writes when it loads the model: a source's own ``meta`` may not
#: set them (a plugin's ``source`` would hide where the model came from)
OWN_META = ("source", "source_type", "device_map", "generation_backend", "vllm_path", "model_type", "n_params",
            "n_layers", "d_ff", "d_model", "vocab_size", "gated_mlp", "kind", "chat_template", "dtype", "device",
            "load_seconds", "checkpoint", "name", "identity", "first_measured", "commit")


def check_loaded(prefix: str, model: str, loaded: Any) -> SourceModel:
    """``loaded``, what source ``prefix``'s ``load`` returned for model ``model``, if it is a :class:`SourceModel`
    whose ``kind`` is base, instruct or None and whose ``meta`` is a dict of new keys; else a
    :class:`~reporter.errors.UserError` naming the source and what would be valid.

    >>> check_loaded("toy", "m", SourceModel(model=None, tokenizer=None, kind="chat"))
    Traceback (most recent call last):
    reporter.errors.UserError: model 'm': source 'toy:' returned kind 'chat'; a SourceModel's kind is 'base', 'instruct' or None (decided from the tokenizer's chat template)
    """
    from ..errors import UserError

    where = f"model '{model}': source '{prefix}:'"
    if not isinstance(loaded, SourceModel):
        raise UserError(f"{where}: its load returned {type(loaded).__name__}, not a "
                        "reporter.config.sources.SourceModel(model, tokenizer, kind=…, meta=…)")
    if loaded.kind not in (None, "base", "instruct"):
        raise UserError(f"{where} returned kind {loaded.kind!r}; a SourceModel's kind is 'base', 'instruct' or None "
                        "(decided from the tokenizer's chat template)")
    if not isinstance(loaded.meta, dict) or not all(isinstance(k, str) for k in loaded.meta):
        raise UserError(f"{where} returned meta of type {type(loaded.meta).__name__}; a SourceModel's meta is a dict "
                        "with text keys")
    if taken := [k for k in OWN_META if k in loaded.meta]:
        raise UserError(f"{where} returned meta key(s) {', '.join(taken)}, which reporter writes itself; rename "
                        "them")
    return loaded


#: model sources by prefix (installed ones, entry-point group ``reporter.sources``, after the built-in ones)
SOURCES: Registry[ModelSource] = Registry("model source", entry_point_group="reporter.sources", load=_plugin_source)


def source_prefix(source: str) -> str | None:
    """The registered source prefix of ``source`` (``toy`` of ``toy:tiny``), or None.

    Looks the registry up (so loads the installed sources) only for a value with a colon.

    >>> source_prefix("Qwen/Qwen2.5-0.5B") is None
    True
    """
    prefix, colon, _ = source.partition(":")
    if not colon or not prefix or "/" in prefix:
        return None
    return prefix if prefix in SOURCES else None
