"""One context manager that registers every hook of a pass and always removes them.

Collectors (MUI, LPP, log-probs …) never touch model code: they ask :class:`HookSet` for
forward pre-hooks (the module's INPUT) or forward hooks (its OUTPUT) and get called inside
the forward pass. On exit — normal, exception or KeyboardInterrupt — every handle is
removed (the baukit ``nethook`` / lm-eval ``steer`` pattern).

>>> import torch
>>> lin = torch.nn.Linear(2, 2)
>>> seen = []
>>> with HookSet() as hs:
...     hs.on_input(lin, lambda x: seen.append(x.shape))
...     _ = lin(torch.zeros(3, 2))
>>> seen, len(lin._forward_pre_hooks)
([torch.Size([3, 2])], 0)
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch import nn


class HookSet:
    """Registers input/output hooks on modules and removes all of them on exit."""

    def __init__(self) -> None:
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._paused = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Inside the block every hook of this set is silent (not called); they stay registered.

        >>> lin, seen = torch.nn.Linear(2, 2), []
        >>> with HookSet() as hs:
        ...     hs.on_input(lin, lambda x: seen.append(1))
        ...     with hs.paused():
        ...         _ = lin(torch.zeros(1, 2))
        ...     _ = lin(torch.zeros(1, 2))
        >>> seen
        [1]
        """
        before, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = before

    def on_input(self, module: nn.Module, fn: Callable[[torch.Tensor], None]) -> None:
        """Call ``fn(first positional input)`` before ``module`` runs; the input is not modified."""

        def pre_hook(_mod, args, kwargs):
            if self._paused:
                return
            x = args[0] if args else next(iter(kwargs.values()))
            fn(x)

        self._handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))

    def replace_input(self, module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace ``module``'s first positional input by ``fn(input)`` (for ablations)."""

        def pre_hook(_mod, args):
            if self._paused:
                return None
            return (fn(args[0]),) + tuple(args[1:])

        self._handles.append(module.register_forward_pre_hook(pre_hook))

    def on_output(self, module: nn.Module, fn: Callable[[object], None]) -> None:
        """Call ``fn(output)`` after ``module`` runs; the output is not modified."""

        def hook(_mod, _args, out):
            if not self._paused:
                fn(out)

        self._handles.append(module.register_forward_hook(hook))

    def remove(self) -> None:
        """Remove every registered hook (also done on leaving the ``with`` block)."""
        while self._handles:
            self._handles.pop().remove()

    def __enter__(self) -> "HookSet":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
