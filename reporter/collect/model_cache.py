"""Model-only work kept across runs: what depends on nothing but the model and the settings (the smoke
perplexity, the held-out reference pass, the LPP corpus pass) is computed once per model and reused by every
later run of the same model, in reporter's cache beside the converted models.

The key covers the model's content identity (:func:`reporter.models.identity.model_identity`), its dtype and
device kind, the step's name and settings, the code (a hash of reporter's source that measures, and of a plugin's
module) and the torch and transformers versions. A hit copies the step's files into the run directory (each
checked against the sha256 it was stored with), so the run directory stays the source of truth; a miss runs the
step and stores the files it wrote. A cache that cannot be read or written only means computing; ``--force``
never reads it.

>>> step = ModelStep("smoke", {"texts": 2})
>>> len(step_key("random:abc", "float32", "cpu", step))
32
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError
from ..installed import cache_root, source_digest
from ..plugin_code import module_files
from ..store.atomic import atomic_directory, read_json, write_bytes

#: the directory of the cache that holds model-only work
CACHE_DIR = "model-work"
_INDEX = "entry.json"
#: what a step's record says (``model_work`` in the manifest)
CACHED, COMPUTED = "cached", "computed"


@dataclass(frozen=True)
class ModelStep:
    """One piece of model-only work: a name and the settings (plain JSON data) its result depends on."""

    name: str
    settings: Any


#: reporter's source that measures nothing: the stages that judge and show (``analyse/``, ``card/``) and
#: ``reporter list``'s catalogue run again from the artifacts on every run, and nothing that measures imports them
#: (pyproject.toml's import contracts; ``tests/test_run.py`` checks it in a fresh process)
NOT_MEASURING = ("analyse", "card", "catalogue.py")


def code_version(*extra: str) -> str:
    """sha256 over reporter's own Python source that measures (all but :data:`NOT_MEASURING`) and the files
    ``extra`` (a plugin's modules, read again at every call): any change of the code that measures makes a new key,
    so a cached result and a resumed run are always the current code's; a change to the analysis or the card keeps
    them.
    """
    own = _measuring_source()
    if not extra:
        return own
    return hashlib.sha256((own + source_digest(None, extra)).encode()).hexdigest()


@lru_cache(maxsize=1)
def _measuring_source() -> str:
    """:func:`source_digest` of reporter's source that measures, read once per process."""
    return source_digest(Path(__file__).resolve().parent.parent, exclude=NOT_MEASURING)


def step_key(identity: str, dtype: str, device: str, step: ModelStep, code: str = "") -> str:
    """The cache key of one step of one model (32 hex digits)."""
    import torch
    import transformers

    blob = json.dumps({"model": identity, "dtype": dtype, "device": device, "step": step.name,
                       "settings": step.settings, "code": code or code_version(), "torch": torch.__version__,
                       "transformers": transformers.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    if not directory.is_dir():
        return {}
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in directory.rglob("*") if p.is_file()}


def _restore(entry: Path, directory: Path) -> bool:
    """Copy a cache entry's files into ``directory`` when every one matches its recorded sha256."""
    index = read_json(entry / _INDEX)
    if not isinstance(index, dict) or not isinstance(index.get("files"), dict) or not index["files"]:
        return False
    blobs = {}
    for rel, digest in index["files"].items():
        path = entry / "files" / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts or not path.is_file():
            return False
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            return False
        blobs[rel] = data
    for rel, data in blobs.items():
        write_bytes(directory / rel, data)
    return True


def _store(entry: Path, directory: Path, files: list[str]) -> None:
    def build(tmp: Path) -> None:
        digests = {}
        for rel in files:
            (tmp / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(directory / rel, tmp / "files" / rel)
            digests[rel] = hashlib.sha256((tmp / "files" / rel).read_bytes()).hexdigest()
        (tmp / _INDEX).write_text(json.dumps({"files": digests}, indent=1), encoding="utf-8")

    atomic_directory(entry, build)


def run_cached(lm: Any, step: ModelStep, directory: Path, run: Callable[[], None], done: Callable[[], bool], *,
               use_cache: bool = True, owner: Any = None) -> str:
    """Run one model-only step through the cache; returns :data:`CACHED` or :data:`COMPUTED`.

    ``run`` writes the step's files into ``directory``; ``done`` says whether they are all there.
    ``use_cache=False`` (``--force``) computes and stores anew. ``owner``: the plugin object whose module's
    source joins the code version (a plugin outside reporter's package).
    """
    from ..models.identity import device_kind, model_identity, source_files

    identity = model_identity(lm)
    entry = None
    if identity is not None:
        # a plugin's code: its module and what it imports from its own package or folder (a helper); none
        # for reporter's own passes, whose code is in code_version already; and a plugin source's, which may
        # change what the same weights compute
        modules = (module_files(type(owner).__module__) if owner is not None else []) + source_files(lm.spec)
        key = step_key(identity, str(lm.dtype).replace("torch.", ""), device_kind(lm), step, code_version(*modules))
        entry = cache_root() / CACHE_DIR / step.name / key
    if entry is not None and use_cache:
        try:
            if entry.is_dir() and _restore(entry, directory) and done():
                return CACHED
        except (OSError, UserError):  # an unreadable entry: computed instead
            pass
    before = _snapshot(directory)
    run()
    if entry is not None:
        after = _snapshot(directory)
        files = sorted(rel for rel, st in after.items() if before.get(rel) != st)
        if files:
            try:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)  # a damaged or outdated entry
                _store(entry, directory, files)
            except (OSError, UserError):  # a read-only or full cache: the run goes on
                pass
    return COMPUTED
