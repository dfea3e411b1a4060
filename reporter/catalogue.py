"""What this installation can run, by kind (``reporter list``): tasks, profiles, model sources, architectures,
collectors, evidence passes, card sections and scorers, each with where it came from.

Every row is read from the registries the run itself looks names up in, after the built-in modules and every
plugin (installed entry points, and ``reporter --plugin`` modules, which the command line imported first) have
registered, so a name listed here is a name a models file or profile may use. ``plugins`` lists only what is not
reporter's own. A kind imports only what it needs: ``tasks``, ``profiles`` and ``scorers`` load no torch.

>>> rows = catalogue(["scorers"])["scorers"]
>>> [r["name"] for r in rows][:3], rows[0]["origin"]
(['choice', 'exact', 'f1'], 'built-in')
>>> print("\\n".join(render_text(catalogue(["architectures"]), width=120).splitlines()[:2]))
architectures (12): what a model's config.model_type must be for the hooks to find its FFN neurons
  llama        gated MLP; FFN neurons at the input of each layer's mlp.down_proj
"""
from __future__ import annotations

import dataclasses
import importlib
import re
import shutil
import textwrap
import unicodedata
from typing import Any, Callable, Iterable

from .errors import UserError
from .registry import PLUGIN_GROUPS, Registry, unknown_name

#: the kinds ``reporter list`` shows, in its order, with the header line each gets
KINDS: dict[str, str] = {
    "tasks": "what a profile's tasks[].name may name (--tasks then picks among a profile's tasks)",
    "profiles": "what --profile (or a models file's profile:) may name; a YAML path works too",
    "sources": "what a models file's source: may be",
    "architectures": "what a model's config.model_type must be for the hooks to find its FFN neurons",
    "collectors": "measurements riding the hooked pass, each with what turns it on or off",
    "evidence": "passes of their own after a model's tasks, each with what turns it on or off",
    "sections": "the card's sections, in card order",
    "scorers": "how a task's responses are scored ('jsonl': a type: jsonl task of your own data may use it)",
    "plugins": "every entry that is not reporter's own (installed entry points and --plugin modules), charts too",
}


def _first_line(text: str | None) -> str:
    """A docstring's first paragraph on one line, with reST's roles and backquotes made plain.

    >>> _first_line("Token F1 of the short answer,\\n    max over ``item['answer']`` (:func:`f1`).\\n\\n    More.")
    "Token F1 of the short answer, max over item['answer'] (f1)."
    """
    paragraph = (text or "").strip().split("\n\n")[0]
    line = " ".join(part.strip() for part in paragraph.splitlines())
    return re.sub(r":\w+:`([^`]*)`", r"\1", line).replace("``", "")


def _row(registry: Registry[Any], name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields, "origin": registry.origin(name)}


def _tasks(builtin: bool = True) -> list[dict[str, Any]]:
    from .tasks import TASKS
    from .tasks.base import checked_task

    rows = []
    for name in TASKS.names():
        if not builtin and TASKS.builtin(name):
            continue
        try:
            task = checked_task(name)  # what validate checks: a plugin's factory, the name it gives, its scorer
        except UserError as e:  # listed with its problem, which would stop a run: the rest are listed too
            rows.append(_row(TASKS, name, type="?", scorer="?", description="", data="", problem=str(e)))
            continue
        rows.append(_row(TASKS, name, type="probe" if task.probe else "benchmark", scorer=task.scorer,
                         description=task.description, data=task.source))
    return rows


def _models_of(profile: Any) -> str:
    """What models a profile runs without a models file, in words: its own list (how many from the hub), or
    reporter's default one.

    >>> from reporter.config import Profile
    >>> _models_of(Profile("p", models=({"name": "a", "source": "org/a"},))), _models_of(Profile("p"))
    ('1 model, from the hub', 'without a models file, the default models')
    """
    from .config.models import source_type

    models = list(profile.models or ())
    if not models:
        return "without a models file, the default models"
    hub = sum(1 for m in models if source_type(str(m.get("source", ""))) == "hub")
    n = f"{len(models)} model{'s' * (len(models) != 1)}"
    return n + ("" if not hub else (", from the hub" if len(models) == 1 else ", all from the hub")
                if hub == len(models) else f", {hub} from the hub")


