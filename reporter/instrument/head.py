"""A faster kernel for the LM head of a decode step on the CPU (a context manager, like the hooks).

At a decode step the LM head multiplies a handful of rows (one per sequence still decoding)
by the [vocabulary, hidden] output matrix. ``nn.Linear`` computes ``x @ W.T``; for a few rows
and a large vocabulary the CPU BLAS is 2-3 times slower at that than at ``(W @ x.T).T``, the
same product in the other orientation (measured on 2 cores with MKL: Gemma-3's 262k x 640 head
on 3 rows, 187 ms against 60 ms; SmolLM2's 49k x 576 head, 30 ms against 11 ms). On a decode
step of a small model the head is most of the time, so :func:`small_batch_head` swaps the
head's forward for that orientation while it is active, for inputs of at most ``max_rows``
rows, and always restores it. The result equals ``nn.Linear``'s up to the order of the
floating-point sums (tests: float64 equality with ``generate`` and with the plain head).

>>> import torch
>>> head = torch.nn.Linear(8, 50, bias=False)
>>> x = torch.randn(3, 8)
>>> with small_batch_head(head):
...     y = head(x)
>>> torch.allclose(y, x @ head.weight.T, atol=1e-6), "forward" in vars(head)
(True, False)
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["small_batch_head", "MAX_ROWS"]

#: up to this many rows the swapped orientation is faster (measured up to 64 on 2 cores)
MAX_ROWS = 32


@contextmanager
def small_batch_head(head: torch.nn.Module | None, max_rows: int = MAX_ROWS) -> Iterator[None]:
    """While active, ``head`` (an ``nn.Linear`` on the CPU) computes inputs of at most ``max_rows``
    rows as ``(W @ x.T).T``; anything else (other devices, other module types, more rows, a dtype
    that differs from the weight's) goes through ``nn.Linear`` unchanged.
    """
    if not isinstance(head, torch.nn.Linear) or head.weight.device.type != "cpu" or "forward" in vars(head):
        yield
        return
    linear = head

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // max(1, x.shape[-1])
        if rows > max_rows or x.dtype != linear.weight.dtype or x.device != linear.weight.device:
            return torch.nn.Linear.forward(linear, x)
        y = torch.mm(linear.weight, x.reshape(rows, x.shape[-1]).t()).t()
        if linear.bias is not None:
            y = y + linear.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])

    linear.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        del linear.forward
