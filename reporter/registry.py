"""One generic registry for everything that is looked up by name.

Tasks, scorers, architecture adapters, collectors, card sections and model sources are each a
:class:`Registry`: entries are registered with a decorator, a second, different entry under
a taken name is an error, and an unknown name gets one "did you mean" message from
:func:`unknown_name` (the same helper every validation message uses).

>>> colours = Registry[str]("colour")
>>> @colours.register("red")
... def red() -> str:
...     return "#f00"
>>> colours.get("red")()
'#f00'
>>> colours.get("rde")
Traceback (most recent call last):
reporter.errors.UserError: unknown colour 'rde' (did you mean 'red'?); available: red

**Installed plugins.** A registry made with an ``entry_point_group`` also holds the entry points
of that group (``importlib.metadata.entry_points(group=...)``) of every installed package,
loaded lazily: on the first lookup or listing, never at import. A broken one (its import
fails, it is not of the registry's type, its name is taken) is one warning line on stderr
naming its package and entry point, and the registry goes on without it. The five plugin
groups are :data:`PLUGIN_GROUPS`; a plugin declares its profile settings (a dataclass read from
the profile's ``plugins.<name>``) as its ``settings`` attribute, gathered by
:func:`declared_settings`.

A ``--plugin`` module is imported by :mod:`reporter.plugin_import`, which keeps the record of the plugins a
process has; what a plugin's code is (the files a run's ``code_version`` and the model-only cache's keys count) is
:mod:`reporter.plugin_code`'s, from that record.
"""
from __future__ import annotations

import dataclasses
import difflib
import sys
from importlib import metadata
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from .errors import UserError
from .plugin_import import _PLUGIN_MODULES

T = TypeVar("T")

#: the entry-point groups installed packages add plugins through, with the kind of plugin each holds
PLUGIN_GROUPS = {
    "reporter.collectors": "collector",
    "reporter.tasks": "task",
    "reporter.sections": "card section",
    "reporter.sources": "model source",
    "reporter.evidence": "evidence pass",
}


