"""What a generation backend returns: the continuation, cut at EOS or a stop string.

>>> class Tok:
...     def decode(self, ids, skip_special_tokens=True): return "".join(chr(96 + i) for i in ids)
>>> trim(Tok(), [1, 2, 3, 9, 9], stop=["c"], eos_ids={9})
([1, 2], 'ab', 'stop')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass
class Generation:
    """One greedy continuation."""

    prompt_ids: list[int]
    response_ids: list[int]  # the model's own tokens, cut where the stop sequence begins
    text: str  # decoded response, cut at the first stop sequence
    stopped_by: str  # "eos", "stop", "length"


def trim(tok: Any, ids: list[int], stop: Sequence[str], eos_ids: set[int]) -> tuple[list[int], str, str]:
    """Cut generated ``ids`` at the first EOS token or stop string: ``(kept ids, text, stopped_by)``."""
    reason = "length"
    for k, t in enumerate(ids):
        if t in eos_ids:
            ids, reason = ids[:k], "eos"
            break
    text = tok.decode(ids, skip_special_tokens=True)
    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
    if cut < 0:
        return ids, text, reason
    text = text[:cut]
    lo, hi = 0, len(ids)  # smallest prefix of ids whose decoding covers the kept text
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tok.decode(ids[:mid], skip_special_tokens=True)) >= len(text):
            hi = mid
        else:
            lo = mid + 1
    return ids[:lo], text, "stop"