def _profiles() -> list[dict[str, Any]]:
    from .config.profile import builtin_profiles, load_profile

    rows = []
    for name in builtin_profiles():
        try:
            profile = load_profile(name)
        except UserError as e:
            rows.append({"name": name, "description": "", "tasks": [], "models": 0, "runs": "", "problem": str(e),
                         "origin": "built-in"})
            continue
        tasks = list(dict.fromkeys(t.lm_eval_group or t.name for t in profile.tasks))
        rows.append({"name": name, "description": profile.description or "", "tasks": [t.name for t in profile.tasks],
                     "models": len(profile.models or ()), "runs": f"{len(tasks)} tasks, {_models_of(profile)}",
                     "origin": "built-in"})
    return rows


def _sources() -> list[dict[str, Any]]:
    from .config.sources import SOURCES
    from .models.packaged import PACKAGED, missing_modules
    from .models.random_archs import RANDOM_ARCHS

    rows: list[dict[str, Any]] = [
        {"name": "ORG/NAME", "description": "a Hugging Face hub id (revision: pins a commit); needs the hub or its "
                                            "copy in the Hugging Face cache", "origin": "built-in"},
        {"name": "PATH", "description": "a local directory with config.json, tokenizer and weight files "
                                        "(save_pretrained's layout)", "origin": "built-in"},
    ]
    for name, pm in PACKAGED.items():  # reporter's own sources (reporter.models.loading registers their loaders)
        missing = missing_modules(pm)
        state = "installed" if not missing else f"not installed: {pm.pip_command}"
        rows.append({"name": f"packaged:{name}", "description": f"{pm.upstream}, {pm.kind}, offline ({state})",
                     "installed": not missing, "origin": "built-in"})
    for name, arch in RANDOM_ARCHS.items():
        rows.append({"name": f"random:{name}", "description": f"an untrained {name} model from the run's seed "
                                                             f"(tokenizer of packaged:{arch.tokenizer}): a baseline",
                     "origin": "built-in"})
    for prefix, source in SOURCES.items():  # a plugin's (its loader needs no torch here: only listed)
        if prefix not in ("packaged", "random"):
            rows.append({"name": f"{prefix}:…", "description": _first_line(source.load.__doc__),
                         "origin": SOURCES.origin(prefix)})
    return rows


def _architectures() -> list[dict[str, Any]]:
    from .models.adapters import ADAPTERS

    rows = []
    for name, spec in ADAPTERS.items():
        mlp = ("gated MLP" if spec.gated else "MLP") + (" (Conv1D weights)" if spec.conv1d else "")
        rows.append(_row(ADAPTERS, name, description=f"{mlp}; FFN neurons at the input of each layer's {spec.down_proj}"))
    return rows


def _settings(cls: Any) -> list[str]:
    """``field=default`` for each field of a plugin's settings dataclass (read from the profile's ``plugins.<name>``)."""
    if cls is None:
        return []
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:  # derived in __post_init__: not a profile setting
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
        out.append(f"{f.name}={default!r}")
    return out


def _collectors() -> list[dict[str, Any]]:
    from .collect import job  # noqa: F401  (imports every built-in collector and evidence pass)
    from .collect.collectors.base import COLLECTORS, CollectorPlugin

    return [_row(COLLECTORS, name, label=plugin.label, description=_first_line(type(plugin).__doc__),
                 switch=plugin.switch or _default_switch(name, plugin, CollectorPlugin),
                 settings=_settings(plugin.settings)) for name, plugin in COLLECTORS.items()]