def did_you_mean(word: str, candidates: Iterable[str], *, prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or an empty string.

    >>> did_you_mean("dtyp", ["dtype", "device"])
    " (did you mean 'dtype'?)"
    >>> did_you_mean("zzz", ["dtype"])
    ''
    """
    close = closest(word, candidates)
    return f" (did you mean '{prefix}{close}'?)" if close is not None else ""


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (difflib's, at 0.6 or more), or None: what :func:`did_you_mean` suggests.

    >>> closest("arc_esay", ["arc_easy", "boolq"]), closest("zzz", ["dtype"])
    ('arc_easy', None)
    """
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_name(kind: str, name: str, candidates: Iterable[str], *, prefix: str = "",
                 listing: str = "available") -> str:
    """The one message for a name that is not one of ``candidates``.

    >>> unknown_name("task", "mmlo", ["mmlu", "gsm8k"])
    "unknown task 'mmlo' (did you mean 'mmlu'?); available: gsm8k, mmlu"
    >>> unknown_name("key", "dtyp", ["name", "dtype"], listing="valid keys")
    "unknown key 'dtyp' (did you mean 'dtype'?); valid keys: name, dtype"
    """
    names = list(candidates)
    shown = sorted(names) if listing == "available" else names
    return (f"unknown {kind} '{name}'{did_you_mean(name, names, prefix=prefix)}; {listing}: "
            + ", ".join(f"{prefix}{n}" for n in shown))


# -- installed plugins (entry points)

#: every warning line printed, so that a broken plugin is reported once per process
_WARNED: set[str] = set()
#: each plugin group's entry points, loaded once: ``(entry point, object)``, or the exception loading it raised
_GROUPS: dict[str, list[tuple[metadata.EntryPoint, Any, BaseException | None]]] = {}
#: the registry that holds each plugin group
_BY_GROUP: dict[str, "Registry[Any]"] = {}


def plugin_origin(ep: metadata.EntryPoint) -> str:
    """How a warning names an entry point: its package (distribution) and its ``name = module:attr`` line.

    >>> ep = metadata.EntryPoint("toy", "toy_pkg:Toy", "reporter.collectors")
    >>> plugin_origin(ep)
    "entry point 'toy = toy_pkg:Toy' (reporter.collectors) of an unknown package"
    """
    dist = getattr(ep, "dist", None)
    package = f"package '{dist.name}' {dist.version}" if dist is not None else "an unknown package"
    return f"entry point '{ep.name} = {ep.value}' ({ep.group}) of {package}"


def plugin_warning(kind: str, name: str, origin: str, why: BaseException | str) -> None:
    """Print the one warning line of a plugin that is skipped (once per process).

    >>> import contextlib, io
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     plugin_warning("collector", "toy", "entry point 'toy = toy:T'", ImportError("No module named 'numpyy'"))
    >>> err.getvalue()
    "warning: skipped the collector plugin 'toy' (entry point 'toy = toy:T'): ImportError: No module named 'numpyy'\\n"
    """
    if isinstance(why, BaseException):
        text = str(why).strip().splitlines()
        why = f"{type(why).__name__}: {text[0][:300]}" if text else type(why).__name__
    line = f"warning: skipped the {kind} plugin '{name}' ({origin}): {why}"
    if line not in _WARNED:
        _WARNED.add(line)
        print(line, file=sys.stderr, flush=True)


#: the plugin groups whose modules are being imported right now
_LOADING: set[str] = set()


def _load_group(group: str) -> list[tuple[metadata.EntryPoint, Any, BaseException | None]]:
    """Import every installed entry point of ``group``, once; a failure is kept, not raised.

    While the group's modules are imported (one of them may look a registry up), the group is
    :data:`_LOADING` and reads as empty; its registry then loads it on a later lookup.
    """
    if group not in _GROUPS and group not in _LOADING:
        _LOADING.add(group)
        try:
            loaded = []
            for ep in sorted(metadata.entry_points(group=group), key=lambda e: e.name):
                try:
                    loaded.append((ep, ep.load(), None))
                except Exception as e:  # a broken plugin never stops the run
                    loaded.append((ep, None, e))
        finally:
            _LOADING.discard(group)
        _GROUPS[group] = loaded
    return _GROUPS.get(group, [])


def check_settings(owner: str, settings: Any) -> None:
    """Raise :class:`TypeError` unless ``settings`` is None or a dataclass whose every field has a default.

    >>> @dataclasses.dataclass
    ... class Good:
    ...     window: int = 4
    >>> check_settings("toy", Good)
    >>> check_settings("toy", dict)
    Traceback (most recent call last):
    TypeError: toy: settings must be a dataclass (every field with a default), got dict
    """
    if settings is None:
        return
    if not (isinstance(settings, type) and dataclasses.is_dataclass(settings)):
        got = settings.__name__ if isinstance(settings, type) else type(settings).__name__
        raise TypeError(f"{owner}: settings must be a dataclass (every field with a default), got {got}")
    required = [f.name for f in dataclasses.fields(settings)
                if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if required:
        raise TypeError(f"{owner}: every field of its settings {settings.__name__} needs a default "
                        f"(not: {', '.join(required)})")


def declared_settings() -> dict[str, type]:
    """Each plugin's settings dataclass by plugin name, over the five plugin kinds (installed or in-process).

    Loads the installed plugins of every group in :data:`PLUGIN_GROUPS`. Two plugins of
    different kinds may share a name and one settings class; two different classes under one
    name keep the first, with one warning.

    >>> isinstance(declared_settings(), dict)
    True
    """
    out: dict[str, type] = {}
    for group in PLUGIN_GROUPS:
        _load_group(group)  # importing a plugin module also imports (so creates) the registry it adds to
    for group, registry in list(_BY_GROUP.items()):
        for name, entry in registry.items():
            cls = getattr(entry, "settings", None)
            if cls is None:
                continue
            if name in out and out[name] is not cls:
                plugin_warning(registry.kind, name, registry.origin(name),
                               f"its settings {cls.__name__} clash with {out[name].__name__}, declared by another "
                               f"plugin named '{name}'; the profile's plugins.{name} is read as the latter")
                continue
            out[name] = cls
    return out


def registering_module() -> str:
    """The module whose code is registering an entry: the first caller outside this module, outside the import
    machinery and outside a reporter ``register…`` helper (``register_task``, ``register_section`` …), so that a
    plugin's ``@register_task("x")`` names the plugin and reporter's own registrations name reporter (an empty string
    when no frame qualifies).
    """
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        helper = (module == "reporter" or module.startswith("reporter.")) and frame.f_code.co_name.startswith("register")
        if module and module != __name__ and not helper and not module.startswith(("importlib", "_frozen_importlib")):
            return module
        frame = frame.f_back  # type: ignore[assignment]
    return ""


#: every registry made, so that what a plugin module registered can be told
_REGISTRIES: list["Registry[Any]"] = []


class Registry(Generic[T]):
    """Named entries of one kind, in registration order.

    >>> r = Registry[int]("number")
    >>> r.add("one", 1)
    >>> r.add("one", 2)
    Traceback (most recent call last):
    ValueError: number 'one' is already registered
    >>> "one" in r, r.names()
    (True, ['one'])

    With ``entry_point_group``, the installed entry points of that group join on the first lookup or
    listing (:meth:`get`, :meth:`names`, :meth:`items`, ``in``, iteration, ``len``), after the
    entries registered in-process; ``load(name, obj)`` turns a loaded object into an entry (and
    raises :class:`TypeError` or :class:`ValueError` for one of the wrong type). An in-process
    registration takes a name from an installed plugin, with a warning.

    >>> plugins = Registry[int]("number", entry_point_group="reporter.no-such-group")
    >>> plugins.names()
    []
    """

    def __init__(self, kind: str, *, entry_point_group: str | None = None,
                 load: Callable[[str, Any], T] | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._load = load
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}  # the entry point of each entry an installed plugin added
        self._modules: dict[str, str] = {}  # the module whose code registered each in-process entry
        self._loaded = entry_point_group is None
        _REGISTRIES.append(self)
        if entry_point_group is not None:
            _BY_GROUP[entry_point_group] = self

    def add(self, name: str, entry: T) -> None:
        """Register ``entry`` under ``name``; re-registering the very same entry is allowed."""
        if name in self._entries and self._entries[name] is not entry:
            origin = self._origins.pop(name, None)
            if origin is None:
                raise ValueError(f"{self.kind} '{name}' is already registered")
            plugin_warning(self.kind, name, origin, f"the name is taken by the {self.kind} registered in-process")
        if self._entries.get(name) is not entry:  # new, or taking an installed plugin's name
            self._modules[name] = registering_module()
        self._entries[name] = entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`; returns the entry unchanged."""

        def decorator(entry: T) -> T:
            self.add(name, entry)
            return entry

        return decorator

    def remove(self, name: str) -> None:
        """Forget ``name`` (for plugins defined by a test)."""
        self._entries.pop(name, None)
        self._origins.pop(name, None)
        self._modules.pop(name, None)

    def load_plugins(self) -> None:
        """Add the installed plugins of :attr:`entry_point_group` (once; every lookup calls it).

        Each broken plugin is one warning line on stderr (see :func:`plugin_warning`) and is left out.

        >>> Registry[int]("number").load_plugins()  # no group: nothing to load
        """
        if self._loaded or self.entry_point_group is None:
            return
        if self.entry_point_group in _LOADING:  # its modules are being imported: load on a later lookup
            return
        self._loaded = True  # first: a plugin that looks this registry up while it loads sees no loop
        for ep, obj, error in _load_group(self.entry_point_group):
            origin = plugin_origin(ep)
            if error is None:
                try:
                    obj = self._load(ep.name, obj) if self._load is not None else obj
                except Exception as e:  # the wrong type, or a plugin whose constructor fails: never the run
                    error = e
            if error is not None:
                plugin_warning(self.kind, ep.name, origin, error)
            elif ep.name in self._entries and self._entries[ep.name] is not obj:
                taken = self._origins.get(ep.name)
                by = self.origin(ep.name)
                plugin_warning(self.kind, ep.name, origin,
                               f"the name is taken by the {taken}" if taken else
                               f"the name is taken by a built-in {self.kind}" if by == "built-in" else
                               f"the name is taken by the {self.kind} of {by}" if by.startswith("--plugin") else
                               f"the name is taken by the {self.kind} {by}")
            else:
                self._entries[ep.name] = obj
                self._origins[ep.name] = origin

    def origin(self, name: str) -> str:
        """Where entry ``name`` came from: ``built-in`` (reporter's own code registered it), an installed plugin's
        entry point, ``--plugin FILE`` (or module), or ``registered in-process by module …`` (any other code).

        >>> from reporter.tasks import TASKS
        >>> TASKS.origin("arc_easy")
        'built-in'
        >>> r = Registry[int]("number"); r.add("one", 1); r.origin("one").startswith("registered in-process by ")
        True
        """
        if name in self._origins:
            return self._origins[name]
        module = self._modules.get(name, "")
        if module == "reporter" or module.startswith("reporter."):
            return "built-in"
        if module in _PLUGIN_MODULES:
            return f"--plugin {_PLUGIN_MODULES[module]}"
        return f"registered in-process by module {module}" if module else "registered in-process by unknown code"

    def builtin(self, name: str) -> bool:
        """Whether reporter's own code registered entry ``name`` (not an installed plugin, not ``--plugin``).

        >>> Registry[int]("number").builtin("one")
        False
        """
        return self.origin(name) == "built-in"

    def get(self, name: str) -> T:
        """The entry registered as ``name``; a :class:`UserError` naming the closest match otherwise."""
        self.load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise UserError(unknown_name(self.kind, name, self._entries)) from None

    def names(self) -> list[str]:
        """Registered names in registration order."""
        self.load_plugins()
        return list(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs in registration order."""
        self.load_plugins()
        return list(self._entries.items())

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self.load_plugins()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.load_plugins()
        return len(self._entries)


class ClassPlugins(Generic[T]):
    """Plugins given as subclasses of ``base`` with a ``name`` (and optional ``settings``): one instance each.

    :meth:`load` is a registry's entry-point converter (an installed entry point names the class);
    :meth:`register` is the in-process class decorator's body. Both check the class the same way.

    >>> class Base:
    ...     name = ""
    ...     settings = None
    >>> reg = Registry[Base]("widget")
    >>> widgets = ClassPlugins(Base, "widget")
    >>> class Knob(Base):
    ...     name = "knob"
    >>> widgets.register(reg, Knob) is Knob, reg.get("knob") is widgets.load("knob", Knob)
    (True, True)
    >>> widgets.load("dial", Knob)
    Traceback (most recent call last):
    ValueError: the entry point is named 'dial' but Knob.name is 'knob'
    """

    def __init__(self, base: type, kind: str, check: Callable[[type], None] | None = None) -> None:
        self.base, self.kind, self.check = base, kind, check
        self._instances: dict[type, T] = {}

    def _instance(self, cls: Any) -> T:
        check_settings(f"{self.kind} '{cls.name}'", getattr(cls, "settings", None))
        if self.check is not None:
            self.check(cls)
        return self._instances.setdefault(cls, cls())

    def load(self, name: str, obj: Any) -> T:
        """The one instance of the class an installed entry point named ``name`` gives."""
        if not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise TypeError(f"{obj!r} is not a subclass of {self.base.__module__}.{self.base.__name__}")
        if obj.name != name:
            raise ValueError(f"the entry point is named '{name}' but {obj.__name__}.name is {obj.name!r}")
        return self._instance(obj)

    def register(self, registry: "Registry[T]", cls: Any) -> Any:
        """Add the one instance of ``cls`` to ``registry`` under ``cls.name``; returns ``cls``."""
        if not cls.name:
            raise ValueError(f"{cls.__name__}: every {self.kind} plugin needs a name")
        registry.add(cls.name, self._instance(cls))
        return cls
