"""What a rerun into an existing run directory may take from it, when its models file or its profile's task list
changed: the run's shared settings must be the same; a model or task whose entry changed is measured again, an
added one is measured, and a removed one keeps its artifacts, off the card.

A user whose model failed fixes its entry in the models file and reruns; one who adds a model or a task to a finished
comparison reruns into the same directory. Both resume: the other models' and tasks' work is taken as it is. What
every model's results depend on (the seed, the run's device and dtype, the profile's MUI, LPP and contamination
settings) refuses the resume, naming what changed, as before.

The manifest's ``resume_keys`` records a hash per model and per task entry that was ever measured in the directory
(:func:`reporter.run.manifest.resume_keys`), so a model taken off the list and put back later is compared too.

>>> old = {"shared": "s", "models": {"a": "1", "b": "2"}, "tasks": {"t": "3"}}
>>> new = {"shared": "s", "models": {"a": "1", "b": "9", "c": "4"}, "tasks": {"t": "3"}}
>>> changed_entries(old, new)  # c is new: a directory of that name would not be its own
(['b', 'c'], [])
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..collect.failures import log
from ..config import RunConfig
from ..errors import UserError
from ..store.layout import RunDir, slugify
from .manifest import config_changes

__all__ = ["changed_entries", "merged_keys", "shared_changes", "take_what_holds"]


def shared_changes(old_resolved: Any, new_resolved: dict[str, Any]) -> list[str]:
    """The key paths of what changed outside the models and the task list (what refuses a resume), or of all that
    changed when the old run recorded no resolved configuration to compare.

    >>> a = {"config": {"seed": 1, "models": [{"name": "x"}]}, "profile": {"tasks": [{"name": "t"}]}}
    >>> shared_changes(a, {"config": {"seed": 2, "models": []}, "profile": {"tasks": []}})
    ['config.seed: 1 → 2']
    """
    def strip(r: Any) -> Any:
        if not isinstance(r, dict):
            return r
        return {"config": {k: v for k, v in (r.get("config") or {}).items() if k != "models"},
                "profile": {k: v for k, v in (r.get("profile") or {}).items() if k not in ("tasks", "models")}}
    return config_changes(strip(old_resolved), strip(new_resolved))


def changed_entries(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The models and the tasks of ``new`` whose entry differs from the one measured in the directory (``old``:
    its manifest's ``resume_keys``), or that no entry was recorded for: their artifacts are not this run's.
    """
    models = [n for n, h in new["models"].items() if (old.get("models") or {}).get(n) != h]
    tasks = [n for n, h in new["tasks"].items() if (old.get("tasks") or {}).get(n) != h]
    return models, tasks


def merged_keys(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The keys the manifest records after a resume: this run's entries, and those of models and tasks measured
    before and no longer listed (their artifacts stay, so a later run that lists them again compares them).
    """
    old = old or {}
    return {"shared": new["shared"], "models": {**(old.get("models") or {}), **new["models"]},
            "tasks": {**(old.get("tasks") or {}), **new["tasks"]}}


def take_what_holds(rd: RunDir, old_manifest: dict[str, Any], new_keys: dict[str, Any], cfg: RunConfig,
                    resolved: dict[str, Any]) -> None:
    """Remove the artifacts of the models and tasks whose entries changed (a task's under every model directory
    there, listed or not), saying why in one line each, and say which measured models and tasks this run leaves
    off its card. Called under the run directory's lock, before the manifest records ``new_keys``: interrupted
    half-way, the next run compares against the old keys and removes the rest.
    """
    old_keys = old_manifest.get("resume_keys") or {}
    models, tasks = changed_entries(old_keys, new_keys)
    before = {m.get("name"): m for m in ((old_manifest.get("resolved") or {}).get("config") or {}).get("models") or []
              if isinstance(m, dict)}
    old_tasks = {t.get("name"): t for t in ((old_manifest.get("resolved") or {}).get("profile") or {}).get("tasks")
                 or [] if isinstance(t, dict)}
    now_tasks = {t["name"]: t for t in resolved["profile"].get("tasks") or []}
    for i, spec in enumerate(cfg.models):
        if spec.name not in models or not _holds_anything(rd, spec.name):
            continue
        what = _what_changed(before.get(spec.name), resolved["config"]["models"][i], f"models[{i}]")
        log(f"model '{spec.name}': its entry is not the one {rd.model_dir(spec.name)} was measured with{what}: "
            "measuring it again")
        _remove(rd.model_dir(spec.name))
        _remove(rd.failure_note(spec.name))
    model_dirs = [d for d in (rd.root / "models").glob("*") if d.is_dir()] if (rd.root / "models").is_dir() else []
    for name in tasks:
        dirs = [d / "tasks" / slugify(name) for d in model_dirs if (d / "tasks" / slugify(name)).exists()]
        if not dirs:
            continue
        where = f"tasks[{list(now_tasks).index(name)}]"
        log(f"task '{name}': its entry is not the one it was measured with{_what_changed(old_tasks.get(name), now_tasks[name], where)}: "
            f"measuring it again for every model")
        for d in dirs:
            _remove(d)
    listed = {slugify(s.name) for s in cfg.models}
    off = [n for n in before if isinstance(n, str) and slugify(n) not in listed and _holds_anything(rd, n)]
    if off:
        log(f"{rd.root / 'models'}: {_names(off, 'model')} no longer among the run's models: the artifacts stay there, "
            "off this run's card")
    gone = [n for n in old_tasks if isinstance(n, str) and n not in now_tasks]
    if gone:
        log(f"{rd.root / 'models'}: {_names(gone, 'task')} no longer among the run's tasks: the artifacts stay there, "
            "off this run's card")


def _what_changed(old: Any, new: Any, where: str) -> str:
    """`` (models[1].source: 'a' → 'b')``: what differs from the entry of the run before (nothing known of one
    measured in an earlier run); the same text with another key counts a file it names by content.

    >>> _what_changed({"name": "t", "limit": 3}, {"name": "t", "limit": 4}, "tasks[0]")
    ' (tasks[0].limit: 3 → 4)'
    >>> _what_changed({"name": "t", "path": "q.jsonl"}, {"name": "t", "path": "q.jsonl"}, "tasks[0]")
    ' (the content of a file it names)'
    """
    if old is None:
        return ""
    changes = [c if c.startswith("and ") else f"{where}.{c}" for c in config_changes(old, new)]
    return f" ({'; '.join(changes)})" if changes else " (the content of a file it names)"


def _names(names: list[str], kind: str) -> str:
    quoted = ", ".join(f"'{n}'" for n in names)
    return f"{kind} {quoted} is" if len(names) == 1 else f"{kind}s {quoted} are"


def _holds_anything(rd: RunDir, name: str) -> bool:
    d = rd.model_dir(name)
    return rd.failure_note(name).exists() or (d.is_dir() and any(d.iterdir()))


def _remove(path: Path) -> None:
    """Remove what another entry measured; one that stays would be taken as this entry's, so the run stops."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        raise UserError(f"{path}: holds what another entry measured and cannot be removed ({e.strerror}); make it "
                        "writable, or choose another -o/--output") from None
