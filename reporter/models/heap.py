"""Give the C heap's free memory back to the system: :func:`return_free_memory`.

glibc's ``malloc`` keeps memory that Python, numpy and torch have freed, for reuse by the same
process. After a GGUF conversion (Gemma-3-270M: about 0.7 GB freed but kept) or a model's
measurement, the next model would be loaded on top of that. A process that converts one packaged
model and then runs others (``make demo`` on a clean machine) reached its peak that way.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Any

__all__ = ["return_free_memory"]


@functools.cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None  # glibc only (musl has none)


def return_free_memory() -> bool:
    """``malloc_trim(0)``: release the heap's free pages to the system. Whether it could (glibc on Linux).

    Nothing allocated is touched, and it costs milliseconds; elsewhere it does nothing.

    >>> isinstance(return_free_memory(), bool)
    True
    """
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
