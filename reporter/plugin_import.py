"""``reporter --plugin``: importing a plugin module in-process, and the record of what each one is.

:func:`import_plugin` imports a ``.py`` file or a dotted module that registers plugins, and keeps what
:mod:`reporter.plugin_code` needs to tell a plugin's code afterwards: the path or name the command line gave
(:data:`_PLUGIN_MODULES`), where its helpers are found (:data:`_PLUGIN_SEARCH`), and which of reporter's own
functions its import rebound (:data:`_REBOUND`). The registries (:mod:`reporter.registry`) read the first to say
where an entry came from.

>>> import_plugin("reporter.errors").__name__
'reporter.errors'
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Iterator

from .errors import UserError, user_path

#: the modules ``--plugin`` imported, by module name: what the command line named (a file's path, or a module)
_PLUGIN_MODULES: dict[str, str] = {}
#: by ``--plugin`` module name, what of reporter's own code its import rebound (``reporter.collect.job.smoke``,
#: ``OptionOrderPass.run``): a plugin that changes reporter, not only adds to it (:mod:`reporter.plugin_code`)
_REBOUND: dict[str, list[str]] = {}
#: by ``--plugin`` module name, the ``sys.path`` entries right after it was imported (where its helpers are looked
#: for: :mod:`reporter.plugin_code`)
_PLUGIN_SEARCH: dict[str, tuple[str, ...]] = {}


def _imported_names(path: Path) -> set[str]:
    """The top-level module names ``path``'s source imports anywhere in it (``import a.b``, ``from a import b``,
    ``importlib.import_module("a")``); empty when it cannot be read.
    """
    import ast

    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and node.args and isinstance(arg := node.args[0], ast.Constant)
              and isinstance(arg.value, str) and arg.value and not arg.value.startswith(".")
              and _imports_by_name(node.func)):
            names.add(arg.value.split(".")[0])
    return names


def _imports_by_name(func: Any) -> bool:
    """Whether a call's function is ``importlib.import_module``, ``import_module`` or ``__import__``."""
    import ast

    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _helpers_beside(path: Path, shadowed: dict[str, Path] | None = None) -> dict[str, Path]:
    """The modules in a ``--plugin`` file's folder that it imports by name, and that they import in turn: top-level
    name -> the helper's file (a package: its folder, whose ``__init__`` is followed). What ``python path`` would
    import from there (``reporter`` aside). A file named like a module this process already has from the Python
    environment (``random.py`` beside it, with the standard library's loaded) is not what the plugin gets: it goes
    to ``shadowed``, when given, and is not followed.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     d = Path(tmp)
    ...     _ = (d / "plug.py").write_text("import json, util_a\\n"); _ = (d / "util_a.py").write_text("import util_b\\n")
    ...     _ = (d / "util_b.py").write_text(""); _ = (d / "other.py").write_text(""); _ = (d / "json.py").write_text("")
    ...     sorted(_helpers_beside(d / "plug.py"))
    ['util_a', 'util_b']
    """
    folder, out, todo = path.parent, {}, [path]
    while todo:
        for top in sorted(_imported_names(todo.pop())):
            if top in out or top in (path.stem, "reporter") or not top.isidentifier():
                continue  # itself, and reporter: a plugin always gets the reporter that runs it
            if (folder / top / "__init__.py").is_file():  # a package first, as Python looks (a folder without
                found = folder / top  # __init__.py never shadows another's module)
            elif (folder / f"{top}.py").is_file():
                found = folder / f"{top}.py"
            else:
                continue
            if _from_environment(top):
                if shadowed is not None:
                    shadowed[top] = found
                continue
            out[top] = found
            todo.append(found / "__init__.py" if found.is_dir() else found)
    return out


def _from_environment(top: str) -> bool:
    """Whether this process has module ``top`` from the Python environment: built in, or a file under its prefixes
    (the standard library, site-packages).
    """
    mod = sys.modules.get(top)
    if mod is None:
        return False
    if top in sys.builtin_module_names:
        return True
    where = _location(mod)
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix) if p}
    return where is not None and any(where.is_relative_to(d) for d in prefixes)


def _location(mod: Any) -> Path | None:
    """Where a loaded module comes from: a package's folder, a module's file; None for one without either."""
    paths = list(getattr(mod, "__path__", None) or [])
    file = getattr(mod, "__file__", None)
    try:
        if paths:
            return Path(paths[0]).resolve()
        return Path(file).resolve() if isinstance(file, str) else None
    except (OSError, RuntimeError, ValueError):
        return None


