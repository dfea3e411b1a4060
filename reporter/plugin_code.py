"""A plugin's code: what a run's results depend on beyond reporter's own source.

:func:`plugin_sources` gives the files of every plugin a process has that can measure, and :func:`module_files` those
of one plugin module; a run's ``code_version`` and the model-only cache's keys count them
(:func:`reporter.collect.model_cache.code_version`). A package's code is its every ``.py`` file; a single-file module's
is its file and the helpers in its folder it imports, read from its source. What lies in the Python environment and
reporter's own source (which its code version counts already) are not a plugin's code. The plugins themselves come
from :mod:`reporter.plugin_import`'s record of ``--plugin`` modules and :mod:`reporter.registry`'s of installed
entry points.

>>> module_files("reporter.errors")
[]
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection

from .plugin_import import _PLUGIN_MODULES, _PLUGIN_SEARCH, _REBOUND, _imports_by_name
from .registry import _REGISTRIES, PLUGIN_GROUPS, _load_group

__all__ = ["ADDITIVE_KINDS", "CHANGES_REPORTER", "SHOWING_KINDS", "entry_files", "module_files", "not_additive",
           "not_removable", "plugin_kinds", "plugin_sources"]


def module_files(name: str) -> list[str]:
    """The source files of a plugin's module ``name`` beyond reporter and the environment: a package's every
    ``.py`` file (its own code, loaded or not); a top-level module's file and the modules in its folder or below
    that it imports, read from its source (at its top or inside a function, loaded yet or not, and what they import
    in turn; a package among them with all of its files), leaving out what lies in the Python environment
    (``sys.prefix``, ``site-packages``, the standard library) and reporter's own source, which its code version
    already counts. A module of reporter itself: none. A module in ``site-packages`` itself: its file alone.

    >>> module_files("reporter.errors"), [Path(f).name for f in module_files("doctest")]
    ([], ['doctest.py'])
    """
    if name == "reporter" or name.startswith("reporter."):
        return []
    file = getattr(sys.modules.get(name), "__file__", None)
    if not isinstance(file, str):
        return []
    path = Path(file).resolve()
    top = sys.modules.get(name.split(".")[0])
    top_file = getattr(top, "__file__", None)
    if getattr(top, "__path__", None) and isinstance(top_file, str):  # a regular package: all of its own code
        return sorted(str(p) for p in _package_files(Path(top_file).resolve().parent, ()))
    outside = _environment_dirs()
    folder = path.parent  # a single file's, or a namespace package's module's: its folder
    if any(folder.is_relative_to(d) for d in outside):
        return [str(path)]
    search = (folder, *(d for d in (_path_entry(e) for e in _PLUGIN_SEARCH.get(name, ())) if d is not None
                        and d != folder and d.is_relative_to(folder)))
    found: set[Path] = set()
    _imported_files(path, _Scope(folder, search, outside), found)
    return sorted(str(f) for f in found)


@dataclass(frozen=True)
class _Scope:
    """Where a plugin's helpers may lie: ``folder`` (the plugin's) and below, found in ``search`` (the folder and the
    ``sys.path`` entries inside it when the plugin was imported), never in ``outside`` (the environment).
    """

    folder: Path
    search: tuple[Path, ...]
    outside: tuple[Path, ...]

    def holds(self, where: Path) -> bool:
        return where.is_relative_to(self.folder) and not any(where.is_relative_to(d) for d in self.outside)


def _path_entry(entry: str) -> Path | None:
    try:
        return Path(entry).resolve()
    except (OSError, RuntimeError, ValueError):
        return None


def _imported_files(path: Path, scope: _Scope, found: set[Path]) -> None:
    """Add ``path`` and, read from its source, every module in the scope's folder or below that it imports, in turn:
    by an import statement anywhere in it (relative ones too), or by ``importlib.import_module`` / ``__import__`` of a
    literal name.
    """
    import ast

    if path in found:
        return
    found.add(path)
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):  # unreadable: its file alone counts
        return
    names: set[str] = set()
    files: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names if a.name != "*"}
        elif isinstance(node, ast.ImportFrom) and node.level > 0:  # relative: from the file's own package
            base = path.parents[node.level - 1] if node.level - 1 < len(path.parents) else path.parent
            stem = node.module.split(".") if node.module else []
            for parts in [stem, *([*stem, a.name] for a in node.names if a.name != "*")]:
                if parts:
                    files += _named_files(base, parts, scope)
        elif (isinstance(node, ast.Call) and node.args and isinstance(arg := node.args[0], ast.Constant)
              and isinstance(arg.value, str) and _imports_by_name(node.func)):
            names.add(arg.value)
    for name in sorted(names):
        parts = name.split(".")
        for where in _module_location(parts[0], scope.search):
            files += _named_files(where, parts[1:], scope, located=True)
    for file in files:
        _imported_files(file, scope, found)


def _named_files(where: Path, parts: list[str], scope: _Scope, located: bool = False) -> list[Path]:
    """The ``.py`` files in the scope of what ``parts`` names below ``where`` (``located``: ``where`` is the module
    itself, a file or a package's folder): a module's file, a package's every file (hidden folders and the
    environment left out); of a namespace package (a folder without ``__init__.py``), only what is named inside it.
    """
    if not located:
        if not parts:
            return []
        head = where / parts[0]
        where = head.with_suffix(".py") if head.with_suffix(".py").is_file() else head
        parts = parts[1:]
    if not scope.holds(where):
        return []
    if where.is_file():
        return [where.resolve()] if where.suffix == ".py" else []
    for part in parts:  # down a namespace package to what the name names
        if (where / "__init__.py").is_file():
            break
        if (where / f"{part}.py").is_file():
            where = where / f"{part}.py"
            break
        where = where / part
    if where.is_file():
        return [where.resolve()]
    if (where / "__init__.py").is_file():  # a package: all of its own code
        return _package_files(where, scope.outside)
    return []


def _package_files(root: Path, outside: tuple[Path, ...]) -> list[Path]:
    """A package's ``.py`` files: below ``root``, not in a hidden folder, not in ``outside``."""
    return [p.resolve() for p in root.rglob("*.py")
            if not any(q.startswith(".") for q in p.relative_to(root).parts[:-1])
            and not any(p.resolve().is_relative_to(d) for d in outside)]


