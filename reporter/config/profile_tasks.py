"""A profile's task entries: :class:`TaskConfig` and the parser of one ``tasks:`` entry (a built-in task or a
``type: jsonl`` file); lm-eval entries are :mod:`reporter.config.profile_lm_eval`'s.

>>> from reporter.config.files import Problems
>>> p = Problems("p.yaml")
>>> parse_task(p, "tasks[0]", {"name": "arc_easy", "limit": 0}, {}, Path("."), recorded=False), p.lines
(None, ['p.yaml: tasks[0].limit: must be a positive integer, got 0'])
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError, user_path
from ..registry import did_you_mean, unknown_name
from ..store.atomic import JSON_ERRORS, why_not_json
from ..store.layout import slugify
from ..tasks import JSONL_SCORERS, TASKS, get_task
from .files import Problems, read_text, short


@dataclass(frozen=True)
class TaskConfig:
    """One task of a profile: a built-in task (by name) or a user's ``type: jsonl`` file, with overrides."""

    name: str
    limit: int | None = None
    shots: int | None = None
    max_new_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    instruction: str | None = None
    type: str | None = None
    path: str | None = None
    prompt_field: str | None = None
    answer_field: str | None = None
    choices_field: str | None = None
    scorer: str | None = None
    #: evaluate only these item ids (from ``items: coreset.json`` or a list of ids); ``limit`` still caps them
    items: tuple[str, ...] | None = None
    items_from: str | None = None  # the core-set file the ids came from (recorded, never written by hand)
    #: a JSON-lines file of the data's other split (GSM8K's train.jsonl, say), the reference of the
    #: contamination test "Min-K% vs the other split" where nothing installed ships one
    other_split: str | None = None
    #: an lm-evaluation-harness task: its (leaf) task name (``tasks: - {lm_eval: NAME}``; a group or tag becomes
    #: one entry per leaf task, see :mod:`reporter.tasks.lm_eval_source`)
    lm_eval: str | None = None
    #: the lm-eval group or tag a leaf task came from (recorded, never written by hand)
    lm_eval_group: str | None = None
    #: which lm-eval metric is reporter's score of an item (``acc_norm``, ``exact_match,flexible-extract``;
    #: default: the task's first metric under its first filter)
    metric: str | None = None
    #: lm-eval's ``--apply_chat_template`` for this task (default false, as in lm-eval)
    chat_template: bool | None = None
    #: overrides of lm-eval task-config fields (:data:`reporter.tasks.lm_eval_source.CONFIG_OVERRIDES`)
    lm_eval_config: Mapping[str, Any] | None = None
    #: sha256 of the lm-eval task's resolved config and documents (recorded, never written by hand)
    lm_eval_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The keys that were set, as plain data."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v
        return out



#: keys recorded by reporter in a resolved profile, never written by hand
RECORDED_TASK_KEYS = ("items_from", "lm_eval_group", "lm_eval_digest")
#: the keys of lm-eval-only settings
LM_EVAL_ONLY_KEYS = ("lm_eval", "metric", "chat_template", "lm_eval_config")
TASK_KEYS = tuple(f.name for f in dataclasses.fields(TaskConfig)
                  if f.name not in RECORDED_TASK_KEYS and f.name not in LM_EVAL_ONLY_KEYS)
#: the keys of an lm-eval task entry (``tasks: - {lm_eval: NAME, ...}``)
LM_EVAL_TASK_KEYS = ("lm_eval", "name", "limit", "shots", "max_new_tokens", "metric", "chat_template",
                     "lm_eval_config", "items")
#: the largest item-id list a task accepts
MAX_ITEM_IDS = 100_000
#: the longest task name (it names a directory)
MAX_TASK_NAME = 100


#: the most new tokens a task may generate: more than any model's context holds today (128k), less than a run that
#: never ends (``max_new_tokens: 100000000`` ran for hours on a 2-layer model)
MAX_NEW_TOKENS = 131072


