"""The models YAML: typed configuration and whole-file validation.

A file is either a top-level list of models or a mapping with ``models:`` plus optional
run settings. Every problem is reported as one line naming the file, the key path and
what would be valid; nothing loads until the whole file is valid. What needs the machine
or the installed models (a CUDA device, a packaged wheel, a random architecture's name) is
checked by the functions registered in :data:`SOURCE_CHECKS` and :data:`DEVICE_CHECKS`
(:mod:`reporter.models.preflight` registers them; this package never imports model code).

>>> cfg = parse_config([{"name": "tiny", "source": "random:llama"}], "inline.yaml")
>>> cfg.models[0].name, cfg.models[0].dtype
('tiny', 'auto')
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import ConfigError, UserError, unknown_home, user_path
from ..registry import Registry, unknown_name
from ..store.atomic import read_json
from ..store.layout import slugify
from .files import Problems, load_yaml, short, type_name
from .sae import SAEConfig, parse_sae
from .sources import SOURCES, source_prefix

DTYPES = ("auto", "float32", "bfloat16", "float16")
KINDS = ("base", "instruct")
CHAT_TEMPLATES = ("auto", "none")
RANDOM_KEYS = ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab", "seed", "tokenizer")
#: the files one of which makes a directory a Hugging Face tokenizer (``random.tokenizer``)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "merges.txt", "spiece.model", "sentencepiece.bpe.model", "*.tiktoken")
#: the weight files transformers loads a local model directory from (one file, or shards with their index)
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")
_HUB_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?$")
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
#: the longest model name (it names a directory and appears in every table)
MAX_NAME = 100

#: checks of a ``packaged:`` or ``random:`` source by kind: ``fn(name) -> problem or None``
SOURCE_CHECKS: Registry[Callable[[str], "str | None"]] = Registry("source check")
#: checks that a device exists on this machine: ``fn(device) -> problem or None`` (local executor only)
DEVICE_CHECKS: Registry[Callable[[str], "str | None"]] = Registry("device check")
#: checks of a ``random:`` entry's sizes against this machine: ``fn(arch, sizes) -> problem or None`` (local only)
RANDOM_CHECKS: Registry[Callable[[str, dict[str, Any]], "str | None"]] = Registry("random size check")


@dataclass
class ModelSpec:
    """One model entry of the YAML file."""

    name: str
    source: str
    dtype: str = "auto"
    device: str | None = None
    revision: str | None = None
    kind: str | None = None
    chat_template: str = "auto"
    trust_remote_code: bool = False
    max_batch_size: int = 8
    checkpoint: float | None = None
    #: a ``random:`` model's sizes, ``vocab``, ``seed`` and ``tokenizer`` (``packaged:NAME`` or an absolute directory)
    random: dict[str, Any] = field(default_factory=dict)
    device_map: str | None = None
    num_gpus: float | None = None
    num_cpus: float = 1
    generation_backend: str = "transformers"
    #: this model's SAEs for MUI over features (replaces the profile's ``mui.sae``)
    sae: SAEConfig | None = None
    #: the model line this entry is a version of (``reporter board``'s history; default: its ``name``); a label,
    #: never part of the run's configuration hash
    release: str | None = None
    #: this entry's version within its ``release`` (``"1.2"``, ``"2026-11"``); a label, like ``release``
    version: str | None = None

    @property
    def source_type(self) -> str:
        """One of ``packaged``, ``random``, ``local``, ``hub`` or a plugin's source prefix."""
        return source_type(self.source)

    def gpus(self, run_device: str = "auto") -> float:
        """What a Ray task for this model asks for: ``num_gpus`` where given, else 1 for a ``cuda`` device (the
        model's own, else the run's) or a ``device_map``, else 0.

        >>> ModelSpec(name="m", source="random:llama").gpus("cuda"), ModelSpec(name="m", source="random:llama").gpus()
        (1, 0)
        >>> ModelSpec(name="m", source="random:llama", device="cpu").gpus("cuda")
        0
        """
        if self.num_gpus is not None:
            return self.num_gpus
        return 1 if (self.device or run_device or "").startswith("cuda") or self.device_map else 0

    @property
    def slug(self) -> str:
        """File-system-safe form of the name, used for artifact directories."""
        return slugify(self.name)


