"""What a rerun into an existing run directory may take from it, when its models file or its profile's task list
changed: the run's shared settings must be the same; a model or task whose entry changed is measured again, an
added one is measured, and a removed one keeps its artifacts, off the card.

A user whose model failed fixes its entry in the models file and reruns; one who adds a model or a task to a finished
comparison reruns into the same directory. Both resume: the other models' and tasks' work is taken as it is. What
every model's results depend on (the seed, the run's device and dtype, the profile's MUI, LPP and contamination
settings) refuses the resume, naming what changed, as before.

The manifest's ``resume_keys`` records a hash per model and per task entry that was ever measured in the directory,
keyed by the directory its artifacts go to (:func:`reporter.run.manifest.resume_keys`), so a model taken off the list
and put back later is compared too, and so is one whose name changed to another with the same directory.

>>> old = {"shared": "s", "models": {"a": "1", "b": "2"}, "tasks": {"t": "3"}}
>>> new = {"shared": "s", "models": {"a": "1", "b": "9", "c": "4"}, "tasks": {"t": "3"}}
>>> changed_entries(old, new)  # c is new: a directory of that name would not be its own
(['b', 'c'], [])
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..collect.evidence import EVIDENCE, evidence_passes
from ..collect.failures import log
from ..collect.model_cache import code_version
from ..config import Profile, RunConfig
from ..errors import UserError
from ..plugin_code import plugin_sources
from ..store.atomic import read_json, write_json
from ..store.layout import LM_EVAL_GROUPS, MODEL_WORK, RunDir, slugify
from .manifest import config_changes, resume_keys, shared_part

__all__ = ["changed_entries", "earlier_unfinished", "merged_keys", "recorded_keys", "shared_changes", "take_what_holds"]

#: the date a default run directory's name ends with (``reports/<file stem>-<date>``)
_DATE = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"


def recorded_keys(manifest: Any) -> dict[str, Any] | None:
    """The manifest's ``resume_keys`` when they are whole (a hash of the shared settings, and hashes by slug), else
    None: a run made before they were recorded, or a manifest edited by hand, resumes only with the same
    configuration hash.

    >>> recorded_keys({"resume_keys": {"shared": "s", "models": {"a": "1"}, "tasks": {}}})["models"]
    {'a': '1'}
    >>> recorded_keys({"resume_keys": {"shared": "s", "models": ["a"], "tasks": {}}}) is None
    True
    """
    keys = manifest.get("resume_keys") if isinstance(manifest, dict) else None
    if not (isinstance(keys, dict) and isinstance(keys.get("shared"), str)):
        return None
    for part in ("models", "tasks"):
        entries = keys.get(part)
        if not (isinstance(entries, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in entries.items())):
            return None
    return keys


def shared_changes(old_resolved: Any, new_resolved: dict[str, Any]) -> list[str]:
    """The key paths of what changed among the shared settings (what refuses a resume): not the models, the task
    list, where the run is written or carried out, nor the profile's name and description.

    >>> a = {"config": {"seed": 1, "models": [{"name": "x"}]}, "profile": {"name": "p", "tasks": [{"name": "t"}]}}
    >>> shared_changes(a, {"config": {"seed": 2, "models": []}, "profile": {"name": "p (1 of its 2 tasks)", "tasks": []}})
    ['config.seed: 1 → 2']
    """
    return config_changes(shared_part(old_resolved), shared_part(new_resolved))


def changed_entries(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The slugs of the models and the tasks of ``new`` whose entry differs from the one measured in the directory
    (``old``: its manifest's ``resume_keys``), or that no entry was recorded for: their artifacts are not this run's.
    """
    models = [n for n, h in new["models"].items() if old["models"].get(n) != h]
    tasks = [n for n, h in new["tasks"].items() if old["tasks"].get(n) != h]
    return models, tasks