def _helper_clash(path: Path) -> str | None:
    """Why a ``--plugin`` file would not run its own helper (None when it would): Python keeps one module per name
    in a process, so a helper beside it whose name is already another file's module (a helper of an earlier
    ``--plugin`` from another folder, or any module loaded before), or is the name of another ``--plugin``'s own
    helper, gives one of the two plugins the other's code, silently.
    """
    shadowed: dict[str, Path] = {}
    mine = _helpers_beside(path, shadowed)
    for top, where in sorted(shadowed.items()):  # not a clash of two files of the user's: said, not refused
        print(f"warning: --plugin {path}: it imports '{top}', and the file beside it ({where}) is not what it gets: "
              f"this process has '{top}' from the Python environment ({_location(sys.modules[top])}); rename the "
              "file if the plugin means its own", file=sys.stderr, flush=True)
    for top, where in sorted(mine.items()):
        loaded = sys.modules.get(top)
        there = _location(loaded) if loaded is not None else None
        if there is not None and there != where.resolve():
            return (f"it imports '{top}', which lies beside it ({where}), but this process already has a module "
                    f"'{top}' from {there}; Python keeps one module per name, so the plugin would run that one: "
                    "give one of them another name")
    for other in [f for f in _PLUGIN_MODULES.values() if f.endswith(".py") and Path(f) != path]:
        theirs = _helpers_beside(Path(other))
        if path.stem in theirs and theirs[path.stem].resolve() != path.resolve():  # it imports this file's name
            return (f"--plugin {other} imports '{path.stem}' from beside it ({theirs[path.stem]}), the name of this "
                    "file; Python keeps one module per name, so one of the two plugins would run the other's: give "
                    "one of them another name")
        for top, where in sorted(mine.items()):
            if top in theirs and theirs[top].resolve() != where.resolve():
                return (f"it imports '{top}', which lies beside it ({where}), and --plugin {other} imports its own "
                        f"'{top}' ({theirs[top]}); Python keeps one module per name, so one of the two plugins "
                        "would run the other's: give one of them another name")
    return None


def _module_clash(module: str) -> str | None:
    """Why ``--plugin a.b`` would not import the module it names (None when it would): its top-level name is already
    a module of this process from another of the user's files (a helper another ``--plugin`` imported), so Python
    gives that one. One from the Python environment is said on one line, not refused (the plugin runs with it).
    """
    import importlib.machinery
    import os

    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    there = _location(loaded) if loaded is not None and top != "reporter" else None
    if there is None:
        return None
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd(), *sys.path])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    found = spec.submodule_search_locations[0] if spec.submodule_search_locations else spec.origin
    if not isinstance(found, str) or Path(found).resolve() == there:
        return None
    if _from_environment(top):
        print(f"warning: --plugin {module}: '{top}' is found at {found}, but this process has '{top}' from the "
              f"Python environment ({there}), which is what it gets", file=sys.stderr, flush=True)
        return None
    return (f"'{top}' is found at {Path(found).resolve()}, but this process already has a module '{top}' from "
            f"{there}; Python keeps one module per name, so the plugin would run that one: give one of them another "
            "name")


def _imported_from(path: Path) -> str | None:
    """The name of a loaded module whose source is ``path`` (another plugin imported a ``--plugin`` file as its
    helper first), or None.
    """
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if str(getattr(mod, "__name__", "")).startswith("reporter_plugin_"):
            continue  # a --plugin file's own module (or its plain name, below), not another plugin's import of it
        if isinstance(file, str) and (file == str(path) or Path(file).name == path.name
                                      and Path(file).resolve() == path):
            return name
    return None


def _as_its_siblings_import_it(path: Path, mod: Any) -> None:
    """Let a plugin beside a ``--plugin`` file that imports it by name (``import main_plug``) get this module, not a
    second copy whose registrations would clash: bound under its plain name where that import would find this file.
    """
    import importlib.util

    stem = path.stem
    taken = sys.modules.get(stem)
    if not stem.isidentifier() or (taken is not None and not str(getattr(taken, "__name__", "")).startswith(
            "reporter_plugin_")):  # the name is another module's (an earlier --plugin's may be replaced)
        return
    try:
        with _beside(str(path.parent)):
            found = importlib.util.find_spec(stem)
    except (ImportError, ValueError):
        return
    if found is not None and isinstance(found.origin, str) and Path(found.origin).resolve() == path:
        sys.modules[stem] = mod


def _reporter_bindings() -> dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    """Per loaded reporter module, a copy of what it binds and of the attributes of each class it defines (the
    objects held, so that no other object can take an id): what a plugin's import could rebind (about 2 ms).
    """
    out = {}
    for name in [n for n in list(sys.modules) if n == "reporter" or n.startswith("reporter.")]:
        bound = dict(vars(sys.modules[name]))
        out[name] = (bound, {k: dict(vars(v)) for k, v in bound.items()
                             if isinstance(v, type) and v.__module__ == name})
    return out