def _default_switch(name: str, plugin: Any, base: type) -> str:
    """When a plugin without its own ``switch`` text runs, as far as its class says: always, or as its ``enabled()``
    decides; a contamination pass on trained models only; and where its settings are read.
    """
    when = "as its enabled() decides" if type(plugin).enabled is not base.enabled else "always"
    if getattr(plugin, "contamination", False):
        when += ", on trained models' benchmark tasks (random ones too with contamination.untrained)"
    return when + (f"; settings: plugins.{name}" if plugin.settings is not None else "")


def _evidence() -> list[dict[str, Any]]:
    from .collect import job  # noqa: F401
    from .collect.evidence import EVIDENCE, EvidencePass

    return [_row(EVIDENCE, name, label=p.label, scope=p.scope, contamination=p.contamination,
                 description=_first_line(type(p).__doc__), switch=p.switch or _default_switch(name, p, EvidencePass),
                 settings=_settings(p.settings))
            for name, p in sorted(EVIDENCE.items(), key=lambda kv: kv[1].order)]


def _sections() -> list[dict[str, Any]]:
    from .card.sections import SECTIONS, ordered_sections

    return [_row(SECTIONS, s.name, title=s.title, order=s.order) for s in ordered_sections()]


def _scorers() -> list[dict[str, Any]]:
    from .scoring.scorers import SCORERS
    from .tasks import JSONL_SCORERS

    return [_row(SCORERS, name, description=_first_line(getattr(fn, "__doc__", None)),
                 jsonl="jsonl" if name in JSONL_SCORERS else "") for name, fn in SCORERS.items()]


_BUILDERS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "tasks": _tasks, "profiles": _profiles, "sources": _sources, "architectures": _architectures,
    "collectors": _collectors, "evidence": _evidence, "sections": _sections, "scorers": _scorers,
}


def _plugins() -> list[dict[str, Any]]:
    """Every entry that reporter did not register itself, with its kind: the five plugin groups (installed entry
    points or ``--plugin``) and the in-process registries a ``--plugin`` module may add to (scorers, architectures,
    charts).
    """
    for module in ("reporter.tasks", "reporter.config.sources", "reporter.card.sections", "reporter.collect.job"):
        importlib.import_module(module)
    from .card.charts import CHARTS
    from .models.adapters import ADAPTERS
    from .registry import _BY_GROUP
    from .scoring.scorers import SCORERS

    registries: list[Registry[Any]] = [r for g in PLUGIN_GROUPS if (r := _BY_GROUP.get(g)) is not None]
    problems = {row["name"]: row["problem"] for row in _tasks(builtin=False) if row.get("problem")}
    rows = []
    for registry in [*registries, SCORERS, ADAPTERS, CHARTS]:
        for name in registry.names():
            if not registry.builtin(name):
                row = {"name": name, "kind": registry.kind, "origin": registry.origin(name)}
                if registry.kind == "task" and name in problems:  # "is my plugin seen?": seen, but it would not run
                    row["problem"] = problems[name]
                rows.append(row)
    return rows


def catalogue(kinds: Iterable[str] = ()) -> dict[str, list[dict[str, Any]]]:
    """The rows of each kind in ``kinds`` (every kind when empty), in :data:`KINDS` order.

    >>> catalogue(["scorer"])
    Traceback (most recent call last):
    reporter.errors.UserError: unknown kind 'scorer' (did you mean 'scorers'?); available: architectures, collectors, evidence, plugins, profiles, scorers, sections, sources, tasks
    """
    wanted = list(kinds) or [k for k in KINDS if k != "plugins"]
    for kind in wanted:
        if kind not in KINDS:
            raise UserError(unknown_name("kind", kind, KINDS))
    return {kind: (_plugins() if kind == "plugins" else _BUILDERS[kind]()) for kind in KINDS if kind in wanted}