def _module_location(top: str, search: tuple[Path, ...]) -> list[Path]:
    """Where the top-level module ``top`` is (its file, or a package's folders), without importing it: the process's
    module when loaded, else the first module or package of that name in ``search`` (the plugin's folder and the
    ``sys.path`` entries inside it when it was imported); none when neither. Not searched on today's ``sys.path``,
    which a plugin or a test may change between two keys of one run.
    """
    mod = sys.modules.get(top)
    if mod is not None:
        paths = getattr(mod, "__path__", None)
        if paths:
            return [Path(p).resolve() for p in paths]
        file = getattr(mod, "__file__", None)
        return [Path(file).resolve()] if isinstance(file, str) else []
    for d in search:
        if (d / f"{top}.py").is_file():
            return [(d / f"{top}.py").resolve()]
        if (d / top).is_dir():
            return [(d / top).resolve()]
    return []


def _environment_dirs() -> tuple[Path, ...]:
    """The folders of the Python environment (its prefixes, site-packages, standard library, the user's site) and
    of reporter's own source: no plugin's code.
    """
    import site
    import sysconfig

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, site.getusersitepackages(),
             *(v for k, v in sysconfig.get_paths().items() if k in ("purelib", "platlib", "stdlib", "platstdlib"))}
    return tuple({Path(p).resolve() for p in paths if p} | {Path(__file__).resolve().parent})


#: the registries of plugins whose entries measure nothing (a plugin module that registers only these is not code
#: a result depends on)
SHOWING_KINDS = ("card section", "chart")


def plugin_sources() -> tuple[str, ...]:
    """The source files of every plugin this process has that can measure (:func:`module_files` of each
    ``--plugin`` module that registered anything but card sections and charts, and of each installed collector,
    task, model source and evidence plugin): with reporter's own, the code a run's results depend on.

    >>> isinstance(plugin_sources(), tuple)
    True
    """
    return tuple(sorted({f for m in _measuring_modules() for f in module_files(m)}))


#: what a plugin may register and still leave a finished run's measurements as they were: a task (with the scorer it
#: scores by) is measured on its own; a card section or chart only shows
ADDITIVE_KINDS = ("task", "scorer", *SHOWING_KINDS)
#: the pseudo-kind of a plugin file whose import rebound something of reporter's own (a function, a method)
CHANGES_REPORTER = "changes reporter"