@dataclass
class RunConfig:
    """A whole run: the models and the run settings."""

    models: list[ModelSpec]
    profile: str | None = None
    output: str | None = None
    seed: int = 1234
    device: str = "auto"
    dtype: str = "auto"
    executor: str = "local"
    address: str | None = None
    path: str = "<inline>"

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain data (what the manifest records), without the file path."""
        d = dataclasses.asdict(self)
        d.pop("path")
        return d


MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec))
RUN_FIELDS = ("models", "profile", "output", "seed", "device", "dtype", "executor", "address")
#: keys only a profile has (reporter.config.profile.PROFILE_KEYS less the shared ones): a models file with them and
#: no models: is a profile given in its place
PROFILE_ONLY = ("tasks", "mui", "lpp", "contamination", "smoke_texts", "collection", "lm_eval_include")
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
BACKENDS = ("transformers", "vllm")
EXECUTORS = ("local", "ray")


def source_type(source: str) -> str:
    """One of ``packaged``, ``random``, ``local``, ``hub`` or a plugin's source prefix, for a ``source:`` value.

    >>> source_type("packaged:smollm2-135m-instruct"), source_type("Qwen/Qwen2.5-0.5B")
    ('packaged', 'hub')
    """
    if source.startswith("packaged:"):
        return "packaged"
    if source.startswith("random:"):
        return "random"
    if source.startswith(("/", "./", "../", "~")) or user_path(source).is_dir():
        return "local"
    return source_prefix(source) or "hub"  # a prefix a plugin registered (reporter.config.sources), or a hub id


def has_tokenizer(path: Path) -> bool:
    """Whether directory ``path`` holds a tokenizer ``AutoTokenizer`` can load: one of :data:`TOKENIZER_FILES`, or a
    ``config.json`` naming its ``tokenizer_class`` (whose own vocabulary file may have any name).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "vocab.txt").write_text("[PAD]"); has_tokenizer(d)
    5
    True
    """
    if any(f.is_file() for pattern in TOKENIZER_FILES for f in path.glob(pattern)):
        return True
    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and isinstance(cfg.get("tokenizer_class"), str)


def _is_path(value: str) -> bool:
    """Whether a ``profile:`` value names a file rather than a built-in profile."""
    return value.endswith((".yaml", ".yml")) or "/" in value or value.startswith("~")


def _unknown_key(key: str, valid: tuple[str, ...]) -> str:
    return unknown_name("key", key, valid, listing="valid keys")


def _parse_checkpoint(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if 0 <= v < math.inf else None  # NaN and infinity are no step
    if isinstance(v, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMbBgGtT]?)\s*", v)
        if m:
            return float(m.group(1)) * _SUFFIX.get(m.group(2).lower(), 1.0)
    return None


def _check_device(p: Problems, key: str, v: Any, local: bool = True) -> str | None:
    if not isinstance(v, str) or not _DEVICE_RE.match(v):
        p.add(key, f"{short(v)} is not a valid device; use auto, cpu, cuda or cuda:N")
        return None
    if local:  # with a Ray executor the GPUs are the workers', not ours
        for _, check in DEVICE_CHECKS.items():
            if (problem := check(v)) is not None:
                p.add(key, problem)
                return None
    return v


def _check_choice(p: Problems, key: str, v: Any, choices: tuple[str, ...]) -> str | None:
    if v not in choices:
        p.add(key, f"{short(v)} is not valid; use one of {', '.join(choices)}")
        return None
    return v


def _check_source(p: Problems, key: str, v: Any, base_dir: Path) -> str | None:
    if not isinstance(v, str) or not v.strip():
        got = "a blank string" if isinstance(v, str) else type_name(v)
        p.add(key, f"must be a hub id, a local model directory, packaged:NAME or random:ARCH, got {got}")
        return None
    kind = source_type(v)
    if kind == "hub" and (base_dir / user_path(v) / "config.json").is_file():  # a model directory beside the file
        kind = "local"
    if kind in ("packaged", "random"):
        if kind in SOURCE_CHECKS and (problem := SOURCE_CHECKS.get(kind)(v.split(":", 1)[1])) is not None:
            p.add(key, problem)
            return None
        return v
    if kind not in ("local", "hub"):  # a source a plugin registered: its own check of what follows the colon
        src = SOURCES.get(kind)
        try:
            problem = src.check(v.split(":", 1)[1]) if src.check is not None else None
        except Exception as e:  # a plugin's bug is one line, not a traceback
            problem = f"the {kind}: source's check failed ({type(e).__name__}: {e})"
        if problem is not None:
            p.add(key, problem)
            return None
        return v
    if kind == "local":
        path = user_path(v)
        if not path.is_absolute():
            path = (base_dir / path)
        if path.is_file():
            p.add(key, f"'{v}' is a file; a local source is a Hugging Face model directory (with config.json)")
            return None
        if not path.is_dir():
            p.add(key, f"local model directory '{v}' does not exist ("
                       + (unknown_home(v) or f"looked at {path}") + ")")
            return None
        if not (path / "config.json").is_file():
            p.add(key, f"'{v}' has no config.json; a local source must be a Hugging Face model directory")
            return None
        try:  # a damaged config.json (a copy cut short) failed the model only after the run began
            read_json(path / "config.json")
        except UserError as e:
            why = str(e).removeprefix(str(path / "config.json") + ": ").removeprefix("is ")
            p.add(key, f"'{v}': its config.json is {why}; copy the model's files again")
            return None
        except OSError as e:  # unreadable (its permissions): transformers would fail on it too
            p.add(key, f"'{v}': its config.json cannot be read ({e.strerror or type(e).__name__})")
            return None
        if not has_tokenizer(path):  # failed only at loading, after the run began
            p.add(key, f"'{v}' holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}, nor a tokenizer_class in "
                       "its config.json); copy the tokenizer's "
                       "files into it (tokenizer.save_pretrained)")
            return None
        if not any(f.is_file() for g in WEIGHT_FILES for f in path.glob(g)):
            p.add(key, f"'{v}' holds no weights (no {', '.join(WEIGHT_FILES)}); copy the model's weight files into "
                       "it (model.save_pretrained)")
            return None
        if "local" in SOURCE_CHECKS and (problem := SOURCE_CHECKS.get("local")(str(path))) is not None:
            p.add(key, f"'{v}': {problem}")  # e.g. a model_type reporter has no adapter for (reporter.models)
            return None
        return str(path.resolve())
    if not _HUB_RE.match(v):
        prefix = re.match(r"^([A-Za-z][A-Za-z0-9_.\-]*):", v)
        if prefix:  # the form of a source prefix none has registered
            names = list(dict.fromkeys(["packaged", "random", *SOURCES.names()]))
            p.add(key, unknown_name("model source", f"{prefix.group(1)}:", [f"{n}:" for n in names],
                                    listing="use a hub id (owner/name), an existing directory or one of"))
            return None
        p.add(key, f"{short(v)} is neither a hub id (owner/name), an existing directory, "
                   "packaged:NAME nor random:ARCH")
        return None
    return v


@dataclass(frozen=True)
class _Entry:
    """What a field rule of a model entry may read besides its own value."""

    raw: dict[str, Any]
    base_dir: Path
    local: bool


def _known_keys(p: Problems, k: str, m: dict[str, Any]) -> None:
    """Every key of a model entry is a field of :class:`ModelSpec`; ``name`` and ``source`` are required."""
    p.unknown_keys(k, m, MODEL_FIELDS)
    for req in ("name", "source"):
        if req not in m:
            p.add(f"{k}.{req}", "is required")


#: the bidirectional controls: characters that make text display in another order than it is stored
#: (``safe\u202egnp.exe`` shows as safeexe.png; U+202A–U+202E, U+2066–U+2069, the marks): refused in names,
#: shown as [U+XXXX] in every output (:mod:`reporter.card.text`)
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
#: a character a name may not hold: a C0/C1 control (Unicode's category Cc is exactly U+0000-U+001F and U+007F-U+009F;
#: a NUL aborted the chart renderer) or a bidirectional control; the one definition names are checked against and
#: every output shows (reporter.card.text)
CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f" + "".join(sorted(BIDI_CONTROLS)) + "]")


def _bad_character(text: str) -> str | None:
    r"""The first control or bidirectional-control character of ``text`` as ``U+XXXX at position N``, or None.

    >>> _bad_character("Llama 3 🦙"), _bad_character("a\x00b"), _bad_character("safe\u202egnp.exe")
    (None, 'U+0000 at position 2', 'U+202E at position 5')
    """
    m = CONTROL_CHARACTER.search(text)
    return None if m is None else f"U+{ord(m.group()):04X} at position {m.start() + 1}"


def _model_name(p: Problems, key: str, v: Any, e: _Entry) -> str | None:
    """``name``: a non-empty string of at most MAX_NAME characters, stripped, with no control characters."""
    if not isinstance(v, str):
        p.add(key, f"must be a non-empty string, got {type_name(v)}")
    elif not v.strip():
        p.add(key, "is blank; give the model a name (it labels the model on the card)")
    elif len(v.strip()) > MAX_NAME:
        p.add(key, f"is {len(v.strip())} characters long; use at most {MAX_NAME}")
    elif (bad := _bad_character(v.strip())) is not None:
        p.add(key, f"holds a control or text-direction character ({bad}); use printable characters only")
    else:
        return v.strip()
    return None


def _model_label(p: Problems, key: str, v: Any, e: _Entry) -> str | None:
    """``release`` / ``version``: a label like ``name`` (a number such as ``1.2`` is read as its text)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = str(v)
    if isinstance(v, str) and not v.strip():
        p.add(key, "is blank; leave it out or give a label such as 1.2")
        return None
    return _model_name(p, key, v, e)