def _rebound(before: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]]) -> list[str]:
    """The names of ``before`` bound to another object now (what an import in between changed), sorted."""
    now = _reporter_bindings()
    found = []
    for name, (bound, classes) in before.items():
        if name not in now:
            continue
        bound_now, classes_now = now[name]
        found += [f"{name}.{k}" for k, v in bound.items() if k in bound_now and bound_now[k] is not v]
        found += [f"{name}.{c}.{k}" for c, attrs in classes.items() for k, v in attrs.items()
                  if k in classes_now.get(c, {}) and classes_now[c][k] is not v]
    return sorted(found)


@contextlib.contextmanager
def _beside(folder: str) -> Iterator[None]:
    """``folder`` first on ``sys.path`` while a plugin imports, then last for the rest of the process: a helper
    module beside the plugin, imported at the top or inside a method that runs later, is found, and an installed
    package of the same name is not shadowed after the import.
    """
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)
        if folder not in sys.path:
            sys.path.append(folder)


def import_plugin(module: str) -> Any:
    """Import a module that registers plugins in-process (``reporter --plugin MODULE``): a dotted module name
    (looked for in the current directory too) or the path of a ``.py`` file.

    A module that cannot be imported is a :class:`UserError` (it was asked for by name, unlike an installed
    plugin, which is skipped with a warning).

    >>> import_plugin("reporter.errors").__name__
    'reporter.errors'
    >>> import_plugin("no_such_plugin_module")
    Traceback (most recent call last):
    reporter.errors.UserError: --plugin no_such_plugin_module: cannot import it (ModuleNotFoundError: No module named 'no_such_plugin_module')
    >>> import_plugin("my plugins")
    Traceback (most recent call last):
    reporter.errors.UserError: --plugin my plugins: is not a module name; give a .py file or a module name (a.b.c)
    """
    import importlib
    import importlib.util
    import os

    try:
        if module.endswith(".py") or os.sep in module:
            path = user_path(module).resolve()
            if not path.is_file():
                what = "is a directory; give a .py file or a module name" if path.is_dir() else "no such file"
                raise UserError(f"--plugin {module}: {what} ({path})")
            name, k = f"reporter_plugin_{path.stem}", 2
            while getattr(sys.modules.get(name), "__file__", str(path)) != str(path):  # another folder's same name
                name, k = f"reporter_plugin_{path.stem}_{k}", k + 1
            if getattr(sys.modules.get(name), "__file__", None) == str(path):  # imported once per process
                return sys.modules[name]
            if (same := _imported_from(path)) is not None:  # another plugin imported this file: one copy
                _PLUGIN_MODULES[same] = str(path)
                _PLUGIN_SEARCH.setdefault(same, tuple(sys.path))
                return sys.modules[same]
            if (clash := _helper_clash(path)) is not None:
                raise UserError(f"--plugin {module}: {clash}")
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise UserError(f"--plugin {module}: not a Python file")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            _PLUGIN_MODULES[name] = str(path)
            before = _reporter_bindings()
            with _beside(str(path.parent)):  # its helper modules, as `python file.py` finds them
                spec.loader.exec_module(mod)
                _PLUGIN_SEARCH[name] = tuple(sys.path)
            _REBOUND[name] = _rebound(before)
            _as_its_siblings_import_it(path, mod)
            return mod
        if not all(part.isidentifier() for part in module.split(".")):  # "sub dir": a folder, imported as nothing
            what = "is a directory" if user_path(module).is_dir() else "is not a module name"
            raise UserError(f"--plugin {module}: {what}; give a .py file or a module name (a.b.c)")
        if (clash := _module_clash(module)) is not None:
            raise UserError(f"--plugin {module}: {clash}")
        _PLUGIN_MODULES[module] = module
        before = _reporter_bindings()
        with _beside(os.getcwd()):
            imported = importlib.import_module(module)
            _REBOUND[module] = _rebound(before)
            if getattr(imported, "__file__", None) is None:
                _PLUGIN_MODULES.pop(module, None)
                raise UserError(f"--plugin {module}: is a directory with no code (a namespace package): nothing "
                                "registers from it; give a .py file or a module, such as a package with __init__.py")
            _PLUGIN_SEARCH[module] = tuple(sys.path)
            return imported
    except UserError:
        raise
    except Exception as e:
        text = str(e).strip().splitlines()
        raise UserError(f"--plugin {module}: cannot import it ({type(e).__name__}"
                        f"{': ' + text[0][:300] if text else ''})") from None