def plugin_kinds() -> dict[str, list[str]]:
    """Per plugin source file (:func:`plugin_sources`), what the code in it registered (``task``, ``collector`` …;
    none for a helper that registers nothing), and :data:`CHANGES_REPORTER` for a plugin whose code rebound
    reporter's own (a run's manifest records it, so that a later run can tell what a plugin file it no longer loads,
    or loads changed, had done).

    >>> plugin_kinds() == {f: plugin_kinds()[f] for f in plugin_sources()}
    True
    """
    files = _Files()
    kinds = _file_kinds(files)
    for module in _measuring_modules():
        if _rebinds(module, files) and (own := files.own(module)) is not None:
            kinds.setdefault(own, set()).add(CHANGES_REPORTER)
    return {f: sorted(kinds.get(f, ())) for f in plugin_sources()}


def not_additive(new: Collection[str]) -> str | None:
    """Why the source files ``new`` (added to a run's code, or changed in it) may change more than the tasks their
    plugins register, or None when they cannot: each plugin whose code holds one of them registers only tasks,
    scorers, sections or charts (:data:`ADDITIVE_KINDS`) in its own files, registers something, and rebinds none
    of reporter's code. The files of another plugin a new one imports count as that plugin's, not the new one's.

    >>> not_additive([])
    'no plugin file was added or changed'
    """
    wanted = set(new)
    if not wanted:
        return "no plugin file was added or changed"
    files = _Files()
    plugins = {m: set(module_files(m)) for m in _measuring_modules()}
    if stray := sorted(wanted - {f for fs in plugins.values() for f in fs}):
        return f"{stray[0]} belongs to no plugin this command loaded"
    kinds = _file_kinds(files)
    for f in sorted(wanted):
        for m, mine in plugins.items():
            if f not in mine:
                continue
            others = {g for q, theirs in plugins.items() if q != m and f not in theirs for g in theirs}
            name = _PLUGIN_MODULES.get(m, m)
            if rebound := _rebinds(m, files):
                return f"{name} rebinds reporter's {', '.join(rebound[:3])}"
            found = set().union(*(kinds.get(g, set()) for g in mine - others))
            if not found:
                return f"{name} registers nothing (a plugin imported for what it changes)"
            if more := sorted(found - set(ADDITIVE_KINDS)):
                return f"{name} registers what measures every task ({', '.join(more)})"
    return None


def not_removable(old: Collection[str], recorded: Any, gone: Collection[str] = ()) -> str | None:
    """Why the source files ``old`` (a run's code had them; this process loads them changed, or not at all:
    ``gone``) may have done more than add tasks, scorers, sections or charts, by what the run recorded of them
    (``recorded``: its manifest's ``plugin_kinds``), or None.

    >>> not_removable(["/p/t.py"], {"/p/t.py": ["task"]}, ["/p/t.py"]) is None
    True
    >>> not_removable(["/p/c.py"], {"/p/c.py": ["collector"]})
    'the run recorded that /p/c.py registered what measures every task (collector)'
    """
    if not old:
        return None
    if not isinstance(recorded, dict) or any(not isinstance(recorded.get(f), list) for f in old):
        return "the run did not record what its plugin files registered (made by an older reporter)"
    found = sorted({k for f in old for k in recorded[f]})
    if more := [k for k in found if k not in ADDITIVE_KINDS]:
        return f"the run recorded that {', '.join(old)} registered what measures every task ({', '.join(more)})"
    if gone and not {k for f in gone for k in recorded[f]}:
        return f"the run recorded that {', '.join(gone)} registered nothing (imported for what it changes)"
    return None


def entry_files(kind: str, name: str) -> list[str]:
    """The plugin source files behind the registry entry ``name`` of ``kind`` (a task, a scorer): every file of the
    plugins whose code holds the module that registered it, or of the installed package that declares it; none for
    reporter's own.

    >>> entry_files("task", "arc_easy")
    []
    """
    registry = next((r for r in _REGISTRIES if r.kind == kind), None)
    if registry is None:
        return []
    group = next((g for g, k in PLUGIN_GROUPS.items() if k == kind), None)
    if name in registry._origins and group is not None:  # an installed entry point
        return sorted({f for ep, _obj, error in _load_group(group) if error is None and ep.name == name
                       for f in module_files(ep.module)})
    module = registry._modules.get(name, "")
    if not module or module == "reporter" or module.startswith("reporter."):
        return []
    own = _Files().own(module)
    holders = [set(module_files(m)) for m in _measuring_modules()]
    found = {f for fs in holders if own in fs for f in fs}
    return sorted(found or module_files(module))


