"""Evaluation profiles: which tasks to run, on how many items, with which settings.

Profiles ship inside the package (``quick``, ``standard``, ``paper-mui``, ``paper-lpp``) or
come from a YAML path. ``quick`` is the default.

>>> p = load_profile("quick")
>>> p["name"], [t["name"] for t in p["tasks"]][:2]   # doctest: +ELLIPSIS
('quick', [...])
"""
from __future__ import annotations

import difflib
from importlib.resources import files
from pathlib import Path

import yaml

from .config import load_yaml
from .errors import ConfigError

TASK_KEYS = ("name", "limit", "shots", "max_new_tokens", "stop", "type", "path", "prompt_field", "answer_field",
             "choices_field", "scorer", "instruction")
PROFILE_KEYS = ("name", "description", "tasks", "mui", "lpp", "contamination", "smoke_texts", "models", "notes")
CONTAMINATION_KEYS = ("verbatim_items", "reference_texts")
LPP_KEYS = ("enabled", "corpus", "n_texts", "context", "step", "layers", "min_tokens")
MUI_KEYS = ("top_ratio", "mode", "rho", "validate_neurons", "enabled")
MUI_MODES = ("score", "activation", "topscore", "global_topk")


def builtin_profiles() -> list[str]:
    return sorted(p.name[:-5] for p in files("reporter.profile_files").iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str | None) -> dict:
    """Load and validate a profile by built-in name or path; returns a plain dict."""
    name_or_path = name_or_path or "quick"
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        data, where = load_yaml(path), str(path)
    else:
        if name_or_path not in builtin_profiles():
            close = difflib.get_close_matches(name_or_path, builtin_profiles(), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"profile '{name_or_path}' not found{hint}; built-in profiles: "
                              f"{', '.join(builtin_profiles())}, or give a path to a YAML file")
        where = f"profile {name_or_path}"
        data = yaml.safe_load(files("reporter.profile_files").joinpath(f"{name_or_path}.yaml").read_text())
    return validate_profile(data, where, base_dir=path.resolve().parent if path.exists() else Path.cwd())


def validate_profile(data, where: str, base_dir: Path) -> dict:
    from .scoring import SCORERS
    from .tasks import JSONL_SCORERS, TASKS

    problems: list[str] = []

    def add(key: str, msg: str) -> None:
        problems.append(f"{where}: {key}: {msg}")

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a profile must be a mapping with 'tasks:'")
    for k in data:
        if k not in PROFILE_KEYS:
            close = difflib.get_close_matches(str(k), PROFILE_KEYS, n=1)
            add(str(k), f"unknown key '{k}'" + (f" (did you mean '{close[0]}'?)" if close else "")
                + f"; valid keys: {', '.join(PROFILE_KEYS)}")
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        add("tasks", "must be a non-empty list of tasks")
        tasks = []
    names = set()
    for i, t in enumerate(tasks):
        k = f"tasks[{i}]"
        if isinstance(t, str):
            t = tasks[i] = {"name": t}
        if not isinstance(t, dict) or "name" not in t:
            add(k, "each task must be a task name or a mapping with 'name'")
            continue
        for key in t:
            if key not in TASK_KEYS:
                close = difflib.get_close_matches(str(key), TASK_KEYS, n=1)
                add(f"{k}.{key}", f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
                    + f"; valid keys: {', '.join(TASK_KEYS)}")
        if t["name"] in names:
            add(f"{k}.name", f"duplicate task '{t['name']}'")
        names.add(t["name"])
        if t.get("type") == "jsonl":
            for req in ("path", "prompt_field", "answer_field", "scorer"):
                if req not in t:
                    add(f"{k}.{req}", "is required for a jsonl task")
            if t.get("scorer") not in (None, *JSONL_SCORERS):
                add(f"{k}.scorer", f"{t['scorer']!r} is not valid; use one of {', '.join(JSONL_SCORERS)}")
            if "path" in t and not Path(t["path"]).is_absolute():
                t["path"] = str((base_dir / t["path"]).resolve())
        elif "type" in t:
            add(f"{k}.type", f"{t['type']!r} is not valid; the only task type is jsonl (omit it for built-in tasks)")
        elif t["name"] not in TASKS:
            close = difflib.get_close_matches(t["name"], list(TASKS), n=1)
            add(f"{k}.name", f"unknown task '{t['name']}'" + (f" (did you mean '{close[0]}'?)" if close else "")
                + f"; available: {', '.join(sorted(TASKS))}")
        for key in ("limit", "shots", "max_new_tokens"):
            v = t.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (0 if key == "shots" else 1)):
                add(f"{k}.{key}", f"must be a {'non-negative' if key == 'shots' else 'positive'} integer, got {v!r}")
        if "stop" in t and not (isinstance(t["stop"], list) and all(isinstance(s, str) for s in t["stop"])):
            add(f"{k}.stop", "must be a list of strings")
    def section(name: str, keys: tuple[str, ...]) -> dict:
        """A mapping-valued profile key, with its unknown keys reported."""
        value = data.get(name) or {}
        if not isinstance(value, dict):
            add(name, "must be a mapping")
            return {}
        for key in value:
            if key not in keys:
                add(f"{name}.{key}", f"unknown key '{key}'; valid keys: {', '.join(keys)}")
        return value

    mui = section("mui", MUI_KEYS)
    if "mode" in mui and mui["mode"] not in MUI_MODES:
        add("mui.mode", f"{mui['mode']!r} is not valid; use one of {', '.join(MUI_MODES)}")
    if "top_ratio" in mui and not (isinstance(mui["top_ratio"], (int, float)) and 0 < mui["top_ratio"] <= 1):
        add("mui.top_ratio", f"must be a number in (0, 1], got {mui['top_ratio']!r}")
    if "rho" in mui and not (isinstance(mui["rho"], (int, float)) and 0 < mui["rho"] <= 1):
        add("mui.rho", f"must be a number in (0, 1], got {mui['rho']!r}")
    cont = section("contamination", CONTAMINATION_KEYS)
    for key, v in cont.items():
        if key in CONTAMINATION_KEYS and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            add(f"contamination.{key}", f"must be a non-negative integer, got {v!r}")
    st = data.get("smoke_texts", 16)
    if isinstance(st, bool) or not isinstance(st, int) or st < 1:
        add("smoke_texts", f"must be a positive integer, got {st!r}")
    lpp = section("lpp", LPP_KEYS)
    for key in ("n_texts", "context", "step", "min_tokens"):
        v = lpp.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            add(f"lpp.{key}", f"must be a positive integer, got {v!r}")
    if lpp.get("layers", "last") not in ("last", "all"):
        add("lpp.layers", f"{lpp['layers']!r} is not valid; use last or all")
    if problems:
        raise ConfigError(problems)
    assert SCORERS  # the scorer registry is importable
    out = dict(data)
    out.setdefault("name", Path(where).stem if where.endswith((".yaml", ".yml")) else where.split()[-1])
    out["mui"] = {"enabled": True, "top_ratio": 0.001, "mode": "score", "rho": 0.9, "validate_neurons": False,
                  **mui}
    out["contamination"] = {"verbatim_items": 16, "reference_texts": 64, **cont}
    out["smoke_texts"] = st
    out["lpp"] = {"enabled": True, "corpus": "coqa", "n_texts": 100, "context": 200, "step": None,
                  "layers": "last", "min_tokens": 128, **lpp}
    return out
