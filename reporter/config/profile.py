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
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from ..errors import ConfigError, UserError, user_path
from ..metrics.mui import DEFINITIONS as MUI_DEFINITIONS
from ..metrics.mui import MODES as MUI_MODES
from ..registry import closest, declared_settings, did_you_mean, unknown_name
from ..tasks.corpora import BUILTIN_CORPORA, names_a_file
from .files import Problems, load_yaml, short
from .models import RUN_FIELDS
from .plugin_settings import parse_plugins, parse_settings
from .profile_lm_eval import parse_entry, parse_include
from .profile_tasks import TaskConfig, check_int, parse_task
from .sae import MUI_UNITS, SAEConfig, parse_sae

__all__ = ["ContaminationConfig", "LPPConfig", "MUIConfig", "Profile", "TaskConfig", "builtin_profiles", "load_profile"]


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
        reporter.errors.UserError: --tasks: 'arc' is not a task of profile quick (did you mean 'arc_challenge' or 'arc_easy'?); its tasks: arc_challenge, arc_easy, mmlu, hellaswag, boolq, gsm8k, math500, humaneval, mbpp, spc, ar
        >>> load_profile("quick").restricted(["arc_esay"])
        Traceback (most recent call last):
        ...
        reporter.errors.UserError: --tasks: 'arc_esay' is not a task of profile quick (did you mean 'arc_easy'?); its tasks: ...
        """
        kept = list(self.tasks)
        if tasks:
            names = [t.name for t in self.tasks] + [g for t in self.tasks if (g := t.lm_eval_group)]
            if unknown := [x for x in tasks if x not in names]:
                sizes: dict[str, int] = {}
                for t in self.tasks:  # what --tasks can name: a task, or a group (not one of its leaves)
                    key = t.lm_eval_group or t.name
                    sizes[key] = sizes.get(key, 0) + 1
                group_names = {t.lm_eval_group for t in self.tasks if t.lm_eval_group}
                listed = [f"{k} (an lm-eval group of {n} tasks)" if k in group_names else k for k, n in sizes.items()]
                hint = self._tasks_hint(unknown[0], list(sizes)) if len(unknown) == 1 else ""
                raise UserError(f"--tasks: {', '.join(repr(x) for x in unknown)} "
                                f"{'is not a task' if len(unknown) == 1 else 'are not tasks'} of profile "
                                f"{self.name or 'unnamed'}{hint}; its tasks: {', '.join(listed)}")
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

    def _tasks_hint(self, word: str, nameable: list[str]) -> str:
        """The suggestion for a ``--tasks`` name that is not one: the nameable names it begins ('arc': arc_challenge,
        arc_easy, not the probe ar), else the closest one; a near miss of a group's leaf suggests the group.
        """
        if starting := [n for n in nameable if n.startswith(word)]:
            return " (did you mean " + " or ".join(f"'{n}'" for n in starting[:3]) + "?)"
        groups = {t.name: t.lm_eval_group for t in self.tasks if t.lm_eval_group}
        close = closest(word, [*nameable, *groups])
        if close in groups:
            return f" (did you mean the lm-eval group '{groups[close]}'? {close} is one of its tasks)"
        return f" (did you mean '{close}'?)" if close is not None else ""

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
        parsed = parse_settings(p, f"plugins.{name}", value, declared[name])
        p.raise_if_any()
        return parsed

    def task(self, name: str) -> TaskConfig:
        """The profile entry of task ``name``."""
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)


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
    p.unknown_keys(name, value, keys)
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
    run_only = set(RUN_FIELDS) - set(PROFILE_KEYS)  # keys only a models file has
    if isinstance(data, list) or (isinstance(data, dict) and "tasks" not in data and set(data) & run_only):
        has = (", ".join(f"{k}:" for k in data if k in RUN_FIELDS) if isinstance(data, dict) else "a list of models")
        raise ConfigError(f"{where}: looks like a models file, not a profile (it has {has}, and no tasks:); give it "
                          "as the FILE argument of reporter run, and the profile (a mapping with tasks:) with --profile")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a profile must be a mapping with 'tasks:'")
    p.unknown_keys("", data, PROFILE_KEYS)
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
    include = parse_include(p, data.get("lm_eval_include"), base_dir, recorded)
    include_ok = len(p.lines) == n0  # lm-eval tasks are looked up only where their include paths are valid
    tasks: list[TaskConfig | None] = []
    for i, t in enumerate(raw_tasks):
        if isinstance(t, dict) and "lm_eval" in t and not recorded:
            if include_ok:
                tasks += parse_entry(p, f"tasks[{i}]", t, names, include, base_dir)
        else:
            tasks.append(parse_task(p, f"tasks[{i}]", t, names, base_dir, recorded))
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
        else:  # a verbatim check continues at least one token (0 divided by zero in the evidence pass)
            check_int(p, f"contamination.{key}", v,
                      1 if key in ("order_permutations", "verbatim_tokens", "verbatim_min_target") else 0)
    tokens, least = cont.get("verbatim_tokens", 32), cont.get("verbatim_min_target", 8)
    if all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in (tokens, least)) and tokens < least:
        p.add("contamination.verbatim_tokens", f"{tokens} is below verbatim_min_target ({least}): no item or "
                                               "reference text could be checked; raise it or lower "
                                               "verbatim_min_target")
    smoke_texts = data.get("smoke_texts", 16)
    check_int(p, "smoke_texts", smoke_texts, 1)
    collection = data.get("collection", "fused")
    if collection not in COLLECTIONS:
        p.add("collection", f"{short(collection)} is not valid; use one of {', '.join(COLLECTIONS)}")
    lpp = _section(p, data, "lpp")
    for key in ("n_texts", "context", "step", "min_tokens"):  # a covariance needs two positions: context >= 2
        check_int(p, f"lpp.{key}", lpp.get(key), 2 if key == "context" else 1)
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
    plugins = parse_plugins(p, data.get("plugins"), recorded)
    p.raise_if_any()
    name = data.get("name") or (Path(where).stem if where.endswith((".yaml", ".yml")) else where.split()[-1])
    models = data.get("models")
    return Profile(name=name, tasks=tuple(t for t in tasks if t is not None), description=data.get("description"),
                   mui=MUIConfig(**mui), lpp=LPPConfig(**lpp), contamination=ContaminationConfig(**cont),
                   smoke_texts=smoke_texts, collection=collection, models=tuple(models) if models is not None else None,
                   notes=data.get("notes"), plugins=plugins, lm_eval_include=include, origin=where)