def _model_source(p: Problems, key: str, v: Any, e: _Entry) -> str | None:
    """``source``: a hub id, a local model directory, ``packaged:NAME`` or ``random:ARCH`` (:func:`_check_source`)."""
    return _check_source(p, key, v, e.base_dir)


def _model_device(p: Problems, key: str, v: Any, e: _Entry) -> str | None:
    """``device``: auto, cpu, cuda or cuda:N, present on this machine when the executor is local."""
    return _check_device(p, key, v, e.local)


def _choice(choices: tuple[str, ...]) -> Callable[[Problems, str, Any, _Entry], str | None]:
    """A field rule: the value is one of ``choices``."""
    def check(p: Problems, key: str, v: Any, e: _Entry) -> str | None:
        return _check_choice(p, key, v, choices)
    check.__doc__ = f"One of {', '.join(choices)}."
    return check


def _non_negative(p: Problems, key: str, v: Any, e: _Entry) -> float | None:
    """``num_gpus``, ``num_cpus``: a non-negative, finite number (NaN is neither: ``.nan`` reached the manifest as a
    bare ``NaN`` that JSON parsers refuse).
    """
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
        p.add(key, f"must be a non-negative number, got {short(v)}")
        return None
    return v


def _model_revision(p: Problems, key: str, v: Any, e: _Entry) -> str | None:
    """``revision``: a branch, tag or commit (a number is read as a string), or null."""
    if v is not None and not isinstance(v, (str, int)):
        p.add(key, f"must be a branch, tag or commit string, got {type_name(v)}")
        return None
    return None if v is None else str(v)


