"""A plugin's code: what a run's results depend on beyond reporter's own source.

:func:`plugin_sources` gives the files of every plugin a process has that can measure, and :func:`module_files` those
of one plugin module; a run's ``code_version`` and the model-only cache's keys count them
(:func:`reporter.collect.model_cache.code_version`). A package's code is its every ``.py`` file; a single-file module's
is its file and the helpers in its folder it imports, read from its source. What lies in the Python environment and
reporter's own source (which its code version counts already) are not a plugin's code. The plugins themselves come
from :mod:`reporter.registry`'s record (``--plugin`` modules, installed entry points).

>>> module_files("reporter.errors")
[]
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .registry import _PLUGIN_MODULES, _REGISTRIES, PLUGIN_GROUPS, _load_group

__all__ = ["SHOWING_KINDS", "module_files", "plugin_sources"]


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
    roots = getattr(sys.modules.get(name.split(".")[0]), "__path__", None)
    if roots:  # a package: all of its own code
        return sorted(str(p) for p in Path(list(roots)[0]).resolve().rglob("*.py"))
    outside = _environment_dirs()
    folder = path.parent
    if any(folder.is_relative_to(d) for d in outside):
        return [str(path)]
    found: set[Path] = set()
    _imported_files(path, folder, outside, found)
    return sorted(str(f) for f in found)


def _imported_files(path: Path, folder: Path, outside: tuple[Path, ...], found: set[Path]) -> None:
    """Add ``path`` and, read from its source, every module in ``folder`` or below that it imports, in turn: by an
    import statement anywhere in it, or by ``importlib.import_module`` / ``__import__`` of a literal name.
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
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names if a.name != "*"}
        elif (isinstance(node, ast.Call) and node.args and isinstance(arg := node.args[0], ast.Constant)
              and isinstance(arg.value, str) and _imports_by_name(node.func)):
            names.add(arg.value)
    for name in sorted(names):
        for file in _source_files(name, folder, outside):
            _imported_files(file, folder, outside, found)


def _imports_by_name(func: Any) -> bool:
    """Whether a call's function is ``importlib.import_module``, ``import_module`` or ``__import__``."""
    import ast

    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _source_files(name: str, folder: Path, outside: tuple[Path, ...]) -> list[Path]:
    """The ``.py`` files of module ``name`` (dotted) that lie in ``folder`` or below and outside ``outside``: a
    module's file, a package's every file (hidden folders and the environment left out); of a namespace package (a
    folder without ``__init__.py``), only what ``name`` names inside it.
    """
    parts = name.split(".")
    files: list[Path] = []
    for where in _module_location(parts[0], folder):
        if not where.is_relative_to(folder) or any(where.is_relative_to(d) for d in outside):
            continue
        if where.is_file():
            files += [where] if where.suffix == ".py" else []
            continue
        for part in parts[1:]:  # down a namespace package to what the name names
            if (where / "__init__.py").is_file():
                break
            if (where / f"{part}.py").is_file():
                where = where / f"{part}.py"
                break
            where = where / part
        if where.is_file():
            files.append(where.resolve())
        elif (where / "__init__.py").is_file():  # a package: all of its own code
            files += [p.resolve() for p in where.rglob("*.py")
                      if not any(q.startswith(".") for q in p.relative_to(where).parts)
                      and not any(p.resolve().is_relative_to(d) for d in outside)]
    return files


def _module_location(top: str, folder: Path) -> list[Path]:
    """Where the top-level module ``top`` is (its file, or a package's folders), without importing it: the process's
    module when loaded, else a module or package of that name in ``folder`` (the plugin's); none when neither. Not
    searched on ``sys.path``, which a plugin or a test may change between two keys of one run.
    """
    mod = sys.modules.get(top)
    if mod is not None:
        paths = getattr(mod, "__path__", None)
        if paths:
            return [Path(p).resolve() for p in paths]
        file = getattr(mod, "__file__", None)
        return [Path(file).resolve()] if isinstance(file, str) else []
    if (folder / f"{top}.py").is_file():
        return [(folder / f"{top}.py").resolve()]
    return [(folder / top).resolve()] if (folder / top).is_dir() else []


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
    modules = {m for m in _PLUGIN_MODULES if not _shows_only(m)}
    for group in PLUGIN_GROUPS:
        if group != "reporter.sections":
            modules |= {ep.module for ep, _obj, error in _load_group(group) if error is None}
    return tuple(sorted({f for m in modules for f in module_files(m)}))


def _shows_only(module: str) -> bool:
    """Whether ``module`` registered entries, all of them card sections or charts."""
    kinds = {r.kind for r in _REGISTRIES for registered in r._modules.values() if registered == module}
    return bool(kinds) and kinds <= set(SHOWING_KINDS)