def merged_keys(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The keys the manifest records after a resume: this run's entries, and those of models and tasks measured
    before and no longer listed (their artifacts stay, so a later run that lists them again compares them).
    """
    old = old or {"models": {}, "tasks": {}}
    return {"shared": new["shared"], "models": {**old["models"], **new["models"]},
            "tasks": {**old["tasks"], **new["tasks"]}}


def take_what_holds(rd: RunDir, old_manifest: dict[str, Any], old_keys: dict[str, Any], new_keys: dict[str, Any],
                    cfg: RunConfig, profile: Profile, resolved: dict[str, Any],
                    code: dict[str, str] | None = None) -> None:
    """Remove the artifacts of the models and tasks whose entries changed (a task's under every model directory
    there, listed or not), saying why in one line each, and say which measured models and tasks this run leaves
    off its card. A listed model's documents that only another task list gives (a model-scope evidence pass this
    one does not run, an lm-eval group it does not list) go too: results.json holds every document there.
    Called under the run directory's lock, before the manifest records ``new_keys``: interrupted half-way, the next
    run compares against the old keys and removes the rest. ``code``: this run's plugin code per task
    (:func:`reporter.run.manifest.task_code`), to say when that is what changed.
    """
    models, tasks = changed_entries(old_keys, new_keys)
    old_resolved: dict[str, Any] = old_manifest.get("resolved") or {}
    if not isinstance(old_resolved, dict):
        old_resolved = {}
    before = _by_slug(((old_resolved.get("config") or {}).get("models")))
    old_tasks = _by_slug(((old_resolved.get("profile") or {}).get("tasks")))
    now_tasks = {slugify(t["name"]): (i, t) for i, t in enumerate(resolved["profile"].get("tasks") or [])}
    for i, spec in enumerate(cfg.models):
        if spec.slug not in models or not _holds_anything(rd, spec.name):
            continue
        what = _what_changed(before.get(spec.slug), resolved["config"]["models"][i], f"models[{i}]")
        log(f"model '{spec.name}': its entry is not the one {rd.model_dir(spec.name)} was measured with{what}: "
            "measuring it again")
        _remove(rd.model_dir(spec.name))
        _remove(rd.failure_note(spec.name))
    model_dirs = [d for d in (rd.root / "models").glob("*") if d.is_dir()] if (rd.root / "models").is_dir() else []
    for slug in tasks:
        dirs = [d / "tasks" / slug for d in model_dirs if (d / "tasks" / slug).exists()]
        if not dirs:
            continue
        _, entry = now_tasks[slug]
        old_code = old_manifest.get("task_code") if isinstance(old_manifest.get("task_code"), dict) else {}
        if (code or {}).get(slug) != old_code.get(slug) and old_tasks.get(slug) is not None \
                and not config_changes(old_tasks.get(slug), entry):
            log(f"task '{entry['name']}': the plugins' task and scorer code is not the code it was measured with: "
                "measuring it again for every model")
        else:
            # by name: the index of the resolved list is not the profile file's under --tasks or an lm-eval group
            what = _what_changed(old_tasks.get(slug), entry, f"tasks[{entry['name']!r}]")
            log(f"task '{entry['name']}': its entry is not the one it was measured with{what}: measuring it again "
                "for every model")
        for d in dirs:
            _remove(d)
    listed = {s.slug for s in cfg.models}
    off = [m["name"] for slug, m in before.items() if slug not in listed and _holds_anything(rd, slug)]
    if off:
        log(f"{rd.root / 'models'}: {_names(off, 'model')} no longer among the run's models: the artifacts stay "
            "there, off this run's card")
    gone = [t["name"] for slug, t in old_tasks.items() if slug not in now_tasks]
    if gone:
        log(f"{rd.root / 'models'}: {_names(gone, 'task')} no longer among the run's tasks: the artifacts stay "
            "there, off this run's card")
    for spec in cfg.models:
        _forget_what_the_tasks_do_not_give(rd.model_dir(spec.name), spec, profile)


def _forget_what_the_tasks_do_not_give(mdir: Path, spec: Any, profile: Profile) -> None:
    """A model's documents that this task list does not give: a model-scope evidence pass's (the held-out reference
    of a profile with no benchmark left; the model-only cache gives it back at once if one comes back), and the
    aggregates of lm-eval groups that are no longer listed (scored again from the leaves' answers if listed again).
    """
    if not mdir.is_dir():
        return
    running = {p.name for p in evidence_passes(profile, spec, "model")}
    forgotten = []
    for _, p in EVIDENCE.items():
        if p.scope == "model" and p.name not in running:
            try:
                p.forget(mdir)
            except OSError as e:
                raise UserError(f"{mdir}: a document of '{p.name}', which this run does not measure, cannot be "
                                f"removed ({e.strerror}); make it writable, or choose another -o/--output") from None
            forgotten.append(p.name)
    try:  # the record of where each model-only step came from: a step whose files are gone is not "computed"
        work = read_json(mdir / MODEL_WORK, None) if (mdir / MODEL_WORK).is_file() else None
    except UserError:
        work = None  # damaged: the job starts it again
    if isinstance(work, dict) and set(forgotten) & set(work):
        write_json(mdir / MODEL_WORK, {k: v for k, v in work.items() if k not in forgotten})
    groups = read_json(mdir / LM_EVAL_GROUPS, None) if (mdir / LM_EVAL_GROUPS).is_file() else None
    if isinstance(groups, dict):
        listed = {t.lm_eval_group for t in profile.tasks if t.lm_eval_group}
        if set(groups) - listed:
            kept = {g: v for g, v in groups.items() if g in listed}
            if kept:
                write_json(mdir / LM_EVAL_GROUPS, kept)
            else:
                _remove(mdir / LM_EVAL_GROUPS)


def _by_slug(entries: Any) -> dict[str, dict[str, Any]]:
    """A manifest's model or task entries by the slug of their names (a damaged entry is left out)."""
    if not isinstance(entries, list):
        return {}
    return {slugify(e["name"]): e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)}


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