def _model_trust_remote_code(p: Problems, key: str, v: Any, e: _Entry) -> bool | None:
    """``trust_remote_code``: true or false."""
    if not isinstance(v, bool):
        p.add(key, f"must be true or false, got {short(v)}")
        return None
    return v


def _model_max_batch_size(p: Problems, key: str, v: Any, e: _Entry) -> int | None:
    """``max_batch_size``: a positive integer."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        p.add(key, f"must be a positive integer, got {short(v)}")
        return None
    return v


def _model_checkpoint(p: Problems, key: str, v: Any, e: _Entry) -> float | None:
    """``checkpoint``: a non-negative training step or token count, with an optional k/M/B/T suffix."""
    c = _parse_checkpoint(v)
    if c is None:
        p.add(key, f"must be a non-negative training step or token count (e.g. 20000 or '1.5T'), got {short(v)}")
    return c


def _model_random(p: Problems, key: str, v: Any, e: _Entry) -> dict[str, Any] | None:
    """``random``: size overrides, only with a ``random:ARCH`` source; each of RANDOM_KEYS a positive integer
    (``seed`` may be 0), except ``tokenizer``: the tokenizer the untrained model borrows instead of its
    family's (``packaged:NAME`` or a tokenizer directory, relative to the models file).
    """
    if not str(e.raw.get("source", "")).startswith("random:"):
        p.add(key, "size overrides are only valid with a random:ARCH source")
        return None
    if not isinstance(v, dict):
        p.add(key, f"must be a mapping of {', '.join(RANDOM_KEYS)}, got {type_name(v)}")
        return None
    ok: dict[str, Any] = {}
    for rk, rv in v.items():
        if rk not in RANDOM_KEYS:
            p.add(f"{key}.{rk}", _unknown_key(str(rk), RANDOM_KEYS))
        elif rk == "tokenizer":
            if (tok := _random_tokenizer(p, f"{key}.{rk}", rv, e.base_dir)) is not None:
                ok[rk] = tok
        elif isinstance(rv, bool) or not isinstance(rv, int) or (rv < 1 and rk != "seed") or rv < 0:
            p.add(f"{key}.{rk}", f"must be {'an integer from 0 to 2**64 - 1' if rk == 'seed' else 'a positive integer'}"
                                 f", got {short(rv)}")
        elif rk == "seed" and rv >= 2 ** 64:  # torch's generator takes 64 bits
            p.add(f"{key}.{rk}", f"must be an integer from 0 to 2**64 - 1, got {short(rv)}")
        else:
            ok[rk] = rv
    if e.local and len(ok) == len(v):  # sizes this machine cannot hold: refused now, not at allocation
        arch = str(e.raw.get("source", "")).split(":", 1)[1]
        for _, check in RANDOM_CHECKS.items():
            if (problem := check(arch, ok)) is not None:
                p.add(key, problem)
                return None
    return ok


def _random_tokenizer(p: Problems, key: str, v: Any, base_dir: Path) -> str | None:
    """``random.tokenizer``: ``packaged:NAME`` (checked like a packaged source) or an existing directory with
    a tokenizer file, returned absolute.
    """
    if not isinstance(v, str) or not v.strip():
        p.add(key, f"must be packaged:NAME or a tokenizer directory, got {type_name(v)}")
        return None
    if v.startswith("packaged:"):
        check = SOURCE_CHECKS.get("packaged") if "packaged" in SOURCE_CHECKS else None
        if check is not None and (problem := check(v.split(":", 1)[1])) is not None:
            p.add(key, problem)
            return None
        return v
    path = user_path(v)
    path = path if path.is_absolute() else base_dir / path
    if not path.is_dir():
        what = "is a file, not a directory" if path.is_file() else "does not exist"
        p.add(key, f"tokenizer directory '{v}' {what} (looked at {path}); use packaged:NAME or a directory "
                   "holding a Hugging Face tokenizer")
        return None
    if not has_tokenizer(path):
        p.add(key, f"'{v}' holds no tokenizer (none of {', '.join(TOKENIZER_FILES)})")
        return None
    return str(path.resolve())


def _model_sae(p: Problems, key: str, v: Any, e: _Entry) -> SAEConfig | None:
    """``sae``: this model's SAEs (:func:`reporter.config.sae.parse_sae`); null means the profile's."""
    return None if v is None else parse_sae(p, key, v, e.base_dir)


#: the field rules of a model entry, in the order their problems are reported
_FIELD_RULES: tuple[tuple[str, Callable[[Problems, str, Any, _Entry], Any]], ...] = (
    ("name", _model_name), ("source", _model_source), ("dtype", _choice(DTYPES)), ("device", _model_device),
    ("device_map", _choice(DEVICE_MAPS)), ("generation_backend", _choice(BACKENDS)),
    ("num_gpus", _non_negative), ("num_cpus", _non_negative), ("revision", _model_revision),
    ("kind", _choice(KINDS)), ("chat_template", _choice(CHAT_TEMPLATES)),
    ("trust_remote_code", _model_trust_remote_code), ("max_batch_size", _model_max_batch_size),
    ("checkpoint", _model_checkpoint), ("random", _model_random), ("sae", _model_sae),
    ("release", _model_label), ("version", _model_label))


def _backend_fits_source(p: Problems, k: str, m: dict[str, Any], spec: dict[str, Any]) -> None:
    """vLLM loads weights from a checkpoint, so it cannot load a ``random:ARCH`` model."""
    if spec.get("generation_backend") == "vllm" and str(m.get("source", "")).startswith("random:"):
        p.add(f"{k}.generation_backend", "vllm cannot load a random:ARCH model; use transformers")


def _parse_model(p: Problems, i: int, m: Any, base_dir: Path, local: bool = True) -> ModelSpec | None:
    """One entry of ``models:``: its keys, each field's rule (:data:`_FIELD_RULES`) and the cross-field rules.

    Every problem is added to ``p``; the spec is returned only when the entry has none.
    """
    k = f"models[{i}]"
    if not isinstance(m, dict):
        p.add(k, f"each model must be a mapping with at least name and source, got {type_name(m)}")
        return None
    n0 = len(p.lines)
    _known_keys(p, k, m)
    entry = _Entry(m, base_dir, local)
    spec = {key: rule(p, f"{k}.{key}", m[key], entry) for key, rule in _FIELD_RULES if key in m}
    _backend_fits_source(p, k, m, spec)
    if len(p.lines) == n0 and local and "random" not in m and str(m.get("source", "")).startswith("random:"):
        arch = str(m["source"]).split(":", 1)[1]  # no random: block: its checks on the family's defaults
        for _, check in RANDOM_CHECKS.items():
            if (problem := check(arch, {})) is not None:
                p.add(f"{k}.source", problem)
                break
    if len(p.lines) > n0:
        return None
    spec.setdefault("device", None)
    return ModelSpec(**spec)


def file_in_the_way(path: Path) -> str | None:
    """Why ``path`` cannot be a run directory because of a file (it, or a folder above it), or None.

    >>> import tempfile; f = Path(tempfile.mkdtemp()) / "afile"; _ = f.write_text("x")
    >>> file_in_the_way(f), file_in_the_way(f / "run")
    ('is a file', 'is under a file (afile)')
    """
    if path.is_file():
        return "is a file"
    for parent in path.parents:
        if parent.is_file():
            return f"is under a file ({parent.name})"
        if parent.is_dir():
            return None
    return None


def parse_config(data: Any, path: str = "<inline>", base_dir: Path | None = None) -> RunConfig:
    """Validate already-loaded YAML data and return a :class:`RunConfig`.

    Raises :class:`ConfigError` listing every problem, one per line.
    """
    p = Problems(path)
    base_dir = base_dir or Path.cwd()
    run: dict[str, Any] = {}
    if isinstance(data, list):
        models_raw: Any = data
    elif isinstance(data, dict):
        if "models" not in data and (profile_keys := [k for k in data if k in PROFILE_ONLY]):
            raise ConfigError(f"{path}: looks like a profile, not a models file (it has "
                              f"{', '.join(k + ':' for k in profile_keys)} and no models:); give it with --profile "
                              f"{path}, and the models file (a list of models, or models:) as FILE")
        p.unknown_keys("", data, RUN_FIELDS)
        if "models" not in data:
            p.add("models", "is required: a list of models (each with name and source)")
        elif data["models"] is None:
            p.add("models", "is empty; list at least one model")
        models_raw = data.get("models")
        for key, what in (("profile", "a profile name or a path to a profile YAML"),
                          ("output", "a directory path string"),
                          ("address", "a Ray address string such as 'ray://head:10001' or 'auto'")):
            if key in data:
                if not isinstance(data[key], str):
                    p.add(key, f"must be {what}, got {type_name(data[key])}")
                elif not data[key].strip():
                    p.add(key, f"is blank; give {what}, or leave the key out")
                else:  # an output directory is relative to the current directory; "~" is the home directory
                    run[key] = str(user_path(data[key])) if key == "output" else data[key]
                    if key == "output" and (blocked := file_in_the_way(Path(run[key]))) is not None:
                        p.add(key, f"{short(data[key])}: {blocked}; give a directory (it is made where missing)")
        if _is_path(run.get("profile", "")):  # a profile file next to the models file, as model sources are
            run["profile"] = str((base_dir / user_path(run["profile"])).resolve())
        if "seed" in data:
            if isinstance(data["seed"], bool) or not isinstance(data["seed"], int) or not 0 <= data["seed"] < 2 ** 32:
                p.add("seed", f"must be an integer from 0 to 2**32 - 1, got {short(data['seed'])}")
            else:
                run["seed"] = data["seed"]
        if "executor" in data:
            ex = _check_choice(p, "executor", data["executor"], EXECUTORS)
            if ex:
                run["executor"] = ex
        if "device" in data:
            dv = _check_device(p, "device", data["device"], run.get("executor", "local") == "local")
            if dv:
                run["device"] = dv
        if "dtype" in data:
            dt = _check_choice(p, "dtype", data["dtype"], DTYPES)
            if dt:
                run["dtype"] = dt
    elif data is None:
        raise ConfigError(f"{path}: the file is empty; expected a list of models or a mapping with 'models:'")
    else:
        raise ConfigError(f"{path}: expected a list of models or a mapping with 'models:', got {type_name(data)}")

    models: list[ModelSpec] = []
    if models_raw is not None:
        if not isinstance(models_raw, list):
            p.add("models", f"must be a list of models, got {type_name(models_raw)}")
        elif not models_raw:
            p.add("models", "is empty; list at least one model")
        else:
            seen: dict[str, int] = {}
            slugs: dict[str, int] = {}
            for i, m in enumerate(models_raw):
                spec = _parse_model(p, i, m, base_dir, run.get("executor", "local") == "local")
                if spec is None:  # its other problems are listed; a later entry of the same name is one more
                    raw = m.get("name") if isinstance(m, dict) else None
                    raw = raw.strip() if isinstance(raw, str) else ""  # as a valid entry's name is read
                    if raw and raw in seen:
                        p.add(f"models[{i}].name", f"duplicate name '{raw}' (also models[{seen[raw]}].name); names "
                                                   "must be unique")
                    elif raw:
                        seen[raw] = i
                    continue
                if spec.name in seen:
                    p.add(f"models[{i}].name", f"duplicate name '{spec.name}' (also models[{seen[spec.name]}].name); names must be unique")
                    continue
                if spec.slug in slugs:
                    p.add(f"models[{i}].name", f"'{spec.name}' collides with models[{slugs[spec.slug]}].name "
                                               f"as a directory name ('{spec.slug}'); choose a more distinct name")
                    continue
                seen[spec.name] = i
                slugs[spec.slug] = i
                models.append(spec)
    p.raise_if_any()
    return RunConfig(models=models, path=path, **run)


def load_config(path: str | Path) -> RunConfig:
    """Load and validate a models YAML file.

    >>> load_config("missing.yaml")
    Traceback (most recent call last):
    reporter.errors.ConfigError: missing.yaml: file not found
    """
    path = Path(path)
    return parse_config(load_yaml(path), str(path), base_dir=path.resolve().parent)


def default_config() -> RunConfig:
    """The embedded default list: SmolLM2-135M-Instruct, Gemma-3-270M and a random baseline."""
    from importlib.resources import files

    res = files("reporter.data").joinpath("default_models.yaml")
    return parse_config(yaml.safe_load(res.read_text()), "<default models>")