def check_int(p: Problems, key: str, v: Any, minimum: int, bounded: bool = True) -> int | None:
    """An integer setting at least ``minimum``; ``bounded``: a ``max_new_tokens`` also at most :data:`MAX_NEW_TOKENS`
    (not in a profile a run recorded, which is read back as it ran).
    """
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        want = ("non-negative integer" if minimum == 0 else "positive integer" if minimum == 1
                else f"integer of at least {minimum}")
        p.add(key, f"must be a{'n' if minimum > 1 else ''} {want}, got {short(v)}")
        return None
    if bounded and key.endswith((".max_new_tokens", ".max_gen_toks")) and v > MAX_NEW_TOKENS:
        p.add(key, f"{v} is more than any model's context; use at most {MAX_NEW_TOKENS}")
        return None
    return v


def parse_task(p: Problems, k: str, t: Any, names: dict[str, str], base_dir: Path, recorded: bool) -> TaskConfig | None:
    """One ``tasks:`` entry at key path ``k`` (a name, or a mapping with ``name``) as a :class:`TaskConfig`, or None
    with its problems added to ``p``. ``names`` maps the names taken so far to their directories (a duplicate, or two
    names sharing a directory, is refused); ``recorded``: an entry a run already resolved, taken as recorded.
    """
    if isinstance(t, str):
        t = {"name": t}
    if not isinstance(t, dict) or "name" not in t:
        p.add(k, "each task must be a task name or a mapping with 'name'")
        return None
    n0 = len(p.lines)
    p.unknown_keys(k, t, TASK_KEYS, also=RECORDED_TASK_KEYS + LM_EVAL_ONLY_KEYS if recorded else ())
    name = t["name"]
    if not isinstance(name, str) or not name.strip():
        p.add(f"{k}.name", f"must be a non-empty string, got {short(name)}")
        return None
    if len(name) > MAX_TASK_NAME:
        p.add(f"{k}.name", f"is {len(name)} characters long; use at most {MAX_TASK_NAME}")
    if name in names:
        p.add(f"{k}.name", f"duplicate task '{name}'")
    elif slugify(name) in names.values():  # two names that would share one directory
        other = next(n for n, s in names.items() if s == slugify(name))
        p.add(f"{k}.name", f"'{name}' and '{other}' would share the directory '{slugify(name)}'; rename one")
    names[name] = slugify(name)
    for key in ("path", "prompt_field", "answer_field", "choices_field", "instruction"):  # scorer: its own check
        if key in t and not isinstance(t[key], str):
            p.add(f"{k}.{key}", f"must be a string, got {short(t[key])}")
    values = {key: t[key] for key in TASK_KEYS if key in t}
    if recorded and "lm_eval" in t:  # a leaf task a run already resolved: take it as recorded
        values.update({key: t[key] for key in RECORDED_TASK_KEYS + LM_EVAL_ONLY_KEYS if key in t})
        if isinstance(values.get("items"), list):
            values["items"] = tuple(values["items"])
        return TaskConfig(**values)
    if t.get("type") == "jsonl":
        for req in ("path", "prompt_field", "answer_field", "scorer"):
            if req not in t:
                p.add(f"{k}.{req}", "is required for a jsonl task")
        if t.get("scorer") is not None and t["scorer"] not in JSONL_SCORERS:
            hint = did_you_mean(t["scorer"], JSONL_SCORERS) if isinstance(t["scorer"], str) else ""
            p.add(f"{k}.scorer", f"{short(t['scorer'])} is not valid{hint}; use one of "
                                 f"{', '.join(JSONL_SCORERS)} (a type: jsonl task's; `reporter list scorers` marks them)")
        if isinstance(t.get("path"), str) and not user_path(t["path"]).is_absolute() and not t["path"].startswith("~"):
            values["path"] = str((base_dir / t["path"]).resolve())
        elif isinstance(t.get("path"), str):
            values["path"] = str(user_path(t["path"]))
    elif "type" in t:
        p.add(f"{k}.type", f"{short(t['type'])} is not valid; the only task type is jsonl (omit it for built-in tasks)")
    elif name not in TASKS and not recorded:
        hint = ""
        if file_keys := [f for f in ("path", "prompt_field", "answer_field", "choices_field") if f in t]:
            hint = f" ({', '.join(file_keys)} given: a task read from your own file needs type: jsonl)"
        elif not any(d in (name or "") for d in ("/", ".")):  # not a file or hub name: perhaps a plugin's
            hint = " (a plugin's task? load its module first: reporter --plugin MODULE COMMAND …)"
        p.add(f"{k}.name", unknown_name("task", name, TASKS) + hint)
    for key in ("limit", "shots", "max_new_tokens"):
        check_int(p, f"{k}.{key}", t.get(key), 0 if key == "shots" else 1, bounded=not recorded)
    if "other_split" in t:
        values["other_split"] = _other_split(p, f"{k}.other_split", t["other_split"], name,
                                             t.get("type") == "jsonl", base_dir, recorded)
    if "items" in t:
        values["items"], values["items_from"] = parse_items(p, f"{k}.items", t["items"], name, base_dir)
        if recorded and isinstance(t.get("items_from"), str):
            values["items_from"] = t["items_from"]
    if "stop" in t:
        if isinstance(t["stop"], list) and all(isinstance(s, str) for s in t["stop"]):
            values["stop"] = tuple(t["stop"])
        else:
            p.add(f"{k}.stop", "must be a list of strings")
    return TaskConfig(**values) if len(p.lines) == n0 else None


