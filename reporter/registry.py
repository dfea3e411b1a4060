"""One generic registry for everything that is looked up by name.

Tasks, scorers, architecture adapters, collectors and card sections are each a
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
"""
from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterable, Iterator, TypeVar

from .errors import UserError

T = TypeVar("T")


def did_you_mean(word: str, candidates: Iterable[str], *, prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or an empty string.

    >>> did_you_mean("dtyp", ["dtype", "device"])
    " (did you mean 'dtype'?)"
    >>> did_you_mean("zzz", ["dtype"])
    ''
    """
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""


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


class Registry(Generic[T]):
    """Named entries of one kind, in registration order.

    >>> r = Registry[int]("number")
    >>> r.add("one", 1)
    >>> r.add("one", 2)
    Traceback (most recent call last):
    ValueError: number 'one' is already registered
    >>> "one" in r, r.names()
    (True, ['one'])
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> None:
        """Register ``entry`` under ``name``; re-registering the very same entry is allowed."""
        if name in self._entries and self._entries[name] is not entry:
            raise ValueError(f"{self.kind} '{name}' is already registered")
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

    def get(self, name: str) -> T:
        """The entry registered as ``name``; a :class:`UserError` naming the closest match otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            raise UserError(unknown_name(self.kind, name, self._entries)) from None

    def names(self) -> list[str]:
        """Registered names in registration order."""
        return list(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs in registration order."""
        return list(self._entries.items())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