#: the short columns each kind aligns as text, then the long text after them (the JSON has every field)
_COLUMNS: dict[str, tuple[str, ...]] = {
    "tasks": ("name", "type", "scorer"),
    "profiles": ("name",),
    "sources": ("name",),
    "architectures": ("name",),
    "collectors": ("name",),
    "evidence": ("name", "scope"),
    "sections": ("name",),
    "scorers": ("name", "jsonl"),
    "plugins": ("kind", "name"),
}


def _long_text(kind: str, row: dict[str, Any]) -> str:
    """A row's long text: what it is, what turns it on, where it came from when not reporter's, and a problem."""
    if kind == "plugins":
        parts = [str(row.get("origin", ""))]
    elif kind == "profiles":
        parts = [f"{row['runs']}." if row.get("runs") else "", str(row.get("description", ""))]
    elif kind == "sections":
        parts = [str(row.get("title", ""))]
    else:
        parts = [str(row.get("description", ""))]
    if row.get("switch"):
        parts.append(f"Runs: {row['switch']}.")
    if kind != "plugins" and row.get("origin", "built-in") != "built-in":
        parts.append(f"[{row['origin']}]")
    if row.get("problem"):
        parts.append(f"CANNOT BE USED: {row['problem']}")
    return " ".join(p for p in parts if p)


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _columns(text: str) -> int:
    """How many terminal columns ``text`` takes: a wide (CJK) character two, a combining mark none.

    >>> _columns("abc"), _columns("模型"), _columns("e\u0301")
    (3, 4, 1)
    """
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def render_text(cat: dict[str, list[dict[str, Any]]], width: int | None = None) -> str:
    """Each kind as a header line and its rows: the short columns aligned, then the long text, wrapped to ``width``
    (default: the terminal's, ``COLUMNS`` first, else 100) under its own column.

    >>> print(render_text({"scorers": [{"name": "exact", "jsonl": "jsonl", "description": "Exact match, after "
    ...                                 "normalising case, spaces and quotes.", "origin": "built-in"}]}, width=40))
    scorers (1): how a task's responses are
      scored ('jsonl': a type: jsonl task of
      your own data may use it)
      exact  jsonl  Exact match, after
                    normalising case,
                    spaces and quotes.
    """
    if width is None:
        width = max(60, shutil.get_terminal_size((100, 24)).columns)
    blocks = []
    for kind, rows in cat.items():
        lines = textwrap.wrap(f"{kind} ({len(rows)}): {KINDS[kind]}", width=width, subsequent_indent="  ",
                              break_on_hyphens=False, break_long_words=False)
        if not rows:
            lines.append("  none" + (" (no installed package or --plugin module registered one)"
                                     if kind == "plugins" else ""))
        cols = _COLUMNS[kind]
        cells = [[_cell(r.get(c, "")) for c in cols] for r in rows]
        widths = [max((_columns(row[i]) for row in cells), default=0) for i in range(len(cols))]
        for r, row in zip(rows, cells):
            prefix = "  " + "  ".join(cell + " " * (w - _columns(cell)) for cell, w in zip(row, widths)) + "  "
            text = _long_text(kind, r)
            if _columns(prefix) > width // 2:  # no room beside the columns: the text goes under them
                lines.append(prefix.rstrip())
                prefix = " " * 6
            indent = " " * _columns(prefix)  # wrapped at the prefix's width on screen, then the prefix put back
            wrapped = textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent,
                                    break_on_hyphens=False, break_long_words=False)
            lines.extend([prefix + wrapped[0][len(indent):], *wrapped[1:]] if wrapped else [prefix.rstrip()])
        if kind == "tasks":
            lines.extend(textwrap.wrap("Your own data needs no plugin: a profile task of type: jsonl (see the "
                                       "scorers marked jsonl). lm-eval's own tasks (a profile's lm_eval: entries): "
                                       "reporter lm-eval ls tasks.", width=width, initial_indent="  ",
                                       subsequent_indent="  ", break_on_hyphens=False, break_long_words=False))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