def _other_split(p: Problems, key: str, v: Any, task: str, jsonl: bool, base_dir: Path, recorded: bool) -> str | None:
    """``other_split:`` — the path of a JSON-lines file of the task's other split (resolved against the profile)."""
    if not isinstance(v, str) or not v.strip():
        p.add(key, f"must be the path of a JSON-lines file of the task's other split, got {short(v)}")
        return None
    path = user_path(v)
    path = path if path.is_absolute() else (base_dir / path).resolve()
    if recorded:
        return str(path)
    if not jsonl and task in TASKS and get_task(task).other_split_from_file is None:
        takers = sorted(n for n in TASKS if get_task(n).other_split_from_file is not None)
        p.add(key, f"task '{task}' takes no other split from a file; the tasks that do: {', '.join(takers)}, and "
                   "jsonl tasks")
    elif not path.is_file():
        p.add(key, f"{path} is not a file; give a JSON-lines file (.jsonl or .jsonl.gz) of the task's other split, "
                   "rows as the data's hub copy has them")
    return str(path)


def parse_items(p: Problems, key: str, v: Any, task: str, base_dir: Path) -> tuple[tuple[str, ...] | None, str | None]:
    """``items:`` — a core-set file written by ``reporter run`` (its ids for this task) or a list of item ids."""
    if isinstance(v, list):
        if not v or not all(isinstance(i, str) for i in v) or len(v) > MAX_ITEM_IDS:
            p.add(key, f"must be a non-empty list of item ids (strings, at most {MAX_ITEM_IDS:,}) or the path of a "
                       f"coreset.json, got {short(v)}")
            return None, None
        return tuple(v), None
    if not isinstance(v, str):
        p.add(key, f"must be the path of a coreset.json or a list of item ids, got {short(v)}")
        return None, None
    path = user_path(v) if user_path(v).is_absolute() else (base_dir / v).resolve()
    try:
        doc = json.loads(read_text(path, "coreset.json"))
    except ConfigError as e:
        p.add(key, str(e))
        return None, None
    except JSON_ERRORS as e:
        where = f"line {e.lineno}" if isinstance(e, json.JSONDecodeError) else why_not_json(e)
        p.add(key, f"{path}: not valid JSON ({where}); give a coreset.json written by `reporter run`")
        return None, None
    tasks = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(tasks, dict):
        p.add(key, f"{path}: has no 'tasks' mapping; give a coreset.json written by `reporter run`")
        return None, None
    if task not in tasks:
        p.add(key, f"{path}: has no core set for task '{task}'{did_you_mean(task, list(tasks))}; it has: "
                   f"{', '.join(sorted(map(str, tasks))[:20]) or 'none'}")
        return None, None
    ids = tasks[task].get("items") if isinstance(tasks[task], dict) else None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        p.add(key, f"{path}: tasks.{task}.items must be a non-empty list of item ids")
        return None, None
    return tuple(ids), str(path)