def earlier_unfinished(cfg: RunConfig, profile: Profile, out_dir: Path) -> str | None:
    """For a run into a date-named default directory that does not exist yet: the line naming the latest earlier
    directory of the same file, where that run is unfinished and this command would resume it there (the same
    shared settings, the same code that measures); None otherwise. The default directory is a new one each day, so
    a run interrupted or failed yesterday is not resumed by today's rerun of the same command; the line says how.
    """
    if out_dir.exists() or len(out_dir.name) <= len("YYYY-MM-DD"):
        return None
    prefix = out_dir.name[:-len("YYYY-MM-DD")]
    earlier = sorted((d for d in out_dir.parent.glob(prefix + _DATE) if d.is_dir()), reverse=True)
    if not earlier:
        return None
    last = RunDir(earlier[0])
    try:
        manifest = read_json(last.manifest)
        results = read_json(last.results) if last.results.is_file() else None
    except UserError:
        return None
    keys = recorded_keys(manifest)
    if keys is None or not isinstance(manifest, dict) or manifest.get("code_version") != code_version(*plugin_sources()):
        return None
    if keys["shared"] != resume_keys({"config": cfg.to_dict(), "profile": profile.to_dict()})["shared"]:
        return None
    done = ((results or {}).get("models") or {}) if isinstance(results, dict) else {}
    complete = sum(1 for s in cfg.models if isinstance(done.get(s.name), dict) and done[s.name].get("status") == "complete"
                   and keys["models"].get(s.slug) is not None)
    if complete == len(cfg.models):
        return None
    return (f"{last.root}: holds an unfinished run of this file ({complete} of {len(cfg.models)} models complete); "
            f"this run starts a new directory, {out_dir}: to finish that one instead, stop this one (Ctrl-C) and "
            f"rerun with -o {last.root}")