class _Files:
    """Each loaded module's resolved source file, found once per question (resolving every module's path for every
    plugin cost most of a second with ten plugins).
    """

    def __init__(self) -> None:
        self._cache: dict[str, str | None] = {}

    def own(self, module: str) -> str | None:
        if module not in self._cache:
            self._cache[module] = _own_file(module)
        return self._cache[module]


def _rebinds(module: str, files: "_Files | None" = None) -> list[str]:
    """What of reporter's own code the plugin ``module`` changed: the names its import rebound in reporter's modules
    loaded before it (:data:`reporter.plugin_import._REBOUND`), and every function, method, ``functools.partial`` or
    class of its code (its module and the helpers it imports) that a reporter module, or a class of one, binds now.
    """
    mine = set(module_files(module)) | ({own} if (own := (files or _Files()).own(module)) else set())
    found = set(_REBOUND.get(module, ()))
    names = {Path(f).name for f in mine}
    for name, mod in list(sys.modules.items()):
        if not (name == "reporter" or name.startswith("reporter.")):
            continue
        for key, value in list(getattr(mod, "__dict__", {}).items()):
            if _defined_in(value, mine, names):
                found.add(f"{name}.{key}")
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                found |= {f"{name}.{key}.{attr}" for attr, member in list(vars(value).items())
                          if _defined_in(member, mine, names)}
    return sorted(found)


def _defined_in(value: Any, files: set[str], names: set[str]) -> bool:
    """Whether ``value`` is code from ``files``: a function or method whose code lies there (whatever
    ``functools.wraps`` copied onto it), a ``functools.partial`` or staticmethod of one, or a class defined there.
    """
    import functools

    for _ in range(8):  # partials of partials, methods of functions
        if isinstance(value, functools.partial):
            value = value.func
        elif isinstance(value, (staticmethod, classmethod)) or hasattr(value, "__func__"):
            value = value.__func__
        else:
            break
    code = getattr(value, "__code__", None)
    where = getattr(code, "co_filename", None)
    if isinstance(where, str):  # resolved only where the file's name is one of theirs: most are reporter's own
        return where in files or (Path(where).name in names and str(Path(where).resolve()) in files)
    if isinstance(value, type) and isinstance(module := getattr(value, "__module__", None), str) and not (
            module == "reporter" or module.startswith("reporter.")):
        return _own_file(module) in files
    return False


def _own_file(module: str) -> str | None:
    """The resolved source file of a loaded module, or None."""
    file = getattr(sys.modules.get(module), "__file__", None)
    return str(Path(file).resolve()) if isinstance(file, str) else None


def _file_kinds(files: "_Files | None" = None) -> dict[str, set[str]]:
    """Per source file, the kinds of entry its code registered (in-process registrations by the module whose code
    ran them, and installed entry points by the module that defines them).
    """
    files = files or _Files()
    out: dict[str, set[str]] = {}
    for r in _REGISTRIES:
        for module in r._modules.values():
            if (own := files.own(module)) is not None:
                out.setdefault(own, set()).add(r.kind)
    for group, kind in PLUGIN_GROUPS.items():
        for ep, _obj, error in _load_group(group):
            if error is None and (own := files.own(ep.module)) is not None:
                out.setdefault(own, set()).add(kind)
    return out


def _measuring_modules() -> list[str]:
    """:func:`plugin_sources`' modules."""
    modules = {m for m in _PLUGIN_MODULES if not _shows_only(m)}
    for group in PLUGIN_GROUPS:
        if group != "reporter.sections":
            modules |= {ep.module for ep, _obj, error in _load_group(group) if error is None}
    return sorted(modules)


def _shows_only(module: str) -> bool:
    """Whether ``module`` registered entries, all of them card sections or charts."""
    kinds = {r.kind for r in _REGISTRIES for registered in r._modules.values() if registered == module}
    return bool(kinds) and kinds <= set(SHOWING_KINDS)
